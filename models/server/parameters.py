"""Reading request fields with sentences for every mistake, and building engine options.

Shared by every dialect: :class:`Fields` reads one JSON object's fields by type and range
(a wrong type, a huge number, a NaN: a 400 naming the field); :func:`structured_fields`
maps a requested output format onto the engine's structured output (``models.structured``),
which refuses, before any token, a schema it cannot enforce — never a silent fallback.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from models.server.errors import ApiError

MAX_INT = 1 << 53  # beyond this, JSON numbers lose precision in most clients


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "an array", dict: "an object"}.get(type(value), type(value).__name__)


class Fields:
    """Typed access to the fields of a JSON object; ``where`` prefixes field names."""

    def __init__(self, values: dict, where: str = "") -> None:
        self.values = values
        self.where = where

    def field_name(self, name: str) -> str:
        """The field's name as a request writes it (``reasoning.effort``)."""
        return f"{self.where}.{name}" if self.where else name

    def _bad(self, name: str, message: str) -> ApiError:
        return ApiError(400, f"The field `{self.field_name(name)}` {message}",
                        param=self.field_name(name), code="invalid_value")

    def get(self, name: str) -> Any:
        return self.values.get(name)

    def number(self, name: str, default: Optional[float], low: float, high: float) -> Optional[float]:
        value = self.values.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value):
            raise self._bad(name, f"must be a number, not {_kind(value)}.")
        if not low <= value <= high:
            raise self._bad(name, f"is {value}; it must be from {low} to {high}.")
        return float(value)

    def integer(self, name: str, default: Optional[int], low: int, high: int) -> Optional[int]:
        value = self.values.get(name)
        if value is None:
            return default
        if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_INT:
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._bad(name, f"must be a whole number, not {_kind(value)}.")
        if not low <= value <= high:
            raise self._bad(name, f"is {value}; it must be a whole number from {low} to {high}.")
        return value

    def boolean(self, name: str, default: bool) -> bool:
        value = self.values.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._bad(name, f"must be true or false, not {_kind(value)}.")
        return value

    def string(self, name: str, default: Optional[str] = None) -> Optional[str]:
        value = self.values.get(name)
        if value is None:
            return default
        if not isinstance(value, str):
            raise self._bad(name, f"must be a string, not {_kind(value)}.")
        return value

    def obj(self, name: str) -> Optional["Fields"]:
        value = self.values.get(name)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise self._bad(name, f"must be an object, not {_kind(value)}.")
        return Fields(value, self.field_name(name))

    def strings(self, name: str, most: int) -> tuple[str, ...]:
        """A string or a list of strings (``stop``)."""
        value = self.values.get(name)
        if value is None:
            return ()
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._bad(name, "must be a string or a list of strings.")
        if len(value) > most:
            raise self._bad(name, f"has {len(value)} entries; at most {most} are allowed.")
        return tuple(v for v in value if v)

    def only_one(self, name: str) -> None:
        """``n``-like fields: several choices per request are not offered."""
        count = self.integer(name, 1, 1, MAX_INT)
        if count != 1:
            raise self._bad(name, f"is {count}, but this server makes one choice per request; "
                                  "send several requests (they are served in parallel).")

    def refuse(self, name: str, why: str, unless: Any = None) -> None:
        """Refuse a field this server does not offer, unless it holds its neutral value."""
        value = self.values.get(name)
        if value is not None and value != unless and value != [] and value != {}:
            raise self._bad(name, f"is not supported: {why}")


def build_options(**values: Any) -> Any:
    """The engine's ChatOptions from these fields."""
    from models.engine.options import ChatOptions

    return ChatOptions(**values)


def options_for_slot(values: dict) -> Any:
    """Engine options made once the slot's context is known: a missing ``max_tokens``
    becomes the rest of the slot's context (what :meth:`ServerCore.start` calls)."""
    def make(context_per_slot: int) -> Any:
        fields = dict(values)
        if fields.get("max_tokens") is None:
            fields["max_tokens"] = max(context_per_slot, 1)
        return build_options(**fields)
    return make


def structured_fields(kind: str, schema: Any = None, strict: bool = False) -> dict:
    """The ChatOptions fields for an output format: ``"text"``, ``"json"`` (any JSON
    object or value) or ``"json_schema"`` (``schema``, enforced by the grammar; with
    ``strict`` what it cannot enforce is refused when the reply is created, without it the
    reply is generated under what is enforceable and checked against the whole schema)."""
    if kind == "text":
        return {}
    if kind == "json":
        return {"response_format": "json"}
    if not isinstance(schema, (dict, bool)):
        raise ApiError(400, "The JSON schema must be a JSON object such as "
                            '{"type": "object", "properties": {...}}.', param="schema",
                       code="invalid_schema")
    return {"response_format": "json_schema", "schema": schema, "allow_unsupported": not strict}


MAX_EMBEDDING_INPUTS = 2048  # OpenAI's limit per request


def embedding_inputs(value: Any, field: str = "input") -> list:
    """``input`` as a list of texts or token-id lists: a string, a list of strings, one
    list of token ids, or a list of them."""
    if isinstance(value, str):
        value = [value]
    elif isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool)
                                                   for v in value):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ApiError(400, f"The field `{field}` must be a string, a list of strings, or "
                            "token ids (a list of integers, or a list of such lists).",
                       param=field, code="invalid_value")
    if len(value) > MAX_EMBEDDING_INPUTS:
        raise ApiError(400, f"The field `{field}` has {len(value)} inputs; at most "
                            f"{MAX_EMBEDDING_INPUTS} are embedded per request.", param=field,
                       code="invalid_value")
    for index, item in enumerate(value):
        text = isinstance(item, str) and item != ""
        tokens = isinstance(item, list) and item and all(
            isinstance(t, int) and not isinstance(t, bool) for t in item)
        if not (text or tokens):
            raise ApiError(400, f"Input {index + 1} of `{field}` is empty or not text or token "
                                "ids.", param=f"{field}[{index}]", code="invalid_value")
    return value
