"""Prompt-lookup drafts for each reply of the batching loop, sized by how well they do.

Every generating reply may propose a *draft*: the tokens that followed the most recent
earlier occurrence of its last few tokens, in its prompt or its own reply
(:func:`~models.engine.prompt_lookup.find_draft`). The batching loop puts the draft into
the step's one ``llama_decode`` after the reply's chosen token, with logits at every
position, beside the other replies' tokens; the reply's sampler then picks from those
rows in turn and keeps the draft while its picks equal it (``batching.py``). A wrong
draft costs only the extra positions of that step, but on a CPU they are not free, so
each reply's :class:`LookupDrafter` adapts:

- the draft length doubles after a draft kept whole and shrinks to what was kept plus
  one after a partial one (a reply that copies long passages drafts long runs; one that
  copies a word here and there drafts a token or two);
- a reply whose drafts keep failing (:data:`MISSES_BEFORE_REST` in a row with nothing
  kept) sits out for some steps, twice as many each time it fails again (up to
  :data:`LONGEST_REST`), so a free-form chat drafts rarely and costs about nothing;
- a match needs at least :data:`MIN_NGRAM` tokens: a single repeated token ("the", a
  comma) predicts what follows too poorly to pay for its verification.

Drafts never change the reply: a draft token counts only while the reply's own pick
equals it, so greedy replies are the tokens of plain decoding and sampled replies keep
their distribution (the sampler sees the same picks and random draws).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from models.engine.prompt_lookup import find_draft

# The shortest tail that is looked up.
MIN_NGRAM = 2
# The first draft's length (it then grows with success up to the request's draft_tokens).
FIRST_LENGTH = 4
# Drafts in a row with nothing kept before the reply sits out, and the longest rest (steps).
MISSES_BEFORE_REST = 2
LONGEST_REST = 64


class LookupDrafter:
    """One reply's prompt-lookup drafts and their adaptive length.

    Args:
        max_length: The most tokens one draft holds (the request's ``draft_tokens``).
        max_ngram: The longest tail looked up (the request's ``ngram_size``).
        capacity: The most tokens the reply's history can hold (the slot's context).
    """

    def __init__(self, max_length: int, max_ngram: int, capacity: int) -> None:
        self.max_length = max_length
        self.max_ngram = max(max_ngram, MIN_NGRAM)
        self.length = min(FIRST_LENGTH, max_length)
        self._history = np.zeros(capacity + max_length + 2, dtype=np.intc)
        self._known = 0  # tokens of the slot already copied into the history
        self._misses = 0
        self._rest = 0
        self._next_rest = 1
        self.drafted = 0
        self.accepted = 0

    def propose(self, tokens: Sequence[int], pending: Sequence[int], room: int) -> list[int]:
        """The draft to verify after ``tokens`` (the slot's cache, which only grows while a
        reply runs) and ``pending`` (chosen, not yet evaluated); at most ``room`` tokens."""
        if self._rest > 0:
            self._rest -= 1
            return []
        limit = min(self.length, room)
        end = len(tokens) + len(pending)
        if limit < 1 or end + limit > self._history.shape[0]:
            return []
        history = self._history
        if self._known < len(tokens):
            history[self._known:len(tokens)] = tokens[self._known:]
            self._known = len(tokens)
        history[len(tokens):end] = pending
        return find_draft(history[:end], self.max_ngram, limit, MIN_NGRAM)

    def update(self, drafted: int, accepted: int) -> None:
        """Adapt to how the last draft did: ``accepted`` of its ``drafted`` tokens kept."""
        if drafted == 0:
            return
        self.drafted += drafted
        self.accepted += accepted
        if accepted == drafted:
            self.length = min(self.max_length, self.length * 2)
            self._misses, self._next_rest = 0, 1
        elif accepted:
            self.length = max(1, min(self.max_length, accepted + 1))
            self._misses, self._next_rest = 0, 1
        else:
            self.length = max(1, self.length // 2)
            self._misses += 1
            if self._misses >= MISSES_BEFORE_REST:
                self._rest, self._misses = self._next_rest, 0
                self._next_rest = min(LONGEST_REST, self._next_rest * 2)
