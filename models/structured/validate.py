"""Validate a generated result against its JSON Schema (2020-12); every problem a sentence.

A grammar makes a reply *likely* valid, not certainly: the grammar may not enforce some
keyword (reported up front by :mod:`.schema_policy`), a reply may be cut by the token
budget, and a model may stop early. So every result is checked here before it is shown
as structured output, against *every* keyword the grammar may skip: ``not``,
``contains``/``minContains``/``maxContains``, ``if``/``then``/``else``, ``prefixItems``,
``dependentRequired``, ``dependentSchemas``, ``propertyNames``, ``patternProperties``,
``multipleOf``, ``uniqueItems``, ``minProperties``/``maxProperties`` and the formats of
:mod:`.formats` (format assertion on). What it cannot check (references to other
documents, ``unevaluated*``) is named before generating (:mod:`.schema_policy`), so
"valid" always says what it checked. No extra dependency;
tests compare every verdict with the ``jsonschema`` package.

JSON semantics, not Python's: ``1`` and ``1.0`` are the same number (also in ``enum``,
``const`` and ``uniqueItems``, recursively inside arrays and objects), ``true`` is not
``1``, and ``multipleOf`` is exact decimal arithmetic on the numbers as written
(``0.3`` is a multiple of ``0.1``), bounded by the size of JSON numbers.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from fractions import Fraction
from typing import Any, Optional

from models.foundation.errors import QuantDeskError
from models.structured.formats import format_ok
from models.structured.schema_check import SchemaIndex, check_schema, compile_pattern


def json_type(value: Any) -> str:
    """The JSON Schema type of a parsed value (an integral float is an ``integer``)."""
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
    actual = json_type(value)
    return actual == kind or (kind == "number" and actual == "integer")


def json_key(value: Any) -> Any:
    """A hashable key equal for exactly the JSON-equal values (numbers by value, not type)."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, (int, float)):
        return ("number", value)  # Python compares int and float exactly, and hashes them alike
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list):
        return ("array", tuple(json_key(v) for v in value))
    return ("object", frozenset((k, json_key(v)) for k, v in value.items()))


def json_equal(a: Any, b: Any) -> bool:
    """JSON Schema equality: mathematical for numbers, recursive for arrays and objects."""
    return json_key(a) == json_key(b)


def _exact(x: float | int) -> Fraction:
    """The decimal a JSON number was written as (a float's shortest repr), exactly."""
    return Fraction(x) if isinstance(x, int) else Fraction(Decimal(repr(x)))


def is_multiple(value: float | int, step: float | int) -> bool:
    """``value`` is a whole multiple of ``step``, in exact decimal arithmetic."""
    if isinstance(value, float) and not math.isfinite(value):
        return False
    return (_exact(value) / _exact(step)).denominator == 1


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."


class _Validator:
    def __init__(self, index: SchemaIndex) -> None:
        self.index = index
        self.patterns: dict[str, Any] = {}

    def search(self, pattern: str, text: str) -> bool:
        if pattern not in self.patterns:
            self.patterns[pattern] = compile_pattern(pattern, "")
        return self.patterns[pattern].search(text) is not None

    def valid(self, value: Any, schema: Any) -> bool:
        return not self.errors(value, schema, "")

    def errors(self, value: Any, schema: Any, where: str) -> list[str]:
        if schema is True:
            return []
        if schema is False:
            return [f"{where} is not allowed at all."]
        out: list[str] = []
        if "$ref" in schema:
            out += self.errors(value, self.index.target(schema), where)
        out += self.applicator_errors(value, schema, where)
        if "const" in schema and not json_equal(value, schema["const"]):
            out.append(f"{where} is {_shown(value)}, not the required {_shown(schema['const'])}.")
        if "enum" in schema and not any(json_equal(value, v) for v in schema["enum"]):
            out.append(f"{where} is {_shown(value)}, which is not one of {_shown(schema['enum'])}.")
        kinds = schema.get("type")
        if kinds is not None:
            kinds = [kinds] if isinstance(kinds, str) else kinds
            if not any(_type_matches(value, k) for k in kinds):
                out.append(f"{where} is a {json_type(value)}, not a {' or '.join(kinds)}.")
        if isinstance(value, dict):
            out += self.object_errors(value, schema, where)
        elif isinstance(value, list):
            out += self.array_errors(value, schema, where)
        elif isinstance(value, str):
            out += self.string_errors(value, schema, where)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out += self.number_errors(value, schema, where)
        return out

    def applicator_errors(self, value: Any, schema: dict, where: str) -> list[str]:
        """allOf, anyOf, oneOf, not, if/then/else: subschemas applied to the same value."""
        out: list[str] = []
        for sub in schema.get("allOf", []):
            out += self.errors(value, sub, where)
        if "anyOf" in schema and not any(self.valid(value, s) for s in schema["anyOf"]):
            out.append(f"{where} matches none of the 'anyOf' alternatives.")
        if "oneOf" in schema:
            n = sum(self.valid(value, s) for s in schema["oneOf"])
            if n != 1:
                out.append(f"{where} matches {n} of the 'oneOf' alternatives instead of exactly one.")
        if "not" in schema and self.valid(value, schema["not"]):
            out.append(f"{where} matches the schema under 'not', which it must not.")
        if "if" in schema:
            branch = "then" if self.valid(value, schema["if"]) else "else"
            if branch in schema:
                out += self.errors(value, schema[branch], where)
        return out

    def object_errors(self, value: dict, schema: dict, where: str) -> list[str]:
        out = []
        props = schema.get("properties", {})
        patterns = schema.get("patternProperties", {})
        extra = schema.get("additionalProperties", True)
        for name in schema.get("required", []):
            if name not in value:
                out.append(f"{where} lacks the required property {name!r}.")
        for name, needs in schema.get("dependentRequired", {}).items():
            if name in value:
                out += [f"{where} has {name!r} but lacks {other!r}, which must come with it."
                        for other in needs if other not in value]
        for name, sub in schema.get("dependentSchemas", {}).items():
            if name in value:
                out += self.errors(value, sub, where)
        names = schema.get("propertyNames")
        for name, item in value.items():
            inner = f"{where}.{name}"
            if names is not None and not self.valid(name, names):
                out.append(f"{where} has the property name {name!r}, which 'propertyNames' does not allow.")
            matched = name in props
            if matched:
                out += self.errors(item, props[name], inner)
            for pattern, sub in patterns.items():
                if self.search(pattern, name):
                    matched = True
                    out += self.errors(item, sub, inner)
            if not matched:
                if extra is False:
                    out.append(f"{where} has the property {name!r}, which the schema does not allow.")
                else:
                    out += self.errors(item, extra, inner)
        return out + _count_errors(len(value), schema, "Properties", "properties", where)

    def array_errors(self, value: list, schema: dict, where: str) -> list[str]:
        out = _count_errors(len(value), schema, "Items", "items", where)
        if schema.get("uniqueItems") and len({json_key(v) for v in value}) != len(value):
            out.append(f"{where} repeats an item, but the schema asks for unique items.")
        prefix = schema.get("prefixItems", [])
        for i, (item, sub) in enumerate(zip(value, prefix)):
            out += self.errors(item, sub, f"{where}[{i}]")
        if "items" in schema:
            for i in range(len(prefix), len(value)):
                out += self.errors(value[i], schema["items"], f"{where}[{i}]")
        if "contains" in schema:
            found = sum(self.valid(item, schema["contains"]) for item in value)
            low, high = schema.get("minContains", 1), schema.get("maxContains")
            if found < low:
                out.append(f"{where} has {found} item(s) matching 'contains', fewer than {low}.")
            if high is not None and found > high:
                out.append(f"{where} has {found} items matching 'contains', more than {high}.")
        return out

    def string_errors(self, value: str, schema: dict, where: str) -> list[str]:
        out = _count_errors(len(value), schema, "Length", "characters", where)
        if "pattern" in schema and not self.search(schema["pattern"], value):
            out.append(f"{where} ({_shown(value)}) does not match the pattern {schema['pattern']!r}.")
        if "format" in schema and not format_ok(value, schema["format"]):
            out.append(f"{where} ({_shown(value)}) is not a valid {schema['format']}.")
        return out

    def number_errors(self, value: float, schema: dict, where: str) -> list[str]:
        out = []
        checks = (("minimum", lambda b: value >= b, "below the minimum"),
                  ("maximum", lambda b: value <= b, "above the maximum"),
                  ("exclusiveMinimum", lambda b: value > b, "not above the exclusive minimum"),
                  ("exclusiveMaximum", lambda b: value < b, "not below the exclusive maximum"))
        for key, ok, words in checks:
            if key in schema and not ok(schema[key]):
                out.append(f"{where} is {value}, {words} {schema[key]}.")
        if "multipleOf" in schema and not is_multiple(value, schema["multipleOf"]):
            out.append(f"{where} is {value}, not a multiple of {schema['multipleOf']}.")
        return out


def _count_errors(count: int, schema: dict, keyword: str, noun: str, where: str) -> list[str]:
    """minItems/maxItems, minLength/maxLength, minProperties/maxProperties."""
    low, high = schema.get("min" + keyword, 0), schema.get("max" + keyword)
    if count < low:
        return [f"{where} has {count} {noun}, fewer than the minimum {low}."]
    if high is not None and count > high:
        return [f"{where} has {count} {noun}, more than the maximum {high}."]
    return []


def validation_errors(value: Any, schema: Any, index: Optional[SchemaIndex] = None) -> list[str]:
    """Every way ``value`` breaks ``schema``, as sentences; empty when it is valid.

    Raises:
        SchemaError: the schema itself is malformed or refused (see :mod:`.schema_check`).
    """
    index = index if index is not None else check_schema(schema)
    try:
        return _Validator(index).errors(value, schema, "The result")
    except RecursionError:
        return ["The result is nested too deeply to check."]


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(text: str) -> Any:
    """Parse strict JSON (no ``NaN``/``Infinity``), every failure a :class:`QuantDeskError`."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise QuantDeskError(
            f"The model's reply is not complete JSON ({exc.msg} at character {exc.pos}).",
            "Allow more tokens for the reply, or simplify the schema.") from None
    except (ValueError, RecursionError) as exc:
        raise QuantDeskError(f"The model's reply is not usable JSON ({exc}).",
                             "Try again, or simplify the schema.") from None


def validate(text: str, schema: Optional[Any], index: Optional[SchemaIndex] = None) -> Any:
    """Parse a generated reply and check it against ``schema`` (``None``: any JSON).

    Returns:
        The parsed value.

    Raises:
        QuantDeskError: the reply is not JSON or breaks the schema; the sentence says how.
    """
    value = parse_json(text)
    if schema is not None:
        problems = validation_errors(value, schema, index)
        if problems:
            raise QuantDeskError("The model's reply does not match the JSON schema: "
                                 + " ".join(problems), "Try again, or relax the schema.")
    return value
