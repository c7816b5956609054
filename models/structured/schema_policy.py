"""What of a JSON Schema QuantDesk enforces while generating, said before any token.

:func:`plan_schema` turns a user's schema into a :class:`SchemaPlan`: the llguidance
grammar that enforces everything enforceable, the 2020-12 schema every finished reply is
validated against, and the :class:`SchemaProblem` list: each constraining keyword the
grammar does not enforce, with its JSON pointer and a sentence. The caller decides: with
``strict`` the problems are a refusal before any token; without, generation goes on under
the grammar and the reply's validation says whether it broke them.

The policy, as JSON Schema 2020-12 reads keywords:

- **Annotations are not constraints.** ``title``, ``description``, ``examples``,
  ``default``, ``readOnly``, ``deprecated``, ``$comment``, ``x-*``, draft-04 ``id``, vendor
  words (``javaType``, ``self``…) and unknown keywords are ignored; so is a ``format``
  llguidance does not know (2020-12: unknown formats are annotations).
- **llguidance enforces the rest it implements** (types, enum/const, properties, required,
  additional and pattern properties, min/max properties over required keys, items and
  prefixItems, counts, lengths, patterns, formats, bounds, multipleOf, allOf/anyOf,
  oneOf it can prove exclusive, local references and recursion).
- **QuantDesk goes further where a rewrite is exact**: ``oneOf`` whose branches cannot
  both match (different types, different const/enum values, a required discriminator
  property with different values, a key one requires and the other forbids) is generated
  as ``anyOf``; ``dependentRequired`` (draft-07 ``dependencies`` lists) becomes ``anyOf``
  [the key absent, all of them present]; ``uniqueItems`` is exact with ``maxItems`` ≤ 1
  and, on items from a short ``enum``, by writing them in the enum's order.
- **Everything else is a problem**: ``not``, ``if``/``then``/``else``, ``contains``,
  ``propertyNames``, ``dependentSchemas``, other ``uniqueItems``, ``unevaluated*``,
  references outside the document, and whatever llguidance refuses (the pointer found by
  blanking parts of the schema until it compiles).

A malformed schema (a ``minLength`` of ``"3"``, a ``$ref`` to nothing) is a
:class:`~.schema_check.SchemaError` in every mode.
"""

from __future__ import annotations

import copy
import itertools
import json
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional
from urllib.parse import unquote

from models.foundation.errors import QuantDeskError
from models.structured.drafts import to_2020_12
from models.structured.guidance import grammar_error, json_schema_grammar
from models.structured.schema_check import (SchemaError, check_schema, compile_pattern,
                                            escape_pointer)
from models.structured.validate import json_key

# llguidance's formats (parser/src/json/formats.rs); any other format is an annotation.
ENFORCED_FORMATS = {"date-time", "time", "date", "duration", "email", "hostname", "ipv4",
                    "ipv6", "uuid", "uri"}
# Constraining 2020-12 keywords llguidance does not implement, and what each means.
NOT_ENFORCED = {
    "not": "'not' (the value must not match a schema)",
    "if": "'if'/'then'/'else' (conditional schemas)",
    "then": "'then' (part of a conditional schema)",
    "else": "'else' (part of a conditional schema)",
    "contains": "'contains' (some item must match a schema)",
    "minContains": "'minContains'", "maxContains": "'maxContains'",
    "propertyNames": "'propertyNames' (a schema for every key)",
    "dependentSchemas": "'dependentSchemas' (a schema applied when a key is present)",
    "dependentRequired": "'dependentRequired' (keys required when another is present)",
    "uniqueItems": "'uniqueItems' (no two items equal)",
    "unevaluatedProperties": "'unevaluatedProperties'",
    "unevaluatedItems": "'unevaluatedItems'",
}
UNCHECKABLE = ("$dynamicRef", "$recursiveRef", "unevaluatedProperties", "unevaluatedItems")
SUBSCHEMA_KEYS = ("items", "additionalProperties", "contains", "not", "if", "then", "else",
                  "propertyNames")
SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
MAX_DEPENDENCIES = 4  # dependentRequired rewritten exactly: 2^n branches once combined
MAX_UNIQUE_ENUM = 6   # uniqueItems over an enum: one branch per ordered subset (2^n)
MAX_RELAXATIONS = 64


@dataclass(frozen=True)
class SchemaProblem:
    """A constraining keyword the grammar does not enforce.

    Attributes:
        pointer: JSON pointer to it in the schema (2020-12 form), e.g. ``/properties/a/not``.
        message: A sentence saying what is not enforced.
    """

    pointer: str
    message: str

    def to_dict(self) -> dict:
        return {"pointer": self.pointer, "message": self.message}

    def __str__(self) -> str:
        return f"{self.pointer or '/'}: {self.message}"


@dataclass
class SchemaPlan:
    """How a schema is generated and checked (see the module docstring)."""

    grammar: str
    schema: Any
    problems: list[SchemaProblem] = field(default_factory=list)
    engine_schema: Any = None  # what the grammar was compiled from (relaxed where listed)
    # Where the grammar is narrower than the schema, never letting an invalid value
    # through (objects closed to the properties they list); shown, never refused.
    restrictions: list[SchemaProblem] = field(default_factory=list)

    @property
    def enforced(self) -> bool:
        """Whether the grammar enforces the whole schema exactly."""
        return not self.problems


def plan_schema(schema: Any) -> SchemaPlan:
    """The grammar, the validation schema and the problems of ``schema``.

    Raises:
        SchemaError: the schema is malformed (a sentence with the pointer).
    """
    if not isinstance(schema, (dict, bool)):
        raise SchemaError("", "the schema must be a JSON object or true/false")
    if schema is False:
        raise SchemaError("", "the schema is 'false', so no value can match it")
    problems: list[SchemaProblem] = []
    checked = _checkable(to_2020_12(schema), problems)
    validated = _without_unreadable_patterns(checked)
    check_schema(validated)
    engine = _enforceable(copy.deepcopy(checked), problems)
    restrictions = _close_objects(engine)
    engine = _compile_relaxing(engine, problems)
    return SchemaPlan(json_schema_grammar(engine), validated, problems, engine, restrictions)


# -- walking ------------------------------------------------------------------------------


def children(node: Any, pointer: str) -> Iterator[tuple[str, Any]]:
    """(pointer, subschema) of each direct subschema of ``node``."""
    if not isinstance(node, dict):
        return
    for key in SUBSCHEMA_KEYS:
        if isinstance(node.get(key), (dict, bool)):
            yield f"{pointer}/{key}", node[key]
    for key in SUBSCHEMA_LISTS:
        if isinstance(node.get(key), list):
            for i, sub in enumerate(node[key]):
                yield f"{pointer}/{key}/{i}", sub
    for key in SUBSCHEMA_MAPS:
        if isinstance(node.get(key), dict):
            for name, sub in node[key].items():
                yield f"{pointer}/{key}/{escape_pointer(str(name))}", sub


def _walk(node: Any, pointer: str = "", depth: int = 0) -> Iterator[tuple[str, dict]]:
    if isinstance(node, dict) and depth <= 64:
        yield pointer, node
        for sub_pointer, sub in children(node, pointer):
            yield from _walk(sub, sub_pointer, depth + 1)


def _tokens(pointer: str) -> list[str]:
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]


def _get(root: Any, pointer: str) -> Any:
    node = root
    for token in _tokens(pointer):
        node = node[int(token)] if isinstance(node, list) else node[token]
    return node


def _set(root: Any, pointer: str, value: Any) -> Any:
    """``root`` with the node at ``pointer`` replaced (the root itself when ``pointer`` is "")."""
    if not pointer:
        return value
    tokens = _tokens(pointer)
    parent = _get(root, "/" + "/".join(escape_pointer(t) for t in tokens[:-1])) \
        if len(tokens) > 1 else root
    parent[int(tokens[-1]) if isinstance(parent, list) else tokens[-1]] = value
    return root


def _is_remote(root: Any, ref: str) -> bool:
    """Whether ``ref`` names another document than ``root`` (a ``$ref`` to a missing part of
    this one is a malformed schema instead)."""
    base = ref.partition("#")[0]
    root_id = root.get("$id", "").split("#")[0] if isinstance(root, dict) else ""
    return bool(base) and base != root_id


def _resolve(root: Any, ref: str) -> Optional[Any]:
    """The local target of ``ref``, or None when it is outside the document or missing."""
    if not isinstance(ref, str):
        return None
    base, _, fragment = ref.partition("#")
    root_id = root.get("$id", "").split("#")[0] if isinstance(root, dict) else ""
    if base and base != root_id:
        return None
    fragment = unquote(fragment)
    if fragment and not fragment.startswith("/"):
        return next((node for _, node in _walk(root) if node.get("$anchor") == fragment), None)
    try:
        target = _get(root, fragment)
    except (KeyError, IndexError, ValueError, TypeError):
        return None
    return target if isinstance(target, (dict, bool)) else None


# -- what can be checked, what can be generated -------------------------------------------


def _checkable(schema: Any, problems: list[SchemaProblem]) -> Any:
    """The schema the validator reads: parts neither side can honour taken out, as problems
    (references outside the document, dynamic references, unevaluated*), nested ``$id``s
    dropped (references are read against the root)."""
    for pointer, node in list(_walk(schema)):
        if pointer and "$id" in node:
            del node["$id"]
        for key in UNCHECKABLE:
            if key in node:
                del node[key]
                problems.append(SchemaProblem(f"{pointer}/{escape_pointer(key)}", (
                    f"'{key}' is neither enforced while generating nor checked after.")))
        if "$ref" in node and isinstance(node["$ref"], str) and _is_remote(schema, node["$ref"]):
            ref = node.pop("$ref")
            problems.append(SchemaProblem(f"{pointer}/$ref", (
                f"the reference {ref!r} points outside this schema, so that part is neither "
                "enforced nor checked.")))
    return schema


def _without_unreadable_patterns(schema: Any) -> Any:
    """The validation schema without patterns Python's ``re`` cannot read (``\\p{L}``):
    llguidance enforced them while generating, or they are listed as problems."""
    schema = copy.deepcopy(schema)
    for pointer, node in _walk(schema):
        if isinstance(node.get("pattern"), str):
            try:
                compile_pattern(node["pattern"], pointer)
            except SchemaError:
                del node["pattern"]
    return schema


def _enforceable(schema: Any, problems: list[SchemaProblem]) -> Any:
    """The schema llguidance compiles: unknown formats dropped (annotations), exact
    rewrites applied, keywords it does not implement taken out as problems."""
    for pointer, node in list(_walk(schema)):
        if isinstance(node.get("format"), str) and node["format"] not in ENFORCED_FORMATS:
            del node["format"]
        if "dependentRequired" in node and _rewrite_dependencies(node):
            del node["dependentRequired"]
        if node.get("uniqueItems") is False or ("uniqueItems" in node and _rewrite_unique(schema, node)):
            del node["uniqueItems"]
        for key, what in NOT_ENFORCED.items():
            if key in node:
                del node[key]
                problems.append(SchemaProblem(f"{pointer}/{escape_pointer(key)}",
                                              f"{what} is not enforced while generating; "
                                              "each reply is checked against it after."))
    return schema


def _close_objects(schema: Any) -> list[SchemaProblem]:
    """Objects that list their properties and say nothing of others get
    ``additionalProperties: false`` in the grammar: narrower than the schema (2020-12
    allows any other key there), never invalid, and what a model should write — a small
    model otherwise invents keys (or copies the schema's own words) until its budget runs
    out, and listed keys are forced text. Left open where other keywords may add or
    require keys: ``patternProperties``, a required key not listed, combinators and
    references beside the properties, the parts an ``allOf`` combines, and subschemas
    that do not say they are objects (the branches of rewrites such as
    ``dependentRequired``'s)."""
    combined = set()
    for _, node in _walk(schema):
        for member in node.get("allOf", []) if isinstance(node.get("allOf"), list) else []:
            target = _resolve(schema, member["$ref"]) if isinstance(member, dict) \
                and isinstance(member.get("$ref"), str) else member
            combined.add(id(target))
            if isinstance(member, dict):
                combined.add(id(member))
    closed = []
    for pointer, node in _walk(schema):
        listed = node.get("properties")
        required = node.get("required", [])
        kinds = node.get("type")
        if not isinstance(listed, dict) or id(node) in combined or kinds != "object" and not (
                isinstance(kinds, list) and "object" in kinds) or any(
                key in node for key in ("additionalProperties", "patternProperties", "allOf",
                                        "anyOf", "oneOf", "$ref", "unevaluatedProperties",
                                        "dependentSchemas", "if")) \
                or not isinstance(required, list) or any(k not in listed for k in required):
            continue
        node["additionalProperties"] = False
        closed.append(SchemaProblem(pointer, "only the properties the schema lists are "
                                             "generated here (the schema allows others)."))
    return closed


def _rewrite_dependencies(node: dict) -> bool:
    """``dependentRequired`` as ``allOf`` [``anyOf`` [key absent, key and its dependants
    present]], exact; False when it is too large (it stays a problem)."""
    deps = node["dependentRequired"]
    if not isinstance(deps, dict) or len(deps) > MAX_DEPENDENCIES or not all(
            isinstance(v, list) for v in deps.values()):
        return False
    rules = [{"anyOf": [{"properties": {key: False}}, {"required": [key, *needed]}]}
             for key, needed in deps.items() if needed]
    if rules:
        node["allOf"] = list(node.get("allOf", [])) + rules
    return True


def _rewrite_unique(root: Any, node: dict) -> bool:
    """``uniqueItems: true`` made exact: nothing to do with at most one item; items from a
    short ``enum``/``const``/boolean list written in that list's order (one ``prefixItems``
    branch per ordered choice: narrower than the schema, never invalid)."""
    if node.get("uniqueItems") is not True:
        return False
    if isinstance(node.get("maxItems"), int) and node["maxItems"] <= 1:
        return True
    if "prefixItems" in node or "contains" in node:
        return False
    items = node.get("items")
    if isinstance(items, dict) and "$ref" in items:
        items = _resolve(root, items["$ref"])
    values = _finite_values(items)
    if values is None or len(values) > MAX_UNIQUE_ENUM:
        return False
    low, high = node.get("minItems", 0), node.get("maxItems", len(values))
    if not isinstance(low, int) or not isinstance(high, int):
        return False
    branches = [{"prefixItems": [{"const": v} for v in chosen], "items": False,
                 "minItems": len(chosen)}
                for n in range(low, min(high, len(values)) + 1)
                for chosen in itertools.combinations(values, n)]
    if not branches:
        return False
    node["allOf"] = list(node.get("allOf", [])) + [{"anyOf": branches}]
    node.pop("items", None)
    return True


def _finite_values(schema: Any) -> Optional[list]:
    """The distinct values a schema allows when it is only an enum, a const or boolean."""
    if not isinstance(schema, dict):
        return None
    rest = {k for k in schema if k not in ("enum", "const", "type", "title", "description")}
    if rest:
        return None
    if "const" in schema:
        values = [schema["const"]]
    elif isinstance(schema.get("enum"), list):
        values = schema["enum"]
    elif schema.get("type") == "boolean":
        values = [False, True]
    else:
        return None
    unique, seen = [], set()
    for value in values:
        key = json_key(value)
        if key not in seen:
            seen.add(key)
            unique.append(value)
    return unique


# -- compiling, and finding what llguidance refuses ---------------------------------------


def _error(schema: Any) -> Optional[str]:
    try:
        return grammar_error(json_schema_grammar(schema))
    except (ValueError, TypeError) as exc:
        return str(exc)


def _compile_relaxing(schema: Any, problems: list[SchemaProblem]) -> Any:
    """``schema`` as llguidance compiles it: where llguidance refuses a part, that part is found,
    relaxed (``oneOf`` → ``anyOf``, a keyword dropped, a subschema opened) and listed,
    unless the rewrite is exact (a ``oneOf`` whose branches cannot overlap)."""
    for _ in range(MAX_RELAXATIONS):
        error = _error(schema)
        if error is None:
            return schema
        pointer, keyword = _locate(schema, error)
        node = _get(schema, pointer)
        reason = error.strip().rstrip(".")
        if reason.startswith("Unsatisfiable"):
            schema = _set(schema, pointer, {})  # the whole part, whichever keyword
            problems.append(SchemaProblem(pointer, (
                f"no value can match this part of the schema ({reason}); it is not enforced "
                "while generating, and a reply that reaches it fails the check after.")))
        elif keyword == "oneOf":
            branches = node.pop("oneOf")
            exclusive = _exclusive_branches(schema, branches)
            node["anyOf"] = exclusive or branches
            if exclusive is None:
                problems.append(SchemaProblem(f"{pointer}/oneOf", (
                    "'oneOf' branches may overlap, and the grammar cannot stop a reply from "
                    "matching more than one; generated as 'anyOf' and checked after.")))
        elif keyword is not None:
            del node[keyword]
            problems.append(SchemaProblem(f"{pointer}/{escape_pointer(keyword)}", (
                f"'{keyword}' is not enforced while generating ({reason}); each reply is "
                "checked against it after.")))
        else:
            schema = _set(schema, pointer, {})
            problems.append(SchemaProblem(pointer, (
                f"this part is not enforced while generating ({reason}); each reply is "
                "checked against it after.")))
    problems.append(SchemaProblem("", "the schema is not enforced while generating (too many "
                                      "parts llguidance refuses); each reply is checked after."))
    return {}


def _locate(schema: Any, error: str) -> tuple[str, Optional[str]]:
    """Where llguidance's ``error`` comes from: the deepest subschema whose blanking changes
    the error, and the keyword there whose removal does (None: the subschema as a whole)."""
    def blanked_changes(pointers: list[str]) -> bool:
        trial = copy.deepcopy(schema)
        for p in pointers:
            trial = _set(trial, p, {})
        return _error(trial) != error

    pointer = ""
    while True:
        # Definitions first: a part that references use is blamed where it is written.
        candidates = sorted((p for p, _ in children(_get(schema, pointer), pointer)),
                            key=lambda p: not p.startswith(pointer + "/$defs/")
                            and not p.startswith(pointer + "/definitions/"))
        while len(candidates) > 1:  # halve while one half alone changes the error
            half = len(candidates) // 2
            if blanked_changes(candidates[:half]):
                candidates = candidates[:half]
            elif blanked_changes(candidates[half:]):
                candidates = candidates[half:]
            else:
                break
        found = next((p for p in candidates if blanked_changes([p])), None)
        if found is None:
            break
        pointer = found
    node = _get(schema, pointer)
    if isinstance(node, dict):
        holders = SUBSCHEMA_KEYS + SUBSCHEMA_LISTS + SUBSCHEMA_MAPS + ("$ref",)
        for keyword in sorted(node, key=lambda k: k in holders):  # plain keywords first
            if keyword in ("$defs", "definitions"):
                continue  # containers: what they hold was tried above
            trial = copy.deepcopy(schema)
            del _get(trial, pointer)[keyword]
            if _error(trial) != error:
                return pointer, keyword
    return pointer, None


def _exclusive_branches(root: Any, branches: list) -> Optional[list]:
    """``oneOf`` branches rewritten so that ``anyOf`` over them means the same or less, never
    more: ``None`` when that cannot be shown.

    Two branches that cannot both match (:func:`_disjoint`) stay as they are. Where branch
    *j* requires a key branch *i* does not, branch *i* gets that key forbidden
    (``properties: {key: false}``), so no value of branch *i* matches *j* too: the common
    "exactly one of these keys" (``oneOf: [{required: [a]}, {required: [b]}]``) becomes
    exact, and object variants told apart by their keys become a narrower, never invalid,
    grammar.
    """
    resolved = [_deref(root, b) for b in branches]
    out = []
    for i, branch in enumerate(resolved):
        forbidden: dict = {}
        for j, other in enumerate(resolved):
            if i == j or _disjoint(root, branch, other):
                continue
            if not isinstance(branch, dict) or not isinstance(other, dict):
                return None
            own = _required(branch)
            extra = [k for k in _required(other) if k not in own]
            if not extra:
                return None
            forbidden[extra[0]] = False
        if not forbidden:
            out.append(branches[i])
        else:
            out.append({"allOf": [branches[i], {"properties": forbidden}]})
    return out


def _required(schema: dict) -> list:
    required = schema.get("required", [])
    return [k for k in required if isinstance(k, str)] if isinstance(required, list) else []


def _deref(root: Any, schema: Any, depth: int = 0) -> Any:
    while isinstance(schema, dict) and "$ref" in schema and depth < 16:
        target = _resolve(root, schema["$ref"])
        if target is None or len(schema) > 1:
            return schema
        schema, depth = target, depth + 1
    return schema


def _types(schema: dict) -> Optional[set]:
    kinds = schema.get("type")
    if isinstance(kinds, str):
        kinds = [kinds]
    if not isinstance(kinds, list):
        values = _values(schema)
        if values is None:
            return None
        kinds = [_type_of(v) for v in values]
    return {"number" if k == "integer" else k for k in kinds}


def _type_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), "unknown")


def _values(schema: dict) -> Optional[set]:
    if "const" in schema:
        return {json_key(schema["const"])}
    if isinstance(schema.get("enum"), list):
        return {json_key(v) for v in schema["enum"]}
    return None


def _disjoint(root: Any, a: Any, b: Any) -> bool:
    if a is False or b is False:
        return True
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    types_a, types_b = _types(a), _types(b)
    if types_a is not None and types_b is not None and not types_a & types_b:
        return True
    values_a, values_b = _values(a), _values(b)
    if values_a is not None and values_b is not None and not values_a & values_b:
        return True
    if types_a is not None and types_a != {"object"} or types_b is not None and types_b != {"object"}:
        return False
    required_a, required_b = set(a.get("required", [])), set(b.get("required", []))
    props_a, props_b = a.get("properties", {}), b.get("properties", {})
    for key in required_a & required_b:  # a discriminator both require, valued apart
        sub_a, sub_b = _deref(root, props_a.get(key)), _deref(root, props_b.get(key))
        if isinstance(sub_a, dict) and isinstance(sub_b, dict):
            va, vb = _values(sub_a), _values(sub_b)
            if va is not None and vb is not None and not va & vb:
                return True
    return _forbids(a, required_b) or _forbids(b, required_a)


def _forbids(schema: dict, keys: set) -> bool:
    """Whether ``schema`` allows none of ``keys`` (a ``false`` property, or closed without it)."""
    properties = schema.get("properties", {})
    for key in keys:
        if properties.get(key) is False:
            return True
        if key not in properties and schema.get("additionalProperties") is False \
                and not schema.get("patternProperties"):
            return True
    return False


def schema_verdict(schema: Any) -> tuple[bool, list[SchemaProblem]]:
    """Whether QuantDesk enforces ``schema`` exactly, and each problem if not: what the
    ``schema check`` command and the Chat page's Structured output panel show. A
    malformed schema is one problem (its pointer and sentence), never an exception."""
    from models.structured.constraint import schema_plan

    try:
        plan = schema_plan(schema)
    except SchemaError as exc:
        return False, [SchemaProblem("" if exc.pointer == "/" else exc.pointer, exc.what)]
    except QuantDeskError as exc:
        return False, [SchemaProblem("", exc.what)]
    return plan.enforced, list(plan.problems)
