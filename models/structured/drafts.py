"""Older JSON Schema drafts read as 2020-12, so one walker and one validator serve all.

Real-world schemas are mostly draft-04 and draft-07 (Kubernetes, the JSON Schema Store,
Snowplow, tool definitions). Their keywords that changed meaning are rewritten into the
2020-12 keywords that mean the same, by the form of the value (a boolean
``exclusiveMinimum`` is draft-04 whatever ``$schema`` says):

- ``exclusiveMinimum: true`` beside ``minimum`` (draft-04) → ``exclusiveMinimum: <minimum>``;
  ``false`` → nothing. The same for the maximum.
- ``items: [a, b]`` → ``prefixItems: [a, b]``, and ``additionalItems`` → ``items``;
  ``additionalItems`` beside a single ``items`` schema does nothing (dropped).
- ``dependencies``: lists → ``dependentRequired``, schemas → ``dependentSchemas``.
- ``$ref`` in draft-04/06/07 ignores its siblings (``definitions`` stay, references read them).
- draft-04 ``id`` → ``$id`` at the root (the base of references), dropped below;
  ``$schema`` dropped (the schema is now 2020-12).
- draft-03's ``required: true`` inside a property is not a draft-04+ keyword: dropped, as
  every later validator ignores it.

References keep their text: ``#/definitions/...`` still points where it did. Pointers in
the problems QuantDesk reports are those of the rewritten schema (``prefixItems/0`` for a
draft-07 ``items/0``).
"""

from __future__ import annotations

from typing import Any

OLD_DRAFTS = ("draft-03", "draft-04", "draft-05", "draft-06", "draft-07")
SCHEMA_VALUED = ("additionalProperties", "contains", "not", "if", "then", "else",
                 "propertyNames", "unevaluatedProperties", "unevaluatedItems")
SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
MAX_DEPTH = 200


def declared_draft(schema: Any) -> str:
    """``draft-04`` … ``draft-07``, ``2019-09``, ``2020-12`` from the root's ``$schema``;
    ``""`` when it names none of them (2020-12 then applies)."""
    uri = schema.get("$schema") if isinstance(schema, dict) else None
    if not isinstance(uri, str):
        return ""
    for name in OLD_DRAFTS + ("2019-09", "2020-12"):
        if name in uri:
            return name
    return ""


def to_2020_12(schema: Any) -> Any:
    """A copy of ``schema`` in JSON Schema 2020-12 terms (see the module's list)."""
    draft = declared_draft(schema)
    return _rewrite(schema, draft in OLD_DRAFTS, True, 0)


def _rewrite(schema: Any, old_ref: bool, root: bool, depth: int) -> Any:
    if not isinstance(schema, dict) or depth > MAX_DEPTH:
        return schema
    out: dict = {}
    if old_ref and "$ref" in schema:
        schema = {k: v for k, v in schema.items()
                  if k in ("$ref", "definitions", "$defs") or (root and k in ("id", "$id"))}
    sub = lambda value: _rewrite(value, old_ref, False, depth + 1)  # noqa: E731
    for key, value in schema.items():
        if key == "$schema":
            continue
        if key in ("id", "$id") and isinstance(value, str):
            base = value.split("#")[0]  # "#field" (draft-04 style) names no document
            if root and base and (key == "$id" or "$id" not in schema):
                out["$id"] = base
            continue
        if key == "required" and isinstance(value, bool):
            continue
        if key in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(value, bool):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            if value and bound in schema:
                out[key] = schema[bound]
            continue
        if key in ("minimum", "maximum"):
            exclusive = schema.get("exclusiveMinimum" if key == "minimum" else "exclusiveMaximum")
            if exclusive is True:
                continue
        if key == "items" and isinstance(value, list):
            out["prefixItems"] = [sub(v) for v in value]
            if "additionalItems" in schema:
                out["items"] = sub(schema["additionalItems"])
            continue
        if key == "additionalItems":
            continue
        if key == "dependencies" and isinstance(value, dict):
            for name, dep in value.items():
                target = "dependentRequired" if isinstance(dep, list) else "dependentSchemas"
                out.setdefault(target, {})[name] = dep if isinstance(dep, list) else sub(dep)
            continue
        if key == "items" or key in SCHEMA_VALUED:
            out[key] = sub(value)
        elif key in SCHEMA_LISTS and isinstance(value, list):
            out[key] = [sub(v) for v in value]
        elif key in SCHEMA_MAPS and isinstance(value, dict):
            merged = dict(out.get(key, {}))
            merged.update({name: sub(v) for name, v in value.items()})
            out[key] = merged
        else:
            out[key] = value
    return out
