"""Moving blocks in and out of the positions-major lane layout, and the imatrix weights.

A batch of ``count`` blocks of ``block`` values, cut into sub-blocks of ``size``, is laid
out as ``xt[i, j*count + b]`` = value ``size*j + i`` of block ``b``::

    block b:  | sub 0: i=0..size-1 | sub 1 | ... | sub K-1 |
    lanes:     g = j*count + b  (all blocks' sub-block 0 first, then sub-block 1, ...)

so that a search sees every sub-block as one lane, and the super-block step that follows
sees the K per-sub-block results of block ``b`` as column ``b`` of a ``(K, count)``
array (``results.reshape(K, count)``): positions-major again, with no copy.
"""

from __future__ import annotations

import numpy as np

from quantize.blocks.jit import F32, helper, inline, prefetch_row, transpose_8x8

_ZERO = F32(0.0)


@helper
def gather(x, first, count, size, xt):
    """Copy blocks ``first .. first+count`` of ``x[blocks, block]`` into ``xt[size, lanes]``.

    Eight blocks at a time, one 8 x 8 transpose per eight positions of a sub-block (eight
    blocks' sub-block ``j`` are eight neighbouring lanes); the blocks beyond a multiple
    of 8 one value at a time. Then the next batch's blocks are prefetched: read from
    memory (not cache) they made this copy a sixth of Q3_K's time.
    """
    subs = x.shape[1] // size
    whole = count - count % 8 if size % 8 == 0 else 0
    for j in range(subs):
        for b in range(0, whole, 8):
            for i in range(0, size, 8):
                transpose_8x8(x, first + b, size * j + i, xt, i, j * count + b)
    for b in range(whole, count):
        for j in range(subs):
            g = j * count + b
            for i in range(size):
                xt[i, g] = x[first + b, size * j + i]
    for row in range(first + count, min(first + 2 * count, x.shape[0])):
        prefetch_row(x, row)  # the next batch, read while this one is quantized


@inline
def block_sum_squares(x, row):
    """``for (j...) sumx2 += x[j]*x[j]`` over one block (or row), from 0, left to right."""
    total = _ZERO
    for j in range(x.shape[1]):
        v = x[row, j]
        total += v * v
    return total


@helper
def imatrix_weights(xt, qw, first, count, blocks_per_row, size, sigma2, raw, w):
    """``w = qw[l] * sqrtf(sigma2 + x*x)`` in lane layout; ``qw`` is the imatrix of one row.

    ``sigma2[b]`` is block ``first + b``'s variance term (its super-block's, or its row's
    for the 32-value types), computed by the caller as C does for that type. ``raw``:
    the weights are ``qw`` itself (Q6_K).
    """
    subs = xt.shape[1] // count
    for j in range(subs):
        for b in range(count):
            g = j * count + b
            base = ((first + b) % blocks_per_row) * (subs * size) + size * j
            s2 = sigma2[b]
            for i in range(size):
                v = xt[i, g]
                w[i, g] = qw[base + i] if raw else qw[base + i] * np.sqrt(s2 + v * v)


@helper
def lane_sums(w, sums):
    """``sums[g] = 0 + w[0, g] + w[1, g] + ...`` (C's ``sumw`` from 0)."""
    size, lanes = w.shape
    for g in range(lanes):
        sums[g] = _ZERO
    for i in range(size):
        for g in range(lanes):
            sums[g] += w[i, g]

