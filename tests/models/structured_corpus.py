"""A generated corpus of (JSON Schema, value) pairs covering every keyword and format
QuantDesk's validator supports, for differential tests against ``jsonschema``.

Seeded ``random.Random``: the same corpus on every run and every machine, so CI is
reproducible and the count of compared pairs is exact. Values are drawn near the
schema (from the same small pools the schema's bounds, patterns and formats come
from), so both verdicts occur often.
"""

from __future__ import annotations

import random
from typing import Any, Iterator

NUMBERS = [0, 1, -1, 1.0, 2, 2.5, 0.5, 3, 4.0, 5, 7, 10, 12, 15, 100, -7.25, 0.25, 1000, -0.0,
           1e3, 0.1, 0.3, 6, 9, 2.0]
STEPS = [1, 2, 3, 5, 0.5, 0.25, 2.5, 4.0]
WORDS = ["", "a", "ab", "abc", "hello", "A1", "b", "zz", "x-1", "key", "name", "émile", "日本",
         "a b", "00", "42"]
FORMAT_SAMPLES = {
    "date": ["2024-05-03", "2024-02-29", "2023-02-29", "2024-13-01", "0000-01-01", "2024-5-3",
             "1999-12-31", "2024-04-31", "２０２４-05-03", "2024-05-03x"],
    "time": ["14:30:00Z", "23:59:60Z", "22:59:60Z", "12:00:00z", "12:00:00+01:60",
             "01:29:60+01:30", "23:59:60+00:00", "15:59:60-08:00", "24:00:00Z", "12:00:00.123+02:00",
             "12:00:00", "1:00:00Z", "12:60:00Z", "23:29:60-00:30"],
    "date-time": ["2024-05-03T14:30:00Z", "2024-05-03t14:30:00z", "1998-12-31T23:59:60Z",
                  "1998-12-31T15:59:60.123-08:00", "2024-05-03 14:30:00Z", "2024-02-30T00:00:00Z",
                  "2024-05-03T14:30:00", "2024-05-03T22:59:60Z", "2024-05-03T10:00:00+23:59"],
    "uuid": ["123e4567-e89b-12d3-a456-426614174000", "123E4567-E89B-12D3-A456-426614174000",
             "123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400",
             "g23e4567-e89b-12d3-a456-426614174000", "00000000-0000-0000-0000-000000000000"],
    "email": ["joe@example.com", ".joe@example.com", "joe.@example.com", "jo..e@example.com",
              "joe@exa=mple.com", '"joe bloggs"@example.com', '"a\\"b"@x.org', "joe@[127.0.0.1]",
              "joe@[IPv6:::1]", "joe", "@example.com", "joe@", "a+b@c-d.org", "joe@-x.com",
              "joe@x-.com", "joe@localhost", "a@b@c.com", "te~st@ex.com", "joe@ex..com"],
    "ipv4": ["127.0.0.1", "256.0.0.1", "01.2.3.4", "1.2.3", "0.0.0.0", "1.2.3.4.5"],
    "ipv6": ["::1", "fe80::1%eth0", "2001:db8::8a2e:370:7334", "12345::", ":::", "::ffff:1.2.3.4"],
}
PATTERNS = ["^a", "b$", "^[a-z]+$", "[0-9]", "^(ab|c)*$", "^.{2,3}$", "x|y", "^$", "\\d{2}"]
TYPES = ["object", "array", "string", "number", "integer", "boolean", "null"]
PROP_NAMES = ["a", "b", "c", "name", "x-1", "key"]


class CorpusGenerator:
    """Schemas and values from one seed; ``pairs(n)`` yields ``n`` (schema, value) pairs."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)

    # -- values ---------------------------------------------------------------------------
    def value(self, depth: int = 0) -> Any:
        r = self.r
        kind = r.choice(["number", "string", "string", "bool", "null", "array", "object"]
                        if depth < 3 else ["number", "string", "bool", "null"])
        if kind == "number":
            return r.choice(NUMBERS)
        if kind == "string":
            if r.random() < 0.4:
                return r.choice(r.choice(list(FORMAT_SAMPLES.values())))
            return r.choice(WORDS)
        if kind == "bool":
            return r.choice([True, False])
        if kind == "null":
            return None
        if kind == "array":
            n = r.choice([0, 1, 2, 2, 3, 4])
            if r.random() < 0.3:  # repeated, and equal-but-differently-typed numbers
                item = self.value(depth + 1)
                return [item] * n if r.random() < 0.5 else [1, 1.0][:n] + [self.value(depth + 1)]
            return [self.value(depth + 1) for _ in range(n)]
        return {r.choice(PROP_NAMES): self.value(depth + 1) for _ in range(r.choice([0, 1, 2, 3]))}

    def value_for(self, schema: Any, depth: int = 0) -> Any:
        """A value shaped by the schema's hints (often valid, sometimes not)."""
        r = self.r
        if not isinstance(schema, dict) or r.random() < 0.25 or depth > 3:
            return self.value(depth)
        if "const" in schema and r.random() < 0.5:
            return _respell(schema["const"], r)
        if "enum" in schema and r.random() < 0.6:
            return _respell(r.choice(schema["enum"]), r)
        kind = schema.get("type")
        kind = r.choice(kind) if isinstance(kind, list) else kind
        if "format" in schema and r.random() < 0.8:
            return r.choice(FORMAT_SAMPLES.get(schema["format"], WORDS))
        if kind == "object" or "properties" in schema:
            out = {}
            for name, sub in schema.get("properties", {}).items():
                if r.random() < 0.8:
                    out[name] = self.value_for(sub, depth + 1)
            for _ in range(r.choice([0, 0, 1])):
                out[r.choice(PROP_NAMES)] = self.value(depth + 1)
            return out
        if kind == "array" or "items" in schema or "prefixItems" in schema:
            prefix = [self.value_for(s, depth + 1) for s in schema.get("prefixItems", [])]
            rest = [self.value_for(schema.get("items", schema.get("contains", {})), depth + 1)
                    for _ in range(r.choice([0, 1, 2, 3]))]
            return prefix[:r.choice([len(prefix), len(prefix), 0, 1])] + rest
        if kind in ("integer", "number"):
            return r.choice(NUMBERS)
        if kind == "string":
            return r.choice(WORDS)
        return self.value(depth)

    # -- schemas --------------------------------------------------------------------------
    def schema(self, depth: int = 0) -> Any:
        r = self.r
        if depth > 2 or r.random() < 0.1:
            return r.choice([True, False, {}, {"type": r.choice(TYPES)}])
        kind = r.choice(["object", "array", "string", "number", "integer", "mixed", "combine",
                         "literal", "typeless"])
        s: dict[str, Any] = {}
        if kind == "object":
            s["type"] = "object"
            names = r.sample(PROP_NAMES, r.choice([0, 1, 2, 3]))
            if names or r.random() < 0.5:
                s["properties"] = {n: self.schema(depth + 1) for n in names}
            if names and r.random() < 0.6:
                s["required"] = r.sample(names + ["zz"], r.choice([1, 2]))
            pick = r.random()
            if pick < 0.3:
                s["additionalProperties"] = r.choice([False, True, self.schema(depth + 1)])
            if r.random() < 0.25:
                s["patternProperties"] = {r.choice(["^a", "^x", "e"]): self.schema(depth + 1)}
            if r.random() < 0.2:
                s["propertyNames"] = r.choice([{"maxLength": 3}, {"pattern": "^[a-c]"},
                                               {"enum": ["a", "b", "name"]}])
            if r.random() < 0.2:
                s["minProperties"] = r.choice([0, 1, 2])
            if r.random() < 0.2:
                s["maxProperties"] = r.choice([0, 1, 2, 3])
            if r.random() < 0.2:
                s["dependentRequired"] = {r.choice(PROP_NAMES): r.sample(PROP_NAMES, 1)}
            if r.random() < 0.15:
                s["dependentSchemas"] = {r.choice(PROP_NAMES): self.schema(depth + 1)}
        elif kind == "array":
            s["type"] = "array"
            if r.random() < 0.7:
                s["items"] = self.schema(depth + 1)
            if r.random() < 0.3:
                s["prefixItems"] = [self.schema(depth + 1) for _ in range(r.choice([1, 2]))]
            if r.random() < 0.3:
                s["minItems"] = r.choice([0, 1, 2])
            if r.random() < 0.3:
                s["maxItems"] = r.choice([0, 1, 2, 3])
            if r.random() < 0.3:
                s["uniqueItems"] = r.choice([True, False])
            if r.random() < 0.3:
                s["contains"] = self.schema(depth + 1)
                if r.random() < 0.5:
                    s["minContains"] = r.choice([0, 1, 2])
                if r.random() < 0.5:
                    s["maxContains"] = r.choice([0, 1, 2])
        elif kind == "string":
            s["type"] = "string"
            if r.random() < 0.4:
                s["format"] = r.choice(list(FORMAT_SAMPLES))
            if r.random() < 0.3:
                s["pattern"] = r.choice(PATTERNS)
            if r.random() < 0.3:
                s["minLength"] = r.choice([0, 1, 2, 3])
            if r.random() < 0.3:
                s["maxLength"] = r.choice([0, 2, 3, 5])
        elif kind in ("number", "integer"):
            s["type"] = kind
            for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
                if r.random() < 0.3:
                    s[key] = r.choice([0, 1, 2.5, -1, 10, 0.5, 100, 3])
            if r.random() < 0.35:
                s["multipleOf"] = r.choice(STEPS)
        elif kind == "mixed":
            s["type"] = r.sample(TYPES, r.choice([1, 2, 3]))
        elif kind == "combine":
            key = r.choice(["allOf", "anyOf", "oneOf", "not", "if"])
            if key == "not":
                s["not"] = self.schema(depth + 1)
            elif key == "if":
                s["if"] = self.schema(depth + 1)
                for branch in ("then", "else"):
                    if r.random() < 0.7:
                        s[branch] = self.schema(depth + 1)
            else:
                s[key] = [self.schema(depth + 1) for _ in range(r.choice([1, 2, 3]))]
        elif kind == "literal":
            if r.random() < 0.5:
                s["const"] = self.value(1)
            else:
                s["enum"] = [self.value(1) for _ in range(r.choice([1, 2, 3]))]
        else:  # type-less: keywords of several types side by side
            for key, choices in (("minLength", [1, 2]), ("maximum", [3, 10]), ("minItems", [1]),
                                 ("required", [["a"]]), ("format", ["date", "email"]),
                                 ("multipleOf", [2, 0.5])):
                if r.random() < 0.35:
                    s[key] = r.choice(choices)
        if depth == 0 and r.random() < 0.3:
            s = {"$defs": {"d": s, "a%b": {"type": "integer"}, "t~x/y": {"minimum": 2}},
                 "$ref": r.choice(["#/$defs/d", "#/$defs/d"]),
                 "anyOf": [{"$ref": "#/$defs/a%25b"}, {"$ref": "#/$defs/t~0x~1y"},
                           {"$anchor": "any", "type": ["string", "object", "array", "null"]},
                           {"$ref": "#any"}]}
        return s

    def pairs(self, n: int) -> Iterator[tuple[Any, Any]]:
        for _ in range(n):
            schema = self.schema()
            yield schema, self.value_for(schema)


def _respell(value: Any, r: random.Random) -> Any:
    """An equal JSON value written differently (1 vs 1.0), or another one."""
    if isinstance(value, bool) or value is None:
        return value if r.random() < 0.8 else r.choice([1, 0, "true"])
    if isinstance(value, int):
        return float(value) if r.random() < 0.5 else value
    if isinstance(value, float) and value.is_integer():
        return int(value) if r.random() < 0.5 else value
    if isinstance(value, list):
        return [_respell(v, r) for v in value]
    if isinstance(value, dict):
        return {k: _respell(v, r) for k, v in value.items()}
    return value
