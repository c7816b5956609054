"""Q8_0, Q4_0, Q4_1, Q5_0, Q5_1: llama.cpp's 32-value block types, compiled, byte-exact.

Block layouts (little endian, ``d``/``m`` are fp16)::

    Q8_0  | d | qs[32] int8 |                                          34 bytes
    Q4_0  | d | qs[16] |                                                18 bytes
    Q4_1  | d | m | qs[16] |                                            20 bytes
    Q5_0  | d | qh[4] | qs[16] |                                        22 bytes
    Q5_1  | d | m | qh[4] | qs[16] |                                    24 bytes

    qs[j] = q[j] & 0xF | (q[j + 16] & 0xF) << 4      (j = 0..15; Q4's C code masks neither)
    qh    = bit i holds (q[i] >> 4) & 1              (i = 0..31, a little-endian uint32)

Without an imatrix these are ggml's ``quantize_row_*_ref`` (straight min/max or abs-max
scaling); with one, ``quantize_row_*_impl``: weights ``qw * sqrt(sigma2 + x*x)`` with
``sigma2`` the mean square of the *whole row*, then ``make_qx_quants`` (symmetric) or
``make_qkx3_quants`` (with offset). Q8_0 ignores the imatrix, as ggml does. Blocks are
processed in batches of :data:`BATCH` lanes (one block per lane, see :mod:`.lanes`).
"""

from __future__ import annotations

import numpy as np

from quantize.blocks.jit import F32, F32_MAX, c_int8, c_trunc_i32, f32, helper, kernel, put_fp16
from quantize.blocks.lanes import gather, imatrix_weights
from quantize.blocks.searches import first_abs_max, qkx_quants, qx_quants

BATCH = 256  # blocks per batch: the lane arrays stay in L1/L2
_ZERO = F32(0.0)
_ONE = F32(1.0)
_HALF = F32(0.5)
_IMPL_RMIN = F32(-0.9)  # make_qkx3_quants(..., -0.9f, 0.05f, 36, false) in every _impl
_IMPL_RDELTA = F32(0.05)


@helper
def _inverse(d):
    """``d ? 1.0f/d : 0.0f``."""
    return _ONE / d if d != _ZERO else _ZERO


@helper
def _roundf(v):
    """C's ``roundf``: half away from zero (``v - trunc(v)`` is exact)."""
    t = np.trunc(v)
    if np.abs(v - t) >= _HALF:
        t = t + (_ONE if v > _ZERO else -_ONE)
    return t


@helper
def _pack_nibbles(out, blk, at, q, g, masked):
    """``qs[j] = q[j] | q[j+16] << 4`` (``& 0xF`` each when ``masked``) from lane ``g`` of ``q``."""
    for j in range(16):
        lo = np.int32(q[j, g])
        hi = np.int32(q[j + 16, g])
        if masked:
            lo &= 0x0F
            hi &= 0x0F
        out[blk, at + j] = np.uint8((lo | (hi << 4)) & 0xFF)


@helper
def _pack_high_bits(out, blk, at, q, g):
    """The Q5 ``qh`` word: bit ``i`` is bit 4 of ``q[i]``, stored little-endian."""
    for k in range(4):
        byte = 0
        for bit in range(8):
            byte |= ((np.int32(q[8 * k + bit, g]) >> 4) & 1) << bit
        out[blk, at + k] = np.uint8(byte)


# ---- without an imatrix: the _ref functions ----------------------------------------------------

@kernel
def q8_0_ref(x, out):
    """``quantize_row_q8_0_ref``: ``d = amax/127``, ``qs = roundf(x/d)``."""
    blocks = x.shape[0]
    for first in range(0, blocks, BATCH):
        count = min(BATCH, blocks - first)
        xt = np.empty((32, count), np.float32)
        amax = np.empty(count, np.float32)
        inv = np.empty(count, np.float32)
        gather(x, first, count, 32, xt)
        for g in range(count):
            amax[g] = _ZERO
        for i in range(32):
            for g in range(count):
                a = np.abs(xt[i, g])
                amax[g] = amax[g] if amax[g] > a else a  # MAX(amax, fabsf(v))
        for g in range(count):
            d = amax[g] / F32(127)
            inv[g] = _inverse(d)
            put_fp16(out, first + g, 0, d)
        for g in range(count):
            for i in range(32):
                out[first + g, 2 + i] = np.uint8(np.int32(c_int8(_roundf(xt[i, g] * inv[g]))) & 0xFF)


@helper
def _symmetric_ref(x, out, nmax, masked, with_high_bits):
    """``quantize_row_q4_0_ref`` (nmax 8) / ``q5_0_ref`` (16): ``d = max/-nmax``, ``q = x/d + nmax``."""
    blocks = x.shape[0]
    bias = f32(nmax) + _HALF
    top = 2 * nmax - 1
    for first in range(0, blocks, BATCH):
        count = min(BATCH, blocks - first)
        xt = np.empty((32, count), np.float32)
        q = np.empty((32, count), np.uint8)
        signed_max = np.empty(count, np.float32)
        amax = np.empty(count, np.float32)
        gather(x, first, count, 32, xt)
        first_abs_max(xt, signed_max, amax)
        for g in range(count):
            d = signed_max[g] / f32(-nmax)
            inv = _inverse(d)
            put_fp16(out, first + g, 0, d)
            for i in range(32):
                level = min(top, np.int32(c_int8(xt[i, g] * inv + bias)))  # MIN(2nmax-1, (int8_t)(..))
                q[i, g] = np.uint8(level & 0xFF)
            if with_high_bits:
                _pack_high_bits(out, first + g, 2, q, g)
                _pack_nibbles(out, first + g, 6, q, g, masked)
            else:
                _pack_nibbles(out, first + g, 2, q, g, masked)


@helper
def _offset_ref(x, out, nmax, clamp, with_high_bits):
    """``quantize_row_q4_1_ref`` (nmax 15) / ``q5_1_ref`` (31): ``d = (max-min)/nmax``, ``m = min``."""
    blocks = x.shape[0]
    for first in range(0, blocks, BATCH):
        count = min(BATCH, blocks - first)
        xt = np.empty((32, count), np.float32)
        q = np.empty((32, count), np.uint8)
        lo = np.empty(count, np.float32)
        hi = np.empty(count, np.float32)
        gather(x, first, count, 32, xt)
        for g in range(count):
            lo[g] = F32_MAX
            hi[g] = -F32_MAX
        for i in range(32):
            for g in range(count):
                v = xt[i, g]
                lo[g] = v if v < lo[g] else lo[g]
                hi[g] = v if v > hi[g] else hi[g]
        for g in range(count):
            d = (hi[g] - lo[g]) / f32(nmax)
            inv = _inverse(d)
            put_fp16(out, first + g, 0, d)
            put_fp16(out, first + g, 2, lo[g])
            for i in range(32):
                shifted = (xt[i, g] - lo[g]) * inv + _HALF
                if clamp:  # Q4_1: MIN(15, (int8_t) v)
                    level = min(15, np.int32(c_int8(shifted)))
                else:  # Q5_1: (uint8_t) v
                    level = c_trunc_i32(shifted)
                q[i, g] = np.uint8(level & 0xFF)
            if with_high_bits:
                _pack_high_bits(out, first + g, 4, q, g)
                _pack_nibbles(out, first + g, 8, q, g, True)
            else:
                _pack_nibbles(out, first + g, 4, q, g, False)


@kernel
def q4_0_ref(x, out):
    _symmetric_ref(x, out, 8, False, False)


@kernel
def q5_0_ref(x, out):
    _symmetric_ref(x, out, 16, True, True)


@kernel
def q4_1_ref(x, out):
    _offset_ref(x, out, 15, True, False)


@kernel
def q5_1_ref(x, out):
    _offset_ref(x, out, 31, False, True)


# ---- with an imatrix: the _impl functions ------------------------------------------------------

@helper
def _row_sigma2(x, blocks_per_row, sigma2_of_block):
    """``sum(x*x)/n_per_row`` of each block's row, summed left to right over the row."""
    blocks = x.shape[0]
    n_per_row = f32(blocks_per_row * x.shape[1])
    for row_start in range(0, blocks, blocks_per_row):
        total = _ZERO
        for blk in range(row_start, row_start + blocks_per_row):
            for j in range(x.shape[1]):
                v = x[blk, j]
                total += v * v
        for blk in range(row_start, row_start + blocks_per_row):
            sigma2_of_block[blk] = total / n_per_row


@helper
def _impl(x, qw, blocks_per_row, out, nmax, symmetric, with_m, with_high_bits):
    """``quantize_row_{q4_0,q5_0,q4_1,q5_1}_impl``: the weighted searches, then the fields."""
    blocks = x.shape[0]
    sigma2_all = np.empty(blocks, np.float32)
    _row_sigma2(x, blocks_per_row, sigma2_all)
    masked = with_high_bits
    for first in range(0, blocks, BATCH):
        count = min(BATCH, blocks - first)
        xt = np.empty((32, count), np.float32)
        w = np.empty((32, count), np.float32)
        q = np.empty((32, count), np.uint8)
        scale = np.empty(count, np.float32)
        the_min = np.empty(count, np.float32)
        gather(x, first, count, 32, xt)
        imatrix_weights(xt, qw, first, count, blocks_per_row, 32, sigma2_all[first:first + count], False, w)
        if symmetric:
            qx_quants(xt, w, nmax, scale, q)
        else:
            qkx_quants(xt, w, nmax, _IMPL_RMIN, _IMPL_RDELTA, 36, False, False, scale, the_min, q)
        for g in range(count):
            put_fp16(out, first + g, 0, scale[g])
            at = 2
            if with_m:
                put_fp16(out, first + g, 2, -the_min[g])
                at = 4
            if with_high_bits:
                _pack_high_bits(out, first + g, at, q, g)
                at += 4
            _pack_nibbles(out, first + g, at, q, g, masked)


@kernel
def q4_0_impl(x, qw, blocks_per_row, out):
    _impl(x, qw, blocks_per_row, out, 8, True, False, False)


@kernel
def q5_0_impl(x, qw, blocks_per_row, out):
    _impl(x, qw, blocks_per_row, out, 16, True, False, True)


@kernel
def q4_1_impl(x, qw, blocks_per_row, out):
    _impl(x, qw, blocks_per_row, out, 15, False, True, False)


@kernel
def q5_1_impl(x, qw, blocks_per_row, out):
    _impl(x, qw, blocks_per_row, out, 31, False, True, True)
