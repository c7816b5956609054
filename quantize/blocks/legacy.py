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

from quantize.blocks.jit import (F32, F32_MAX, Flag, Int, c_int8, c_trunc_i32, f32, first_equal, fp16_to_fp32,
                                 fp32_to_fp16, half_row_magnitude, helper, inverse, roundf,
                                 inline, kernel, key_value, magnitude_key, order_key, pick, put_fp16, row_key_range,
                                 stack_array, store_nibbles_in_range, streaming_kernel)
from quantize.blocks.lanes import gather, imatrix_weights
from quantize.blocks.searches import qkx_quants, qx_quants

BATCH = 256  # blocks per batch: the lane arrays stay in L1/L2
_ZERO = F32(0.0)
_ONE = F32(1.0)
_HALF = F32(0.5)
_INF = F32(np.inf)
_IMPL_RMIN = F32(-0.9)  # make_qkx3_quants(..., -0.9f, 0.05f, 36, false) in every _impl
_IMPL_RDELTA = F32(0.05)


_INF_KEY = np.int32(0x7F800000)  # order_key(+inf); NaNs' keys lie beyond +-inf's
_MINUS_INF_KEY = np.int32(-0x7F800001)  # order_key(-inf)


@inline
def _key_range(x, blk, lo, hi):
    """The least and greatest :func:`order_key` of block ``blk``'s values and ``lo``/``hi``,
    skipping NaNs as C's comparisons do; and whether every value is finite.

    One vectorized pass of integer min/max; a block holding a NaN (its key lies beyond
    the infinities') is reduced again with the NaNs left out.
    """
    least, greatest = row_key_range(x, blk)
    least = min(least, lo)
    greatest = max(greatest, hi)
    finite = (greatest < _INF_KEY) & (least > _MINUS_INF_KEY)
    if (greatest > _INF_KEY) | (least < _MINUS_INF_KEY):  # a NaN
        least = lo
        greatest = hi
        for j in range(32):
            key = order_key(x[blk, j])
            inside = (key <= _INF_KEY) & (key >= _MINUS_INF_KEY)
            least = min(least, pick(inside, key, lo))
            greatest = max(greatest, pick(inside, key, hi))
    return least, greatest, finite


@inline
def _first_abs_max(x, blk):
    """C's ``if (amax < fabsf(v)) { amax = fabsf(v); max = v; }`` from 0 over one block;
    and whether the block's values are all finite.

    The largest and the most negative value come from :func:`_key_range`; only a tie of
    ``+a`` and ``-a`` (or an all-zero block) needs C's "first one wins" scan. Zeros and
    NaNs never win, as in C. No branch on which side wins: it is a coin flip per block.
    """
    lo, hi, finite = _key_range(x, blk, np.int32(0), np.int32(0))  # from order_key(+0.0)
    vlo = key_value(lo)
    vhi = key_value(hi)
    if vhi == -vlo:  # rare
        if vhi == _ZERO:
            return _ZERO, finite
        return x[blk, first_equal(x, blk, vhi, True)], finite
    return pick(vhi > -vlo, vhi, vlo), finite


@inline
def _min_max(x, blk):
    """C's ``if (v < min) min = v; if (v > max) max = v;`` from ``FLT_MAX``/``-FLT_MAX``;
    and whether the block's values are all finite.

    When an extreme is a zero, C kept the first zero it met (``-0.0 < +0.0`` is false),
    whose sign is looked up.
    """
    lo, hi, finite = _key_range(x, blk, order_key(F32_MAX), order_key(-F32_MAX))
    vlo = key_value(lo)
    vhi = key_value(hi)
    if vlo == _ZERO or vhi == _ZERO:  # rare
        zero = x[blk, first_equal(x, blk, _ZERO, False)]
        vlo = pick(vlo == _ZERO, zero, vlo)
        vhi = pick(vhi == _ZERO, zero, vhi)
    return vlo, vhi, finite


@inline
def _finite(v):
    return np.abs(v) < _INF


@inline
def _high_bits(levels):
    """The Q5 ``qh`` word: bit ``j`` is bit 4 of level ``j``."""
    qh = Int(0)
    for j in range(32):
        qh |= Int((levels[j] >> 4) & 1) << j
    return qh


@inline
def _store_q5(out, blk, at, levels):
    """``qh`` (4 bytes, little endian) then ``qs[j] = (L[j] & 0xF) | (L[j+16] & 0xF) << 4``."""
    qh = _high_bits(levels)
    for k in range(4):
        out[blk, at + k] = np.uint8((qh >> (8 * k)) & 0xFF)
    for j in range(16):
        out[blk, at + 4 + j] = np.uint8(((levels[j] & 0xF) | ((levels[j + 16] & 0xF) << 4)) & 0xFF)


@inline
def _store_q4(out, blk, at, levels):
    """``qs[j] = L[j] | L[j+16] << 4`` with C's uint8 values, unmasked."""
    for j in range(16):
        out[blk, at + j] = np.uint8(((levels[j] & 0xFF) | ((levels[j + 16] & 0xFF) << 4)) & 0xFF)


@streaming_kernel
def q8_0_ref(x, qw, blocks_per_row, out):
    """``quantize_row_q8_0_ref``: ``d = amax/127``, ``qs = roundf(x/d)``.

    ``amax = MAX(amax, fabsf(v))`` is reduced as ordered integers (equal for every block
    without NaN).
    """
    for blk in range(x.shape[0]):
        top = np.int32(0)
        for j in range(32):
            top = max(top, magnitude_key(x[blk, j]))
        d = key_value(top) / F32(127)
        inv = inverse(d)
        put_fp16(out, blk, 0, d)
        for j in range(32):
            out[blk, 2 + j] = np.uint8(c_trunc_i32(roundf(x[blk, j] * inv)) & 0xFF)


@streaming_kernel
def q8_0_from_f16(bits, out):
    """:func:`q8_0_ref` of F16 values, read as their bits (``(blocks, 32)`` uint16) and
    widened in the kernel: one pass from the mapped file to the output, with no float32
    copy between them. The same bytes: widening is exact, and the largest magnitude is
    found on the bits (``h & 0x7FFF`` orders like ``fabsf`` for every non-NaN value).
    """
    for blk in range(bits.shape[0]):
        d = fp16_to_fp32(half_row_magnitude(bits, blk)) / F32(127)  # NaN never wins, as in q8_0_ref
        inv = inverse(d)
        put_fp16(out, blk, 0, d)
        for j in range(32):
            v = fp16_to_fp32(bits[blk, j]) * inv
            t = np.trunc(v)  # C's roundf without a branch, so that the loop vectorizes
            t = t + pick(np.abs(v - t) >= _HALF, pick(v > _ZERO, _ONE, -_ONE), _ZERO)
            out[blk, 2 + j] = np.uint8(c_trunc_i32(t) & 0xFF)


@inline
def _store_levels(out, blk, at, x, scale, shift, bias, top, via_int8, five_bits):
    """Quantize one block with C's range guards and store its nibbles (and Q5's ``qh``).

    Level ``j`` is C's ``(x[j] - shift)*scale + bias`` converted to ``int8_t`` and capped
    at ``top`` (``via_int8``), or converted straight to ``uint8_t`` (Q5_1), kept as the
    ``uint8_t`` C stores. For blocks whose values may be NaN or out of ``int`` range;
    the others take :func:`store_nibbles_in_range`.
    """
    qh = Int(0)
    for j in range(16):
        v0 = (x[blk, j] - shift) * scale + bias
        v1 = (x[blk, j + 16] - shift) * scale + bias
        if via_int8:
            l0 = min(top, np.int32(c_int8(v0))) & 0xFF
            l1 = min(top, np.int32(c_int8(v1))) & 0xFF
        else:
            l0 = c_trunc_i32(v0) & 0xFF
            l1 = c_trunc_i32(v1) & 0xFF
        if five_bits:
            qh |= (Int((l0 >> 4) & 1) << j) | (Int((l1 >> 4) & 1) << (j + 16))
            out[blk, at + 4 + j] = np.uint8(((l0 & 0xF) | ((l1 & 0xF) << 4)) & 0xFF)
        else:
            out[blk, at + j] = np.uint8((l0 | (l1 << 4)) & 0xFF)
    if five_bits:
        _store_u32(out, blk, at, qh)


@inline
def _store_u32(out, blk, at, word):
    """``word`` as 4 little-endian bytes at ``out[blk, at:at+4]``."""
    for k in range(4):
        out[blk, at + k] = np.uint8((word >> (8 * k)) & 0xFF)


REF_BATCH = 64  # blocks whose scales are computed together, 8 per vector


@inline
def _legacy_ref(x, out, nmax, with_min, five_bits):
    """``quantize_row_q4_0_ref`` (nmax 8) / ``q5_0_ref`` (16): ``d = max/-nmax``, ``q = x/d + nmax``;
    ``quantize_row_q4_1_ref`` (nmax 15) / ``q5_1_ref`` (31) (``with_min``): ``d = (max-min)/nmax``, ``m = min``.

    Per batch: each block's extremes (one vectorized pass), then the scales of all its
    blocks at once (8 blocks per vector: divisions and fp16 roundings), then each
    block's levels. With finite values and a finite ``d`` and ``1/d``, ``|x/d| <= nmax``
    up to rounding: those levels need no range guard (:func:`store_nibbles_in_range`).
    """
    lows = stack_array(REF_BATCH, np.float32)  # min, or the signed abs-max
    highs = stack_array(REF_BATCH, np.float32)
    in_range = stack_array(REF_BATCH, np.bool_)
    inverse = stack_array(REF_BATCH, np.float32)
    d_bits = stack_array(REF_BATCH, np.uint16)
    m_bits = stack_array(REF_BATCH, np.uint16)
    top = nmax if with_min else 2 * nmax - 1  # MIN(top, ...) in C; Q5_1 has none (and stays <= 31)
    bias = _HALF if with_min else f32(nmax) + _HALF
    at = 4 if with_min else 2  # after d (and m)
    blocks = x.shape[0]
    for first in range(0, blocks, REF_BATCH):
        count = min(REF_BATCH, blocks - first)
        for b in range(count):
            if with_min:
                lo, hi, finite = _min_max(x, first + b)
            else:
                lo, finite = _first_abs_max(x, first + b)
                hi = lo
            lows[b] = lo
            highs[b] = hi
            in_range[b] = finite
        for b in range(count):
            d = (highs[b] - lows[b]) / f32(nmax) if with_min else lows[b] / f32(-nmax)
            inv = pick(d != _ZERO, _ONE / d, _ZERO)
            inverse[b] = inv
            in_range[b] = in_range[b] & _finite(d) & _finite(inv)
            d_bits[b] = fp32_to_fp16(d)
            m_bits[b] = fp32_to_fp16(lows[b])
        for b in range(count):
            blk = first + b
            if with_min:
                _store_u32(out, blk, 0, np.int32(d_bits[b]) | (np.int32(m_bits[b]) << 16))
            else:
                out[blk, 0] = np.uint8(d_bits[b] & 0xFF)
                out[blk, 1] = np.uint8(d_bits[b] >> 8)
            shift = lows[b] if with_min else _ZERO
            if in_range[b]:
                qh = store_nibbles_in_range(x, blk, shift, inverse[b], bias, top, out, blk, at + 4 if five_bits else at)
                if five_bits:
                    _store_u32(out, blk, at, qh)
            else:  # Q4_0, Q5_0, Q4_1: MIN(top, (int8_t)(v)); Q5_1: (uint8_t)(v)
                _store_levels(out, blk, at, x, inverse[b], shift, bias, top, not (with_min and five_bits), five_bits)


@streaming_kernel
def q4_0_ref(x, qw, blocks_per_row, out):
    _legacy_ref(x, out, 8, False, False)


@streaming_kernel
def q5_0_ref(x, qw, blocks_per_row, out):
    _legacy_ref(x, out, 16, False, True)


@streaming_kernel
def q4_1_ref(x, qw, blocks_per_row, out):
    _legacy_ref(x, out, 15, True, False)


@streaming_kernel
def q5_1_ref(x, qw, blocks_per_row, out):
    _legacy_ref(x, out, 31, True, True)


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
    for first in range(0, blocks, BATCH):
        count = min(BATCH, blocks - first)
        xt = np.empty((32, count), np.float32)
        w = np.empty((32, count), np.float32)
        q = np.empty((32, count), np.uint8)
        scale = np.empty(count, np.float32)
        the_min = np.empty(count, np.float32)
        gather(x, first, count, Int(32), xt)
        imatrix_weights(xt, qw, first, count, blocks_per_row, Int(32), sigma2_all[first:first + count], Flag(False), w)
        if symmetric:
            qx_quants(xt, w, nmax, scale, q)
        else:
            qkx_quants(xt, w, nmax, _IMPL_RMIN, _IMPL_RDELTA, Int(36), Flag(False), Flag(False), scale, the_min, q)
        levels = np.empty(32, np.int32)
        for g in range(count):
            put_fp16(out, first + g, 0, scale[g])
            at = 2
            if with_m:
                put_fp16(out, first + g, 2, -the_min[g])
                at = 4
            for j in range(32):
                levels[j] = np.int32(q[j, g])
            if with_high_bits:
                _store_q5(out, first + g, at, levels)
            else:
                _store_q4(out, first + g, at, levels)


@kernel
def q4_0_impl(x, qw, blocks_per_row, out):
    _impl(x, qw, blocks_per_row, out, Int(8), Flag(True), Flag(False), Flag(False))


@kernel
def q5_0_impl(x, qw, blocks_per_row, out):
    _impl(x, qw, blocks_per_row, out, Int(16), Flag(True), Flag(False), Flag(True))


@kernel
def q4_1_impl(x, qw, blocks_per_row, out):
    _impl(x, qw, blocks_per_row, out, Int(15), Flag(False), Flag(True), Flag(False))


@kernel
def q5_1_impl(x, qw, blocks_per_row, out):
    _impl(x, qw, blocks_per_row, out, Int(31), Flag(False), Flag(True), Flag(True))
