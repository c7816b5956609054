"""Compliance on real-world schemas: SmolLM2 replies under sampled JSONSchemaBench schemas,
each judged by the reference ``jsonschema`` library under the schema's own draft.

Schemas are drawn with a fixed seed, evenly over the corpus's sets, among those QuantDesk
enforces exactly (``plan_schema`` lists no problem) and that ``jsonschema`` itself can read
(its ``check_schema`` passes; a pattern Python's ``re`` cannot compile is skipped). Each is
sent through the engine (the batching loop, check-first sampling, fast-forward) at
temperature 0.8 with the schema in the prompt. A reply cut by ``max_tokens`` or the
context is counted apart; every other reply must parse and validate: the figure that
matters is "invalid", which must be 0.

Run: .venv/bin/python tests/benchmarks/compliance_structured.py CORPUS/data
     [--count 220] [--max-tokens 320] [--seed 36] [--replies FILE]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

PROMPT_SCHEMA_CHARS = 2500


def reference_readable(schema) -> bool:
    import jsonschema

    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
        cls(schema).is_valid({})  # compiles patterns and resolves local references
        return True
    except Exception:  # noqa: BLE001 - any failure means the reference cannot judge it
        return False


def reference_valid(schema, value) -> list[str]:
    import jsonschema

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return [e.message for e in cls(schema, format_checker=cls.FORMAT_CHECKER).iter_errors(value)]


def sample(corpus: Path, count: int, seed: int) -> list[tuple[str, dict]]:
    from models.structured import plan_schema

    r = random.Random(seed)
    sets = sorted(p for p in corpus.iterdir() if p.is_dir())
    files = {s.name: sorted(s.glob("*.json")) for s in sets}
    for names in files.values():
        r.shuffle(names)
    chosen: list[tuple[str, dict]] = []
    while len(chosen) < count and any(files.values()):
        for name in sorted(files):
            if not files[name] or len(chosen) >= count:
                continue
            path = files[name].pop()
            schema = json.loads(path.read_text(encoding="utf-8"))
            try:
                if plan_schema(schema).problems or not reference_readable(schema):
                    continue
            except Exception:  # noqa: BLE001 - a refused schema is simply not sampled
                continue
            chosen.append((f"{name}/{path.name}", schema))
    return chosen


def main(argv=None) -> int:
    from models.engine import ChatOptions, EngineClient, LoadSettings
    from tests.conftest import cached_models_dir, fetch_smollm2

    parser = argparse.ArgumentParser()
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--count", type=int, default=220)
    parser.add_argument("--max-tokens", type=int, default=320)
    parser.add_argument("--seed", type=int, default=36)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--replies", type=Path, help="write every reply as JSON lines")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    schemas = sample(args.corpus, args.count, args.seed)
    print(f"sampled {len(schemas)} schemas: {dict(Counter(n.split('/')[0] for n, _ in schemas))}",
          flush=True)
    client = EngineClient()
    client.load(fetch_smollm2(cached_models_dir()),
                LoadSettings(threads=args.threads, batch_threads=args.threads,
                             context_length=4096))
    out = args.replies.open("w") if args.replies else None
    counts: Counter = Counter()
    started = time.perf_counter()
    try:
        for index, (name, schema) in enumerate(schemas):
            text = json.dumps(schema, separators=(",", ":"), ensure_ascii=False)
            messages = [{"role": "system", "content": "You reply with JSON only."},
                        {"role": "user", "content": "Write an example JSON value for this "
                         f"JSON Schema:\n{text[:PROMPT_SCHEMA_CHARS]}"}]
            options = ChatOptions(temperature=0.8, seed=args.seed + index,
                                  max_tokens=args.max_tokens, response_format="json_schema",
                                  schema=schema)
            reply = client.chat(messages, options).wait()
            stats = reply.stats
            if stats.stop_reason in ("length", "context_full"):
                verdict, errors = "cut", []
            else:
                try:
                    errors = reference_valid(schema, json.loads(reply.text))
                except json.JSONDecodeError as exc:
                    errors = [f"not JSON: {exc}"]
                verdict = "valid" if not errors else "invalid"
            counts[verdict] += 1
            counts["closed_at_budget"] += stats.closed_at_budget
            counts["tokens"] += stats.completion_tokens
            counts["forced"] += stats.forced_tokens
            if verdict == "invalid":
                print(f"INVALID {name}: {errors[:2]} {reply.text[:300]!r}", flush=True)
            if out:
                out.write(json.dumps({"schema": name, "verdict": verdict, "errors": errors[:3],
                                      "stop": stats.stop_reason, "text": reply.text}) + "\n")
            if (index + 1) % 20 == 0:
                print(f"{index + 1} replies: {dict(counts)}", flush=True)
    finally:
        client.shutdown()
    seconds = time.perf_counter() - started
    print(f"replies: {len(schemas)}; valid {counts['valid']}, invalid {counts['invalid']}, "
          f"cut by max_tokens {counts['cut']} (closed at the budget, still valid: "
          f"{counts['closed_at_budget']}); tokens {counts['tokens']} of which forced "
          f"{counts['forced']}; {seconds:.0f} s")
    return 1 if counts["invalid"] else 0


if __name__ == "__main__":
    sys.exit(main())
