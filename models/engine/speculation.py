"""Prompt-lookup drafts for each reply of the batching loop, as long as they pay.

Every generating reply may propose a *draft*: the tokens that followed the earlier
occurrence of its last few tokens that matches furthest back, in its prompt or its own
reply (:func:`~models.engine.prompt_lookup.find_match`; repeated when that occurrence is
in the reply's own recent text, :func:`repeat_continuation`). The batching loop puts the draft into
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

- :class:`StepCost`: a step's time, measured over the recent steps that read no prompt —
  a one-token micro-batch (llama.cpp's vector kernels) on its own, a size measured lately
  by its own time, any other as a fixed time plus a time per token (the matrix kernels),
  hopefully less at first so that a size that may pay is tried;
- each reply's record of how far its drafts ran, position by position, for drafts found
  by a long match (the reply is copying a passage) apart from the others
  (:class:`RunRecord`, :class:`LookupDrafter`), which says how many tokens a pass with a
  draft of each length yields (:meth:`RunRecord.yields`).

The plan takes the drafts that give most tokens per unit of the step's predicted time,
and none when nothing beats plain decoding (a free-form chat, a busy machine). A reply
whose drafts do not pay is not drafted at all: it still looks a draft up now and then
(after a rest that doubles, up to :data:`LONGEST_REST` steps) and *watches* it — compares
it with the tokens it then picks — so its record keeps being learnt at no cost to the
step, and a reply that starts copying later is noticed. A match needs at least
:data:`MIN_NGRAM` tokens: a few repeated tokens ("of the", a comma) predict what follows
too poorly.

Drafts never change the reply: a draft token counts only while the reply's own pick
equals it, so greedy replies are the tokens of plain decoding and sampled replies keep
their distribution (the sampler sees the same picks and random draws).
"""

from __future__ import annotations

import bisect
import os
from typing import Optional, Sequence

import numpy as np

from models.engine.prompt_lookup import find_match

# The shortest tail that is looked up (unless the request asks for shorter ones only).
# Looking up long tails first and no shorter than 4 tokens keeps the drafts that are
# likely right: returning 1,000–1,300-token files with a rename, SmolLM2's tokens, 97 %
# of the drafted tokens were right (79 % with tails of 3 and 2), in fewer passes, and in
# prose a quarter as many drafts were proposed (all mostly wrong).
MIN_NGRAM = 4
# A match of at least this many tokens (the reply's end found earlier) is a long one: the
# reply is copying that passage, and its drafts have an acceptance of their own.
LONG_MATCH = 32
# A new reply's acceptance of each kind of draft before it has drafted or watched one:
# middling for a short match, so that a reply drafts at once only where tokens are cheap
# and elsewhere watches first; high for a long one (a passage being copied), whose drafts
# were kept at 96-100 % — so a reply that copies drafts long from its first long match on.
FIRST_ACCEPTANCE = (0.5, 0.97)
# How much of a reply's record of how far its drafts ran each later draft leaves: the
# record spans about the last ten drafts of a kind. Position by position, so a run of short
# drafts kept whole adds up at their positions, and says little of positions past them.
FORGET = 0.9
# The cost of one more token in a step before any step was measured.
FIRST_EXTRA_COST = 0.1
# Per step that cannot measure a draft token's cost (a one-token step, or steps of one size
# with no one-token step to compare), the share of the way that cost goes back towards the
# first guess, so that drafting resumes now and then and is measured again: else one
# unlucky measurement of a slow step would stop a reply alone from ever drafting again.
RELAX = 0.02
# How many steps' worth the fitted line counts for against a size's own measured steps.
SIZE_PRIOR = 0.5
# How much cheaper than the line a micro-batch not measured lately is hoped to be, past
# the longest measured or at a power of two. CPU kernels are not a line (SmolLM2 Q4_1 at
# one thread: 17 tokens took 12.2 one-token steps, 32 took 22.7 and 33 took 26.4): priced
# hopefully, a size that may pay is tried once, and from then on its own time prices it
# (``_sizes``); one that does not is dropped after that one step, until its measurement
# has faded (:data:`RELAX`).
HOPE = 0.35
# A plan must promise this many times the tokens per unit of time of plain decoding.
MIN_GAIN = 1.05
# The longest rest (steps) between two looks of a reply whose drafts do not pay.
LONGEST_REST = 16
# The most tokens of one reply in a step (its chosen tokens and its draft): llama.cpp's CPU
# flash attention reads 64 or more queries of a sequence at once with a tiled kernel
# (GGML_FA_TILE_Q) that rounds differently from the one-query kernel plain decoding uses
# (logits up to 1.2 apart on SmolLM2): a greedy reply would then not be plain decoding's.
MOST_STEP_TOKENS = 63
# Draft lengths a plan tries (besides the offered drafts' own lengths): a draft of
# 2^k − 1 tokens after a reply's one chosen token makes a micro-batch of 2^k, the sizes
# matrix kernels are quickest at.
PLAN_LENGTHS = (1, 2, 3, 4, 6, 7, 8, 12, 15, 16, 24, 31, 32, 48, 62)
# How many drafts' worth of evidence a position's own record needs to count as much as
# the pooled record of the positions after the first.
POSITION_PRIOR = 2.0
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
    """Decode time against the step's micro-batches, fitted over recent steps.

    A micro-batch of one token takes llama.cpp's matrix-*vector* kernels; one of several
    tokens the matrix-*matrix* ones, which cost a fixed time plus a time per token. On a
    CPU the two differ: SmolLM2 at 1 thread took 1.9× a one-token step for two tokens but
    only 0.63× more for each further one (5.6× for 8, 20.7× for 32), so a line through
    the one-token steps would price long drafts as dear as the first extra token. So:

    - ``single``: the time of a one-token micro-batch, an exponentially weighted mean of
      the steps that were exactly that (a reply alone, plain);
    - ``fixed`` and ``per_token``: a least-squares line through the other micro-batches
      (a step's time less its one-token micro-batches' ``single``), over exponentially
      weighted sums (about the last ``1 / (1 - decay)`` steps count), so it follows a
      machine whose load changes.

    - a step of one micro-batch of a size seen before: its own measured time, mostly. The
      matrix kernels' cost is not a line at small sizes (F32 weights, one thread: 2 tokens
      1.49 one-token steps, 4: 2.29, 8: 3.33, 32: 9.51), and a line fitted where a reply
      copying drafts 64 tokens at a time prices a 3-token draft nearly twice what it costs.

    Costs are in units of ``single`` (:meth:`units`). Until the line can be fitted (steps
    of one shape only, as while nothing is drafted) it drifts towards the first guess —
    each further token :data:`FIRST_EXTRA_COST` of a one-token step — and the sizes'
    own times count for less and less, so drafting resumes now and then and is measured
    again.
    """

    def __init__(self, decay: float = 0.98) -> None:
        self.decay = decay
        self._sums = np.zeros(6)  # weight, Σuu, Σut, Σtt, Σuy, Σty (u micro-batches, t tokens)
        self._single = 0.0  # seconds of a one-token step, weighted mean (0: none yet)
        self._single_weight = 0.0
        self._seen: set[int] = set()  # the step sizes seen (the first of each is not counted)
        # Steps of one micro-batch, by size: [weight, mean time in one-token steps].
        self._sizes: dict[int, list[float]] = {}
        self._measured: list[int] = []  # its keys, sorted (looked up at every step's plan)
        pinned = os.environ.get(COST_ENV)
        self.pinned = pinned is not None
        self.extra = float(pinned) if self.pinned else FIRST_EXTRA_COST

    @property
    def extra(self) -> float:
        """The cost of each further token in a micro-batch, in one-token steps."""
        return self.per_token

    @extra.setter
    def extra(self, value: float) -> None:
        """Price each token after a micro-batch's first at ``value`` one-token steps (a
        micro-batch of one token costs one)."""
        self.per_token = min(max(value, 0.001), 0.99)
        self.fixed = 1.0 - self.per_token

    def add(self, sizes: Sequence[int], seconds: float) -> None:
        """Record a step (no prompt) of micro-batches of ``sizes`` tokens that took
        ``seconds``."""
        if self.pinned or not sizes:
            return
        total = sum(sizes)
        if total not in self._seen:  # a step of a new size also sets llama.cpp's graph up
            self._seen.add(total)
            return
        ones = sum(1 for size in sizes if size == 1)
        if ones == len(sizes):
            self._single_weight = self._single_weight * self.decay + 1.0
            self._single += (seconds / ones - self._single) / self._single_weight
            self._relax()
            return
        if len(sizes) == 1 and self._single > 0:
            entry = self._sizes.get(total)
            if entry is None:
                entry = self._sizes[total] = [0.0, 0.0]
                bisect.insort(self._measured, total)
            entry[0] = entry[0] * self.decay + 1.0
            entry[1] += (seconds / self._single - entry[1]) / entry[0]
        if self._single > 0:
            seconds -= ones * self._single
        u, t = len(sizes) - ones, total - ones
        self._sums *= self.decay
        self._sums += (1.0, u * u, u * t, t * t, u * seconds, t * seconds)
        weight, uu, ut, tt, uy, ty = self._sums
        det = uu * tt - ut * ut
        if weight >= 4 and det >= 0.02 * uu * tt:
            fixed, per_token = (uy * tt - ty * ut) / det, (uu * ty - ut * uy) / det
            unit = self._single or fixed + per_token  # no one-token step seen: the line's
            if unit > 0:
                self.fixed = max(fixed / unit, 0.001)
                self.per_token = min(max(per_token / unit, 0.001), 10.0)
                return
        # Micro-batches of one size only lately: the line through their mean time and a
        # one-token step's, when that is known; else the guess drifts back to the first.
        size = t / u
        if self._single > 0 and size > 1:
            self.per_token = min(max((uy / uu / self._single - 1.0) / (size - 1.0), 0.001),
                                 10.0)
            self.fixed = max(1.0 - self.per_token, 0.001)
        else:
            self._relax()

    def _relax(self) -> None:
        """Move the line a little towards the first guess: while nothing is drafted it
        cannot be measured, and an unlucky measurement must not stop drafting for good."""
        self.per_token = float(np.exp(np.log(self.per_token)
                                      + RELAX * np.log(FIRST_EXTRA_COST / self.per_token)))
        self.fixed += RELAX * (1.0 - FIRST_EXTRA_COST - self.fixed)
        for size, entry in list(self._sizes.items()):
            entry[0] *= 1.0 - RELAX
            if entry[0] < 0.01:  # forgotten: hoped for again
                del self._sizes[size]
                self._measured.remove(size)

    def units(self, sizes: Sequence[int]) -> float:
        """A step's predicted time in one-token steps."""
        return sum(self._micro_batch(size) for size in sizes)

    def _micro_batch(self, size: int) -> float:
        """A micro-batch's predicted time, in one-token steps:

        - a size measured lately: the line's, moved towards the size's own measured time
          as far as that has been measured (one step: two thirds of the way);
        - between two sizes measured lately: their times, interpolated;
        - past the longest measured: its time plus the line's per token;
        - nothing measured: the line's.

        Past the longest measured, and at a power of two (the matrix kernels work in
        tiles of such sizes), :data:`HOPE` less, so that a size that may pay is tried
        once (and then priced by what it cost).
        """
        if size == 1:
            return 1.0
        line = self.fixed + self.per_token * size
        entry = self._sizes.get(size)
        if entry is not None:
            weight, measured = entry
            return (weight * measured + SIZE_PRIOR * line) / (weight + SIZE_PRIOR)
        at = bisect.bisect(self._measured, size)
        if at == 0:
            return line
        below = self._measured[at - 1]
        low = self._micro_batch(below)
        if at < len(self._measured):
            above = self._measured[at]
            price = low + (self._micro_batch(above) - low) * (size - below) / (above - below)
            return price * (1.0 - HOPE) if size & (size - 1) == 0 else price
        return (low + self.per_token * (size - below)) * (1.0 - HOPE)


def _lengths(longest: int) -> list[int]:
    return [*(n for n in PLAN_LENGTHS if n < longest), longest]


def best_length(yields: np.ndarray, cost: StepCost) -> int:
    """The draft length of a reply alone with the most expected tokens per unit of time,
    among :data:`PLAN_LENGTHS` up to the table's longest (0: draft nothing, when no
    length beats plain decoding by :data:`MIN_GAIN`). ``yields[k]``: the tokens a pass
    gives with a draft of ``k`` (:meth:`RunRecord.yields`)."""
    best, best_gain = 0, MIN_GAIN
    for length in _lengths(len(yields) - 1):
        gain = yields[length] / cost.units([length + 1])
        if gain > best_gain:
            best, best_gain = length, gain
    return best


def plan_drafts(counts: Sequence[tuple[int, int]], offers: dict[int, np.ndarray],
                cost: StepCost, n_ubatch: int, equal: bool) -> dict[int, int]:
    """The draft length of each offering reply in a step, chosen together.

    ``counts``: (sequence id, chosen tokens) of each generating reply, in batch order;
    ``offers``: index in ``counts`` → the yield table of its draft (``[k]``: the tokens
    a pass gives with the first ``k`` of it; its length is the draft's). Tries the
    replies likeliest to be right first, all at one length (or their own, when shorter),
    and returns {index: length} of the plan with the most expected tokens per unit of
    time (:meth:`StepCost.units` of :func:`ubatch_sizes`), or {} when none beats plain
    decoding by :data:`MIN_GAIN`.
    """
    def value(lengths: dict[int, int]) -> float:
        shape = [(seq, count + lengths.get(i, 0)) for i, (seq, count) in enumerate(counts)]
        tokens = len(counts) + sum(offers[i][k] - 1 for i, k in lengths.items())
        return tokens / cost.units(ubatch_sizes(shape, n_ubatch, equal))

    best, best_value = {}, MIN_GAIN * value({})
    longest = {i: len(table) - 1 for i, table in offers.items()}
    lengths = sorted(set(longest.values()) | set(_lengths(max(longest.values()))))
    ranked = sorted(offers, key=lambda i: -offers[i][min(longest[i], 4)])
    for top in range(1, len(ranked) + 1):
        chosen = ranked[:top]
        for length in lengths:
            capped = {i: min(length, longest[i]) for i in chosen}
            only = {i: length for i in chosen if longest[i] >= length}
            for plan in (capped, only) if capped != only else (capped,):
                if plan:
                    v = value(plan)
                    if v > best_value:
                        best, best_value = plan, v
    return best


class RunRecord:
    """How far one kind of draft runs before the reply departs from it, position by
    position, over the recent drafts (those verified and those watched).

    A per-token acceptance misjudges copying: when a reply copies a passage, its drafts
    are cut at a few places (where the reply changes something, where a loop turns) and
    the draft after a cut starts from a short, shaky match; the tokens further into a
    draft that got going are kept at a far higher rate. Drafts of 3 tokens kept at 98 %
    promise 36 tokens from a draft of 63 at one rate (1 − 2 % a token), where drafts of
    48–64 tokens of the same replies (llama-server's) were kept at 96 %. So each position
    ``j`` has its own rate of cuts among the drafts that reached it (a Kaplan–Meier
    estimate); a position few drafts reached borrows the pooled rate of the positions after
    the first, and the prior is the kind's :data:`FIRST_ACCEPTANCE` worth two drafts.

    Args:
        longest: The longest draft of the kind.
        first: The kind's acceptance before any draft (:data:`FIRST_ACCEPTANCE`).
    """

    def __init__(self, longest: int, first: float) -> None:
        self.first = first
        self.reached = np.zeros(longest + 1)  # [j]: faded count of drafts compared at j
        self.cut = np.zeros(longest + 1)  # [j]: faded count of drafts cut at j
        self._yields: dict[int, np.ndarray] = {}  # by longest, until the next draft

    def add(self, drafted: int, kept: int, fade: float) -> None:
        """A draft of ``drafted`` tokens of which the first ``kept`` were kept; earlier
        drafts count ``fade`` as much as before."""
        self._yields.clear()
        self.reached *= fade
        self.cut *= fade
        self.reached[1:min(kept + 1, drafted) + 1] += 1.0
        if kept < drafted:
            self.cut[kept + 1] += 1.0

    def rate(self) -> float:
        """The pooled per-token acceptance: tokens kept over tokens compared."""
        reached, cut = self.reached.sum(), self.cut.sum()
        return (reached - cut + 2.0 * self.first) / (reached + 2.0)

    def yields(self, longest: int) -> np.ndarray:
        """``[k]``: the tokens a pass gives with a draft of ``k`` (0 … ``longest``): one
        chosen token plus the expected number of the draft's first ``k`` kept."""
        table = self._yields.get(longest)
        if table is None:
            table = self._yields[longest] = self._count_yields(longest)
        return table

    def _count_yields(self, longest: int) -> np.ndarray:
        prior = 1.0 - self.first
        later = (self.cut[2:].sum() + 2.0 * prior) / (self.reached[2:].sum() + 2.0)
        cuts = self.cut[1:longest + 1].copy()
        reached = self.reached[1:longest + 1].copy()
        cuts[0] += 2.0 * prior  # the first position: its own record and the prior
        reached[0] += 2.0
        cuts[1:] += POSITION_PRIOR * later  # the others: their own and the pooled later ones
        reached[1:] += POSITION_PRIOR
        survive = np.cumprod(1.0 - cuts / reached)
        return np.concatenate(([1.0], 1.0 + np.cumsum(survive)))


def repeat_continuation(continuation: np.ndarray, limit: int) -> list[int]:
    """The draft after a match whose continuation runs up to the history's end: its tokens,
    then — when the match is ``len(continuation)`` tokens back, so the text repeats with
    that period — the same tokens again, up to ``limit``. A reply going round a loop (a
    list, a table, a model repeating itself) drafts as far ahead as a fresh passage."""
    tokens = continuation[:limit].tolist()
    period = len(tokens)
    while 0 < period and len(tokens) < limit:
        tokens.extend(tokens[:min(period, limit - len(tokens))])
    return tokens


class LookupDrafter:
    """One reply's prompt-lookup drafts, and its acceptance.

    Drafts come in two kinds, each with an acceptance of its own: those found by a *long*
    match (the reply's last :data:`LONG_MATCH` tokens or more occur earlier: it is copying
    that passage) and the others (a few tokens in common). Replaying SmolLM2's replies to
    the edit benchmark's requests, drafts from long matches were kept at 96–100 % and the
    others at 70–90 %; where a draft token costs a third of a step or more, only the first
    pay for long drafts.

    Each kind's drafts have a :class:`RunRecord` of how far they ran. A draft whose
    kind's record could pay for it (:func:`best_length` at the step cost of a reply
    alone) is *offered* to the step's plan, with its yield table (:attr:`offered`);
    otherwise, and when the plan leaves it out, it is *watched*: compared with the tokens
    the reply then picks (:meth:`observe`), which teaches the record without verifying
    anything.

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
        # Per kind (0: short match, 1: long): how far its recent drafts ran.
        self._records = [RunRecord(max_length, first) for first in FIRST_ACCEPTANCE]
        self._kind = 0  # of the draft offered last
        self.offered = np.ones(1)  # the yield table of the draft offered last
        self._history = np.zeros(capacity + max_length + 2, dtype=np.intc)
        self._known = 0  # tokens of the slot already copied into the history
        self._rest = 0
        self._next_rest = 1
        self._watched: list[int] = []  # a draft being compared with the picks
        self._watched_kind = 0
        self._matched = 0  # its tokens picked so far
        self.drafted = 0
        self.accepted = 0

    def rate(self, kind: int) -> float:
        """The pooled per-token acceptance of a kind of draft (:meth:`RunRecord.rate`)."""
        return self._records[kind].rate()

    def propose(self, tokens: Sequence[int], pending: Sequence[int], room: int) -> list[int]:
        """The draft to offer after ``tokens`` (the slot's cache, which only grows while a
        reply runs) and ``pending`` (chosen, not yet evaluated), at most ``room`` tokens;
        [] when it would not pay (a draft found then is watched instead)."""
        pays = [best_length(record.yields(self.max_length), self.cost) > 0
                for record in self._records]
        if not any(pays) and (self._watched or self._rest > 0):
            self._rest -= not self._watched
            return []
        limit = min(self.max_length, room, self._history.shape[0] - len(tokens) - len(pending))
        if limit < 1:
            return []
        draft, kind = self._look(tokens, pending, limit)
        if draft and pays[kind]:
            self._kind, self.offered = kind, self._records[kind].yields(len(draft))
            self._next_rest = 1
            return draft
        if draft and not self._watched:
            self.watch(draft, kind)
            if not any(pays):  # nothing pays: the next look waits twice as long
                self._rest, self._next_rest = self._next_rest, min(LONGEST_REST,
                                                                   self._next_rest * 2)
        return []

    def _look(self, tokens: Sequence[int], pending: Sequence[int],
              limit: int) -> tuple[list[int], int]:
        end = len(tokens) + len(pending)
        history = self._history
        if self._known < len(tokens):
            history[self._known:len(tokens)] = tokens[self._known:]
            self._known = len(tokens)
        history[len(tokens):end] = pending
        begin, extent = find_match(history[:end], self.max_ngram, self.min_ngram, LONG_MATCH)
        if begin < 0:
            return [], 0
        return repeat_continuation(history[begin:end], limit), int(extent >= LONG_MATCH)

    def watch(self, draft: list[int], kind: Optional[int] = None) -> None:
        """Compare ``draft`` with the tokens picked next (unless one is being compared);
        ``kind``: of its match (by default that of the draft offered last)."""
        if draft and not self._watched:
            self._watched, self._matched = draft, 0
            self._watched_kind = self._kind if kind is None else kind

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
            self._learn(self._watched_kind, len(self._watched), self._matched)
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
        self._learn(self._kind, drafted, accepted)

    def _learn(self, kind: int, drafted: int, accepted: int) -> None:
        self._records[kind].add(drafted, accepted, FORGET)
