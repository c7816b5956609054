"""MXFP4: the OCP microscaling 4-bit float type (gpt-oss experts), compiled, byte-exact.

A block of 32 values shares one power-of-two scale (an E8M0 exponent byte ``e``); each
value is the E2M1 float nearest ``x / scale``, stored as a 4-bit index into ggml's
doubled table ``kvalues_mxfp4`` (0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6, times 2). Layout::

    MXFP4 | e | qs[16] |                                                   17 bytes
    e = floor(log2(max |x|)) - 2 + 127 (0 when the block is all zero), as a byte
    qs[j] = index(x[j]) | index(x[16 + j]) << 4;  value = kvalues[index] * 2^(e - 128)

The exponent comes from the C library's ``log2f`` (numba calls the same one), so a
magnitude just below a power of two takes the exponent that ``floorf(log2f(...))``
gives there. ggml ignores an importance matrix for this type.
"""

from __future__ import annotations

import math

import numpy as np

from quantize.blocks.jit import F32, bits_f32, c_trunc_i32, inline, kernel

#: ggml's ``kvalues_mxfp4`` (E2M1 values, doubled).
MXFP4_LEVELS = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int8)
_LEVELS = MXFP4_LEVELS.astype(np.float32)
_ZERO = F32(0.0)


@inline
def e8m0_to_fp32_half(e):
    """``ggml_e8m0_to_fp32_half``: ``2^(e - 128)`` (the two smallest as denormals)."""
    bits = np.int32(0x00200000) << e if e < 2 else np.int32(e - 1) << 23
    return bits_f32(bits)


@inline
def best_index_mxfp4(x, d):
    """The first index with the least ``|kvalues[i]*d - x|``."""
    best = 0
    best_err = np.abs(_LEVELS[0] * d - x)
    for i in range(1, 16):
        err = np.abs(_LEVELS[i] * d - x)
        if err < best_err:
            best = i
            best_err = err
    return best


@kernel
def mxfp4(x, qw, blocks_per_row, out):
    """``quantize_row_mxfp4_ref``: ``x`` ``(blocks, 32)`` float32; ``qw`` ignored."""
    for blk in range(x.shape[0]):
        amax = _ZERO
        for j in range(32):
            a = np.abs(x[blk, j])
            if amax < a:
                amax = a
        e = 0
        if amax > _ZERO:
            exponent = np.floor(np.float32(math.log2(amax))) - F32(2.0) + F32(127.0)
            e = np.int32(c_trunc_i32(exponent)) & 0xFF  # (uint8_t) of the float, as x86 converts it
        d = e8m0_to_fp32_half(e)
        out[blk, 0] = np.uint8(e)
        for j in range(16):
            out[blk, 1 + j] = np.uint8(best_index_mxfp4(x[blk, j], d) | (best_index_mxfp4(x[blk, 16 + j], d) << 4))
