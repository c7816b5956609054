"""Cutting a tokenized text into chunks exactly as llama-perplexity and llama-imatrix do.

Chunk ``i`` is tokens ``[i*n_ctx, (i+1)*n_ctx)`` of the whole text (tokens past the last
full chunk are not used); when the model adds a BOS token its first token is replaced by
BOS. ``n_batch // n_ctx`` chunks (at least one) are decoded together, each as its own
sequence, in a context of ``n_seq * n_ctx`` cells; a chunk longer than ``n_batch`` is
decoded in ``n_batch`` pieces. Perplexity and KL divergence are scored on positions
``first = n_ctx // 2`` to ``n_ctx - 2`` (each predicting the next token).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np

from models.foundation.errors import QuantDeskError

MIN_CTX = 32


@dataclass(frozen=True)
class ChunkPlan:
    """How a text is cut and batched.

    Attributes:
        n_ctx: Tokens per chunk.
        n_chunk: Chunks used.
        n_batch: Tokens per decode call (llama.cpp's ``-b``, capped at ``n_seq * n_ctx``).
        n_seq: Chunks decoded together as separate sequences.
    """

    n_ctx: int
    n_chunk: int
    n_batch: int
    n_seq: int

    @property
    def first(self) -> int:
        """The first scored position of a chunk."""
        return self.n_ctx // 2

    @property
    def scored_per_chunk(self) -> int:
        """Positions scored per chunk (each predicts the token after it)."""
        return self.n_ctx - 1 - self.first

    @property
    def context_cells(self) -> int:
        """KV cells the context needs: one chunk per sequence."""
        return self.n_seq * self.n_ctx

    @property
    def pieces_per_chunk(self) -> int:
        """Decode calls per chunk when a chunk is longer than a batch."""
        return (self.n_ctx + self.n_batch - 1) // self.n_batch


def plan_chunks(n_tokens: int, n_ctx: int, n_batch: int, chunks: Optional[int],
                text_name: str) -> ChunkPlan:
    """The chunking of a text of ``n_tokens`` tokens.

    Args:
        n_tokens: Tokens in the whole text.
        n_ctx: Tokens per chunk (``--ctx``).
        n_batch: Tokens per decode call (``--batch``); llama.cpp requires it to be below
            ``n_ctx`` or a multiple of it.
        chunks: At most this many chunks (``--chunks``), ``None`` for all.
        text_name: The text's name, for messages.

    Raises:
        QuantDeskError: the text is shorter than two chunks, or the sizes do not fit.
    """
    if n_ctx < MIN_CTX:
        raise QuantDeskError(f"A context of {n_ctx} tokens is too small to measure with.",
                             f"Use --ctx {MIN_CTX} or more (llama.cpp's tools use 512).")
    if n_batch < 1 or not (n_batch < n_ctx or n_batch % n_ctx == 0):
        raise QuantDeskError(f"A batch of {n_batch} tokens does not fit chunks of {n_ctx}.",
                             f"Use a batch below {n_ctx} or a multiple of it (e.g. {4 * n_ctx}).")
    if chunks is not None and chunks < 1:
        raise QuantDeskError(f"--chunks {chunks} asks for no text at all.", "Give 1 or more.")
    if n_tokens < 2 * n_ctx:
        raise QuantDeskError(
            f"The text {text_name} is {n_tokens} tokens long, too short for two chunks of "
            f"{n_ctx} tokens (llama.cpp's tools need at least {2 * n_ctx}).",
            "Use a longer text, or a smaller --ctx.")
    available = n_tokens // n_ctx
    n_chunk = available if chunks is None else min(chunks, available)
    n_seq = max(1, n_batch // n_ctx)
    return ChunkPlan(n_ctx=n_ctx, n_chunk=n_chunk, n_batch=min(n_batch, n_seq * n_ctx), n_seq=n_seq)


@dataclass(frozen=True)
class Piece:
    """One decode call: ``tokens[s]`` of sequence ``s`` at positions ``start .. start+len-1``.

    Attributes:
        chunk: Index of the first chunk in this group of sequences.
        tokens: One array per sequence (chunk ``chunk + s``), BOS already in place.
        start: Position of the first token within its chunk.
        last: Whether this is the last piece of the group (its chunks are complete).
    """

    chunk: int
    tokens: list[np.ndarray]
    start: int
    last: bool


def pieces(tokens: np.ndarray, plan: ChunkPlan, bos: Optional[int]) -> Iterator[Piece]:
    """The decode calls for ``tokens`` under ``plan``, in llama.cpp's order.

    Args:
        tokens: The whole tokenized text.
        plan: From :func:`plan_chunks`.
        bos: The BOS token when the model adds one (it replaces each chunk's first token).
    """
    for i in range(0, plan.n_chunk, plan.n_seq):
        n_seq_batch = min(plan.n_seq, plan.n_chunk - i)
        for j in range(plan.pieces_per_chunk):
            start = j * plan.n_batch
            size = min(plan.n_ctx - start, plan.n_batch)
            seqs = []
            for s in range(n_seq_batch):
                begin = (i + s) * plan.n_ctx + start
                seq = np.array(tokens[begin:begin + size], dtype=np.int32)
                if bos is not None and j == 0:
                    seq[0] = bos
                seqs.append(seq)
            yield Piece(i, seqs, start, j == plan.pieces_per_chunk - 1)


def next_tokens(tokens: np.ndarray, plan: ChunkPlan, chunk: int) -> np.ndarray:
    """The tokens that the scored positions of ``chunk`` predict (the text's own tokens)."""
    begin = chunk * plan.n_ctx + plan.first + 1
    return np.asarray(tokens[begin:begin + plan.scored_per_chunk], dtype=np.int32)
