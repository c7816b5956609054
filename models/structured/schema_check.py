"""Is this a JSON Schema QuantDesk can use? Every "no" is a :class:`SchemaError` sentence.

The converter and the validator both walk the user's schema; a malformed keyword (a
``minLength`` of ``"3"``, a ``pattern`` Python cannot compile, a ``$ref`` that leads
nowhere) must stop with a sentence naming the place, never escape as a ``KeyError`` or
``re.error``. :func:`check_schema` runs first and proves the schema well formed, so the
walkers after it can trust every value's type.

It also refuses what neither the grammar nor the validator can honour, so no reply is
ever called valid without being checked:

- references outside the document (remote ``$ref``), ``$dynamicRef`` /
  ``$recursiveRef``, nested ``$id`` (it changes what ``#...`` means below it);
- ``unevaluatedProperties`` / ``unevaluatedItems`` (they need every applicator's
  annotations);
- reference loops that never read into the value (``{"$ref": "#"}``): validating or
  generating them would never end.

References follow RFC 3986/6901: the fragment is percent-decoded, then read as a JSON
pointer (``~1`` is ``/``, ``~0`` is ``~``) or, without a leading ``/``, as an
``$anchor`` name; an absolute reference whose base is the root ``$id`` stays local.
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterator, Optional
from urllib.parse import unquote

from models.foundation.errors import QuantDeskError

MAX_DEPTH = 64
TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
SCHEMA_KEYWORDS = ("not", "if", "then", "else", "items", "contains", "additionalProperties",
                   "propertyNames")
SCHEMA_LIST_KEYWORDS = ("allOf", "anyOf", "oneOf", "prefixItems")
SCHEMA_MAP_KEYWORDS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
COUNT_KEYWORDS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties",
                  "maxProperties", "minContains", "maxContains")
NUMBER_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
# Keywords whose subschemas apply to the same value (a loop through only these never ends).
IN_PLACE = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas")
REFUSED = {
    "$dynamicRef": "dynamic references ('$dynamicRef') are not supported",
    "$recursiveRef": "recursive references ('$recursiveRef') are not supported",
    "unevaluatedProperties": "'unevaluatedProperties' is neither enforced by the grammar nor "
                             "checked by the validator",
    "unevaluatedItems": "'unevaluatedItems' is neither enforced by the grammar nor checked by "
                        "the validator",
}
SCHEMA_FIX = ("Fix the schema (JSON Schema 2020-12) and try again; "
              "https://json-schema.org/understanding-json-schema explains each keyword.")
_ANCHOR = re.compile(r"[A-Za-z_][-A-Za-z0-9._]*")


class SchemaError(QuantDeskError):
    """A schema that is malformed, or uses a feature QuantDesk refuses, at ``pointer``."""

    def __init__(self, pointer: str, problem: str) -> None:
        self.pointer = pointer or "/"
        super().__init__(f"The JSON schema cannot be used: at {self.pointer}, {problem}.", SCHEMA_FIX)


def escape_pointer(key: str) -> str:
    """One JSON pointer reference token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_count(x: Any) -> bool:
    return _is_number(x) and math.isfinite(x) and x >= 0 and x == int(x)


def compile_pattern(pattern: str, pointer: str) -> "re.Pattern[str]":
    """``re.compile`` with its errors as a sentence (JSON Schema's regex dialect is ECMA 262;
    Python's ``re`` reads the common subset the same way). Characters that Python reads as
    literals today but warns about (:func:`unambiguous_pattern`) are escaped first, so a
    schema never prints ``FutureWarning`` to the terminal."""
    try:
        return re.compile(unambiguous_pattern(pattern))
    except (re.error, RecursionError, OverflowError, ValueError) as exc:
        raise SchemaError(pointer, f"the regular expression {pattern!r} is not one QuantDesk can "
                                   f"read ({exc})") from None


# How many characters after "\\x", "\\u", "\\U" a class escape reads (as Python's parser does).
_HEX_DIGITS_AFTER = {"x": 2, "u": 4, "U": 8}


def _class_escape(pattern: str, i: int) -> str:
    """The escape starting at ``pattern[i]`` (a backslash) inside a character class."""
    kind = pattern[i + 1:i + 2]
    if kind in _HEX_DIGITS_AFTER:
        return pattern[i:i + 2 + _HEX_DIGITS_AFTER[kind]]
    if kind == "N" and pattern[i + 2:i + 3] == "{":
        end = pattern.find("}", i)
        return pattern[i:end + 1] if end >= 0 else pattern[i:]
    if kind and kind in "01234567":
        end = i + 2
        while end < i + 4 and pattern[end:end + 1] and pattern[end] in "01234567":
            end += 1
        return pattern[i:end]
    return pattern[i:i + 2]


def unambiguous_pattern(pattern: str) -> str:
    """``pattern`` with the characters escaped that Python's ``re`` reads as literals but
    warns about (``FutureWarning: Possible nested set`` / ``set difference``…), because a
    later Python may read them as set operations: a ``[`` opening a class's first item
    (``[[a-z]]``) and a doubled ``-``, ``&``, ``~`` or ``|`` inside a class (``[a-z--b]``).
    They are literals in ECMA 262 too, so escaping them keeps what the pattern matches.

    It walks the classes as Python's parser does (its ``_parse`` of ``[...]``), so only the
    characters it would warn about change; everything else is left as written.
    """
    out: list[str] = []
    i, n = 0, len(pattern)

    def token(at: int) -> str:
        return _class_escape(pattern, at) if pattern[at] == "\\" else pattern[at]

    while i < n:
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        out.append(c)
        i += 1
        if c != "[":
            continue
        nested = pattern[i:i + 1] == "["  # "[[": Python warns of a nested set
        if pattern[i:i + 1] == "^":
            out.append("^")
            i += 1
        nonempty = False
        while i < n:
            this = token(i)
            i += len(this)
            if this == "]" and nonempty:
                out.append("]")
                break
            if nested and not nonempty or \
                    nonempty and this in ("-", "&", "~", "|") and pattern[i:i + 1] == this:
                out.append("\\" + this)  # "--", "&&", "~~", "||": a possible set operation
            else:
                out.append(this)
            nonempty = True
            if pattern[i:i + 1] == "-" and i + 1 < n:  # a range, or "-" before the "]"
                that = token(i + 1)
                i += 1 + len(that)
                if that == "]":
                    out.append("-]")
                    break
                out.append("-\\-" if that == "-" else "-" + that)
    return "".join(out)


class SchemaIndex:
    """A checked schema: its anchors, and reference resolution for the walkers after it."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.base = root.get("$id", "").split("#")[0] if isinstance(root, dict) else ""
        self.anchors: dict[str, Any] = {}
        self._checked: set[int] = set()
        self._refs: dict[int, Any] = {}
        self._collect_anchors(root, 0)
        self._check(root, "", 0)
        self._check_loops()

    # -- references ---------------------------------------------------------------------
    def resolve(self, ref: str, pointer: str) -> Any:
        """The subschema ``ref`` names; :class:`SchemaError` when it is not in this document."""
        base, _, fragment = ref.partition("#")
        if base and base != self.base:
            raise SchemaError(pointer, f"the reference {ref!r} points outside this schema; only "
                                       "references inside it (#/$defs/...) are supported")
        fragment = unquote(fragment)
        if fragment and not fragment.startswith("/"):
            if fragment not in self.anchors:
                raise SchemaError(pointer, f"the reference {ref!r} names the anchor {fragment!r}, "
                                           "which no '$anchor' in the schema defines")
            return self.anchors[fragment]
        node = self.root
        for token in fragment.split("/")[1:]:
            token = token.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and token in node:
                node = node[token]
            elif isinstance(node, list) and re.fullmatch(r"0|[1-9][0-9]*", token) and int(token) < len(node):
                node = node[int(token)]
            else:
                raise SchemaError(pointer, f"the reference {ref!r} does not point to anything in "
                                           "the schema")
        if not isinstance(node, (dict, bool)):
            raise SchemaError(pointer, f"the reference {ref!r} points to something that is not a schema")
        return node

    def target(self, schema: dict) -> Any:
        """The resolved target of ``schema['$ref']`` (resolved during the check)."""
        return self._refs[id(schema)]

    # -- the check ----------------------------------------------------------------------
    def _collect_anchors(self, schema: Any, depth: int) -> None:
        for _, sub, _ in _subschemas(schema, "") if depth < MAX_DEPTH else ():
            self._collect_anchors(sub, depth + 1)
        if isinstance(schema, dict) and isinstance(schema.get("$anchor"), str):
            self.anchors.setdefault(schema["$anchor"], schema)

    def _check(self, schema: Any, pointer: str, depth: int) -> None:
        if isinstance(schema, bool):
            return
        if not isinstance(schema, dict):
            raise SchemaError(pointer, "a schema must be a JSON object or true/false")
        if id(schema) in self._checked:
            return
        if depth > MAX_DEPTH:
            raise SchemaError(pointer, f"the schema is nested more than {MAX_DEPTH} levels deep")
        self._checked.add(id(schema))
        self._check_keywords(schema, pointer)
        for sub_pointer, sub, _ in _subschemas(schema, pointer):
            self._check(sub, sub_pointer, depth + 1)
        if "$ref" in schema:
            target = self.resolve(schema["$ref"], pointer + "/$ref")
            self._refs[id(schema)] = target
            self._check(target, pointer + "/$ref", depth + 1)

    def _check_keywords(self, schema: dict, pointer: str) -> None:
        def fail(key: str, problem: str) -> SchemaError:
            return SchemaError(f"{pointer}/{escape_pointer(key)}", problem)

        for key, problem in REFUSED.items():
            if key in schema:
                raise fail(key, problem)
        if "$id" in schema and (pointer or not isinstance(schema["$id"], str)):
            raise fail("$id", "an '$id' inside the schema changes what references below it mean, "
                              "which is not supported; move the definition to '$defs'")
        for key in ("$ref", "$anchor", "format", "pattern", "$schema", "$comment"):
            if key in schema and not isinstance(schema[key], str):
                raise fail(key, f"'{key}' must be a string")
        if "$anchor" in schema and not _ANCHOR.fullmatch(schema["$anchor"]):
            raise fail("$anchor", f"{schema['$anchor']!r} is not a valid anchor name")
        if "pattern" in schema:
            compile_pattern(schema["pattern"], f"{pointer}/pattern")
        for key in COUNT_KEYWORDS:
            if key in schema and not _is_count(schema[key]):
                raise fail(key, f"'{key}' must be a whole number of zero or more")
        for key in NUMBER_KEYWORDS:
            if key in schema and not (_is_number(schema[key]) and math.isfinite(schema[key])):
                raise fail(key, f"'{key}' must be a number")
        if "multipleOf" in schema and not schema["multipleOf"] > 0:
            raise fail("multipleOf", "'multipleOf' must be greater than zero")
        if "type" in schema:
            kinds = schema["type"]
            kinds = [kinds] if isinstance(kinds, str) else kinds
            if not isinstance(kinds, list) or not all(isinstance(k, str) and k in TYPES for k in kinds):
                raise fail("type", f"'type' must be one of {', '.join(TYPES)} or a list of them")
            if not kinds or len(set(kinds)) != len(kinds):
                raise fail("type", "'type' must list each type once, and at least one")
        if "enum" in schema and not isinstance(schema["enum"], list):
            raise fail("enum", "'enum' must be a list of values")
        if "required" in schema:
            _check_names(schema["required"], fail("required", "'required' must be a list of "
                                                              "distinct property names"))
        if "dependentRequired" in schema:
            deps = schema["dependentRequired"]
            problem = fail("dependentRequired", "'dependentRequired' must map property names to "
                                                "lists of distinct property names")
            if not isinstance(deps, dict):
                raise problem
            for names in deps.values():
                _check_names(names, problem)
        if "uniqueItems" in schema and not isinstance(schema["uniqueItems"], bool):
            raise fail("uniqueItems", "'uniqueItems' must be true or false")
        if isinstance(schema.get("items"), list):
            raise fail("items", "'items' must be one schema in JSON Schema 2020-12; write a "
                                "tuple as 'prefixItems'")
        for key in SCHEMA_LIST_KEYWORDS:
            if key in schema and not (isinstance(schema[key], list) and schema[key]):
                raise fail(key, f"'{key}' must be a non-empty list of schemas")
        for key in SCHEMA_MAP_KEYWORDS:
            if key in schema and not isinstance(schema[key], dict):
                raise fail(key, f"'{key}' must be an object whose values are schemas")
        for name in schema.get("patternProperties", {}):
            compile_pattern(name, f"{pointer}/patternProperties/{escape_pointer(name)}")

    def _check_loops(self) -> None:
        """Refuse a cycle of in-place subschemas and references (it never reads the value)."""
        state: dict[int, int] = {}  # 1: on the current path, 2: done

        def visit(schema: Any, pointer: str) -> None:
            if not isinstance(schema, dict) or state.get(id(schema)) == 2:
                return
            if state.get(id(schema)) == 1:
                raise SchemaError(pointer, "the schema refers back to itself without reading into "
                                           "the value (a '$ref' loop), so no value could ever be "
                                           "checked against it")
            state[id(schema)] = 1
            for sub_pointer, sub, in_place in _subschemas(schema, pointer):
                if in_place:
                    visit(sub, sub_pointer)
            if "$ref" in schema:
                visit(self._refs[id(schema)], pointer + "/$ref")
            state[id(schema)] = 2

        visit(self.root, "")
        for pointer, sub in _all_subschemas(self.root, ""):
            visit(sub, pointer)


def _check_names(names: Any, problem: SchemaError) -> None:
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names) \
            or len(set(names)) != len(names):
        raise problem


def _subschemas(schema: Any, pointer: str) -> Iterator[tuple[str, Any, bool]]:
    """(pointer, subschema, applies to the same value) for each direct subschema."""
    if not isinstance(schema, dict):
        return
    for key in SCHEMA_KEYWORDS:
        if key in schema:
            yield f"{pointer}/{key}", schema[key], key in IN_PLACE
    for key in SCHEMA_LIST_KEYWORDS:
        if isinstance(schema.get(key), list):
            for i, sub in enumerate(schema[key]):
                yield f"{pointer}/{key}/{i}", sub, key in IN_PLACE
    for key in SCHEMA_MAP_KEYWORDS:
        if isinstance(schema.get(key), dict):
            for name, sub in schema[key].items():
                yield f"{pointer}/{key}/{escape_pointer(str(name))}", sub, key in IN_PLACE


def _all_subschemas(schema: Any, pointer: str, depth: int = 0) -> Iterator[tuple[str, Any]]:
    for sub_pointer, sub, _ in _subschemas(schema, pointer):
        yield sub_pointer, sub
        if depth < MAX_DEPTH:
            yield from _all_subschemas(sub, sub_pointer, depth + 1)


def check_schema(schema: Any) -> SchemaIndex:
    """Check a whole schema; returns its index for reference resolution.

    Raises:
        SchemaError: malformed, or uses a refused feature (a sentence with the pointer).
    """
    if not isinstance(schema, (dict, bool)):
        raise SchemaError("", "the schema must be a JSON object or true/false")
    try:
        return SchemaIndex(schema)
    except RecursionError:
        raise SchemaError("", "the schema is nested too deeply to read") from None
