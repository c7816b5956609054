"""Benchmark: speculative decoding (prompt lookup, draft model) against plain decoding.

Part 1, prompt lookup, on a copy-heavy task: "fix the typos in this paragraph and return
it", where most of the reply repeats the prompt. Part 2, a draft model, on free writing
(short stories): the chat model is SmolLM2-135M-Instruct dequantized to F32 (real
weights; a slower model than its draft, as a large model is), the draft its Q4_1 file
(``--target``/``--draft-model`` choose others; ``--skip-draft`` leaves part 2 out).

The engine loads the model (2 threads unless ``--threads``, context 2048, flash attention
on unless ``--no-flash-attention``) and answers each request greedily, alternating plain
and speculative decoding so that load from other processes hits both alike. Each pair has
its own prompt, in the KV cache for both replies, so the pair differs only in how it
decodes. Printed per mode: median decode tok/s (measured inside the engine), median reply
time, drafted/accepted tokens and acceptance rate (and draft-model time), then the
speculative speed as a ratio of plain decoding's. The two replies of every pair must be
equal (greedy speculation changes the speed, never the text); a difference is reported.

Run: ``.venv/bin/python tests/benchmarks/bench_speculative.py [MODEL.gguf] [--runs N]
[--draft N] [--ngram N] [--target F.gguf --draft-model D.gguf] [--skip-draft]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

SENTENCES = [
    "Teh quick brown fox jumpd over the lazy dog near the rivr bank.",
    "Every mornign the fox ran along the path to the old mill, where the miller kept his "
    "grain in large wooden barels.",
    "The miller did not like foxes, but he liked the quite mornings even less when the "
    "fox was not there to keep him companny.",
    "In the autum the leaves fell on the path and the fox left small tracks in them that "
    "the miler's children loved to follow.",
    "By winter the river froze, and the fox and the miller both waited for sprng.",
]


def paragraph(run: int) -> str:
    """The paragraph of run ``run``: the sentences rotated, so no two runs share a prompt."""
    shift = run % len(SENTENCES)
    return " ".join(SENTENCES[shift:] + SENTENCES[:shift])


def one_reply(client, messages: list[dict], options) -> tuple[str, object, float]:
    started = time.perf_counter()
    reply = client.chat(messages, options).wait()
    return reply.text, reply.stats, time.perf_counter() - started


STORIES = ["a fox and a miller", "a lighthouse keeper and a storm", "two robots who open a "
           "bakery", "a girl who finds a map in a library book", "a dragon afraid of the dark"]


def compare(client, label: str, fast, plain, prompts: list[str], max_tokens: int) -> int:
    """Time plain and ``fast`` replies to each prompt, alternating; print; return mismatches."""
    results: dict[str, list] = {"plain": [], label: []}
    mismatches = 0
    client.chat([{"role": "user", "content": "Hi"}], plain).wait()  # warm-up
    from models.engine import ChatOptions

    for run, prompt in enumerate(prompts):
        messages = [{"role": "user", "content": prompt}]
        # Prefill once, so both timed replies find the prompt in the cache.
        client.chat(messages, ChatOptions(temperature=0.0, max_tokens=1)).wait()
        order = [("plain", plain), (label, fast)]
        if run % 2:
            order.reverse()
        texts = []
        for name, options in order:
            text, stats, seconds = one_reply(client, messages, options)
            results[name].append((stats, seconds))
            texts.append(text)
        mismatches += texts[0] != texts[1]
    print(f"{'mode':<14} {'decode tok/s':>12} {'reply s':>8} {'tokens':>7} {'drafted':>8} "
          f"{'accepted':>9} {'acceptance':>11} {'draft s':>8} {'tok/pass':>9}")
    medians = {}
    for name, rows in results.items():
        decode = statistics.median(s.decode_tokens_per_second for s, _ in rows)
        seconds = statistics.median(t for _, t in rows)
        drafted = sum(s.draft_tokens for s, _ in rows)
        accepted = sum(s.accepted_tokens for s, _ in rows)
        tokens = statistics.median(s.completion_tokens for s, _ in rows)
        draft_s = statistics.median(s.draft_seconds for s, _ in rows)
        per_pass = sum(s.completion_tokens for s, _ in rows) / max(sum(s.decode_passes for s, _ in rows), 1)
        rate = f"{accepted / drafted:.1%}" if drafted else "-"
        medians[name] = (decode, seconds)
        print(f"{name:<14} {decode:>12.1f} {seconds:>8.2f} {tokens:>7.0f} {drafted:>8} "
              f"{accepted:>9} {rate:>11} {draft_s:>8.2f} {per_pass:>9.2f}")
    (plain_decode, plain_s), (fast_decode, fast_s) = medians["plain"], medians[label]
    print(f"{label} / plain: decode tok/s x{fast_decode / plain_decode:.2f}, "
          f"reply time x{fast_s / plain_s:.2f}")
    print("replies identical in every run" if not mismatches
          else f"WARNING: the replies differed in {mismatches} of {len(prompts)} runs (llama.cpp's "
          "logits for a batch can round differently from one token's, flipping a near-tie)")
    return mismatches


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", help="GGUF file (default: the SmolLM2 test model)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--draft", type=int, default=8, help="draft tokens (default 8)")
    parser.add_argument("--ngram", type=int, default=3, help="n-gram size (default 3)")
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--target", help="chat model for part 2 (default: SmolLM2 as F32)")
    parser.add_argument("--draft-model", help="draft for part 2 (default: the SmolLM2 test model)")
    parser.add_argument("--skip-draft", action="store_true", help="prompt lookup only")
    parser.add_argument("--no-flash-attention", action="store_true",
                        help="llama.cpp's plain attention: its rounding depends on the batch "
                             "size, so greedy replies may then differ at near-ties")
    args = parser.parse_args()

    from models.engine import ChatOptions, EngineClient, LoadSettings

    model = args.model
    if model is None:
        from tests.conftest import cached_models_dir, fetch_smollm2
        model = str(fetch_smollm2(cached_models_dir()))
    settings = dict(threads=args.threads, batch_threads=args.threads, context_length=2048,
                    flash_attention=not args.no_flash_attention)
    plain = ChatOptions(temperature=0.0, max_tokens=args.max_tokens)
    common = f"{args.threads} threads, {args.runs} runs, flash attention " \
             f"{'off' if args.no_flash_attention else 'on'}, greedy, up to {args.max_tokens} tokens"

    lookup = ChatOptions(temperature=0.0, max_tokens=args.max_tokens, speculative="prompt_lookup",
                         draft_tokens=args.draft, ngram_size=args.ngram)
    print(f"== prompt lookup: model {Path(model).name}, {common}, draft {args.draft}, "
          f"n-gram {args.ngram}")
    prompts = ["Fix the typos in this paragraph and return it:\n\n" + paragraph(run)
               for run in range(args.runs)]
    with EngineClient() as client:
        client.load(model, LoadSettings(**settings))
        mismatches = compare(client, "prompt lookup", lookup, plain, prompts, args.max_tokens)
    if args.skip_draft:
        return 0 if not mismatches else 1

    with tempfile.TemporaryDirectory() as folder:
        target, draft = args.target, args.draft_model or model
        if target is None:
            from tests.quantize.model_files import write_dequantized_f16
            target = str(write_dequantized_f16(Path(model), Path(folder) / "target-f32.gguf", "f32"))
        print(f"\n== draft model: model {Path(target).name}, draft {Path(draft).name}, {common}, "
              f"up to {args.draft} drafted at once")
        drafted = ChatOptions(temperature=0.0, max_tokens=args.max_tokens,
                              speculative="draft_model", draft_tokens=args.draft)
        prompts = [f"Write a short story about {STORIES[run % len(STORIES)]}."
                   for run in range(args.runs)]
        with EngineClient() as client:
            client.load(target, LoadSettings(**settings, draft_model=draft))
            mismatches += compare(client, "draft model", drafted, plain, prompts, args.max_tokens)
    return 0 if not mismatches else 1


if __name__ == "__main__":
    sys.exit(main())
