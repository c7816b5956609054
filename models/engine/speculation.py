"""Prompt-lookup drafts for each reply of the batching loop, as long as they pay.

Every generating reply may propose a *draft*: the tokens that followed the most recent
earlier occurrence of its last few tokens, in its prompt or its own reply
(:func:`~models.engine.prompt_lookup.find_draft`). The batching loop puts the draft into
the step's one ``llama_decode`` after the reply's chosen token, with logits at every
position, beside the other replies' tokens; the reply's sampler then picks from those
rows in turn and keeps the draft while its picks equal it (``batching.py``).

A draft token is not free: the weights are read once per *micro-batch*, but each position
still costs its attention over the whole context and its share of arithmetic, and on a
CPU that other programs keep busy, arithmetic is what runs short. Worse, with several
slots (one KV stream per sequence) llama.cpp splits a batch into micro-batches that take
the same number of tokens from each sequence, of consecutive sequence ids
(:func:`ubatch_sizes`): a draft of one reply beside three replies' single tokens is a
second pass over the weights, and a step of slots 0, 2 and 3 is two. So the step's drafts
are chosen together (:func:`plan_drafts`) from:

- :class:`StepCost`: a step's time as a fixed time per micro-batch plus a time per token,
  fitted over the recent steps that read no prompt;
- each reply's acceptance: the share of its drafted tokens it kept, recently
  (:class:`LookupDrafter`).

With acceptance ``p`` a draft of ``k`` tokens yields ``(1 − p^(k+1)) / (1 − p)`` tokens
(:func:`expected_tokens`); the plan takes the drafts that give most tokens per unit of the
step's predicted time, and none when nothing beats plain decoding (a free-form chat, a busy
machine). A reply whose drafts do not pay is not drafted at all: it still looks a draft up
now and then (after a rest that doubles, up to :data:`LONGEST_REST` steps) and *watches*
it — compares it with the tokens it then picks — so its acceptance keeps being learnt at no
cost to the step, and a reply that starts copying later is noticed. A match needs at least
:data:`MIN_NGRAM` tokens: a few repeated tokens ("of the", a comma) predict what follows
too poorly.

Drafts never change the reply: a draft token counts only while the reply's own pick
equals it, so greedy replies are the tokens of plain decoding and sampled replies keep
their distribution (the sampler sees the same picks and random draws).
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from models.engine.prompt_lookup import find_draft

# The shortest tail that is looked up (unless the request asks for shorter ones only).
# Looking up long tails first and no shorter than 4 tokens keeps the drafts that are
# likely right: returning 1,000–1,300-token files with a rename, SmolLM2's tokens, 97 %
# of the drafted tokens were right (79 % with tails of 3 and 2), in fewer passes, and in
# prose a quarter as many drafts were proposed (all mostly wrong).
MIN_NGRAM = 4
# A new reply's acceptance before it has drafted or watched a draft: middling, so that a
# reply drafts at once only where tokens are cheap, and elsewhere watches first.
FIRST_ACCEPTANCE = 0.5
# How much of the acceptance estimate one draft's outcome replaces.
ACCEPTANCE_WEIGHT = 0.3
# The cost of one more token in a step before any step was measured.
FIRST_EXTRA_COST = 0.1
# Per step the fit cannot update (its recent steps all of one shape: nothing drafted), the
# share of the way its ratio goes back towards the first guess's, so that drafting resumes
# now and then and is measured again: else one unlucky measurement of a slow step would
# stop a reply alone from ever drafting again.
RELAX = 0.02
# A plan must promise this many times the tokens per unit of time of plain decoding.
MIN_GAIN = 1.05
# The longest rest (steps) between two looks of a reply whose drafts do not pay.
LONGEST_REST = 16
# Draft lengths a plan tries (besides the offered drafts' own lengths).
PLAN_LENGTHS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
# When set (a number), the cost of one more token in a step, instead of measuring it: the
# tests pin it so that what is drafted does not depend on how busy the machine is.
COST_ENV = "QUANTDESK_DRAFT_TOKEN_COST"


def ubatch_sizes(counts: Sequence[tuple[int, int]], n_ubatch: int, equal: bool) -> list[int]:
    """The tokens of each micro-batch llama.cpp splits a batch into.

    ``counts``: (sequence id, tokens) of each sequence, in batch order, each sequence once.
    With one KV stream (``equal`` False) the batch is cut every ``n_ubatch`` tokens. With a
    stream per sequence each micro-batch takes sequences of consecutive ids from the first
    one left, and the same number of tokens from each (as many as the shortest has left):
    llama.cpp's ``split_equal(sequential)``.
    """
    if not equal:
        total = sum(count for _, count in counts)
        return [min(n_ubatch, total - start) for start in range(0, total, n_ubatch)]
    left = [count for _, count in counts]
    sizes = []
    while True:
        chosen, last = [], None
        for i, (seq, _) in enumerate(counts):
            if left[i] and (last is None or seq == last + 1):
                chosen.append(i)
                last = seq
        if not chosen:
            return sizes
        take = min(min(left[i] for i in chosen), max(1, n_ubatch // len(chosen)))
        for i in chosen:
            left[i] -= take
        sizes.append(take * len(chosen))


class StepCost:
    """Decode time against its micro-batches, fitted over recent steps.

    ``time ≈ fixed × micro-batches + per_token × tokens``: a least-squares fit through
    exponentially weighted sums (the newest step weighs most; about the last
    ``1 / (1 - decay)`` steps count), so it follows a machine whose load changes.
    :attr:`ratio` is ``per_token / fixed``; :attr:`extra` the cost of one more token
    relative to a one-token step, ``per_token / (fixed + per_token)``.
    """

    def __init__(self, decay: float = 0.98) -> None:
        self.decay = decay
        self._sums = np.zeros(6)  # weight, Σuu, Σut, Σtt, Σuy, Σty (u micro-batches, t tokens)
        pinned = os.environ.get(COST_ENV)
        self.pinned = pinned is not None
        self.extra = float(pinned) if self.pinned else FIRST_EXTRA_COST

    @property
    def extra(self) -> float:
        return self.ratio / (1.0 + self.ratio)

    @extra.setter
    def extra(self, value: float) -> None:
        value = min(max(value, 0.0), 0.99)
        self.ratio = value / (1.0 - value)

    def add(self, sizes: Sequence[int], seconds: float) -> None:
        """Record a step (no prompt) of micro-batches of ``sizes`` tokens that took
        ``seconds``."""
        if self.pinned or not sizes:
            return
        u, t = len(sizes), sum(sizes)
        self._sums *= self.decay
        self._sums += (1.0, u * u, u * t, t * t, u * seconds, t * seconds)
        weight, uu, ut, tt, uy, ty = self._sums
        det = uu * tt - ut * ut
        if weight < 8 or det < 0.05 * uu * tt:  # too few steps of differing shapes lately
            first = FIRST_EXTRA_COST / (1.0 - FIRST_EXTRA_COST)
            self.ratio = float(np.exp(np.log(self.ratio) + RELAX * np.log(first / self.ratio)))
            return
        fixed = (uy * tt - ty * ut) / det
        per_token = (uu * ty - ut * uy) / det
        if per_token <= 0:
            self.ratio = 0.01
        elif fixed <= 0:
            self.ratio = 100.0
        else:
            self.ratio = float(min(max(per_token / fixed, 0.01), 100.0))

    def units(self, sizes: Sequence[int]) -> float:
        """A step's predicted time in fixed times of a micro-batch."""
        return len(sizes) + self.ratio * sum(sizes)


def expected_tokens(acceptance: float, length: int) -> float:
    """The tokens a pass gives with a draft of ``length``: 1 + p + p² + … + p^length."""
    if acceptance >= 1.0:
        return length + 1.0
    return (1.0 - acceptance ** (length + 1)) / (1.0 - acceptance)


def best_length(acceptance: float, extra: float, longest: int) -> int:
    """The draft length of a reply alone with the most expected tokens per unit of cost
    (0: draft nothing, when no length beats plain decoding by :data:`MIN_GAIN`)."""
    best, best_gain = 0, MIN_GAIN
    for length in range(1, longest + 1):
        gain = expected_tokens(acceptance, length) / (1.0 + extra * length)
        if gain > best_gain:
            best, best_gain = length, gain
    return best


def plan_drafts(counts: Sequence[tuple[int, int]], offers: dict[int, tuple[int, float]],
                cost: StepCost, n_ubatch: int, equal: bool) -> dict[int, int]:
    """The draft length of each offering reply in a step, chosen together.

    ``counts``: (sequence id, chosen tokens) of each generating reply, in batch order;
    ``offers``: index in ``counts`` → (longest draft it offers, its acceptance). Tries
    the replies likeliest to be right first, all at one length (or their own, when
    shorter), and returns {index: length} of the plan with the most expected tokens per
    unit of time (:meth:`StepCost.units` of :func:`ubatch_sizes`), or {} when none beats
    plain decoding by :data:`MIN_GAIN`.
    """
    def value(lengths: dict[int, int]) -> float:
        shape = [(seq, count + lengths.get(i, 0)) for i, (seq, count) in enumerate(counts)]
        tokens = len(counts) + sum(expected_tokens(offers[i][1], k) - 1
                                   for i, k in lengths.items())
        return tokens / cost.units(ubatch_sizes(shape, n_ubatch, equal))

    best, best_value = {}, MIN_GAIN * value({})
    longest = max(length for length, _ in offers.values())
    lengths = sorted({length for length, _ in offers.values()}
                     | {length for length in PLAN_LENGTHS if length < longest})
    ranked = sorted(offers, key=lambda i: -offers[i][1])
    for top in range(1, len(ranked) + 1):
        chosen = ranked[:top]
        for length in lengths:
            capped = {i: min(length, offers[i][0]) for i in chosen}
            only = {i: length for i in chosen if offers[i][0] >= length}
            for plan in (capped, only) if capped != only else (capped,):
                if plan:
                    v = value(plan)
                    if v > best_value:
                        best, best_value = plan, v
    return best


class LookupDrafter:
    """One reply's prompt-lookup drafts, and its acceptance.

    A reply whose acceptance could pay for a draft (:func:`best_length` at the step cost
    of a reply alone) *offers* its draft to the step's plan; otherwise, and when the plan
    leaves its draft out, the draft is *watched*: compared with the tokens the reply then
    picks (:meth:`observe`), which teaches the acceptance without verifying anything.

    Args:
        max_length: The most tokens one draft holds (the request's ``draft_tokens``).
        max_ngram: The longest tail looked up (the request's ``ngram_size``).
        capacity: The most tokens the reply's history can hold (the slot's context).
        cost: The engine's :class:`StepCost`.
    """

    def __init__(self, max_length: int, max_ngram: int, capacity: int, cost: StepCost) -> None:
        self.max_length = max_length
        self.max_ngram = max_ngram
        self.min_ngram = min(MIN_NGRAM, max_ngram)
        self.cost = cost
        self.acceptance = FIRST_ACCEPTANCE
        self._history = np.zeros(capacity + max_length + 2, dtype=np.intc)
        self._known = 0  # tokens of the slot already copied into the history
        self._rest = 0
        self._next_rest = 1
        self._watched: list[int] = []  # a draft being compared with the picks
        self._matched = 0  # its tokens picked so far
        self.drafted = 0
        self.accepted = 0

    def propose(self, tokens: Sequence[int], pending: Sequence[int], room: int) -> list[int]:
        """The draft to offer after ``tokens`` (the slot's cache, which only grows while a
        reply runs) and ``pending`` (chosen, not yet evaluated), at most ``room`` tokens;
        [] when the reply's drafts do not pay (a draft found then is watched instead)."""
        offering = best_length(self.acceptance, self.cost.extra, self.max_length) > 0
        if not offering:
            if self._watched or self._rest > 0:
                self._rest -= not self._watched
                return []
        limit = min(self.max_length, room, self._history.shape[0] - len(tokens) - len(pending))
        if limit < 1:
            return []
        draft = self._look(tokens, pending, limit)
        if offering:
            self._next_rest = 1
            return draft
        if draft:  # watched; the next look waits twice as long
            self.watch(draft)
            self._rest, self._next_rest = self._next_rest, min(LONGEST_REST, self._next_rest * 2)
        return []

    def _look(self, tokens: Sequence[int], pending: Sequence[int], limit: int) -> list[int]:
        end = len(tokens) + len(pending)
        history = self._history
        if self._known < len(tokens):
            history[self._known:len(tokens)] = tokens[self._known:]
            self._known = len(tokens)
        history[len(tokens):end] = pending
        return find_draft(history[:end], self.max_ngram, limit, self.min_ngram)

    def watch(self, draft: list[int]) -> None:
        """Compare ``draft`` with the tokens picked next (unless one is being compared)."""
        if draft and not self._watched:
            self._watched, self._matched = draft, 0

    def observe(self, tokens: Sequence[int]) -> None:
        """The reply picked ``tokens`` (no draft of its own in the step): settle the
        watched draft once they depart from it or it is used up (all of it right: the
        rest between looks starts again from one step)."""
        for token in tokens:
            if not self._watched:
                return
            if token == self._watched[self._matched]:
                self._matched += 1
                if self._matched < len(self._watched):
                    continue
            self._learn(len(self._watched), self._matched)
            if self._matched == len(self._watched):  # right to the end: look again at once
                self._rest, self._next_rest = 0, 1
            self._watched = []

    def update(self, drafted: int, accepted: int) -> None:
        """Learn from the last verified draft: ``accepted`` of its ``drafted`` tokens kept."""
        if drafted == 0:
            return
        self.drafted += drafted
        self.accepted += accepted
        self._watched = []  # the verified draft went past what was watched
        self._learn(drafted, accepted)

    def _learn(self, drafted: int, accepted: int) -> None:
        # The per-token rate p that best explains the run: a draft cut after i kept tokens
        # says i / (i + 1); one kept whole (k tokens) says at least that, (k + 1) / (k + 2).
        observed = accepted / (accepted + 1) if accepted < drafted else \
            (drafted + 1) / (drafted + 2)
        self.acceptance += ACCEPTANCE_WEIGHT * (observed - self.acceptance)
