"""JSON Schema → GBNF grammar, with every feature the grammar cannot enforce reported.

llama-cpp-python's converter drops what it cannot express and generates anyway, so a
user asking for ``"multipleOf": 5`` silently gets any number. Ours returns the grammar
*and* a list of :class:`UnsupportedFeature` (JSON pointer + sentence); the caller refuses
or asks the user before generating (:meth:`SchemaGrammar.require_supported`).

The grammar writes compact JSON (no whitespace between tokens): whitespace carries no
meaning, and without it far more of the text is forced (see ``fast_forward``). Like
llama.cpp's converter, the grammar may be *narrower* than the schema where that keeps
generation short and never makes a result invalid: properties come in the schema's
order, extra properties only where ``additionalProperties`` allows them, integers have
at most 16 digits unless bounded, fractions at most 15 digits.

Supported: ``type`` (one or a list; a schema without one allows every type, each with
its own keywords), ``properties``/``required``/``additionalProperties`` (an object
without declared properties is free-form; one with properties but no
``additionalProperties`` is closed, a restriction reported in ``restrictions``),
``enum``, ``const``, ``anyOf``/``oneOf`` (oneOf when the branches are disjoint), ``false``
subschemas where they can be left out, ``allOf`` (merged), local ``$ref`` (JSON pointers
and anchors, recursion too), ``items``/``minItems``/``maxItems``,
``minLength``/``maxLength``, ``pattern`` (see :mod:`.regex_grammar`), ``format``
date/time/date-time/uuid/email, integer bounds (exact, see :mod:`.numeric_ranges`) and
whole-number bounds on numbers. The schema is checked first (:mod:`.schema_check`): a
malformed or refused schema is a :class:`~.schema_check.SchemaError`. Keywords the
validator checks after generating are reported as such; the table in README.md lists
every keyword. The same schema always gives the same grammar text (no set order).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Optional

from app.core.errors import QuantDeskError
from models.structured.json_rules import (FORMATS, PRIMITIVE_DEPENDENCIES, PRIMITIVES, gbnf_char,
                                          literal, reachable)
from models.structured.numeric_ranges import integer_range, number_range
from models.structured.formats import CHECKED_FORMATS
from models.structured.regex_grammar import UnsupportedPattern, pattern_to_gbnf
from models.structured.schema_check import SchemaError, SchemaIndex, check_schema, escape_pointer

ANNOTATIONS = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
               "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "$anchor",
               "contentMediaType", "contentEncoding", "contentSchema"}
# Keywords the grammar does not enforce but the validator checks after generating.
CHECKED_AFTER = {"not", "if", "then", "else", "contains", "minContains", "maxContains",
                 "prefixItems", "dependentRequired", "dependentSchemas", "propertyNames",
                 "patternProperties", "multipleOf", "uniqueItems", "minProperties", "maxProperties"}
HANDLED = {"type", "properties", "required", "additionalProperties", "enum", "const", "anyOf",
           "oneOf", "allOf", "$ref", "items", "minItems", "maxItems", "minLength", "maxLength",
           "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
MAX_COUNT = 1000  # lengths and item counts the grammar enforces (llama.cpp: < 2000 copies)

@dataclass(frozen=True)
class UnsupportedFeature:
    """A schema feature the grammar cannot enforce.

    Attributes:
        pointer: JSON pointer to the keyword in the schema, e.g. ``/properties/age/multipleOf``.
        message: A sentence saying what is not enforced.
    """

    pointer: str
    message: str


@dataclass
class SchemaGrammar:
    """A schema's grammar and what of the schema it cannot enforce."""

    gbnf: str
    unsupported: list[UnsupportedFeature] = field(default_factory=list)
    restrictions: list[UnsupportedFeature] = field(default_factory=list)

    def require_supported(self) -> None:
        """Raise a :class:`QuantDeskError` listing every unsupported feature, if any."""
        if self.unsupported:
            listed = " ".join(f"{f.pointer or '/'}: {f.message}" for f in self.unsupported)
            raise QuantDeskError(
                f"The JSON schema uses {len(self.unsupported)} feature(s) that constrained "
                f"generation cannot enforce, so replies could break the schema. {listed}",
                "Remove or simplify these parts of the schema, or generate anyway and let "
                "validation reject replies that break them.")


_escape_pointer = escape_pointer


def _is_whole(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x == int(x)


class _Converter:
    def __init__(self, root: Any, index: SchemaIndex) -> None:
        self.root = root
        self.index = index
        self.rules: dict[str, str] = {}
        self.unsupported: list[UnsupportedFeature] = []
        self.restrictions: list[UnsupportedFeature] = []
        self.ref_rules: dict[int, str] = {}

    # -- bookkeeping -------------------------------------------------------------------
    def report(self, pointer: str, message: str) -> None:
        self.unsupported.append(UnsupportedFeature(pointer, message))

    def restrict(self, pointer: str, message: str) -> None:
        """A narrowing the user should know about (never makes a reply invalid)."""
        self.restrictions.append(UnsupportedFeature(pointer, message))

    def primitive(self, name: str) -> str:
        if name not in self.rules:
            self.rules[name] = PRIMITIVES[name]
            for dep in PRIMITIVE_DEPENDENCIES.get(name, []):
                self.primitive(dep)
        return name

    def rule(self, hint: str, body: str) -> str:
        """Add a rule named after ``hint`` (made GBNF-safe and unique) and return its name."""
        base = "".join(c if c.isascii() and (c.isalnum() or c == "-") else "-" for c in hint) or "r"
        base = base.strip("-") or "r"
        name, n = base, 1
        while name in self.rules or name in PRIMITIVES:
            n += 1
            name = f"{base}-{n}"
        self.rules[name] = body
        return name

    # -- references and merging --------------------------------------------------------
    def resolve(self, ref: str, pointer: str) -> Any:
        """The target of a reference (the schema check has proved it resolves)."""
        return self.index.resolve(ref, pointer)

    def deref(self, schema: Any, pointer: str) -> Any:
        seen = set()
        while isinstance(schema, dict) and "$ref" in schema and schema["$ref"] not in seen:
            seen.add(schema["$ref"])
            siblings = {k: v for k, v in schema.items() if k != "$ref" and k not in ANNOTATIONS}
            target = self.resolve(schema["$ref"], pointer + "/$ref")
            schema = self.merge([target, siblings], pointer) if siblings else target
        return schema

    def merge(self, schemas: list[Any], pointer: str) -> dict:
        """allOf: one schema that means all of ``schemas`` where they combine plainly."""
        merged: dict = {}
        for i, sub in enumerate(schemas):
            sub = self.deref(sub, f"{pointer}/allOf/{i}")
            if sub is True or sub == {}:
                continue
            if not isinstance(sub, dict):
                raise SchemaError(f"{pointer}/allOf/{i}", "'allOf' includes a 'false' schema, so "
                                                          "no value can match")
            for key, value in sub.items():
                if key in ANNOTATIONS:
                    continue
                if key == "allOf":
                    for k2, v2 in self.merge(value, f"{pointer}/allOf/{i}").items():
                        merged = self.merge([merged, {k2: v2}], pointer)
                elif key not in merged:
                    merged[key] = value
                elif key == "properties":
                    if "additionalProperties" in merged or "additionalProperties" in sub:
                        self.report(f"{pointer}/allOf/{i}/properties",
                                    "'allOf' combines properties with 'additionalProperties' from "
                                    "another branch, which the grammar cannot merge.")
                    props = dict(merged[key])
                    for name, prop in value.items():
                        props[name] = {"allOf": [props[name], prop]} if name in props else prop
                    merged[key] = props
                elif key == "required":
                    merged[key] = list(dict.fromkeys(list(merged[key]) + list(value)))
                elif key in ("minimum", "minLength", "minItems", "exclusiveMinimum"):
                    merged[key] = max(merged[key], value)
                elif key in ("maximum", "maxLength", "maxItems", "exclusiveMaximum"):
                    merged[key] = min(merged[key], value)
                elif key == "type":
                    a = {merged[key]} if isinstance(merged[key], str) else set(merged[key])
                    b = {value} if isinstance(value, str) else set(value)
                    both = a & b
                    if "integer" in a | b and "number" in a | b:
                        both.add("integer")  # every integer is a number
                    both = [t for t in TYPES if t in both]
                    merged[key] = both if len(both) != 1 else both[0]
                elif merged[key] != value:
                    self.report(f"{pointer}/allOf/{i}/{_escape_pointer(key)}",
                                f"'allOf' combines two different values of '{key}', which the "
                                "grammar cannot merge.")
        return merged

    # -- visiting ----------------------------------------------------------------------
    def visit(self, schema: Any, pointer: str, hint: str) -> str:
        if schema is True or schema == {}:
            return self.primitive("value")
        if schema is False:
            raise SchemaError(pointer, "the schema is 'false' here, so no value can match")
        if "$ref" in schema:
            ref = schema["$ref"]
            siblings = {k for k in schema if k != "$ref" and k not in ANNOTATIONS}
            if not siblings:
                target = self.resolve(ref, pointer + "/$ref")
                if id(target) not in self.ref_rules:
                    name = self.rule("ref-" + ref.rsplit("/", 1)[-1], "")
                    self.ref_rules[id(target)] = name  # registered first, so recursion finds it
                    self.rules[name] = self.visit(target, pointer + "/$ref", name)
                return self.ref_rules[id(target)]
            return self.visit(self.deref(schema, pointer), pointer, hint)
        for key in schema:
            if key in CHECKED_AFTER:
                self.report(f"{pointer}/{_escape_pointer(key)}",
                            f"the grammar does not enforce '{key}'; replies are checked against "
                            "it after generating.")
            elif key not in HANDLED and key not in ANNOTATIONS:
                self.report(f"{pointer}/{_escape_pointer(key)}",
                            f"the keyword '{key}' is not one QuantDesk knows, so it would not be "
                            "enforced (JSON Schema 2020-12 ignores unknown keywords).")
        if "allOf" in schema:
            rest = {k: v for k, v in schema.items() if k != "allOf"}
            return self.visit(self.merge(list(schema["allOf"]) + [rest], pointer), pointer, hint)
        for combiner in ("anyOf", "oneOf"):
            if combiner in schema:
                return self.visit_alternatives(schema, combiner, pointer, hint)
        if "const" in schema:
            return self.rule(hint, literal(schema["const"]))
        if "enum" in schema:
            if not schema["enum"]:
                raise SchemaError(pointer + "/enum", "'enum' lists no values, so no value can match")
            return self.rule(hint, " | ".join(literal(v) for v in schema["enum"]))
        types = schema.get("type")
        if types is None:
            types = self.implied_types(schema)
        if isinstance(types, list):
            if not types:
                self.report(pointer + "/type", "an empty list of types allows nothing.")
                return self.primitive("value")
            return self.rule(hint, " | ".join(
                self.visit_type(schema, t, pointer, f"{hint}-{t}") for t in types))
        return self.visit_type(schema, types, pointer, hint)

    @staticmethod
    def implied_types(schema: dict):
        """A schema without ``type`` allows every type; its keywords constrain only their
        own type (``{"minLength": 2}`` allows 5 and null too), so each type gets its
        branch. ``number`` covers the integers."""
        return ["object", "array", "string", "number", "boolean", "null"]

    def visit_alternatives(self, schema: dict, combiner: str, pointer: str, hint: str) -> str:
        rest = {k: v for k, v in schema.items() if k != combiner and k not in ANNOTATIONS}
        branches = []
        for i, branch in enumerate(schema[combiner]):
            if self.deref(branch, f"{pointer}/{combiner}/{i}") is False:
                continue  # a 'false' branch matches nothing: leaving it out is exact
            sub = self.merge([rest, branch], pointer) if rest else branch
            branches.append(self.visit(sub, f"{pointer}/{combiner}/{i}", f"{hint}-{i}"))
        if combiner == "oneOf" and not self.disjoint(schema[combiner], pointer):
            self.report(pointer + "/oneOf", "'oneOf' branches overlap, and the grammar cannot "
                                            "stop a reply from matching more than one; use "
                                            "'anyOf' or give the branches different types or "
                                            "const values.")
        if not branches:
            raise SchemaError(f"{pointer}/{combiner}", f"every '{combiner}' branch is 'false', so "
                                                       "no value can match")
        return self.rule(hint, " | ".join(branches))

    def disjoint(self, branches: list, pointer: str) -> bool:
        """oneOf branches are provably exclusive when types or const/enum values differ."""
        keys = []
        for branch in branches:
            branch = self.deref(branch, pointer)
            if branch is False:
                continue
            if not isinstance(branch, dict):
                return False
            if "const" in branch:
                keys.append(("const", json.dumps(branch["const"], sort_keys=True)))
            elif isinstance(branch.get("type"), str):
                keys.append(("type", "number" if branch["type"] == "integer" else branch["type"]))
            else:
                return False
        return len(set(keys)) == len(keys) and len({k for k, _ in keys}) == 1

    def visit_type(self, schema: dict, kind: Any, pointer: str, hint: str) -> str:
        if kind == "object":
            return self.visit_object(schema, pointer, hint)
        if kind == "array":
            return self.visit_array(schema, pointer, hint)
        if kind == "string":
            return self.visit_string(schema, pointer, hint)
        if kind == "integer":
            return self.visit_integer(schema, pointer, hint)
        if kind == "number":
            return self.visit_number(schema, pointer, hint)
        if kind in ("boolean", "null"):
            return self.primitive(kind)
        self.report(pointer + "/type", f"{kind!r} is not a JSON Schema type.")
        return self.primitive("value")

    def visit_object(self, schema: dict, pointer: str, hint: str) -> str:
        declared = schema.get("properties", {})
        required = list(schema.get("required", []))
        props = {**declared, **{name: {} for name in required if name not in declared}}
        if "additionalProperties" in schema:
            extra = schema["additionalProperties"]
        elif declared:
            extra = False
            self.restrict(pointer or "/", "only the properties the schema lists will be generated "
                                          "('additionalProperties' is not set, so others would be "
                                          "allowed).")
        else:
            extra = True  # no declared properties: any object, as llama.cpp's converter does
        kv = []
        for name, sub in props.items():
            at = f"{pointer}/properties/{_escape_pointer(name)}"
            if self.deref(sub, at) is False:
                if name in required:
                    raise SchemaError(at, f"the property {name!r} is required but its schema is "
                                          "'false', so no object can match")
                continue  # a 'false' property may never appear: leaving it out is exact
            value = self.visit(sub, at, f"{hint}-{name}")
            kv.append((name in required, f"{literal(name)} \":\" {value}"))
        tail = {True: '""', False: '""'}
        if extra is not False:
            value = (self.primitive("value") if extra is True or extra == {} else
                     self.visit(extra, pointer + "/additionalProperties", f"{hint}-extra"))
            pair = self.rule(f"{hint}-extra-kv", f'{self.key_except(list(props), hint)} ":" {value}')
            tail = {True: f'({pair} ("," {pair})*)?', False: f'("," {pair})*'}
        # rest(i, first): properties i.. of the object; ``first`` when none was written yet.
        rest = dict(tail)
        for required_here, pair in reversed(kv):
            with_first = f"{pair} {rest[False]}"
            with_comma = f'"," {pair} {rest[False]}'
            if required_here:
                body = {True: with_first, False: with_comma}
            else:
                body = {True: f"{with_first} | {rest[True]}", False: f"{with_comma} | {rest[False]}"}
            rest = {first: self.rule(f"{hint}-rest", body[first]) for first in (True, False)}
        return self.rule(hint, f'"{{" {rest[True]} "}}"')

    def key_except(self, names: list[str], hint: str) -> str:
        """A JSON string that is none of ``names`` (a trie over their JSON text)."""
        if not names:
            return self.primitive("string")
        self.primitive("char")
        encoded = [json.dumps(n, ensure_ascii=False)[1:-1] for n in names]

        def node(prefix: str) -> str:
            children = sorted({e[len(prefix)] for e in encoded if e.startswith(prefix) and len(e) > len(prefix)})
            alts = [f'"{gbnf_char(c)}" {node(prefix + c)}' for c in children]
            excluded = "".join(gbnf_char(c) for c in children)
            alts.append(f'[^"\\\\\\x7F\\x00-\\x1F{excluded}] char* "\\""')
            if prefix not in encoded:
                alts.append('"\\""')
            return self.rule(f"{hint}-key", " | ".join(alts))

        return f'"\\"" {node("")}'

    def visit_array(self, schema: dict, pointer: str, hint: str) -> str:
        items = schema.get("items", {})
        low, high = self.counts(schema, "Items", pointer)
        if self.deref(items, pointer + "/items") is False and "prefixItems" not in schema:
            if low > 0:
                raise SchemaError(pointer + "/items", "'items' is 'false' but 'minItems' asks for "
                                                      "items, so no array can match")
            return self.rule(hint, '"[" "]"')
        item = self.visit(items if self.deref(items, pointer) is not False else {}, pointer + "/items",
                          f"{hint}-item")
        if low == 0:
            more = "*" if high is None else f"{{0,{int(high) - 1}}}"
            body = '"[" "]"' if high == 0 else f'"[" ({item} ("," {item}){more})? "]"'
        else:
            more = f"{{{low - 1},}}" if high is None else f"{{{low - 1},{int(high) - 1}}}"
            body = f'"[" {item} ("," {item}){more} "]"'
        return self.rule(hint, body)

    def visit_string(self, schema: dict, pointer: str, hint: str) -> str:
        if "format" in schema:
            fmt = schema["format"]
            if fmt in FORMATS:
                for key in ("pattern", "minLength", "maxLength"):
                    if key in schema:
                        self.report(f"{pointer}/{key}", f"'{key}' together with 'format' is not supported.")
                return self.rule(hint, f'"\\"" {self.primitive(fmt)} "\\""')
            if fmt in CHECKED_FORMATS:
                self.report(pointer + "/format", f"the grammar does not enforce the format {fmt!r}; "
                                                 "replies are checked against it after generating.")
            else:
                self.report(pointer + "/format", f"the string format {fmt!r} is neither enforced nor "
                                                 "checked (QuantDesk knows "
                                                 f"{', '.join(CHECKED_FORMATS)}).")
        if "pattern" in schema:
            try:
                body = pattern_to_gbnf(schema["pattern"])
            except UnsupportedPattern as exc:
                self.report(pointer + "/pattern", f"the pattern {schema['pattern']!r} uses {exc}, "
                                                  "which the grammar cannot express.")
            else:
                for key in ("minLength", "maxLength"):
                    if key in schema:
                        self.report(f"{pointer}/{key}", f"'{key}' together with 'pattern' is not supported.")
                return self.rule(hint, f'"\\"" {body} "\\""')
        low, high = self.counts(schema, "Length", pointer)
        if low == 0 and high is None:
            return self.primitive("string")
        count = f"{{{low},}}" if high is None else f"{{{low},{int(high)}}}"
        return self.rule(hint, f'"\\"" {self.primitive("char")}{count} "\\""')

    def bounds(self, schema: dict, pointer: str, whole: bool):
        """(lo, hi) inclusive bounds, or reports and returns None for inexpressible ones."""
        lo, hi = schema.get("minimum"), schema.get("maximum")
        for key, step in (("exclusiveMinimum", 1), ("exclusiveMaximum", -1)):
            if key not in schema:
                continue
            value = schema[key]
            if isinstance(value, bool) or not whole or not _is_whole(value):
                self.report(f"{pointer}/{key}", f"'{key}' is only supported on integers.")
                continue
            bound = int(value) + step
            if step > 0:
                lo = bound if lo is None else max(lo, bound)
            else:
                hi = bound if hi is None else min(hi, bound)
        if whole:
            lo = None if lo is None else math.ceil(lo)
            hi = None if hi is None else math.floor(hi)
        for key, value in (("minimum", lo), ("maximum", hi)):
            if value is not None and not _is_whole(value):
                self.report(f"{pointer}/{key}", f"a {key} that is not a whole number cannot be "
                                                "enforced on numbers by the grammar.")
                return None
        return (None if lo is None else int(lo)), (None if hi is None else int(hi))

    def visit_integer(self, schema: dict, pointer: str, hint: str) -> str:
        bounds = self.bounds(schema, pointer, whole=True)
        if bounds is None or bounds == (None, None):
            return self.primitive("integer")
        lo, hi = bounds
        if lo is not None and hi is not None and lo > hi:
            self.report(pointer, "the integer bounds leave no value.")
            return self.primitive("integer")
        return self.rule(hint, integer_range(lo, hi))

    def counts(self, schema: dict, keyword: str, pointer: str) -> tuple[int, Optional[int]]:
        """min/max{keyword} as repetition counts llama.cpp can take (it refuses 2000 or
        more copies); larger or contradictory counts are reported, the grammar made wider,
        and the validator checks them."""
        low, high = int(schema.get("min" + keyword, 0)), schema.get("max" + keyword)
        high = None if high is None else int(high)
        if high is not None and high < low:
            self.report(f"{pointer}/max{keyword}", f"'max{keyword}' is below 'min{keyword}', so "
                                                   "nothing of this type fits.")
            high = None
        if low >= MAX_COUNT or (high is not None and high >= MAX_COUNT):
            self.report(f"{pointer}/{'min' if low >= MAX_COUNT else 'max'}{keyword}",
                        f"counts of {MAX_COUNT} or more are checked after generating, not "
                        "enforced by the grammar.")
            low = min(low, MAX_COUNT - 1)
            high = None if high is None or high >= MAX_COUNT else high
        return low, high

    def visit_number(self, schema: dict, pointer: str, hint: str) -> str:
        bounds = self.bounds(schema, pointer, whole=False)
        if bounds is None or bounds == (None, None):
            return self.primitive("number")
        if None not in bounds and bounds[0] > bounds[1]:
            self.report(pointer, "the number bounds leave no value.")
            return self.primitive("number")
        return self.rule(hint, number_range(*bounds, self.primitive("fraction")))


def schema_to_grammar(schema: Any) -> SchemaGrammar:
    """Convert a JSON Schema (already parsed from JSON) into a GBNF grammar.

    Args:
        schema: The schema; ``{}`` or ``True`` means any JSON value.

    Returns:
        The grammar (rule ``root``) and the features it cannot enforce.
    """
    converter = _Converter(schema, check_schema(schema))
    root = converter.visit(schema, "", "root")
    if root != "root":
        converter.rules = {"root": root, **converter.rules}
    else:
        converter.rules = {"root": converter.rules.pop("root"), **converter.rules}
    rules = reachable(converter.rules)
    gbnf = "\n".join(f"{name} ::= {body}" for name, body in rules.items()) + "\n"
    return SchemaGrammar(gbnf, converter.unsupported, converter.restrictions)


def any_json_grammar() -> str:
    """The grammar of any JSON value (the "any JSON" mode)."""
    return schema_to_grammar({}).gbnf
