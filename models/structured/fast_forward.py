"""Grammar-constrained decoding on a ``llama_cpp.Llama``, with guided fast-forward.

Sampling is constrained by llguidance (:mod:`.sampler`: check-first, a whole-vocabulary
mask only when the plain choice is refused). Where the grammar allows exactly one
continuation (``","age":`` after a string value, the rest of an enum value, the closing
``}``), llguidance says which tokens it is (``compute_ff_tokens``, canonically tokenized
and never splitting a token the model could still extend); they are consumed by the
matcher and decoded *in one batch* together with the last sampled token: no sampling, no
vocabulary mask, one forward pass for many tokens.

Token boundaries: the canonical split of a forced text may differ from the tokens the
model would pick one by one. With ``hold_back_last=True`` (the default) the last token of
a forced run is left to the sampler (llguidance's ``compute_ff_tokens`` leaves out a last
token the model could extend: ``":"`` before a string's first letters), which, under the
grammar, may pick it or a longer token that also covers the next free characters; that
keeps the greedy output equal to plain constrained decoding more often. ``False`` forces
the canonical tokens of the whole forced text (measured in
tests/benchmarks/bench_structured.py; see README.md).

When the grammar is complete and nothing may follow, generation stops without asking the
model for an end-of-turn token. Near ``max_tokens`` a JSON reply the model has not
finished is closed (``closed_at_budget``): the grammar's mask narrowed to the tokens that
end strings, objects and arrays or write the shortest values.
"""

from __future__ import annotations

import codecs
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

import numpy as np

from models.engine.options import ChatOptions
from models.foundation.jobs import CancelToken
from models.structured.sampler import GrammarSampler

# Closing a reply at its budget starts when the tokens left are no more than three per
# open object or array (a required key may still be missing: its key, a value, the
# closer), one for an open string, plus this margin (a tool call's closing tag, a key
# still to come).
CLOSING_MARGIN = 10
# What closes a JSON reply soonest, best first: end the string / object / array (several
# at once first), the shortest values, then a comma (a required key may still be missing).
CLOSERS = ('"}]}', '"]}', '"}}', '"}]', '"}', '"]', "}]}", "]}", "}}", "}]", '"', "}", "]",
           "0", "1", "null", "true", "false", '""', "[]", "{}", '",', ",", "a")
# Inside a string, after what ends it: what ends a date-time or time (a zone), then a
# plain letter or digit (a string that must be longer, or match a pattern).
STRING_CLOSERS = ("Z", "a", "0")


@dataclass
class GenerationStats:
    """What one generation did.

    Attributes:
        sampled_tokens: Tokens chosen by the sampler.
        forced_tokens: Tokens appended by fast-forward without sampling.
        stop_reason: ``complete`` (grammar finished), ``eog`` (model ended),
            ``max_tokens`` or ``cancelled``.
        seconds: Wall time after the prompt was decoded.
        full_masks: Sampled tokens for which the whole vocabulary was masked by the
            grammar (the unconstrained choice was not allowed, or check-first is off).
        closed_at_budget: The reply was steered to its shortest ending because
            ``max_tokens`` was nearly spent (the model had not finished).
        passes: Forward passes of the model after the prompt (a forced run and the
            sampled token before it are evaluated in one).
    """

    sampled_tokens: int = 0
    forced_tokens: int = 0
    stop_reason: str = ""
    seconds: float = 0.0
    full_masks: int = 0
    closed_at_budget: bool = False
    passes: int = 0

    @property
    def tokens(self) -> int:
        return self.sampled_tokens + self.forced_tokens

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


class JsonNesting:
    """How many strings, objects and arrays are open in a JSON text read piece by piece."""

    def __init__(self) -> None:
        self.open = 0
        self.in_string = False
        self._escaped = False

    def feed(self, text: str) -> None:
        for c in text:
            if self.in_string:
                if self._escaped:
                    self._escaped = False
                elif c == "\\":
                    self._escaped = True
                elif c == '"':
                    self.in_string = False
            elif c == '"':
                self.in_string = True
            elif c in "{[":
                self.open += 1
            elif c in "}]":
                self.open -= 1

    @property
    def closing_tokens(self) -> int:
        """About how many tokens the shortest ending needs."""
        return 3 * self.open + self.in_string


class ConstrainedGenerator:
    """Generate text from a loaded ``llama_cpp.Llama`` under an llguidance grammar.

    Args:
        llm: The loaded model (its context is reused; a shared prompt prefix is kept).
        grammar: An llguidance grammar (:mod:`.guidance`); ``None`` generates unconstrained.
        options: The chat's sampling options (temperature 0 is greedy; the top-k/top-p/
            min-p filters, seed and max_tokens apply; repeat penalties and stop strings
            do not, as a grammar decides where the reply ends).
        fast_forward: Append forced continuations without sampling.
        hold_back_last: Leave the last token of each forced run to the sampler.
        check_first: Ask the grammar about the unconstrained choice before masking
            the whole vocabulary (see :mod:`models.structured.sampler`).
        close_at_budget: When the token budget is about to run out, steer the reply to its
            shortest ending (JSON's closers, the grammar's end), so it still parses; tool
            calls and GBNF grammars that hold JSON close the same way.
    """

    def __init__(self, llm, grammar: Optional[str], options: ChatOptions,
                 fast_forward: bool = True, hold_back_last: bool = True,
                 check_first: bool = True, close_at_budget: bool = True) -> None:
        self.llm = llm
        self.grammar = grammar
        self.options = options
        self.fast_forward = fast_forward and grammar is not None
        self.hold_back_last = hold_back_last
        self.check_first = check_first
        self.close_at_budget = close_at_budget and grammar is not None
        self.stats = GenerationStats()

    def _decode_prompt(self, prompt: Sequence[int]) -> None:
        """Evaluate the prompt, keeping the longest prefix already in the context."""
        llm, keep = self.llm, 0
        cached = llm.input_ids[:llm.n_tokens]
        while keep < min(len(cached), len(prompt) - 1) and cached[keep] == prompt[keep]:
            keep += 1
        llm.n_tokens = keep
        llm.eval(list(prompt[keep:]))

    def stream(self, prompt: Sequence[int], max_tokens: Optional[int] = None,
               cancel: Optional[CancelToken] = None) -> Iterator[str]:
        """Yield the reply's text piece by piece; :attr:`stats` says how it went.

        Args:
            prompt: Prompt tokens (already templated and tokenized by the caller).
            max_tokens: Most tokens in the reply, sampled and forced together; ``None``
                takes ``options.max_tokens``.
            cancel: Stops generation at the next token when cancelled.
        """
        self._decode_prompt(prompt)
        yield from self.stream_after_prompt(
            max_tokens, (lambda: cancel.cancelled) if cancel is not None else None)

    def stream_after_prompt(self, max_tokens: Optional[int] = None,
                            cancelled: Optional[Callable[[], bool]] = None) -> Iterator[str]:
        """Like :meth:`stream`, for a prompt the caller has already evaluated.

        The engine evaluates prompts itself (reusing its cache and saved sessions), then
        hands over here: the logits of the prompt's last token must be the context's last.
        ``cancelled`` is polled between tokens; when it is set, a decode llama.cpp aborts
        (the engine's abort callback) ends the reply as ``cancelled`` instead of raising.
        """
        llm = self.llm
        cancelled = cancelled or (lambda: False)
        steps = self.steps(self.options.max_tokens if max_tokens is None else max_tokens)
        self.stats = stats = steps.stats
        try:
            while True:
                if cancelled():
                    stats.stop_reason = "cancelled"
                    break
                text = steps.plan()
                if text:
                    yield text
                if stats.stop_reason:
                    break
                if steps.pending:
                    stats.passes += 1
                    try:
                        llm.eval(steps.pending)
                    except RuntimeError:
                        if not cancelled():
                            raise
                        stats.stop_reason = "cancelled"  # llama.cpp dropped the batch
                        break
                    steps.pending = []
                text = steps.pick(-1)
                if stats.stop_reason:
                    break
                if text:
                    yield text
        finally:
            steps.close()

    def steps(self, max_tokens: int) -> "ConstrainedSteps":
        """This generator's loop as steps, for a caller that evaluates the tokens itself
        (the engine's batching loop, which decodes several replies in one batch)."""
        return ConstrainedSteps(self.llm, self.grammar, self.options, max_tokens,
                                self.fast_forward, self.hold_back_last, self.check_first,
                                self.close_at_budget)

    def generate(self, prompt: Sequence[int], max_tokens: Optional[int] = None,
                 cancel: Optional[CancelToken] = None) -> str:
        """The whole reply as one string (see :meth:`stream`)."""
        return "".join(self.stream(prompt, max_tokens, cancel))


class ConstrainedSteps:
    """Constrained decoding one model evaluation at a time.

    The caller owns the decoding: it evaluates :attr:`pending` (the tokens chosen and not
    yet in the KV cache: the last sampled token and any forced run after it, as one batch
    whose last token has logits), then calls :meth:`pick` with the row of those logits,
    then :meth:`plan`, and again. Before the first pick (right after the prompt), call
    :meth:`plan` once: a grammar may force the reply's first tokens. ``stats.stop_reason``
    is set when the reply has ended. :class:`ConstrainedGenerator` drives it with
    ``Llama.eval``; the engine's batching loop drives one per constrained reply.
    """

    def __init__(self, llm, grammar: Optional[str], options: ChatOptions, max_tokens: int,
                 fast_forward: bool, hold_back_last: bool, check_first: bool,
                 close_at_budget: bool) -> None:
        o = options
        self.llm = llm
        self.max_tokens = max_tokens
        self.fast_forward = fast_forward
        self.hold_back_last = hold_back_last
        self.stats = GenerationStats()
        self.pending: list[int] = []
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._nesting = JsonNesting() if close_at_budget else None
        seed = 0xFFFFFFFF if o.seed is None else o.seed  # LLAMA_DEFAULT_SEED: a random seed
        self._sampler = GrammarSampler(llm, grammar, o.temperature, o.top_k, o.top_p, o.min_p,
                                       seed, check_first)
        self._closers: Optional[dict[bool, list[int]]] = None
        self._accepting_at = 0  # reply tokens when the grammar last could end
        self._started = time.perf_counter()

    def plan(self) -> str:
        """What the grammar decides before the next pick: the end of the reply, or forced
        tokens (appended to :attr:`pending`); returns their text."""
        stats = self.stats
        if self._sampler.must_end:
            self._end("complete")
        elif self._no_room_for_more():
            stats.closed_at_budget = True
            self._end("complete")
        elif stats.tokens >= self.max_tokens:
            self._end("max_tokens")
        elif self.fast_forward and (ending := self._end_after_forced()):
            self._sampler.accept(ending)
            self.pending += ending
            stats.forced_tokens += len(ending)
            stats.closed_at_budget = True
            self._end("complete")
            return self._text(ending)
        elif self.fast_forward:
            tokens = self._sampler.forced_tokens(whole=not self.hold_back_last)
            tokens = tokens[:self.max_tokens - stats.tokens]
            if tokens:
                self._sampler.accept(tokens)
                self.pending += tokens
                stats.forced_tokens += len(tokens)
                text = self._text(tokens)
                if self._sampler.must_end:
                    self._end("complete")
                elif stats.tokens >= self.max_tokens:
                    self._end("max_tokens")
                return text
        return ""

    def pick(self, index: int) -> str:
        """Sample the next token from row ``index`` of the last evaluation's logits under
        the grammar; returns its text (the end of generation ends the reply)."""
        token = self._sampler.sample(index, self._closing_mask())
        if self._sampler.is_end(token):
            self._end("eog")
            return ""
        self.stats.sampled_tokens += 1
        self.pending.append(token)
        return self._text([token])

    def valid_prefix(self, tokens: list[int]) -> int:
        """How many of ``tokens``, from the first, the grammar allows next in its current
        state (checked, not consumed): a draft is cut there."""
        matcher = self._sampler.matcher
        return len(tokens) if matcher is None else matcher.validate_tokens(tokens)

    def _text(self, tokens: list[int]) -> str:
        text = self._utf8.decode(self.llm.detokenize(tokens))
        if self._nesting is not None:
            self._nesting.feed(text)
        return text

    def _no_room_for_more(self) -> bool:
        """The reply could end here, and another part like the last one (a tool call, an
        item of a top-level list) would not fit in the tokens left: end it now rather
        than be cut inside that part."""
        if self._nesting is None or not self._sampler.accepting:
            return False
        part = self.stats.tokens - self._accepting_at
        self._accepting_at = self.stats.tokens
        return self.max_tokens - self.stats.tokens < part

    def _end_after_forced(self) -> Optional[list[int]]:
        """The whole forced text's tokens when they complete the reply and another part
        would not fit after them (``compute_ff_tokens`` holds back a last token such as the
        ``>`` of ``</tool_call>``, which the model could extend into the next call)."""
        if self._nesting is None:
            return None
        tokens = self._sampler.forced_tokens(whole=True)
        left = self.max_tokens - self.stats.tokens - len(tokens)
        if not tokens or left < 0 or left >= self.stats.tokens + len(tokens) - self._accepting_at:
            return None
        trial = self._sampler.matcher.deep_copy()
        return tokens if trial.consume_tokens(tokens) and trial.is_accepting() else None

    def _closing_mask(self) -> Optional[np.ndarray]:
        """Near the end of the budget: the grammar's mask narrowed to the first closer it
        allows (``None`` otherwise: the sampler's usual way)."""
        nesting = self._nesting
        left = self.max_tokens - self.stats.tokens
        if nesting is None or left > nesting.closing_tokens + CLOSING_MARGIN:
            return None
        self.stats.closed_at_budget = True
        if self._closers is None:  # the end of the reply first, when the grammar allows it
            import llama_cpp

            vocab = self._sampler.vocab
            ends = [t for t in (llama_cpp.llama_vocab_eot(vocab), llama_cpp.llama_vocab_eos(vocab))
                    if t >= 0]
            single = {c: ids[0] for c in CLOSERS
                      for ids in [self.llm.tokenize(c.encode(), add_bos=False, special=False)]
                      if len(ids) == 1}
            # Inside a string only what ends it helps; outside, what starts one does not.
            self._closers = {
                True: ends + [t for c, t in single.items() if c.startswith('"') and c != '""']
                + [self.llm.tokenize(c.encode(), add_bos=False, special=False)[0]
                   for c in STRING_CLOSERS],
                False: ends + [t for c, t in single.items() if not c.startswith('"') or c == '""']}
        allowed = self._sampler.allowed_mask()
        for token in self._closers[nesting.in_string]:
            if allowed[token]:
                only = np.zeros_like(allowed)
                only[token] = True
                return only
        return allowed

    def _end(self, reason: str) -> None:
        self.stats.stop_reason = reason
        self.stats.seconds = time.perf_counter() - self._started
        self.stats.full_masks = self._sampler.full_masks if self._sampler else 0
        if reason == "max_tokens":
            self.stats.closed_at_budget = False

    def close(self) -> None:
        """Free the native sampler chain."""
        if self._sampler is not None:
            if not self.stats.seconds:
                self.stats.seconds = time.perf_counter() - self._started
                self.stats.full_masks = self._sampler.full_masks
            self._sampler.close()
            self._sampler = None
