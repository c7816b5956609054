"""Speculative decoding by prompt lookup (engine side).

A reply that copies from its prompt (editing a paragraph, quoting code) repeats long runs
of tokens the conversation already holds. Prompt lookup guesses the next few tokens for
free: find the most recent earlier place where the last ``n`` generated tokens occurred,
and propose the tokens that followed them there (:func:`find_match`). The model then
checks the whole guess in one batch (:class:`DraftBatch`), which reads the weights once
for all positions: cheap where reading the weights is a step's cost (a larger model, a
GPU), about 0.6 of a step per token where arithmetic is (SmolLM2 at one CPU thread), so
how long a draft pays is measured (``speculation.py``).

Verification keeps the output exactly what plain decoding gives: the engine's sampler
picks a token from the logits of every position in turn, and a drafted token counts only
while the picked token equals it. The first picked token that differs replaces the rest
of the draft, whose keys and values are removed from the KV cache
(:func:`truncate_cache`). Because the draft is a fixed guess (not sampled from a draft
distribution), accepting it only when the target's own pick equals it leaves the
distribution of the reply unchanged at any temperature, and the sampler sees the same
sequence of picks (and random draws) as plain decoding.

Runs only in the engine process (imports llama_cpp).
"""

from __future__ import annotations

from typing import Sequence

import llama_cpp.llama_cpp as llama_low
import numpy as np


def find_match(history: np.ndarray, max_ngram: int, min_ngram: int = 1,
               longest: int = 0) -> tuple[int, int]:
    """Where the continuation of the best earlier occurrence of the history's tail begins
    — the draft — and how many tokens before it match the history's end: the tail's
    length, or more (up to ``longest``) where the match goes on further back.
    (-1, 0) when no tail occurs earlier.

    Tries the longest tail first (``max_ngram`` tokens, down to ``min_ngram``): a longer
    match is a more specific context, so its continuation is likelier to be right. Among
    the places that match that tail, the one whose match goes furthest back (up to
    ``longest``) wins, the most recent of those on a tie (the freshest text): a reply
    copying a passage finds that passage rather than a later place where the same few
    tokens recur, and a long match says its continuation is far likelier to be right.
    """
    length = history.shape[0]
    most = min(max_ngram, length - 1)
    least = max(min_ngram, 1)
    if most < least:
        return -1, 0
    # Earlier places whose token is the history's last (each has a continuation), then
    # how far back each goes on matching: up to the longest tail for all of them, then
    # further (up to ``longest``) for those that matched the longest tail — one pass over
    # the history, and a few over the places left.
    ends = np.flatnonzero(history[:-1] == history[-1])
    if not ends.size:
        return -1, 0
    matched = np.ones(ends.shape[0], dtype=np.intp)
    alive = np.arange(ends.shape[0])
    for back in range(1, max(most, min(longest, length - 1))):
        if back == most:  # past the longest tail: only its places are followed back
            if matched.max() < most:
                break
            alive = alive[matched[alive] == most]
        alive = alive[ends[alive] >= back]
        alive = alive[history[ends[alive] - back] == history[length - 1 - back]]
        if not alive.size:
            break
        matched[alive] += 1
    size = min(int(matched.max()), most)
    if size < least:
        return -1, 0
    candidates = np.flatnonzero(matched >= size)
    best = candidates[np.flatnonzero(matched[candidates] == matched[candidates].max())[-1]]
    return int(ends[best]) + 1, int(matched[best])


class DraftBatch:
    """A llama.cpp batch that evaluates a token and its draft with logits at every position.

    ``Llama.eval`` asks for the logits of the last position only, so verification has its
    own batch. Position ``i`` of the batch gives the logits for the token after
    ``tokens[i]``; sample them with ``Sampler.sample(ctx, i)``.

    Args:
        capacity: The most tokens one batch holds (at most the context's batch size).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._batch = llama_low.llama_batch_init(capacity, 0, 1)

    def decode(self, ctx, tokens: Sequence[int], first_position: int) -> int:
        """Evaluate ``tokens`` at ``first_position`` onwards in sequence 0.

        Cells at and after ``first_position`` are removed first (stale ones from an
        earlier rejected draft). Returns llama_decode's code: 0 is success, 2 means the
        abort hook (cancel) stopped it.
        """
        if not 0 < len(tokens) <= self.capacity:
            raise ValueError(f"a draft batch holds 1 to {self.capacity} tokens, not {len(tokens)}")
        truncate_cache(ctx, first_position)
        batch = self._batch
        batch.n_tokens = len(tokens)
        for i, token in enumerate(tokens):
            batch.token[i] = token
            batch.pos[i] = first_position + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = True
        return llama_low.llama_decode(ctx, batch)

    def close(self) -> None:
        """Free the native batch."""
        if self._batch is not None:
            llama_low.llama_batch_free(self._batch)
            self._batch = None

    def __enter__(self) -> "DraftBatch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def truncate_cache(ctx, keep: int) -> None:
    """Remove the KV cells of sequence 0 from position ``keep`` on.

    Done at once (not left to the next ``Llama.eval``) so that a saved session, which
    copies every cell of sequence 0, never holds a rejected draft.
    """
    memory = llama_low.llama_get_memory(ctx)
    llama_low.llama_memory_seq_rm(memory, 0, keep, -1)

