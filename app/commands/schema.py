"""``quantdesk schema check [--json] FILE…``: does QuantDesk enforce these JSON Schemas exactly?

For each file: "enforced exactly", or each keyword the grammar would not enforce with its
JSON pointer and a sentence (the same verdict as the Chat page's Structured output panel
and the API server's ``strict`` check). ``--json`` prints one object per file and line:
``{"path", "enforced", "problems": [{"pointer", "message"}]}``. The exit code is 0 when
every schema is enforced exactly, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def file_verdict(path: str) -> dict:
    """The verdict on one schema file; a file that cannot be read or parsed is a problem."""
    from models.structured.schema_policy import schema_verdict

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return {"path": path, "enforced": False,
                "problems": [{"pointer": "", "message": f"The file cannot be read ({exc})."}]}
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        return {"path": path, "enforced": False, "problems": [{"pointer": "", "message": (
            f"The file is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}).")}]}
    enforced, problems = schema_verdict(schema)
    return {"path": path, "enforced": enforced, "problems": [p.to_dict() for p in problems]}


def run(args: argparse.Namespace) -> int:
    verdicts = [file_verdict(path) for path in args.files]
    for verdict in verdicts:
        if args.json:
            print(json.dumps(verdict, ensure_ascii=False), flush=True)
            continue
        if verdict["enforced"]:
            print(f"{verdict['path']}: enforced exactly")
            continue
        count = len(verdict["problems"])
        print(f"{verdict['path']}: not enforced exactly ({count} problem{'s' * (count != 1)})")
        for problem in verdict["problems"]:
            print(f"  {problem['pointer'] or '/'}: {problem['message']}")
    return 0 if all(v["enforced"] for v in verdicts) else 1


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("schema", help="check JSON Schemas for structured output")
    actions = parser.add_subparsers(dest="schema_action", required=True)
    check = actions.add_parser(
        "check", help="say whether QuantDesk enforces each schema exactly, and where not")
    check.add_argument("files", nargs="+", metavar="FILE", help="JSON Schema files")
    check.add_argument("--json", action="store_true",
                       help='one JSON object per file: {"path", "enforced", "problems"}')
    check.set_defaults(func=run)
