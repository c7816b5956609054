"""What the engine is asked for: an output constraint, built and checked before generating.

Three kinds, all ending as one GBNF grammar for llama.cpp:

- ``schema`` — a JSON Schema. Features the grammar cannot enforce make
  :func:`constraint_for_schema` raise a sentence listing them, unless the user agreed to
  generate anyway (``allow_unsupported=True``); the list stays on the constraint so the
  GUI can show it. Never silently unconstrained.
- ``json`` — any JSON value.
- ``gbnf`` — a user's raw grammar, syntax-checked by our parser (sentences with line
  and column) before llama.cpp sees it.

An :class:`OutputConstraint` holds plain values only, so it crosses the pipe to the
engine's child process as is. :meth:`OutputConstraint.check` is the validation every
result goes through.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from app.core.errors import QuantDeskError
from models.structured.gbnf import parse_gbnf
from models.structured.schema_grammar import UnsupportedFeature, any_json_grammar, schema_to_grammar
from models.structured.validate import validate

KINDS = ("schema", "json", "gbnf")


@dataclass(frozen=True)
class OutputConstraint:
    """A grammar for llama.cpp and what a finished reply is checked against.

    Attributes:
        kind: ``schema``, ``json`` or ``gbnf``.
        gbnf: The grammar text (rule ``root``).
        schema: The JSON Schema for ``schema``; ``None`` otherwise.
        unsupported: Schema features the grammar does not enforce (only when the user
            allowed them); validation still checks them.
        restrictions: Where the grammar is narrower than the schema in a way the user
            may notice (properties not listed are never generated); shown, never refused.
    """

    kind: str
    gbnf: str
    schema: Optional[Any] = None
    unsupported: tuple[UnsupportedFeature, ...] = ()
    restrictions: tuple[UnsupportedFeature, ...] = ()

    def check(self, text: str) -> Any:
        """Validate a finished reply: the parsed JSON, or the text itself for ``gbnf``.

        Raises:
            QuantDeskError: not JSON, or breaks the schema (a sentence saying how).
        """
        if self.kind == "gbnf":
            return text
        return validate(text, self.schema if self.kind == "schema" else None)


def constraint_for_schema(schema: Any, allow_unsupported: bool = False) -> OutputConstraint:
    """Build the constraint for a JSON Schema, refusing what it cannot enforce.

    Args:
        schema: The schema, parsed from JSON.
        allow_unsupported: Generate even though some features are not enforced.

    Raises:
        QuantDeskError: the schema is not an object or is malformed, uses a feature that is
            refused outright (:mod:`.schema_check`), or uses features the grammar does not
            enforce and ``allow_unsupported`` is false.
    """
    if not isinstance(schema, (dict, bool)):
        raise QuantDeskError("The JSON schema must be a JSON object.",
                             'Start from {"type": "object", "properties": {...}}.')
    converted = schema_to_grammar(schema)
    if not allow_unsupported:
        converted.require_supported()
    return OutputConstraint("schema", converted.gbnf, schema, tuple(converted.unsupported),
                            tuple(converted.restrictions))


def constraint_for_any_json() -> OutputConstraint:
    """Any JSON value."""
    return OutputConstraint("json", any_json_grammar())


def constraint_for_gbnf(text: str) -> OutputConstraint:
    """A raw GBNF grammar after our syntax check.

    Raises:
        QuantDeskError: the grammar has a syntax error (line, column and what to fix).
    """
    parse_gbnf(text)
    return OutputConstraint("gbnf", text)
