"""The GBNF building blocks of compact JSON, and small helpers for writing grammars.

Rule names are llama.cpp's ``[a-zA-Z0-9-]+``. Strings allow JSON's escapes; numbers cap
the whole part at 16 digits and fractions at 15 (as llama.cpp's converter caps integers),
so a small model cannot loop in a number. The formats are RFC 3339 ``date``/``time``/
``date-time`` (years 0001-9999, day 31 in any month: the validator rejects impossible
dates; no leap seconds, uppercase ``T``/``Z``), lowercase ``uuid``, and an ``email``
subset of RFC 5321 (dot-separated atoms of letters, digits, ``_+-``; a domain of at least
two LDH labels; the validator checks the lengths).
"""

from __future__ import annotations

import json
import re
from typing import Any

PRIMITIVES = {
    "char": r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})',
    "string": r'"\"" char* "\""',
    "integer": r'"-"? ("0" | [1-9] [0-9]{0,15})',
    "fraction": r'"." [0-9]{1,15}',
    "number": r'integer fraction? ([eE] [-+]? [0-9]{1,3})?',
    "boolean": r'"true" | "false"',
    "null": r'"null"',
    "value": r"object | array | string | number | boolean | null",
    "object": r'"{" (string ":" value ("," string ":" value)*)? "}"',
    "array": r'"[" (value ("," value)*)? "]"',
    "two-digits": r"[0-9] [0-9]",
    "date": r'([1-9] [0-9]{3} | "0" ([1-9] [0-9]{2} | "0" ([1-9] [0-9] | "0" [1-9]))) "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | [1-2] [0-9] | "3" [0-1])',
    "time": r'([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? '
            r'("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])',
    "date-time": r'date "T" time',
    "uuid": r'[0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12}',
    "email-atom": r'[a-zA-Z0-9_+-]+',
    "email-label": r'[a-zA-Z0-9] ([a-zA-Z0-9-]* [a-zA-Z0-9])?',
    "email": r'email-atom ("." email-atom)* "@" email-label ("." email-label)+',
}
PRIMITIVE_DEPENDENCIES = {"string": ["char"], "number": ["integer", "fraction"],
                          "value": ["object", "array", "string", "number", "boolean", "null"],
                          "object": ["string", "value"], "array": ["value"],
                          "date-time": ["date", "time"], "email": ["email-atom", "email-label"]}
FORMATS = ("date", "time", "date-time", "uuid", "email")


def _plain_numbers(value: Any) -> Any:
    """Integral floats as integers (``4.0`` → ``4``, ``-0.0`` → ``0``): the same JSON
    number, written the way the grammar writes integers everywhere else."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_plain_numbers(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain_numbers(v) for k, v in value.items()}
    return value


def literal(value: Any) -> str:
    """A GBNF literal for the compact JSON text of ``value`` (integral numbers unpointed)."""
    text = json.dumps(_plain_numbers(value), separators=(",", ":"), ensure_ascii=False)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def gbnf_char(c: str) -> str:
    """One character as it may appear in a GBNF literal or class (escaped when needed)."""
    if c in '"\\[]-^' or ord(c) < 0x20 or ord(c) == 0x7F:
        return f"\\x{ord(c):02X}"
    return c


LITERALS_AND_CLASSES = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]')
RULE_NAME = re.compile(r"[a-zA-Z0-9-]+")


def reachable(rules: dict[str, str]) -> dict[str, str]:
    """Only the rules ``root`` uses (the object builder makes a few it then skips)."""
    keep, todo = set(), ["root"]
    while todo:
        name = todo.pop()
        if name in keep or name not in rules:
            continue
        keep.add(name)
        body = LITERALS_AND_CLASSES.sub(" ", rules[name])
        todo.extend(n for n in RULE_NAME.findall(body) if not n.isdigit())
    return {name: body for name, body in rules.items() if name in keep}


