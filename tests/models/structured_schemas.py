"""The schema set for structured output tests: each case a schema and a task for the model.

Issue 7 asks for at least 20 schemas of varied features — nested objects, arrays with
min/max items, enums, numbers with bounds, required/optional, $ref, anyOf, string
formats — whose SmolLM2 outputs all parse and validate. ``UNSUPPORTED`` lists schemas
with keywords the grammar cannot enforce, each with the JSON pointer it must report;
``ENFORCED`` those it enforces although they once were refused.
"""

from __future__ import annotations

SUPPORTED = {
    "person": ("Describe a person named Anna who is 34.", {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 30},
                       "age": {"type": "integer", "minimum": 0, "maximum": 120}},
        "required": ["name", "age"]}),
    "nested-address": ("Give the address of a bakery in Berlin.", {
        "type": "object",
        "properties": {
            "shop": {"type": "string", "maxLength": 30},
            "address": {"type": "object",
                        "properties": {"street": {"type": "string", "maxLength": 40},
                                       "city": {"type": "string", "maxLength": 20},
                                       "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                        "required": ["street", "city", "zip"]}},
        "required": ["shop", "address"]}),
    "tags-array": ("List tags for a blog post about cooking pasta.", {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 15},
                                "minItems": 1, "maxItems": 3}},
        "required": ["tags"]}),
    "enum-color": ("What colour is the sky on a clear day?", {
        "type": "object",
        "properties": {"color": {"enum": ["red", "green", "blue", "yellow"]}},
        "required": ["color"]}),
    "bounded-numbers": ("Report the weather in Rome today.", {
        "type": "object",
        "properties": {"celsius": {"type": "number", "minimum": -50, "maximum": 60},
                       "humidity": {"type": "number", "minimum": 0, "maximum": 1}},
        "required": ["celsius", "humidity"]}),
    "optional-fields": ("Describe the user account of Tom.", {
        "type": "object",
        "properties": {"username": {"type": "string", "maxLength": 20},
                       "nickname": {"type": "string", "maxLength": 20},
                       "admin": {"type": "boolean"}},
        "required": ["username", "admin"]}),
    "ref-defs": ("Give a line from point (1, 2) to point (5, 7).", {
        "$defs": {"point": {"type": "object",
                            "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                            "required": ["x", "y"]}},
        "type": "object",
        "properties": {"start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"}},
        "required": ["start", "end"]}),
    "anyof": ("Give the id of order number 42.", {
        "type": "object",
        "properties": {"id": {"anyOf": [{"type": "integer", "minimum": 0},
                                        {"type": "string", "maxLength": 12}]}},
        "required": ["id"]}),
    "oneof-by-type": ("How many legs does a spider have?", {
        "type": "object",
        "properties": {"answer": {"oneOf": [{"type": "integer", "minimum": 0, "maximum": 100},
                                            {"type": "null"}]}},
        "required": ["answer"]}),
    "date-time-formats": ("When does the meeting on 3 May 2024 at 14:30 UTC start?", {
        "type": "object",
        "properties": {"day": {"type": "string", "format": "date"},
                       "at": {"type": "string", "format": "time"}},
        "required": ["day", "at"]}),
    "datetime-uuid": ("Log an event with an id and a timestamp.", {
        "type": "object",
        "properties": {"id": {"type": "string", "format": "uuid"},
                       "timestamp": {"type": "string", "format": "date-time"}},
        "required": ["id", "timestamp"]}),
    "email": ("Give the contact email of the support team of example.com.", {
        "type": "object",
        "properties": {"email": {"type": "string", "format": "email"}},
        "required": ["email"]}),
    "nullable": ("Is the user Bob active, and when was he deleted?", {
        "type": "object",
        "properties": {"active": {"type": "boolean"},
                       "deleted": {"type": ["string", "null"], "maxLength": 20}},
        "required": ["active", "deleted"]}),
    "const": ("Write the header of a version 2 report.", {
        "type": "object",
        "properties": {"version": {"const": 2}, "kind": {"const": "report"},
                       "title": {"type": "string", "maxLength": 30}},
        "required": ["version", "kind", "title"]}),
    "array-of-objects": ("List two items of a shopping list with quantities.", {
        "type": "object",
        "properties": {"items": {"type": "array", "maxItems": 3, "minItems": 1,
                                 "items": {"type": "object",
                                           "properties": {"name": {"type": "string", "maxLength": 20},
                                                          "qty": {"type": "integer", "minimum": 1,
                                                                  "maximum": 99}},
                                           "required": ["name", "qty"]}}},
        "required": ["items"]}),
    "allof-merge": ("Describe a red car.", {
        "allOf": [{"type": "object", "properties": {"make": {"type": "string", "maxLength": 20}},
                   "required": ["make"]},
                  {"properties": {"color": {"enum": ["red", "black", "white"]}},
                   "required": ["color"]}]}),
    "additional-properties": ("Score three players in a game from 0 to 10.", {
        "type": "object",
        "properties": {"game": {"type": "string", "maxLength": 20}},
        "required": ["game"],
        "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 10}}),
    "recursive-ref": ("Give a small family tree for Ann with one child.", {
        "$defs": {"node": {"type": "object",
                           "properties": {"name": {"type": "string", "maxLength": 15},
                                          "children": {"type": "array", "maxItems": 2,
                                                       "items": {"$ref": "#/$defs/node"}}},
                           "required": ["name", "children"]}},
        "$ref": "#/$defs/node"}),
    "exclusive-integers": ("Pick a number of stars from 1 to 9 for a good film.", {
        "type": "object",
        "properties": {"stars": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}},
        "required": ["stars"]}),
    "pattern": ("Give the flight code of a flight from Paris.", {
        "type": "object",
        "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3,4}$"}},
        "required": ["code"]}),
    "mixed-enum": ("Pick one value.", {
        "type": "object",
        "properties": {"value": {"enum": [1, "two", None, True]}},
        "required": ["value"]}),
    "top-level-array": ("Give the first three prime numbers.", {
        "type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 1000},
        "minItems": 3, "maxItems": 3}),
    "number-array": ("Give probabilities for rain on the next two days.", {
        "type": "object",
        "properties": {"p": {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1},
                             "minItems": 2, "maxItems": 4}},
        "required": ["p"]}),
    "any-json": ("Describe a cat as JSON with two fields.", {}),
}

# Constraining keywords the grammar does not enforce: schema, the JSON pointers that must
# be reported (at least these). Refused when strict; generated and checked otherwise.
UNSUPPORTED = {
    "not": ({"type": "object", "properties": {"a": {"not": {"type": "string"}}}},
            ["/properties/a/not"]),
    "unique-items": ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
                     ["/uniqueItems"]),
    "lookahead": ({"type": "string", "pattern": "^(?=.*[0-9]).{8,}$"}, ["/pattern"]),
    "overlapping-oneof": ({"oneOf": [{"type": "integer"}, {"type": "integer", "minimum": 3}]},
                          ["/oneOf"]),
    "min-properties-optional": ({"type": "object", "properties": {"a": {}}, "minProperties": 1,
                                 "additionalProperties": {"type": "integer"}},
                                ["/minProperties"]),
    "if-then": ({"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}},
                ["/if", "/then"]),
    "contains": ({"type": "array", "contains": {"const": 1}}, ["/contains"]),
    "nested-deep": ({"type": "object", "properties": {"a": {"type": "array", "items": {
        "type": "object", "properties": {"b": {"type": "string", "propertyNames": {}}},
        "propertyNames": {"maxLength": 3}}}}},
        ["/properties/a/items/propertyNames"]),
}

# Parts neither the grammar nor the validator can read: listed like UNSUPPORTED (refused
# when strict), and without strict the rest of the schema is generated and checked.
UNCHECKED = {
    "remote-ref": ({"$ref": "https://example.com/schema.json"}, "/$ref"),
    "dynamic-ref": ({"$dynamicRef": "#meta"}, "/$dynamicRef"),
    "unevaluated": ({"type": "object", "unevaluatedProperties": False}, "/unevaluatedProperties"),
}

# Keywords the old converter refused that the grammar now enforces exactly.
ENFORCED = {
    "multiple-of": {"type": "integer", "multipleOf": 5},
    "format-uri": {"type": "object", "properties": {"home": {"type": "string", "format": "uri"}}},
    "fractional-bound": {"type": "number", "minimum": 0.5},
    "exclusive-number": {"type": "number", "exclusiveMinimum": 0},
    "min-properties": {"type": "object", "properties": {"a": {}, "b": {}},
                       "required": ["a", "b"], "minProperties": 2},
    "prefix-items": {"type": "array", "prefixItems": [{"type": "integer"}]},
    "pattern-properties": {"type": "object", "patternProperties": {"^x-": {"type": "integer"}}},
    "length-and-pattern": {"type": "string", "maxLength": 8, "pattern": "^[a-z]+$"},
    "unicode-property-pattern": {"type": "string", "pattern": "\\p{L}+"},
    "draft-04": {"$schema": "http://json-schema.org/draft-04/schema#", "type": "object",
                 "id": "shape", "properties": {"radius": {"type": "number", "minimum": 0,
                                                          "exclusiveMinimum": True}},
                 "required": ["radius"]},
    "draft-07-tuple": {"$schema": "http://json-schema.org/draft-07/schema#", "type": "array",
                       "items": [{"type": "integer"}, {"type": "string"}],
                       "additionalItems": False},
    "annotations": {"type": "object", "title": "T", "description": "d", "examples": [{}],
                    "example": {}, "readonly": True, "javaType": "x.Y", "self": {"a": 1},
                    "_format": "x", "x-vendor": 1, "$comment": "c", "deprecated": False,
                    "properties": {"a": {"type": "string", "format": "no-such-format",
                                         "default": "z", "readOnly": True}}},
    "disjoint-oneof-const": {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
         "required": ["kind"]},
        {"type": "object", "properties": {"kind": {"const": "b"}, "x": {"type": "integer"}},
         "required": ["kind"]}]},
    "dependent-required": {"type": "object", "properties": {"a": {}, "b": {}},
                           "dependentRequired": {"a": ["b"]}},
    "unique-enum-items": {"type": "array", "items": {"enum": ["x", "y", "z"]},
                          "uniqueItems": True},
}

# Schemas refused outright, even with allow_unsupported (malformed):
# schema, the pointer in the sentence.
REFUSED = {
    "missing-anchor": ({"$ref": "#nowhere"}, "/$ref"),
    "missing-pointer": ({"$ref": "#/$defs/absent"}, "/$ref"),
    "ref-loop": ({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}},
                  "$ref": "#/$defs/a"}, "/$ref"),
    "bad-pattern-property": ({"patternProperties": {"(": {}}}, "/patternProperties/("),
    "string-min-length": ({"type": "string", "minLength": "3"}, "/minLength"),
    "negative-multiple": ({"type": "number", "multipleOf": -2}, "/multipleOf"),
    "unknown-type": ({"type": "text"}, "/type"),
    "false-root": (False, "/"),
}

# Schemas no value can match: named (pointer and sentence) like UNSUPPORTED, refused when
# strict; without strict every reply fails the check.
UNSATISFIABLE = {
    "required-false": ({"type": "object", "properties": {"a": False}, "required": ["a"]},
                       "/properties/a"),
    "empty-enum": ({"enum": []}, ""),
    "string-bounds": ({"type": "string", "minLength": 5, "maxLength": 2}, ""),
    "number-bounds": ({"type": "number", "minimum": 5, "maximum": 1}, ""),
    "integer-bounds": ({"type": "integer", "minimum": 5, "maximum": 1}, ""),
}


def _deep(levels: int) -> dict:
    schema: dict = {}
    for _ in range(levels):
        schema = {"items": schema}
    return schema


REFUSED["deep"] = (_deep(100), None)
