"""Where the engine's decode could lose against llama-bench: three A/B checks in one process.

``bench_engine.py`` measures the engine (a process of its own, deltas through a pipe)
against ``llama-bench`` and raw llama-cpp-python. When the engine comes out behind, these
checks take the difference apart, each one alternating its two sides run by run (the
order swapped every other run) and printing the median of the ratios within pairs
(``timing.paired_ratio``), 128 greedy tokens after a ~300-token prompt per run:

- ``contexts``: bare ``llama_decode`` loops (no Python per token but the call) on a
  context made by ``llama_cpp.Llama`` — as the engine makes it — and on one made from
  llama.cpp's default context parameters; the parameters that differ are printed.
- ``process``: ``Llama.generate`` in a process started the way the engine process is
  (``multiprocessing`` spawn) against the same in this process.
- ``scheduler``: the engine's own decode loop (``BatchScheduler.step``, native abort hook,
  greedy) against ``Llama.generate``, in this process; with ``--pipe`` every delta goes
  through a pipe to a process whose reader thread hands it to another thread, as
  ``EngineClient`` does.
- ``between``: whether what the engine does between two tokens slows the next
  ``llama_decode`` itself (rather than only adding its own time): in one bare loop, every
  other token is followed by 250 us of Python work, or by a delta sent through a pipe to
  a process with a reader thread as above; the decode right after it is timed against
  the decode right after nothing. Taking turns token by token puts the VM's drift on
  both sides alike, so this check resolves differences of a few tenths of a percent,
  where the run-by-run checks above resolve a few percent.

A ratio near 1.0 clears that part. Run on a quiet machine:
``.venv/bin/python tests/benchmarks/decode_gap.py {contexts,process,scheduler,between}
[--pipe] [--runs 16] [MODEL.gguf]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import sys
import threading
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.benchmarks.bench_engine import GENERATE, raw_run  # noqa: E402
from tests.benchmarks.timing import paired_ratio_text  # noqa: E402

THREADS, CONTEXT, BATCH, DEPTH = 2, 512, 512, 316


def make_llama(path: str):
    import llama_cpp

    return llama_cpp.Llama(model_path=path, n_ctx=CONTEXT, n_batch=BATCH, n_ubatch=BATCH,
                           n_threads=THREADS, n_threads_batch=THREADS, flash_attn=False,
                           verbose=False)


def generate_rate(llm, run: int) -> float:
    """``Llama.generate``'s decode tok/s (``bench_engine.raw_run``) after a prompt of its own."""
    prompt = llm.tokenize(f"Run {run}. ".encode() + b"The quick brown fox jumps. " * 45)
    return raw_run(llm, prompt)[1]


def alternate(sides: dict[str, Callable[[int], float]], runs: int) -> dict[str, list[float]]:
    """Each side once per run, the order swapped every other run; tok/s per side."""
    names = list(sides)
    for name in names:
        sides[name](-1)  # warm-up
    rates: dict[str, list[float]] = {name: [] for name in names}
    for run in range(runs):
        for name in names if run % 2 == 0 else names[::-1]:
            rates[name].append(sides[name](run))
        print(f"  run {run + 1}: " + ", ".join(f"{n} {rates[n][-1]:.1f}" for n in names)
              + " tok/s", flush=True)
    return rates


def prefill_random(ctx, batch, vocab: int, picks: random.Random) -> None:
    """Clear the context and evaluate ``DEPTH`` random tokens on sequence 0, the last with
    logits; leaves ``batch`` set for one token at a time."""
    import llama_cpp

    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
    for i in range(DEPTH):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = picks.randrange(vocab), i, 1
        batch.seq_id[i][0], batch.logits[i] = 0, i == DEPTH - 1
    batch.n_tokens = DEPTH
    llama_cpp.llama_decode(ctx, batch)
    batch.n_tokens = 1


def check_contexts(path: str, runs: int) -> None:
    import llama_cpp

    llm = make_llama(path)
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = CONTEXT, BATCH, BATCH
    params.n_threads = params.n_threads_batch = THREADS
    params.flash_attn_type = 0
    default_ctx = llama_cpp.llama_init_from_model(llm.model, params)
    differ = {name: (getattr(llm.context_params, name), getattr(params, name))
              for name, _ in params._fields_
              if "callback" not in name and not name.startswith("cb") and name != "samplers"
              and getattr(llm.context_params, name) != getattr(params, name)}
    print(f"context parameters that differ (Llama's, default): {differ}")
    vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(llm.model))
    batch = llama_cpp.llama_batch_init(BATCH, 0, 1)
    picks = random.Random(1)

    def bare(ctx) -> Callable[[int], float]:
        def run(_run: int) -> float:
            prefill_random(ctx, batch, vocab, picks)
            llama_cpp.llama_synchronize(ctx)
            started = time.perf_counter()
            for k in range(GENERATE):
                batch.token[0], batch.pos[0], batch.logits[0] = picks.randrange(vocab), DEPTH + k, 1
                llama_cpp.llama_decode(ctx, batch)
                llama_cpp.llama_get_logits_ith(ctx, -1)
            return GENERATE / (time.perf_counter() - started)
        return run

    rates = alternate({"Llama() context": bare(llm.ctx), "default context": bare(default_ctx)},
                      runs)
    print(f"Llama() context / default context: "
          f"{paired_ratio_text(rates['Llama() context'], rates['default context'])}")
    llama_cpp.llama_batch_free(batch)
    llama_cpp.llama_free(default_ctx)


def _generate_in_child(conn, path: str) -> None:
    llm = make_llama(path)
    while (run := conn.recv()) is not None:
        conn.send(generate_rate(llm, run))


def check_process(path: str, runs: int) -> None:
    spawn = multiprocessing.get_context("spawn")
    here, there = spawn.Pipe()
    child = spawn.Process(target=_generate_in_child, args=(there, path), daemon=True)
    child.start()
    llm = make_llama(path)

    def in_child(run: int) -> float:
        here.send(run)
        return here.recv()

    rates = alternate({"spawned process": in_child,
                       "this process": lambda run: generate_rate(llm, run)}, runs)
    here.send(None)
    child.join(10)
    print(f"spawned process / this process: "
          f"{paired_ratio_text(rates['spawned process'], rates['this process'])}")


def _client_threads(conn) -> None:
    """A reader thread handing each event to the consuming thread, as EngineClient's."""
    import queue

    events: queue.Queue = queue.Queue()

    def read() -> None:
        while True:
            event = conn.recv()
            events.put(event)
            if event is None:
                return

    threading.Thread(target=read, daemon=True).start()
    while events.get() is not None:
        pass


def check_scheduler(path: str, runs: int, pipe: bool) -> None:
    from models.engine import runtime
    from models.engine.batching import BatchScheduler
    from models.engine.benchmark import bench_messages
    from models.engine.cancel_flag import CancelFlag, install_abort_hook
    from models.engine.llama_log import LlamaLogCapture
    from models.engine.options import ChatOptions
    from models.engine.settings import LoadSettings

    settings = LoadSettings(threads=THREADS, batch_threads=THREADS, context_length=CONTEXT,
                            batch_size=BATCH, micro_batch_size=BATCH)
    log_capture = LlamaLogCapture()  # referenced to the end: llama.cpp calls it
    model = runtime.LoadedModel(path, settings, log_capture)
    model.self_test()
    spawn = multiprocessing.get_context("spawn")
    cancel = CancelFlag(spawn)
    model.abort_hook = install_abort_hook(model.llm.ctx, cancel.shared)
    done: list[dict] = []
    connection = None
    if pipe:
        connection, there = spawn.Pipe()
        spawn.Process(target=_client_threads, args=(there,), daemon=True).start()

    def send(event: dict) -> None:
        if connection is not None:
            connection.send(event)
        if event["event"] == "done":
            done.append(event)

    scheduler = BatchScheduler(model, cancel.shared, send, cache_ram_bytes=0)
    options = ChatOptions(max_tokens=GENERATE, ignore_eos=True, temperature=0.0).to_dict()

    def engine_loop(run: int) -> float:
        scheduler.submit({"id": run, "lane": 0, "messages": bench_messages(run, 280),
                          "options": options})
        while scheduler.busy():
            scheduler.step()
            scheduler.run_after_reply()
        return done[-1]["stats"]["decode_tokens_per_second"]

    llm = make_llama(path)
    rates = alternate({"engine loop": engine_loop,
                       "Llama.generate": lambda run: generate_rate(llm, run)}, runs)
    if connection is not None:
        connection.send(None)
    scheduler.close()
    model.close()
    print(f"engine loop{' (deltas through a pipe)' if pipe else ''} / Llama.generate: "
          f"{paired_ratio_text(rates['engine loop'], rates['Llama.generate'])}")


def check_between(path: str, runs: int) -> None:
    import statistics

    import llama_cpp

    llm = make_llama(path)
    vocab = llm.n_vocab()
    batch = llama_cpp.llama_batch_init(BATCH, 0, 1)
    picks = random.Random(1)
    spawn = multiprocessing.get_context("spawn")
    connection, there = spawn.Pipe()
    spawn.Process(target=_client_threads, args=(there,), daemon=True).start()

    def python_work() -> None:
        end = time.perf_counter() + 250e-6
        while time.perf_counter() < end:
            pass

    delta = {"event": "delta", "id": 1, "text": "a few words of a reply " * 3}
    for name, work in (("250 us of Python", python_work),
                       ("a delta through the pipe", lambda: connection.send(delta))):
        after: dict[bool, list[float]] = {True: [], False: []}
        for _run in range(runs):
            prefill_random(llm.ctx, batch, vocab, picks)
            worked = False
            for k in range(GENERATE):
                batch.token[0], batch.pos[0], batch.logits[0] = picks.randrange(vocab), DEPTH + k, 1
                started = time.perf_counter()
                llama_cpp.llama_decode(llm.ctx, batch)
                if k >= 2:
                    after[worked].append(time.perf_counter() - started)
                worked = k % 2 == 0
                if worked:
                    work()
        with_work, without = statistics.median(after[True]), statistics.median(after[False])
        print(f"llama_decode after {name}: {with_work * 1e6:.0f} us, after nothing "
              f"{without * 1e6:.0f} us (medians of {len(after[True])} tokens each; "
              f"{with_work / without:.4f}, means "
              f"{statistics.mean(after[True]) / statistics.mean(after[False]):.4f})", flush=True)
    connection.send(None)
    llama_cpp.llama_batch_free(batch)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=("contexts", "process", "scheduler", "between"))
    parser.add_argument("model", nargs="?", type=Path)
    parser.add_argument("--runs", type=int, default=16)
    parser.add_argument("--pipe", action="store_true",
                        help="scheduler: send every delta to another process")
    args = parser.parse_args()
    if args.model is None:
        from tests.conftest import cached_models_dir, fetch_smollm2

        args.model = fetch_smollm2(cached_models_dir())
    from tests.benchmarks import llama_tools

    print(f"machine: {llama_tools.machine_line()}")
    path = str(args.model)
    if args.check == "contexts":
        check_contexts(path, args.runs)
    elif args.check == "process":
        check_process(path, args.runs)
    elif args.check == "between":
        check_between(path, args.runs)
    else:
        check_scheduler(path, args.runs, args.pipe)
    print(f"machine at the end: {llama_tools.machine_line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
