"""Benchmark: prompt-lookup speculative decoding against plain decoding, in the engine.

Copy-heavy task: "fix the typos in this paragraph and return it", where most of the reply
repeats the prompt. The engine loads SmolLM2-135M-Instruct (or the GGUF given as the
first argument; 2 threads unless ``--threads``, context 2048, flash attention on unless
``--no-flash-attention``) and answers the same
request greedily, alternating plain decoding and prompt lookup so that load from other
processes hits both alike. Each pair uses its own paragraph (the sentences rotated), and
the prompt is in the KV cache for both replies of a pair, so the pair differs only in
how it decodes. Printed: per mode the median decode tok/s (measured inside the engine),
the median reply time, drafted/accepted tokens and acceptance rate, then prompt lookup's
speed as a ratio of plain decoding's. The two replies of every pair must be equal (greedy
prompt lookup changes the speed, never the text); a difference is reported.

Run: ``.venv/bin/python tests/benchmarks/bench_speculative.py [MODEL.gguf] [--runs N]
[--draft N] [--ngram N]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", help="GGUF file (default: the SmolLM2 test model)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--draft", type=int, default=8, help="draft tokens (default 8)")
    parser.add_argument("--ngram", type=int, default=3, help="n-gram size (default 3)")
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--no-flash-attention", action="store_true",
                        help="llama.cpp's plain attention: its rounding depends on the batch "
                             "size, so greedy replies may then differ at near-ties")
    args = parser.parse_args()

    from models.engine import ChatOptions, EngineClient, LoadSettings

    model = args.model
    if model is None:
        from tests.conftest import cached_models_dir, fetch_smollm2
        model = str(fetch_smollm2(cached_models_dir()))
    plain = ChatOptions(temperature=0.0, max_tokens=args.max_tokens)
    lookup = ChatOptions(temperature=0.0, max_tokens=args.max_tokens, speculative="prompt_lookup",
                         draft_tokens=args.draft, ngram_size=args.ngram)
    client = EngineClient()
    client.load(model, LoadSettings(threads=args.threads, batch_threads=args.threads,
                                    context_length=2048,
                                    flash_attention=not args.no_flash_attention))
    results: dict[str, list] = {"plain": [], "prompt lookup": []}
    mismatches = 0
    try:
        client.chat([{"role": "user", "content": "Hi"}], ChatOptions(max_tokens=4)).wait()  # warm-up
        for run in range(args.runs):
            messages = [{"role": "user", "content": "Fix the typos in this paragraph and "
                         "return it:\n\n" + paragraph(run)}]
            # Prefill once, so both timed replies find the prompt in the cache.
            client.chat(messages, ChatOptions(temperature=0.0, max_tokens=1)).wait()
            order = [("plain", plain), ("prompt lookup", lookup)]
            if run % 2:
                order.reverse()
            texts = []
            for name, options in order:
                text, stats, seconds = one_reply(client, messages, options)
                results[name].append((stats, seconds))
                texts.append(text)
            mismatches += texts[0] != texts[1]
    finally:
        client.shutdown()

    print(f"model {Path(model).name}, {args.threads} threads, {args.runs} runs, flash attention "
          f"{'off' if args.no_flash_attention else 'on'}, "
          f"draft {args.draft}, n-gram {args.ngram}, greedy, up to {args.max_tokens} tokens")
    print(f"{'mode':<14} {'decode tok/s':>12} {'reply s':>8} {'tokens':>7} {'drafted':>8} "
          f"{'accepted':>9} {'acceptance':>11}")
    medians = {}
    for name, rows in results.items():
        decode = statistics.median(s.decode_tokens_per_second for s, _ in rows)
        seconds = statistics.median(t for _, t in rows)
        drafted = sum(s.draft_tokens for s, _ in rows)
        accepted = sum(s.accepted_tokens for s, _ in rows)
        tokens = statistics.median(s.completion_tokens for s, _ in rows)
        rate = f"{accepted / drafted:.1%}" if drafted else "-"
        medians[name] = (decode, seconds)
        print(f"{name:<14} {decode:>12.1f} {seconds:>8.2f} {tokens:>7.0f} {drafted:>8} "
              f"{accepted:>9} {rate:>11}")
    (plain_decode, plain_s), (fast_decode, fast_s) = medians["plain"], medians["prompt lookup"]
    print(f"prompt lookup / plain: decode tok/s x{fast_decode / plain_decode:.2f}, "
          f"reply time x{fast_s / plain_s:.2f}")
    print("replies identical in every run" if not mismatches
          else f"WARNING: the replies differed in {mismatches} of {args.runs} runs (llama.cpp's "
          "logits for a batch can round differently from one token's, flipping a near-tie)")
    return 0 if not mismatches else 1


if __name__ == "__main__":
    sys.exit(main())
