"""Prompt-lookup drafts for each reply of the batching loop, as long as they pay.

Every generating reply may propose a *draft*: the tokens that followed the most recent
earlier occurrence of its last few tokens, in its prompt or its own reply
(:func:`~models.engine.prompt_lookup.find_draft`). The batching loop puts the draft into
the step's one ``llama_decode`` after the reply's chosen token, with logits at every
position, beside the other replies' tokens; the reply's sampler then picks from those
rows in turn and keeps the draft while its picks equal it (``batching.py``).

A draft token is not free: the weights are read once for the whole batch, but each
position still costs its attention over the whole context and its share of arithmetic,
and on a CPU that other programs keep busy, arithmetic is what runs short. So the length
of each draft is chosen from two measured numbers:

- :class:`StepCost`: how a decode step's time grows with its tokens, fitted over the
  recent steps that read no prompt (``time ≈ base + per_token × tokens``); ``extra`` is
  the cost of one more token relative to a one-token step — about 0.05 for a small model
  on an idle CPU at a short context, near 1 on a starved one at a long context;
- each reply's acceptance: the share of its drafted tokens it kept, recently
  (:class:`LookupDrafter`).

With acceptance ``p`` a draft of ``k`` tokens yields ``(1 − p^(k+1)) / (1 − p)`` tokens
for ``1 + extra × k`` the cost of a plain step; the drafter takes the ``k`` that gives
most, and drafts nothing when no length beats plain decoding (a free-form chat, a busy
machine). A reply that is not drafting still looks now and then, after a rest that
doubles each time (up to :data:`LONGEST_REST` steps), with a short draft, so a reply that
starts copying later is noticed. A match needs at least :data:`MIN_NGRAM` tokens: a single
repeated token ("the", a comma) predicts what follows too poorly.

Drafts never change the reply: a draft token counts only while the reply's own pick
equals it, so greedy replies are the tokens of plain decoding and sampled replies keep
their distribution (the sampler sees the same picks and random draws).
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from models.engine.prompt_lookup import find_draft

# The shortest tail that is looked up.
MIN_NGRAM = 2
# A new reply's acceptance before it has drafted (optimistic, so that it tries).
FIRST_ACCEPTANCE = 0.7
# How much of the acceptance estimate one draft's outcome replaces.
ACCEPTANCE_WEIGHT = 0.3
# The cost of one more token in a step before any step was measured.
FIRST_EXTRA_COST = 0.1
# A draft must promise this many times the tokens per unit of cost of plain decoding.
MIN_GAIN = 1.05
# The longest rest (steps) of a reply whose drafts do not pay, between two looks.
LONGEST_REST = 64
# The length of a look after a rest.
PROBE_LENGTH = 2
# When set (a number), the cost of one more token in a step, instead of measuring it: the
# tests pin it so that what is drafted does not depend on how busy the machine is.
COST_ENV = "QUANTDESK_DRAFT_TOKEN_COST"


class StepCost:
    """Decode-step time against its token count, fitted over recent steps.

    A least-squares line through exponentially weighted sums (the newest step weighs most;
    about the last ``1 / (1 - decay)`` steps count), so it follows a machine whose load
    changes.
    """

    def __init__(self, decay: float = 0.98) -> None:
        self.decay = decay
        self._sums = np.zeros(5)  # weight, Σx, Σy, Σxx, Σxy
        pinned = os.environ.get(COST_ENV)
        self.pinned = pinned is not None
        self.extra = float(pinned) if self.pinned else FIRST_EXTRA_COST

    def add(self, tokens: int, seconds: float) -> None:
        """Record a step of ``tokens`` tokens (no prompt) that took ``seconds``."""
        if self.pinned:
            return
        self._sums *= self.decay
        self._sums += (1.0, tokens, seconds, tokens * tokens, tokens * seconds)
        weight, sx, sy, sxx, sxy = self._sums
        spread = sxx - sx * sx / weight
        if weight < 8 or spread < 0.5 * weight:  # too few steps of differing sizes yet
            return
        slope = (sxy - sx * sy / weight) / spread
        one = (sy + slope * (weight - sx)) / weight  # the fitted time of a one-token step
        if one > 0:
            self.extra = float(min(max(slope / one, 0.01), 2.0))


def best_length(acceptance: float, extra: float, longest: int) -> int:
    """The draft length with the most expected tokens per unit of cost (0: draft nothing,
    when no length beats plain decoding by :data:`MIN_GAIN`)."""
    best, best_gain = 0, MIN_GAIN
    tokens = 1.0  # expected tokens of a pass: 1 + p + p² + … + p^k
    term = 1.0
    for length in range(1, longest + 1):
        term *= acceptance
        tokens += term
        gain = tokens / (1.0 + extra * length)
        if gain > best_gain:
            best, best_gain = length, gain
    return best


class LookupDrafter:
    """One reply's prompt-lookup drafts, their length chosen by :func:`best_length`.

    Args:
        max_length: The most tokens one draft holds (the request's ``draft_tokens``).
        max_ngram: The longest tail looked up (the request's ``ngram_size``).
        capacity: The most tokens the reply's history can hold (the slot's context).
        cost: The engine's :class:`StepCost`.
    """

    def __init__(self, max_length: int, max_ngram: int, capacity: int, cost: StepCost) -> None:
        self.max_length = max_length
        self.max_ngram = max(max_ngram, MIN_NGRAM)
        self.cost = cost
        self.acceptance = FIRST_ACCEPTANCE
        self._history = np.zeros(capacity + max_length + 2, dtype=np.intc)
        self._known = 0  # tokens of the slot already copied into the history
        self._rest = 0
        self._next_rest = 1
        self.drafted = 0
        self.accepted = 0

    def propose(self, tokens: Sequence[int], pending: Sequence[int], room: int) -> list[int]:
        """The draft to verify after ``tokens`` (the slot's cache, which only grows while a
        reply runs) and ``pending`` (chosen, not yet evaluated); at most ``room`` tokens."""
        end = len(tokens) + len(pending)
        length = best_length(self.acceptance, self.cost.extra, self.max_length)
        probing = length == 0
        if probing:  # drafts do not pay: a short look now and then
            if self._rest > 0:
                self._rest -= 1
                return []
            length = PROBE_LENGTH
        limit = min(length, room, self._history.shape[0] - end)
        if limit < 1:
            return []
        history = self._history
        if self._known < len(tokens):
            history[self._known:len(tokens)] = tokens[self._known:]
            self._known = len(tokens)
        history[len(tokens):end] = pending
        draft = find_draft(history[:end], self.max_ngram, limit, MIN_NGRAM)
        if probing and draft:  # the next look waits twice as long
            self._rest, self._next_rest = self._next_rest, min(LONGEST_REST, self._next_rest * 2)
        elif not probing:
            self._next_rest = 1
        return draft

    def update(self, drafted: int, accepted: int) -> None:
        """Learn from the last draft: ``accepted`` of its ``drafted`` tokens kept."""
        if drafted == 0:
            return
        self.drafted += drafted
        self.accepted += accepted
        # The per-token rate p that best explains the run: a draft cut after i kept tokens
        # says i / (i + 1); one kept whole (k tokens) says at least that, (k + 1) / (k + 2).
        observed = accepted / (accepted + 1) if accepted < drafted else \
            (drafted + 1) / (drafted + 2)
        self.acceptance += ACCEPTANCE_WEIGHT * (observed - self.acceptance)
