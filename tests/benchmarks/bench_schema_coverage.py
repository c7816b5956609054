"""How many real-world JSON Schemas QuantDesk enforces exactly, beside llguidance alone.

The corpus is JSONSchemaBench (the GitHub repository guidance-ai/jsonschemabench, its
``data/`` folder: 9,558 schemas from GitHub, Kubernetes, Snowplow, the Washington Post's
API, the JSON Schema Store and Glaive's function-calling set, one folder per set). A
schema counts for an engine when it compiles it without relaxing any keyword ("strict"):

- QuantDesk: :func:`models.structured.plan_schema` lists no problem (annotations and
  unknown formats ignored, older drafts read as 2020-12, exact rewrites beyond llguidance);
- llguidance: ``LLMatcher.grammar_from_json_schema`` of the schema as written, then
  ``validate_grammar`` reports no error (its default options: it also refuses what it
  cannot enforce, and unknown formats).

Compile only, no model. Prints one row per set, the total, the seconds each engine took,
and the most common problems QuantDesk lists.

Run: .venv/bin/python tests/benchmarks/bench_schema_coverage.py CORPUS/data [--sets a,b]
     [--failures FILE]   (writes each refused schema's path and problems as JSON lines)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def llguidance_accepts(schema) -> bool:
    from llguidance import LLMatcher

    try:
        grammar = LLMatcher.grammar_from_json_schema(schema)
    except (ValueError, TypeError):
        return False
    return not LLMatcher.validate_grammar(grammar)


def quantdesk_problems(schema) -> list[str]:
    from models.foundation.errors import QuantDeskError
    from models.structured import plan_schema

    try:
        return [f"{p.pointer}: {p.message}" for p in plan_schema(schema).problems]
    except QuantDeskError as exc:
        return [f"refused: {exc.what}"]


def problem_kind(text: str) -> str:
    """A problem without its place and names: what to count."""
    kind = re.sub(r"^[^:]*: ", "", text)
    kind = re.sub(r"'[^']*'|\"[^\"]*\"", "…", kind)
    return kind[:110]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("corpus", type=Path, help="the data/ folder of JSONSchemaBench")
    parser.add_argument("--sets", default="", help="comma-separated set names (default: all)")
    parser.add_argument("--failures", type=Path, help="write refused schemas as JSON lines")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")  # Python's re warns about some schemas' patterns
    sets = args.sets.split(",") if args.sets else sorted(p.name for p in args.corpus.iterdir()
                                                         if p.is_dir())
    kinds: Counter = Counter()
    totals = Counter()
    failures = args.failures.open("w") if args.failures else None
    print(f"{'set':<16} {'schemas':>8} {'QuantDesk':>10} {'llguidance':>11}")
    for name in sets:
        files = sorted((args.corpus / name).glob("*.json"))
        ours = theirs = 0
        for path in files:
            schema = json.loads(path.read_text(encoding="utf-8"))
            started = time.perf_counter()
            problems = quantdesk_problems(schema)
            totals["ours_s"] += time.perf_counter() - started
            started = time.perf_counter()
            theirs += llguidance_accepts(schema)
            totals["theirs_s"] += time.perf_counter() - started
            ours += not problems
            for problem in problems:
                kinds[problem_kind(problem)] += 1
            if problems and failures:
                failures.write(json.dumps({"path": str(path), "problems": problems}) + "\n")
        totals["n"] += len(files)
        totals["ours"] += ours
        totals["theirs"] += theirs
        print(f"{name:<16} {len(files):>8} {ours / len(files):>10.3f} {theirs / len(files):>11.3f}"
              f"   ({ours} / {theirs})", flush=True)
    n = totals["n"]
    print(f"{'all':<16} {n:>8} {totals['ours'] / n:>10.3f} {totals['theirs'] / n:>11.3f}"
          f"   ({totals['ours']} / {totals['theirs']})")
    print(f"seconds: QuantDesk {totals['ours_s']:.1f}, llguidance {totals['theirs_s']:.1f}")
    print("most common problems (occurrences):")
    for kind, count in kinds.most_common(25):
        print(f"{count:6d}  {kind}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
