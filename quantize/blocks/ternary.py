"""TQ1_0 and TQ2_0: llama.cpp's ternary types (BitNet b1.58, TriLMs), compiled, byte-exact.

Every value becomes -1, 0 or +1 times the block's largest magnitude ``d`` (a trit
``t = lroundf(x/d) + 1`` in 0..2). Layouts (bytes, 256 values a block)::

    TQ1_0 | qs[48]: 5 trits a byte | qh[4]: 4 trits a byte | d (fp16) |    54
    TQ2_0 | qs[64]: 4 trits a byte, 2 bits each | d (fp16) |              66

    TQ1_0 qs[m]      (m < 32)  = ceil(256 * T(x[m], x[m+32], .. x[m+128]) / 243)
          qs[32 + m] (m < 16)  = the same over x[160 + m + 16n], n = 0..4
          qh[j]      (j < 4)   = ceil(256 * 3 * T(x[240 + j + 4n], n = 0..3) / 243)
          where T(t0, t1, ..) = ((t0*3 + t1)*3 + ..) in uint8 arithmetic
    TQ2_0 qs[32k + m] = sum_n t(x[128k + m + 32n]) << 2n      (k = 0, 1; n = 0..3)

Both ignore an importance matrix, as ggml does (``quantize_tq*_0`` call the ``_ref``).
"""

from __future__ import annotations

import numpy as np

from quantize.blocks.jit import F32, c_trunc_i32, inline, inverse, kernel, put_fp16, roundf

_ZERO = F32(0.0)


@inline
def _block_scale(x, blk):
    amax = _ZERO
    for j in range(256):
        a = np.abs(x[blk, j])
        amax = amax if amax > a else a  # MAX(amax, fabsf(v))
    return amax


@inline
def _trit(x, blk, j, inv):
    """``lroundf(x * id) + 1``: -1, 0, 1 -> 0, 1, 2."""
    return np.int32(c_trunc_i32(roundf(x[blk, j] * inv))) + 1


@inline
def _ceil_243(q):
    """``((uint16_t) q * 256 + 242) / 243`` kept as a byte: spreads 0..242 over 0..255."""
    return np.uint8((((q & 0xFF) * 256 + 242) // 243) & 0xFF)


@kernel
def tq1_0(x, qw, blocks_per_row, out):
    """``quantize_row_tq1_0_ref``: ``x`` ``(blocks, 256)`` float32; ``qw`` ignored."""
    for blk in range(x.shape[0]):
        d = _block_scale(x, blk)
        inv = inverse(d)
        put_fp16(out, blk, 52, d)
        for m in range(32):
            q = 0
            for n in range(5):
                q = (q * 3 + _trit(x, blk, m + 32 * n, inv)) & 0xFF
            out[blk, m] = _ceil_243(q)
        for m in range(16):
            q = 0
            for n in range(5):
                q = (q * 3 + _trit(x, blk, 160 + m + 16 * n, inv)) & 0xFF
            out[blk, 32 + m] = _ceil_243(q)
        for j in range(4):
            q = 0
            for m in range(4):
                q = (q * 3 + _trit(x, blk, 240 + j + 4 * m, inv)) & 0xFF
            out[blk, 48 + j] = _ceil_243((q * 3) & 0xFF)


@kernel
def tq2_0(x, qw, blocks_per_row, out):
    """``quantize_row_tq2_0_ref``: ``x`` ``(blocks, 256)`` float32; ``qw`` ignored."""
    for blk in range(x.shape[0]):
        d = _block_scale(x, blk)
        inv = inverse(d)
        put_fp16(out, blk, 64, d)
        for k in range(2):
            for m in range(32):
                q = 0
                for n in range(4):
                    q += (_trit(x, blk, 128 * k + m + 32 * n, inv) & 3) << (2 * n)
                out[blk, 32 * k + m] = np.uint8(q & 0xFF)
