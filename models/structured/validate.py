"""Validate a generated result against its JSON Schema; every problem is a sentence.

A grammar makes a reply *likely* valid, not certainly: the grammar may not enforce some
feature (reported up front by :mod:`.schema_grammar`), a reply may be cut by the token
budget, and a model may stop early. So every result is checked here before it is shown
as structured output. This validator covers exactly the keywords the converter handles
(plus ``multipleOf``, ``uniqueItems``, ``minProperties``/``maxProperties`` so results of
schemas generated "anyway" are still judged), with no extra dependency.
"""

from __future__ import annotations

import datetime
import json
import math
import re
import uuid
from typing import Any, Optional

from app.core.errors import QuantDeskError

EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _type_matches(value: Any, kind: str) -> bool:
    actual = _json_type(value)
    return actual == kind or (kind == "number" and actual == "integer")


def _format_ok(value: str, fmt: str) -> bool:
    try:
        if fmt == "date":
            if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value) is None:
                return False
            # RFC 3339 allows year 0000, Python's date does not; 2000 has the same leap day.
            year = value[:4] if value[:4] != "0000" else "2000"
            datetime.date.fromisoformat(year + value[4:])
            return True
        if fmt == "time":
            return re.fullmatch(r"\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})", value) is not None \
                and datetime.time.fromisoformat(value.replace("Z", "+00:00")) is not None
        if fmt == "date-time":
            date, _, time = value.partition("T")
            return _format_ok(date, "date") and _format_ok(time, "time")
        if fmt == "uuid":
            return len(value) == 36 and str(uuid.UUID(value)) == value.lower()
        if fmt == "email":
            return EMAIL.match(value) is not None
    except ValueError:
        return False
    return True  # unknown formats are annotations in JSON Schema


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but True != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b if not (isinstance(a, (list, dict)) or isinstance(b, (list, dict))) else \
        json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _count_errors(count: int, schema: dict, keyword: str, noun: str, where: str) -> list[str]:
    """minItems/maxItems, minLength/maxLength, minProperties/maxProperties."""
    low, high = schema.get("min" + keyword, 0), schema.get("max" + keyword)
    if count < low:
        return [f"{where} has {count} {noun}, fewer than the minimum {low}."]
    if high is not None and count > high:
        return [f"{where} has {count} {noun}, more than the maximum {high}."]
    return []


class _Validator:
    def __init__(self, root: Any) -> None:
        self.root = root

    def resolve(self, ref: str) -> Any:
        node = self.root
        for part in [p for p in ref.lstrip("#").split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            node = node[int(part)] if isinstance(node, list) else node[part]
        return node

    def errors(self, value: Any, schema: Any, where: str) -> list[str]:
        if schema is True or schema == {}:
            return []
        if schema is False:
            return [f"{where} is not allowed at all."]
        out: list[str] = []
        if "$ref" in schema:
            out += self.errors(value, self.resolve(schema["$ref"]), where)
        for sub in schema.get("allOf", []):
            out += self.errors(value, sub, where)
        if "anyOf" in schema and not any(not self.errors(value, s, where) for s in schema["anyOf"]):
            out.append(f"{where} matches none of the 'anyOf' alternatives.")
        if "oneOf" in schema:
            n = sum(not self.errors(value, s, where) for s in schema["oneOf"])
            if n != 1:
                out.append(f"{where} matches {n} of the 'oneOf' alternatives instead of exactly one.")
        if "const" in schema and not _equal(value, schema["const"]):
            out.append(f"{where} is {json.dumps(value)}, not the required {json.dumps(schema['const'])}.")
        if "enum" in schema and not any(_equal(value, v) for v in schema["enum"]):
            out.append(f"{where} is {json.dumps(value)}, which is not one of {json.dumps(schema['enum'])}.")
        kinds = schema.get("type")
        if kinds is not None:
            kinds = [kinds] if isinstance(kinds, str) else kinds
            if not any(_type_matches(value, k) for k in kinds):
                return out + [f"{where} is a {_json_type(value)}, not a {' or '.join(kinds)}."]
        if isinstance(value, dict):
            out += self.object_errors(value, schema, where)
        elif isinstance(value, list):
            out += self.array_errors(value, schema, where)
        elif isinstance(value, str):
            out += self.string_errors(value, schema, where)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out += self.number_errors(value, schema, where)
        return out

    def object_errors(self, value: dict, schema: dict, where: str) -> list[str]:
        out = []
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                out.append(f"{where} lacks the required property {name!r}.")
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in props:
                out += self.errors(item, props[name], f"{where}.{name}")
            elif extra is False:
                out.append(f"{where} has the property {name!r}, which the schema does not allow.")
            else:
                out += self.errors(item, extra, f"{where}.{name}")
        return out + _count_errors(len(value), schema, "Properties", "properties", where)

    def array_errors(self, value: list, schema: dict, where: str) -> list[str]:
        out = _count_errors(len(value), schema, "Items", "items", where)
        if schema.get("uniqueItems") and len({json.dumps(v, sort_keys=True) for v in value}) != len(value):
            out.append(f"{where} repeats an item, but the schema asks for unique items.")
        items = schema.get("items")
        if isinstance(items, (dict, bool)):
            for i, item in enumerate(value):
                out += self.errors(item, items, f"{where}[{i}]")
        return out

    def string_errors(self, value: str, schema: dict, where: str) -> list[str]:
        out = _count_errors(len(value), schema, "Length", "characters", where)
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            out.append(f"{where} ({value!r}) does not match the pattern {schema['pattern']!r}.")
        if "format" in schema and not _format_ok(value, schema["format"]):
            out.append(f"{where} ({value!r}) is not a valid {schema['format']}.")
        return out

    def number_errors(self, value: float, schema: dict, where: str) -> list[str]:
        out = []
        checks = (("minimum", lambda b: value >= b, "below the minimum"),
                  ("maximum", lambda b: value <= b, "above the maximum"),
                  ("exclusiveMinimum", lambda b: value > b, "not above the exclusive minimum"),
                  ("exclusiveMaximum", lambda b: value < b, "not below the exclusive maximum"))
        for key, ok, words in checks:
            if key in schema and not isinstance(schema[key], bool) and not ok(schema[key]):
                out.append(f"{where} is {value}, {words} {schema[key]}.")
        step = schema.get("multipleOf")
        if step and not math.isclose(value / step, round(value / step), abs_tol=1e-9):
            out.append(f"{where} is {value}, not a multiple of {step}.")
        return out


def validation_errors(value: Any, schema: Any) -> list[str]:
    """Every way ``value`` breaks ``schema``, as sentences; empty when it is valid."""
    return _Validator(schema).errors(value, schema, "The result")


def validate(text: str, schema: Optional[Any]) -> Any:
    """Parse a generated reply and check it against ``schema`` (``None``: any JSON).

    Returns:
        The parsed value.

    Raises:
        QuantDeskError: the reply is not JSON or breaks the schema; the sentence says how.
    """
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise QuantDeskError(
            f"The model's reply is not complete JSON ({exc.msg} at character {exc.pos}).",
            "Allow more tokens for the reply, or simplify the schema.") from None
    if schema is not None:
        problems = validation_errors(value, schema)
        if problems:
            raise QuantDeskError("The model's reply does not match the JSON schema: "
                                 + " ".join(problems), "Try again, or relax the schema.")
    return value
