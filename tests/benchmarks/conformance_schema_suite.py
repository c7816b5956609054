"""The official JSON Schema Test Suite (draft 2020-12) through QuantDesk's structured output.

The suite (json-schema-org/JSON-Schema-Test-Suite) is read from the copy the
``jsonschema`` package vendors in its source distribution on PyPI (fetched once with pip,
the version installed here). Each case is a schema and instances marked valid or invalid.
Three figures:

- **validator agreement**: QuantDesk's validator (``validation_errors``) gives the suite's
  verdict. QuantDesk asserts ``format`` (the suite's required part treats it as an
  annotation, which 2020-12 allows either way). A schema the validator refuses with a
  sentence (``unevaluated*``, ``$dynamicRef``, a ``$ref`` to another document, an ``$id``
  inside the schema) is counted apart, not as agreement;
- **valid instances the grammar accepts**, over schemas the grammar enforces exactly (no
  problem listed): compact JSON of each valid instance run through the schema's llguidance
  grammar. A refused one is sorted by why: the same value spelled another way is accepted
  (``1`` for ``1.0``: a model writes the canonical form); the format QuantDesk asserts; a
  listed restriction (objects closed to the properties they list, keys in the listed order:
  what a model is asked to write); else a miss;
- **invalid instances caught**: refused by the grammar or by the validator that checks
  every finished reply. Must be all of them: an invalid value that passes both would
  reach a client.

Run: .venv/bin/python tests/benchmarks/conformance_schema_suite.py [--optional] [--show 20]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def suite_files(cache: Path, optional: bool) -> list[tuple[str, list]]:
    """(name, cases) of every draft 2020-12 file of the suite vendored by ``jsonschema``."""
    version = metadata.version("jsonschema")
    archive = cache / f"jsonschema-{version}.tar.gz"
    if not archive.exists():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                        "-q", "--disable-pip-version-check", "-d", str(cache),
                        f"jsonschema=={version}"], check=True)
    prefix = f"jsonschema-{version}/json/tests/draft2020-12/"
    files = []
    with tarfile.open(archive) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            name = member.name[len(prefix):] if member.name.startswith(prefix) else None
            if not name or not name.endswith(".json") or ("/" in name and not optional):
                continue
            files.append((name, json.load(tar.extractfile(member))))
    return files


def compact(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def respelled(value):
    """``value`` with every float that holds a whole number written as an integer."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [respelled(v) for v in value]
    if isinstance(value, dict):
        return {k: respelled(v) for k, v in value.items()}
    return value


def main(argv=None) -> int:
    from models.structured import SchemaError, plan_schema, validation_errors
    from models.structured.guidance import grammar_accepts
    from tests.conftest import cached_models_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--optional", action="store_true", help="also the optional/ files (formats …)")
    parser.add_argument("--show", type=int, default=10, help="how many disagreements to print")
    args = parser.parse_args(argv)

    n = {k: 0 for k in ("instances", "agree", "unreadable", "schemas", "enforced",
                        "valid", "accepted", "spelled", "format", "restricted", "missed", "invalid", "caught")}
    shown = []
    for name, cases in suite_files(cached_models_dir(), args.optional):
        for case in cases:
            schema = case["schema"]
            n["schemas"] += 1
            try:
                plan = plan_schema(schema)
            except SchemaError:
                plan = None
            if plan is not None and plan.enforced:
                n["enforced"] += 1
            for test in case["tests"]:
                n["instances"] += 1
                expected = test["valid"]
                try:
                    ours = not validation_errors(test["data"], schema)
                except SchemaError:
                    n["unreadable"] += 1
                    continue
                if ours == expected:
                    n["agree"] += 1
                elif len(shown) < args.show:
                    shown.append(f"validator  {name}: {case['description']} / {test['description']}")
                if plan is None or not plan.enforced:
                    continue
                in_grammar = grammar_accepts(plan.grammar, compact(test["data"]))
                if expected:
                    n["valid"] += 1
                    if in_grammar:
                        n["accepted"] += 1
                    elif grammar_accepts(plan.grammar, compact(respelled(test["data"]))):
                        n["spelled"] += 1
                    elif not ours or '"format"' in json.dumps(schema):
                        n["format"] += 1
                    elif plan.restrictions or isinstance(test["data"], dict):
                        n["restricted"] += 1
                    else:
                        n["missed"] += 1
                        if len(shown) < args.show:
                            shown.append(f"grammar    {name}: {case['description']} / {test['description']}")
                else:
                    n["invalid"] += 1
                    if not in_grammar or not ours:
                        n["caught"] += 1
                    elif len(shown) < args.show:
                        shown.append(f"LET THROUGH {name}: {case['description']} / {test['description']}")
    readable = n["instances"] - n["unreadable"]
    print(f"JSON Schema Test Suite draft 2020-12 ({'required + optional' if args.optional else 'required'}), "
          f"from jsonschema {metadata.version('jsonschema')}'s source distribution")
    print(f"validator agreement: {n['agree']}/{readable} instances ({n['unreadable']} more in "
          f"schemas refused with a sentence: unevaluated*, $dynamicRef, other documents, inner $id)")
    print(f"schemas the grammar enforces exactly: {n['enforced']}/{n['schemas']}")
    print(f"valid instances the grammar accepts: {n['accepted']}/{n['valid']} "
          f"(refused: {n['spelled']} accepted spelled canonically, {n['format']} by the asserted "
          f"format, {n['restricted']} by a listed restriction, {n['missed']} missed)")
    print(f"invalid instances caught by grammar or validator: {n['caught']}/{n['invalid']}")
    for line in shown:
        print("  " + line)
    return 0 if n["caught"] == n["invalid"] else 1


if __name__ == "__main__":
    sys.exit(main())
