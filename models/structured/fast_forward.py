"""Grammar-constrained decoding on a ``llama_cpp.Llama``, with guided fast-forward.

Sampling is constrained by llama.cpp's own grammar sampler (C++, masks the whole
vocabulary each step). Beside it runs our :class:`~models.structured.gbnf.GrammarMatcher`
over the text generated so far. Where the grammar allows exactly one continuation
(``","age":`` after a string value, the rest of an enum value, the closing ``}``), the
matcher yields it, it is tokenized, accepted by the llama.cpp grammar (so both stay in
step) and decoded *in one batch* together with the last sampled token: no sampling,
no vocabulary mask, one forward pass for many tokens.

Token boundaries: the tokenizer's split of a forced text may differ from the tokens the
model would pick one by one (``":"`` is one token in SmolLM2, but a forced ``":`` then
a sampled ``"`` is two). With ``hold_back_last=True`` (the default) the last token of a
forced run is left to the sampler, which, under the grammar, may pick it or a longer
token that also covers the next free characters; that keeps the greedy output equal to
plain constrained decoding more often (measured in tests/benchmarks/bench_structured.py;
see README.md).

When the matcher says the grammar is complete and nothing may follow, generation stops
without asking the model for an end-of-turn token. Near ``max_tokens`` the grammar's
shortest completion closes a reply the model has not finished (``closed_at_budget``).

llama.cpp aborts the process if its grammar is handed a token it rejects; the engine runs
this in its child process, and tests run it in a subprocess.
"""

from __future__ import annotations

import codecs
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Sequence

from app.core.jobs import CancelToken
from models.engine.options import ChatOptions
from models.structured.gbnf import GrammarMatcher, parse_gbnf
from models.structured.sampler import GrammarSampler

# How close to max_tokens (in tokens) the shortest completion starts being checked, and
# how many tokens to spare: one sampled token can open a structure whose shortest ending
# is longer, so closing starts a little early (and may overrun max_tokens by that much).
CLOSING_WINDOW = 64
CLOSING_MARGIN = 2


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
        closed_at_budget: The reply was completed with the grammar's shortest ending
            because ``max_tokens`` was nearly spent (the model had not finished).
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


class ConstrainedGenerator:
    """Generate text from a loaded ``llama_cpp.Llama`` under a GBNF grammar.

    Args:
        llm: The loaded model (its context is reused; a shared prompt prefix is kept).
        gbnf: Grammar text (rule ``root``); ``None`` generates unconstrained.
        options: The chat's sampling options (temperature 0 is greedy; the top-k/top-p/
            min-p filters, seed and max_tokens apply; repeat penalties and stop strings
            do not, as a grammar decides where the reply ends).
        fast_forward: Append forced continuations without sampling.
        hold_back_last: Leave the last token of each forced run to the sampler.
        close_at_budget: When the token budget is about to run out, append the shortest
            text that completes the grammar, so the reply still parses.
        check_first: Ask the grammar about the unconstrained choice before masking
            the whole vocabulary (see :mod:`models.structured.sampler`).
    """

    def __init__(self, llm, gbnf: Optional[str], options: ChatOptions,
                 fast_forward: bool = True, hold_back_last: bool = True,
                 check_first: bool = True, close_at_budget: bool = True) -> None:
        self.llm = llm
        self.gbnf = gbnf
        self.grammar = parse_gbnf(gbnf) if gbnf is not None else None  # sentences, not aborts
        self.options = options
        self.fast_forward = fast_forward and gbnf is not None
        self.hold_back_last = hold_back_last
        self.check_first = check_first
        self.close_at_budget = close_at_budget
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
        return ConstrainedSteps(self.llm, self.grammar, self.gbnf, self.options, max_tokens,
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

    def __init__(self, llm, grammar, gbnf: Optional[str], options: ChatOptions,
                 max_tokens: int, fast_forward: bool, hold_back_last: bool,
                 check_first: bool, close_at_budget: bool) -> None:
        o = options
        self.llm = llm
        self.max_tokens = max_tokens
        self.fast_forward = fast_forward
        self.hold_back_last = hold_back_last
        self.close_at_budget = close_at_budget
        self.stats = GenerationStats()
        self.matcher = GrammarMatcher(grammar) if grammar is not None else None
        self.pending: list[int] = []
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        seed = 0xFFFFFFFF if o.seed is None else o.seed  # LLAMA_DEFAULT_SEED: a random seed
        self._sampler = GrammarSampler(llm, gbnf, o.temperature, o.top_k, o.top_p, o.min_p,
                                       seed, check_first)
        self._started = time.perf_counter()

    def plan(self) -> str:
        """What the grammar decides before the next pick: the end of the reply, or forced
        text (appended to :attr:`pending`); returns that text.

        Nothing is forced while the last sampled token ended inside a UTF-8 character
        (byte-level vocabularies split CJK characters, emoji…): llama.cpp's grammar has
        taken those bytes, but our matcher sees text, so its forced continuation would
        repeat them, and llama.cpp aborts on a token its grammar rejects. The next pick,
        under llama.cpp's grammar, completes the character first.
        """
        stats, matcher, out = self.stats, self.matcher, []
        while not stats.stop_reason:
            inside_character = bool(self._utf8.getstate()[0])
            if matcher is not None and matcher.must_end:
                self._end("complete")
            elif stats.tokens >= self.max_tokens:
                self._end("max_tokens")
            elif inside_character:
                break
            elif closing := self._closing_tokens(self.max_tokens - stats.tokens):
                out.append(self._append_unsampled(*closing))
                stats.closed_at_budget = True
                self._end("complete")
            elif forced := (self._forced_tokens(self.max_tokens - stats.tokens)
                            if self.fast_forward else None):
                out.append(self._append_unsampled(*forced))
            else:
                break
        return "".join(out)

    def pick(self, index: int) -> str:
        """Sample the next token from row ``index`` of the last evaluation's logits under
        the grammar; returns its text (the end of generation ends the reply)."""
        token = self._sampler.sample(index)
        if self._sampler.is_end(token):
            self._end("eog")
            return ""
        self.stats.sampled_tokens += 1
        text = self._utf8.decode(self.llm.detokenize([token]))
        if self.matcher is not None:
            self.matcher.feed(text)
        self.pending.append(token)
        return text

    def _end(self, reason: str) -> None:
        self.stats.stop_reason = reason
        self.stats.seconds = time.perf_counter() - self._started
        self.stats.full_masks = self._sampler.full_masks if self._sampler else 0

    def close(self) -> None:
        """Free the native samplers."""
        if self._sampler is not None:
            if not self.stats.seconds:
                self.stats.seconds = time.perf_counter() - self._started
                self.stats.full_masks = self._sampler.full_masks
            self._sampler.close()
            self._sampler = None

    def _forced_tokens(self, budget: int):
        """The tokens of the forced continuation and their text (a prefix of it), or None."""
        forced = self.matcher.forced_text() if self.matcher is not None else None
        if not forced:
            return None
        tokens = self.llm.tokenize(forced.encode("utf-8"), add_bos=False, special=False)
        if self.hold_back_last:
            tokens = tokens[:-1]
        tokens = tokens[:budget]
        while tokens:
            try:
                text = self.llm.detokenize(tokens).decode("utf-8")
            except UnicodeDecodeError:
                text = None  # the last token ends inside a multi-byte character
            if text is not None and forced.startswith(text):
                return tokens, text
            tokens = tokens[:-1]
        return None

    def _closing_tokens(self, budget: int):
        """Near the end of the budget: the shortest completion's tokens, if it is due now.

        A reply cut at ``max_tokens`` is not JSON; a small model can loop in an unbounded
        array or recursion until it is. So once the shortest completion needs nearly all
        of the remaining tokens, it is appended instead, and the reply ends complete
        (``stats.closed_at_budget`` says so).
        """
        if self.matcher is None or not self.close_at_budget or budget > CLOSING_WINDOW:
            return None
        text = self.matcher.shortest_completion()
        if not text:
            return None
        tokens = self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        if len(tokens) + CLOSING_MARGIN < budget:
            return None
        if self.llm.detokenize(tokens).decode("utf-8", errors="replace") != text:
            return None
        return tokens, text

    def _append_unsampled(self, tokens: list[int], text: str) -> str:
        """Append tokens chosen by the grammar: both grammars accept them, decode later."""
        for token in tokens:
            self._sampler.accept(token)
        self.matcher.feed(text)
        self.pending += tokens
        self.stats.forced_tokens += len(tokens)
        return text
