"""Structured output speed on SmolLM2: unconstrained, constrained, constrained + fast-forward.

Prints tokens per second for each mode, as ratios against unconstrained generation
measured in the same run (modes interleaved case by case, each reply timed over several
rounds keeping the fastest, since other load only adds time; tok/s counts the reply's
tokens after the prompt), the fraction of tokens
fast-forward appended without sampling, how often the whole vocabulary had to be masked
by the grammar, and how many replies equal plain constrained greedy decoding.

Modes (see tests/models/structured_runner.py):
    free      unconstrained
    mask-all  llguidance masks the whole vocabulary for every token
    plain     check-first: the grammar judges the unconstrained choice, masks only if rejected
    ff        plain + fast-forward, last forced token held back (the default)
    ff-all    plain + fast-forward of every forced token

``--large-vocab`` runs the same on SmolLM2 with its vocabulary grown to 152,064 tokens
(``large_vocab.padded_smollm2``: Qwen2.5's size, so the output layer, the sampler and every
grammar mask work on a Qwen-sized vocabulary while the model writes SmolLM2's text).

Run: .venv/bin/python tests/benchmarks/bench_structured.py [--rounds 3] [--cases a,b] [--large-vocab]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

DEFAULT_CASES = "person,nested-address,array-of-objects,ref-defs,enum-color,date-time-formats"
MODES = ("free", "mask-all", "plain", "ff", "ff-all")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default=DEFAULT_CASES)
    parser.add_argument("--max-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--large-vocab", action="store_true")
    args = parser.parse_args()

    import llama_cpp

    from models.engine.options import ChatOptions
    from models.structured import ConstrainedGenerator, constraint_for_schema
    from tests.benchmarks.large_vocab import padded_smollm2
    from tests.conftest import cached_models_dir, fetch_smollm2
    from tests.models.structured_runner import MODES as OPTIONS, chatml_prompt
    from tests.models.structured_schemas import SUPPORTED

    model = fetch_smollm2(cached_models_dir())
    if args.large_vocab:
        model = padded_smollm2(model, cached_models_dir() / "smollm2-vocab152k.gguf")
    llm = llama_cpp.Llama(model_path=str(model), n_ctx=2048,
                          n_threads=args.threads, n_threads_batch=args.threads, verbose=False)
    cases = args.cases.split(",")
    totals = {mode: {"sampled": 0, "forced": 0, "full_masks": 0, "seconds": 0.0} for mode in MODES}
    texts: dict[tuple[str, str], str] = {}
    # Greedy replies are the same every round, so each (schema, mode) keeps its fastest
    # round: other work on the machine only ever adds time. Modes interleave per case.
    for name in cases:
        task, schema = SUPPORTED[name]
        constraint = constraint_for_schema(schema)
        best: dict[str, object] = {}
        for _ in range(args.rounds):
            for mode in MODES:
                options = OPTIONS[mode]
                generator = ConstrainedGenerator(
                    llm, constraint.grammar if options["constrained"] else None,
                    ChatOptions(temperature=0.0), fast_forward=options["fast_forward"],
                    hold_back_last=options["hold_back_last"], check_first=options["check_first"])
                llm.reset()  # the same full prompt decode before every mode
                texts[mode, name] = generator.generate(chatml_prompt(llm, schema, task), args.max_tokens)
                if mode not in best or generator.stats.seconds < best[mode].seconds:
                    best[mode] = generator.stats
        for mode, stats in best.items():
            total = totals[mode]
            total["sampled"] += stats.sampled_tokens
            total["forced"] += stats.forced_tokens
            total["full_masks"] += stats.full_masks
            total["seconds"] += stats.seconds

    def rate(mode: str) -> float:
        t = totals[mode]
        return (t["sampled"] + t["forced"]) / t["seconds"]

    print(f"SmolLM2-135M Q4_1, {llm.n_vocab():,} tokens, {args.threads} threads, {len(cases)} schemas, {args.rounds} rounds, "
          f"greedy, max {args.max_tokens} tokens")
    print(f"{'mode':9} {'tok/s':>7} {'vs free':>8} {'forced':>7} {'full masks':>11} {'= plain':>8}")
    for mode in MODES:
        t = totals[mode]
        all_tokens = t["sampled"] + t["forced"]
        same = sum(texts[mode, n] == texts["plain", n] for n in cases)
        masks = f"{t['full_masks'] / max(t['sampled'], 1):.0%}" if mode != "free" else "-"
        print(f"{mode:9} {rate(mode):7.1f} {rate(mode) / rate('free'):8.2f} "
              f"{t['forced'] / max(all_tokens, 1):7.0%} {masks:>11} "
              f"{same if mode != 'free' else '-':>5}/{len(cases)}")
    valid = sum(_valid(texts[mode, n], SUPPORTED[n][1]) for mode in MODES[1:] for n in cases)
    print(f"valid constrained replies: {valid}/{len(cases) * (len(MODES) - 1)}")
    print(json.dumps({m: [texts[m, n] for n in cases] for m in ("plain", "ff")}, indent=None)[:2000])
    return 0


def _valid(text: str, schema) -> bool:
    from models.foundation.errors import QuantDeskError
    from models.structured import validate

    try:
        validate(text, schema)
        return True
    except QuantDeskError:
        return False


if __name__ == "__main__":
    sys.exit(main())
