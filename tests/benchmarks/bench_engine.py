"""Benchmark: the engine process against llama.cpp's ``llama-bench`` and raw llama-cpp-python.

The engine drives llama.cpp token by token in a child process and streams every token
over a pipe; this measures what that costs against two references, on the same GGUF
(SmolLM2-135M-Instruct unless a path is given) with the same settings (2 threads unless
``--threads``, batch 512, flash attention off unless ``--flash-attention``, f16 KV cache):

- **llama-bench**: llama.cpp's own benchmark, built from the same llama.cpp source with
  the same CPU options (``llama_tools.py``; ``--llama-tools DIR``, built there once when
  missing; ``--no-llama-bench`` leaves it out). Its prefill is ``pp<N>`` (N = the
  engine's prompt length) and its decode ``tg128`` at depth N (after a prompt as long as
  the engine's), one repetition per run, warm-up excluded. It decodes random tokens
  without sampling: the C floor.
- **raw**: ``llama_cpp.Llama`` in this process: ``Llama.generate`` (its own eval and
  sample loop) on the prompt tokens, timed to the first and the last token.
- **engine (inside)**: the speeds the engine measures beside the work (decode: the 127
  tokens after the first over their time; prefill: prompt tokens over the time from the
  request to the end of the prompt, template and tokenizer included).
- **engine (client)**: decode speed as the client sees the deltas arrive, pipe included.

Each run processes a different rendered prompt of about 300 tokens (nothing reused) and
generates 128 tokens greedily without stopping at EOS. The three take turns within every
run (engine, raw, llama-bench; every other run the other way round, and the decode ratio
is also printed for each order), so load from other processes hits all alike; medians
over ``--runs`` (15) are printed, and the engine's speeds as ratios: of the medians, and
the median of the ratios within each run (``timing.paired_ratio``), which cancels the
VM's drift of ±20 % from minute to minute (goal: that decode ratio ≥ 0.97 of
llama-bench's).


Then the cancel goal (100 ms, from a ``cancel()`` on another thread, as the window's Stop
does, to the end of the reply), ``--cancels`` times each: mid-reply (after 8 tokens of a
900-token reply) and mid-prompt (0.1 s into a prompt of several 512-token batches, where
llama.cpp's abort callback must stop the batch). Printed beside what the cancel saves: one
decode step and one 512-token batch, measured above. The tests hold cancels only to a
generous bound (tests/models/test_engine_chat.py), since single runs on a loaded machine
vary.

Run: ``.venv/bin/python tests/benchmarks/bench_engine.py [MODEL.gguf] [--runs N]
[--cancels N] [--llama-tools DIR]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.benchmarks import llama_tools  # noqa: E402
from tests.benchmarks.timing import paired_ratio_text  # noqa: E402

BATCH = 512
# The context llama-bench gives its tg128 at depth ~316 (depth + generated tokens, which
# llama.cpp pads to a multiple of 256): every side has the same KV cache. The cancel part
# reloads with CANCEL_CONTEXT, for its longer prompts and replies.
CONTEXT, CANCEL_CONTEXT = 512, 2048
GENERATE = 128
DEFAULT_THREADS = 2


def raw_run(llm, prompt_tokens: list[int]) -> tuple[float, float]:
    """Prefill and decode tok/s of raw llama-cpp-python for one prompt."""
    llm.reset()
    started = time.perf_counter()
    first = last = started
    for index, _token in enumerate(llm.generate(prompt_tokens, temp=0.0, reset=True)):
        now = time.perf_counter()
        if index == 0:
            first = now
        if index + 1 == GENERATE:
            last = now
            break
    return len(prompt_tokens) / (first - started), (GENERATE - 1) / (last - first)


def engine_run(client, messages: list[dict]) -> tuple[float, float, float]:
    """Prefill, decode (both measured inside) and client-side decode tok/s."""
    from models.engine import ChatOptions

    reply = client.chat(messages, ChatOptions(temperature=0.0, max_tokens=GENERATE,
                                              ignore_eos=True))
    arrivals = [time.perf_counter() for _ in reply]
    stats = reply.stats
    # The engine sends the first token at once, then what has come every 50 ms, and the
    # rest with the end: the tokens after the first, over the time from the first delta
    # to the last.
    client_decode = (stats.completion_tokens - 1) / (arrivals[-1] - arrivals[0])
    return stats.prefill_tokens_per_second, stats.decode_tokens_per_second, client_decode


def cancel_after_tokens(client, messages: list[dict], tokens: int = 8) -> float:
    """Seconds from ``cancel()`` after ``tokens`` streamed tokens to the end of the reply."""
    from models.engine import ChatOptions

    reply = client.chat(messages, ChatOptions(temperature=0.8, seed=1, max_tokens=900,
                                              ignore_eos=True))
    cancelled_at = None
    for count, _delta in enumerate(reply, 1):
        if count == tokens:
            cancelled_at = time.perf_counter()
            threading.Thread(target=client.cancel).start()
    assert reply.stop_reason == "cancelled", reply.stop_reason
    return time.perf_counter() - cancelled_at


def cancel_mid_prompt(client, run: int, delay: float = 0.1) -> float:
    """Seconds from ``cancel()`` ``delay`` s into a long prompt to the end of the reply
    (a different prompt each run, so that no run reuses another's cache)."""
    from models.engine import ChatOptions

    text = f"Text {run}. Summarise: " + f"the quick brown fox {run} jumps. " * 90
    reply = client.chat([{"role": "user", "content": text}], ChatOptions(temperature=0.0, max_tokens=8))
    times: dict[str, float] = {}

    def cancel_soon() -> None:
        time.sleep(delay)
        times["cancelled"] = time.perf_counter()
        client.cancel()

    canceller = threading.Thread(target=cancel_soon)
    canceller.start()
    for _delta in reply:
        pass
    ended = time.perf_counter()
    canceller.join()
    assert reply.stop_reason == "cancelled", reply.stop_reason
    return ended - times["cancelled"]


def llama_bench_run(tools, model: Path, prompt_tokens: int, threads: int,
                    flash_attention: bool) -> tuple[float, float]:
    """``llama-bench``'s prefill (pp<N>) and decode (tg128 at depth N) tok/s, one repetition."""
    result = tools.run("llama-bench", [
        "-m", str(model), "-t", str(threads), "-b", str(BATCH), "-ub", str(BATCH),
        "-fa", "1" if flash_attention else "0", "-ctk", "f16", "-ctv", "f16",
        "-p", str(prompt_tokens), "-n", str(GENERATE), "-d", f"0,{prompt_tokens}",
        "-r", "1", "-o", "json"])
    tests = json.loads(result.stdout)
    prefill = next(t["avg_ts"] for t in tests if t["n_prompt"] and t["n_depth"] == 0)
    decode = next(t["avg_ts"] for t in tests if t["n_gen"] and t["n_depth"] == prompt_tokens)
    return prefill, decode


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", nargs="?", type=Path)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    parser.add_argument("--cancels", type=int, default=5, help="cancels timed in each place")
    parser.add_argument("--flash-attention", action="store_true",
                        help="flash attention on for every side (default: off on every side)")
    parser.add_argument("--no-llama-bench", action="store_true",
                        help="compare with raw llama-cpp-python only")
    llama_tools.add_argument(parser)
    args = parser.parse_args()
    threads, fa = args.threads, args.flash_attention
    if args.model is None:
        from tests.conftest import cached_models_dir, fetch_smollm2

        args.model = fetch_smollm2(cached_models_dir())
    tools = None if args.no_llama_bench else llama_tools.require_tools(
        args.llama_tools, needed=("llama-bench",))

    import llama_cpp

    from models.engine import EngineClient, LoadSettings
    from models.engine.benchmark import bench_messages
    from models.engine.chat_template import render_chat
    from models.engine.gguf_info import read_model_info

    info = read_model_info(args.model)
    settings = LoadSettings(threads=threads, batch_threads=threads, context_length=CONTEXT,
                            batch_size=BATCH, micro_batch_size=BATCH, flash_attention=fa)
    raw = llama_cpp.Llama(model_path=str(args.model), n_threads=threads,
                          n_threads_batch=threads, n_ctx=CONTEXT, n_batch=BATCH,
                          n_ubatch=BATCH, flash_attn=fa, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(raw.model)
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
    bos = raw.detokenize([raw.token_bos()], special=True).decode() if add_bos else ""
    keys = ("raw_p", "raw_d", "eng_p", "eng_d", "eng_c", "lb_p", "lb_d")
    results: dict[str, list[float]] = {k: [] for k in keys}
    print(f"machine: {llama_tools.machine_line()}", flush=True)
    with EngineClient() as client:
        client.load(args.model, settings)
        engine_run(client, bench_messages(-1, 280))  # warm-up, like llama-bench's own
        for run in range(args.runs):
            messages = bench_messages(run, 280)
            prompt = render_chat(info.chat_template, messages, bos_token=bos)
            tokens = raw.tokenize(prompt.encode(), add_bos=add_bos and not prompt.startswith(bos)
                                  if bos else add_bos, special=True)
            parts: dict[str, str] = {}

            def run_engine() -> None:
                p, d, c = engine_run(client, messages)
                results["eng_p"].append(p), results["eng_d"].append(d), results["eng_c"].append(c)
                parts["engine"] = f"engine prefill {p:.1f} decode {d:.1f} (client {c:.1f})"

            def run_raw() -> None:
                p, d = raw_run(raw, tokens)
                results["raw_p"].append(p), results["raw_d"].append(d)
                parts["raw"] = f"raw prefill {p:.1f} decode {d:.1f}"

            def run_llama_bench() -> None:
                p, d = llama_bench_run(tools, args.model, len(tokens), threads, fa)
                results["lb_p"].append(p), results["lb_d"].append(d)
                parts["llama-bench"] = f"llama-bench prefill {p:.1f} decode {d:.1f}"

            sides = [run_engine, run_raw] + ([run_llama_bench] if tools is not None else [])
            # Every other run in the opposite order, so that whatever the side before
            # leaves behind (a process just ended, a VM's spent CPU credit) falls on each.
            for side in sides if run % 2 == 0 else sides[::-1]:
                side()
            line = f"run {run + 1} ({'engine' if run % 2 == 0 else 'references'} first): " \
                   f"prompt {len(tokens)} tokens; " + "; ".join(
                       parts[name] for name in ("engine", "raw", "llama-bench") if name in parts)
            print(line + " tok/s", flush=True)
        cancels = {"reply": [], "prompt": []}
        if args.cancels:
            client.load(args.model, replace(settings, context_length=CANCEL_CONTEXT))
        for run in range(args.cancels):
            cancels["reply"].append(cancel_after_tokens(client, bench_messages(100 + run, 40)))
            cancels["prompt"].append(cancel_mid_prompt(client, run))
    med = {k: statistics.median(v) for k, v in results.items() if v}
    print(f"\n{info.name}, {threads} threads, context {CONTEXT}, batch {BATCH}, flash attention "
          f"{'on' if fa else 'off'}, {GENERATE} tokens generated, median of {args.runs} "
          f"alternating runs:")
    print(f"{'':24}{'prefill tok/s':>15}{'decode tok/s':>15}")
    if "lb_p" in med:
        print(f"{'llama-bench':24}{med['lb_p']:15.1f}{med['lb_d']:15.1f}")
    print(f"{'raw llama-cpp-python':24}{med['raw_p']:15.1f}{med['raw_d']:15.1f}")
    print(f"{'engine (inside)':24}{med['eng_p']:15.1f}{med['eng_d']:15.1f}")
    print(f"{'engine (client side)':24}{'':>15}{med['eng_c']:15.1f}")
    for name, p, d in (("llama-bench", "lb_p", "lb_d"), ("raw", "raw_p", "raw_d")):
        if p in med:
            print(f"engine / {name}, ratio of the medians: prefill {med['eng_p'] / med[p]:.3f}, "
                  f"decode {med['eng_d'] / med[d]:.3f} (inside), {med['eng_c'] / med[d]:.3f} "
                  f"(client side)")
            print(f"engine / {name} within each run: prefill "
                  f"{paired_ratio_text(results['eng_p'], results[p])}; decode "
                  f"{paired_ratio_text(results['eng_d'], results[d])} (inside), client side "
                  f"{paired_ratio_text(results['eng_c'], results[d])}")
    if "lb_d" in med and args.runs >= 4:
        for start, order in ((0, "engine first"), (1, "llama-bench first")):
            print(f"engine / llama-bench decode, runs with the {order}: "
                  f"{paired_ratio_text(results['eng_d'][start::2], results['lb_d'][start::2])}")
    print("goal: engine decode >= 0.97 of llama-bench's (the median of the ratios within runs)")
    step_ms, batch_ms = 1000 / med["eng_d"], 1000 * BATCH / med["eng_p"]
    for place, saved in (("reply", f"one decode step here: {step_ms:.0f} ms"),
                         ("prompt", f"one {BATCH}-token batch here: {batch_ms:.0f} ms")):
        ms = sorted(1000 * t for t in cancels[place])
        if not ms:
            continue
        print(f"cancel mid-{place}: median {statistics.median(ms):.0f} ms, worst {ms[-1]:.0f} ms "
              f"of {len(ms)} (goal <= 100 ms; {saved})")
    print(f"machine at the end: {llama_tools.machine_line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
