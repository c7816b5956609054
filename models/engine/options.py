"""Sampling options of one chat reply, the messages a chat is made of, and its stats.

Both are validated in the client, before anything reaches the engine process, so a bad
value is a :class:`~models.foundation.errors.QuantDeskError` sentence for the user rather than a
failure in llama.cpp's sampler.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Optional, Sequence

from models.foundation.errors import QuantDeskError

ROLES = ("system", "user", "assistant", "tool")
MAX_STOP_STRINGS = 16
SPECULATIVE_MODES = ("off", "prompt_lookup", "draft_model")
RESPONSE_FORMATS = ("text", "json", "json_schema", "grammar")
MAX_DRAFT_TOKENS = 64
MAX_NGRAM_SIZE = 8


@dataclass(frozen=True)
class ChatOptions:
    """How to sample one reply.

    Attributes:
        temperature: 0 picks the most likely token every time (greedy); higher is more
            varied. 0 … 5.
        top_p: Keep the smallest set of tokens whose probabilities add up to this. (0, 1].
        top_k: Keep only the k most likely tokens; 0 turns the filter off.
        min_p: Drop tokens less likely than this fraction of the most likely one. [0, 1).
        repeat_penalty: Divide the score of recently used tokens by this; 1 is off.
        repeat_last_n: How many recent tokens the repeat penalty looks at.
        seed: Random seed for reproducible replies; ``None`` for a new one each time.
        max_tokens: Most tokens in the reply.
        stop: Strings that end the reply when generated (not included in it).
        ignore_eos: Keep generating past the end-of-turn token (benchmarks only).
        speculative: ``"prompt_lookup"`` (the default) guesses the next tokens from
            earlier text of the conversation and checks them in the batch beside the
            other replies (``speculation.py``), faster when the reply copies and adaptive,
            so a reply that copies nothing hardly drafts; ``"draft_model"`` has the draft
            model loaded with the model guess them (``draft_model.py``; the request then
            has the engine to itself); ``"off"`` decodes one token per pass.
            Either way the reply is the same as without.
            (Token for token with flash attention on and quantized weights; llama.cpp's
            plain attention, and its matrix kernels for F32 weights, round a batch slightly
            differently from one token, which can flip a near-tie.)
        draft_tokens: The most tokens guessed at once, 1 … 64. Prompt lookup chooses each
            draft's length up to it from the reply's acceptance and the step's measured
            cost, so the default (64) lets a reply that copies draft long; a draft model
            guesses at most 16 (``draft_model.MOST_DRAFT_MODEL_TOKENS``).
        ngram_size: The longest run of recent tokens prompt lookup searches for. 1 … 8.
        response_format: ``"text"`` (free), ``"json"`` (any JSON value), ``"json_schema"``
            (JSON matching ``schema``) or ``"grammar"`` (a GBNF ``grammar``). Constrained
            replies are generated under an llguidance grammar (``models.structured``) and
            validated when they end; stop strings and repeat penalties do not apply.
        schema: The JSON Schema for ``json_schema``.
        grammar: The GBNF grammar text (rule ``root``) for ``grammar``.
        allow_unsupported: Generate even though the schema uses keywords the grammar
            cannot enforce (a request without ``strict``: they are checked when the reply
            ends, and ``ChatStats.not_enforced`` lists them); off (strict), such a schema
            is refused before generating, with the list of those keywords and pointers.
        fast_forward: Append the text the grammar forces (keys, punctuation, the rest of
            an enum value) without sampling it.
        presence_penalty: Subtract this from the score of every token already in the
            reply (OpenAI's meaning); -2 … 2, 0 is off.
        frequency_penalty: Subtract this times a token's count in the reply; -2 … 2.
        logprobs: ``None`` for none; k from 0 to 20 to report each picked token's
            log-probability and the k likeliest alternatives (plain text replies).
        thinking: A reasoning model thinks before answering (``True``) or answers at once
            (``False``), through its template's switch (``enable_thinking``); ``None`` is
            the template's default. Templates without a switch ignore it.
        tools: Function definitions (OpenAI's ``{"type": "function", "function": {...}}``)
            passed to a chat template that reads ``tools``, so the model sees them the way
            it was trained to; ``None`` for none. The API server decides the call format
            and the grammar (``models/server/tool_calls.py``).
    """

    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    seed: Optional[int] = None
    max_tokens: int = 1024
    stop: tuple[str, ...] = field(default_factory=tuple)
    ignore_eos: bool = False
    speculative: str = "prompt_lookup"
    draft_tokens: int = 64
    ngram_size: int = 8
    response_format: str = "text"
    schema: Optional[Any] = None
    grammar: str = ""
    allow_unsupported: bool = False
    fast_forward: bool = True
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logprobs: Optional[int] = None
    thinking: Optional[bool] = None
    tools: Optional[list] = None

    def to_dict(self) -> dict:
        """Plain values for the pipe to the engine."""
        values = asdict(self)
        values["stop"] = list(self.stop)
        return values

    @classmethod
    def from_dict(cls, values: dict) -> "ChatOptions":
        """The inverse of :meth:`to_dict`."""
        values = dict(values)
        values["stop"] = tuple(values.get("stop") or ())
        return cls(**values)


@dataclass
class ChatStats:
    """What one reply cost, as the engine measured it beside the work. Times in seconds, speeds in tokens per second."""

    prompt_tokens: int = 0
    prompt_tokens_evaluated: int = 0
    prompt_tokens_reused: int = 0
    completion_tokens: int = 0
    time_to_first_token: float = 0.0
    prefill_seconds: float = 0.0
    prefill_tokens_per_second: float = 0.0
    decode_seconds: float = 0.0
    decode_tokens_per_second: float = 0.0
    stop_reason: str = ""
    seed: int = 0
    session_restored: bool = False  # the KV cache came from the conversation's saved state
    session_notice: str = ""  # why a saved state could not be used ("" when nothing to say)
    draft_tokens: int = 0  # tokens proposed by speculative decoding
    accepted_tokens: int = 0  # of those, tokens the model confirmed (kept in the reply)
    acceptance_rate: float = 0.0  # accepted / drafted (0 when nothing was drafted)
    draft_seconds: float = 0.0  # time the draft model spent guessing (draft_model mode)
    # Forward passes of the model after the prompt: about one per reply token in plain
    # decoding, fewer when speculation or fast-forward settle several tokens per pass.
    decode_passes: int = 0
    forced_tokens: int = 0  # structured output: tokens appended by fast-forward, unsampled
    closed_at_budget: bool = False  # the grammar's shortest ending closed an unfinished reply
    valid: Optional[bool] = None  # structured output: the reply parsed and matched (None: text)
    validation_error: str = ""  # why it did not (a cancelled or cut-off reply, say)
    # Schema keywords the grammar did not enforce (a request without strict), each
    # {"pointer", "message"}; the reply was checked against them (valid says how it went).
    not_enforced: list = field(default_factory=list)
    # Of completion_tokens, those of the reasoning section (its <think> tags included), as
    # models.engine.reasoning.ReasoningSplitter counts them; 0 for a reply without one.
    reasoning_tokens: int = 0
    reasoning_seconds: float = 0.0  # from the first token to </think> (to the end, unclosed)
    # Images: those in the prompt, those encoded for this reply (the others' KV cells were
    # reused), their image tokens, and the vision encoder's time (within prefill_seconds).
    images: int = 0
    images_encoded: int = 0
    image_tokens: int = 0
    image_encode_seconds: float = 0.0

    @property
    def tokens_per_pass(self) -> float:
        """Reply tokens per forward pass: the per-reply speed-up of speculative decoding
        and fast-forward over plain decoding (about 1.0), in model work."""
        return self.completion_tokens / self.decode_passes if self.decode_passes else 0.0

    def to_dict(self) -> dict:
        """Plain values for the pipe."""
        return asdict(self)


def _number(name: str, value: Any, low: float, high: float, low_open: bool = False,
            high_open: bool = False, hint: str = "") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise QuantDeskError(f"The sampling option {name} must be a number, not {value!r}.", hint)
    too_low = value <= low if low_open else value < low
    too_high = value >= high if high_open else value > high
    if too_low or too_high:
        bounds = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        raise QuantDeskError(f"The sampling option {name} is {value}, outside {bounds}.", hint)
    return float(value)


def _integer(name: str, value: Any, low: int, high: int, hint: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise QuantDeskError(f"The sampling option {name} is {value!r}; it must be a whole "
                             f"number from {low} to {high}.", hint)
    return value


def validate_options(options: ChatOptions, context_length: Optional[int] = None) -> ChatOptions:
    """Check every option; return ``options`` unchanged when they are all valid.

    Args:
        options: The options to check.
        context_length: The loaded model's context, which bounds ``max_tokens``.

    Raises:
        QuantDeskError: An option is out of range, naming it and its valid range.
    """
    _number("temperature", options.temperature, 0.0, 5.0,
            hint="Use 0 for the most likely reply, about 0.7 for a varied one.")
    _number("top-p", options.top_p, 0.0, 1.0, low_open=True, hint="Use 0.95, or 1 to turn it off.")
    _integer("top-k", options.top_k, 0, 1 << 20, "Use 40, or 0 to turn it off.")
    _number("min-p", options.min_p, 0.0, 1.0, high_open=True, hint="Use 0.05, or 0 to turn it off.")
    _number("repeat penalty", options.repeat_penalty, 0.0, 10.0, low_open=True,
            hint="Use 1 (off) to 1.3.")
    _integer("repeat window", options.repeat_last_n, 0, 1 << 20, "Use 64.")
    _number("presence penalty", options.presence_penalty, -2.0, 2.0, hint="Use 0 (off).")
    _number("frequency penalty", options.frequency_penalty, -2.0, 2.0, hint="Use 0 (off).")
    if options.logprobs is not None:
        _integer("top logprobs", options.logprobs, 0, 20,
                 "Use a number of alternatives from 0 to 20.")
    if options.seed is not None:
        _integer("seed", options.seed, 0, 2**32 - 2, "Use a number from 0 to 4294967294, "
                 "or no seed for a new one each time.")
    limit = context_length or 1 << 24
    _integer("max tokens", options.max_tokens, 1, limit,
             f"Use a number of tokens from 1 to {limit} (the context length).")
    if not isinstance(options.stop, (tuple, list)) or len(options.stop) > MAX_STOP_STRINGS:
        raise QuantDeskError(f"Stop strings must be a list of at most {MAX_STOP_STRINGS} strings.",
                             "Remove some stop strings.")
    for stop in options.stop:
        if not isinstance(stop, str) or not stop:
            raise QuantDeskError(f"The stop string {stop!r} is empty or not text.",
                                 "Remove it or type the text that should end a reply.")
    if not isinstance(options.ignore_eos, bool):
        raise QuantDeskError("The option ignore_eos must be on or off.", "Choose on or off.")
    if options.speculative not in SPECULATIVE_MODES:
        raise QuantDeskError(f"The speculative decoding mode {options.speculative!r} is unknown.",
                             f"Choose one of: {', '.join(SPECULATIVE_MODES)}.")
    _integer("draft tokens", options.draft_tokens, 1, MAX_DRAFT_TOKENS,
             "Use 64 (prompt lookup chooses shorter drafts where they pay better).")
    _integer("n-gram size", options.ngram_size, 1, MAX_NGRAM_SIZE, "Use 8.")
    if options.thinking is not None and not isinstance(options.thinking, bool):
        raise QuantDeskError("The option thinking must be on, off or the model's default.",
                             "Choose on, off, or leave it unset.")
    output_constraint(options)
    return options


def output_constraint(options: ChatOptions):
    """The :class:`~models.structured.OutputConstraint` the options ask for, or ``None``.

    Built (and so checked) in the client before a request leaves, and again in the
    engine, which needs the grammar; both give the same result.

    Raises:
        QuantDeskError: An unknown format, a missing or malformed schema or grammar, a
            schema using features the grammar cannot enforce (each named, with where it
            is) unless ``allow_unsupported``, or a mode that cannot be combined with it.
    """
    if options.response_format not in RESPONSE_FORMATS:
        raise QuantDeskError(f"The response format {options.response_format!r} is unknown.",
                             f"Choose one of: {', '.join(RESPONSE_FORMATS)}.")
    if options.response_format == "text":
        return None
    # Imported here: models.structured imports this module for ChatOptions.
    from models.structured.constraint import (constraint_for_any_json, constraint_for_gbnf,
                                              constraint_for_schema)

    if options.speculative == "draft_model":
        raise QuantDeskError("A draft model cannot be combined with structured output.",
                             "Use prompt lookup (the default) or no speculative decoding for "
                             "JSON or grammar replies.")
    if options.response_format == "json":
        return constraint_for_any_json()
    if options.response_format == "json_schema":
        if options.schema is None:
            raise QuantDeskError("JSON schema mode needs a schema.",
                                 "Paste or open a JSON Schema, or choose plain JSON mode.")
        return constraint_for_schema(options.schema, options.allow_unsupported)
    if not isinstance(options.grammar, str) or not options.grammar.strip():
        raise QuantDeskError("Grammar mode needs a grammar.",
                             'Write a GBNF grammar with a root rule, e.g. root ::= "yes" | "no".')
    return constraint_for_gbnf(options.grammar)


def validate_messages(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """Check a conversation and return it as plain ``{"role", "content"}`` dicts.

    ``content`` is text, or a list of parts (``{"type": "text", "text"}`` and
    ``{"type": "image", "data": bytes}``, see :mod:`models.images`); a list without
    images becomes its text, and images are checked here (format, size).

    Raises:
        QuantDeskError: The conversation is empty, a message is malformed, or an image
            cannot be used.
    """
    from models.images import check_image, content_text

    if not isinstance(messages, (list, tuple)) or not messages:
        raise QuantDeskError("The conversation has no messages to reply to.",
                             "Type a message first.")
    clean = []
    for index, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        parts_ok = isinstance(content, (list, tuple)) and all(
            isinstance(p, dict) and ((p.get("type") == "text" and isinstance(p.get("text"), str))
                                     or (p.get("type") == "image" and isinstance(p.get("data"), (bytes, bytearray))))
            for p in content)
        if not isinstance(message, dict) or message.get("role") not in ROLES \
                or not (isinstance(content, str) or parts_ok):
            raise QuantDeskError(
                f"Message {index + 1} of the conversation is malformed: {message!r:.80}.",
                f"Each message needs a role ({', '.join(ROLES)}) and text content.",
            )
        if not isinstance(content, str):
            images = [p for p in content if p["type"] == "image"]
            for part in images:
                check_image(part["data"])
            content = [dict(p) for p in content] if images else content_text(content)
        clean.append({**message, "role": message["role"], "content": content})
    return clean
