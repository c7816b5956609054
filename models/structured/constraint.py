"""What the engine is asked for: an output constraint, built and checked before generating.

Three kinds, all ending as one llguidance grammar (:mod:`.guidance`):

- ``schema`` — a JSON Schema, planned by :func:`~.schema_policy.plan_schema`: what the
  grammar does not enforce is listed (pointer and sentence) before any token. Strict (the
  default) refuses such a schema with that list; ``allow_unsupported=True`` (a request
  without ``strict``) generates under everything enforceable, and the list stays on the
  constraint so the reply can say what was not enforced and whether it broke it.
- ``json`` — any JSON value.
- ``gbnf`` — a user's GBNF grammar (or Lark text starting with ``%llguidance``), compiled
  by llguidance; a syntax error is a sentence before anything is generated.

:meth:`OutputConstraint.check` is the validation every result goes through.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Optional

from models.foundation.errors import QuantDeskError
from models.structured.guidance import gbnf_grammar, json_schema_grammar
from models.structured.schema_policy import SchemaPlan, SchemaProblem, plan_schema
from models.structured.validate import validate

KINDS = ("schema", "json", "gbnf")


@dataclass(frozen=True)
class OutputConstraint:
    """A grammar for llguidance and what a finished reply is checked against.

    Attributes:
        kind: ``schema``, ``json`` or ``gbnf``.
        grammar: The llguidance grammar (a string, the same in the client and the engine).
        schema: The JSON Schema replies are validated against (2020-12 form) for ``schema``.
        not_enforced: Schema keywords the grammar does not enforce (only when the user
            allowed them); validation still checks them.
        restrictions: Where the grammar is narrower than the schema in a way the user may
            notice (keys the schema does not list are never generated); never refused.
    """

    kind: str
    grammar: str
    schema: Optional[Any] = None
    not_enforced: tuple[SchemaProblem, ...] = ()
    restrictions: tuple[SchemaProblem, ...] = ()

    def check(self, text: str) -> Any:
        """Validate a finished reply: the parsed JSON, or the text itself for ``gbnf``.

        Raises:
            QuantDeskError: not JSON, or breaks the schema (a sentence saying how).
        """
        if self.kind == "gbnf":
            return text
        return validate(text, self.schema if self.kind == "schema" else None)


def refusal(problems: list[SchemaProblem] | tuple[SchemaProblem, ...]) -> QuantDeskError:
    """The sentence a strict request gets for a schema the grammar cannot enforce exactly."""
    listed = " ".join(str(p) for p in problems)
    return QuantDeskError(
        f"The JSON schema uses {len(problems)} feature(s) that constrained generation cannot "
        f"enforce, so replies could break the schema. {listed}",
        "Remove or simplify these parts of the schema, or send the request without strict "
        "(generate anyway: every reply is checked, and the response says what was not "
        "enforced).")


@functools.lru_cache(maxsize=64)
def _plan(schema_text: str) -> SchemaPlan:
    return plan_schema(json.loads(schema_text))


def schema_plan(schema: Any) -> SchemaPlan:
    """:func:`~.schema_policy.plan_schema`, remembered for the last schemas (the client and
    the engine plan every request's schema, and agents send the same tools each turn)."""
    if not isinstance(schema, (dict, bool)):
        raise QuantDeskError("The JSON schema must be a JSON object.",
                             'Start from {"type": "object", "properties": {...}}.')
    return _plan(json.dumps(schema, sort_keys=False, ensure_ascii=False))


def constraint_for_schema(schema: Any, allow_unsupported: bool = False) -> OutputConstraint:
    """Build the constraint for a JSON Schema, refusing what it cannot enforce.

    Args:
        schema: The schema, parsed from JSON.
        allow_unsupported: Generate even though some keywords are not enforced (they are
            checked after; ``not_enforced`` lists them).

    Raises:
        QuantDeskError: the schema is not an object or is malformed, or uses keywords the
            grammar does not enforce and ``allow_unsupported`` is false.
    """
    plan = schema_plan(schema)
    if plan.problems and not allow_unsupported:
        raise refusal(plan.problems)
    return OutputConstraint("schema", plan.grammar, plan.schema, tuple(plan.problems),
                            tuple(plan.restrictions))


def constraint_for_any_json() -> OutputConstraint:
    """Any JSON value."""
    return OutputConstraint("json", json_schema_grammar({}))


def constraint_for_gbnf(text: str) -> OutputConstraint:
    """A raw GBNF grammar (or ``%llguidance`` Lark text), compiled by llguidance.

    Raises:
        QuantDeskError: the grammar has a syntax error (the line and what to fix).
    """
    return OutputConstraint("gbnf", gbnf_grammar(text))
