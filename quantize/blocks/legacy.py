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

from quantize.blocks.jit import (F32, F32_MAX, Flag, Int, c_int8, c_trunc_i32, f32, helper, inline, kernel, key_value, pick,
                                 magnitude_key, order_key, put_fp16, streaming_kernel)
from quantize.blocks.lanes import gather, imatrix_weights
from quantize.blocks.searches import qkx_quants, qx_quants

BATCH = 256  # blocks per batch: the lane arrays stay in L1/L2
_ZERO = F32(0.0)
_ONE = F32(1.0)
_HALF = F32(0.5)
_INF = F32(np.inf)
_IMPL_RMIN = F32(-0.9)  # make_qkx3_quants(..., -0.9f, 0.05f, 36, false) in every _impl
_IMPL_RDELTA = F32(0.05)


@inline
def _inverse(d):
    """``d ? 1.0f/d : 0.0f``."""
    return _ONE / d if d != _ZERO else _ZERO


@inline
def _roundf(v):
    """C's ``roundf``: half away from zero (``v - trunc(v)`` is exact)."""
    t = np.trunc(v)
    if np.abs(v - t) >= _HALF:
        t = t + (_ONE if v > _ZERO else -_ONE)
    return t


_INF_KEY = np.int32(0x7F800000)  # order_key(+inf); NaNs' keys lie beyond +-inf's
_MINUS_INF_KEY = np.int32(-0x7F800001)  # order_key(-inf)


@inline
def _key_range(x, blk, lo, hi):
    """The least and greatest :func:`order_key` of block ``blk``'s values and ``lo``/``hi``,
    skipping NaNs as C's comparisons do; and whether every value is finite.

    One pass of integer min/max (it vectorizes); a block holding a NaN (its key lies
    beyond the infinities') is reduced again with the NaNs left out.
    """
    least = lo
    greatest = hi
    for j in range(x.shape[1]):  # 32, unknown to LLVM: vectorized rather than unrolled
        key = order_key(x[blk, j])
        least = min(least, key)
        greatest = max(greatest, key)
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
        for j in range(32):
            if np.abs(x[blk, j]) == vhi:
                return x[blk, j], finite
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
    if vlo == _ZERO or vhi == _ZERO:
        for j in range(32):
            if x[blk, j] == _ZERO:
                vlo = x[blk, j] if vlo == _ZERO else vlo
                vhi = x[blk, j] if vhi == _ZERO else vhi
                break
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
        inv = _inverse(d)
        put_fp16(out, blk, 0, d)
        for j in range(32):
            out[blk, 2 + j] = np.uint8(c_trunc_i32(_roundf(x[blk, j] * inv)) & 0xFF)


@inline
def _store_levels(out, blk, at, x, scale, shift, bias, top, via_int8, five_bits, in_range):
    """Quantize one block and store its nibbles (and Q5's ``qh``) in one vectorizable pass.

    Level ``j`` is C's ``(x[j] - shift)*scale + bias`` converted to ``int8_t`` and capped
    at ``top`` (``via_int8``), or converted straight to ``uint8_t`` (Q5_1), kept as the
    ``uint8_t`` C stores. ``in_range``: every such value is known to lie in ``[0, 2*top]``
    (a finite block, a finite scale), so a plain conversion gives C's integers and the
    guard for NaN and out-of-range values (:func:`c_trunc_i32`) is left out.
    """
    qh = Int(0)
    half = x.shape[1] >> 1  # 16, unknown to LLVM: the loop is vectorized, not unrolled (which
    for j in range(half):  # would leave it scalar: out might overlap x)
        v0 = (x[blk, j] - shift) * scale + bias
        v1 = (x[blk, j + half] - shift) * scale + bias
        if in_range:
            l0 = min(top, np.int32(v0))
            l1 = min(top, np.int32(v1))
        elif via_int8:
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
        for k in range(4):
            out[blk, at + k] = np.uint8((qh >> (8 * k)) & 0xFF)


@inline
def _symmetric_ref(x, out, nmax, five_bits):
    """``quantize_row_q4_0_ref`` (nmax 8) / ``q5_0_ref`` (16): ``d = max/-nmax``, ``q = x/d + nmax``.

    With finite values and a finite ``1/d``, ``|x/d| <= nmax`` (within rounding): the
    levels need no range guard.
    """
    bias = f32(nmax) + _HALF
    top = 2 * nmax - 1
    for blk in range(x.shape[0]):
        signed_max, finite = _first_abs_max(x, blk)
        d = signed_max / f32(-nmax)
        inv = pick(d != _ZERO, _ONE / d, _ZERO)
        put_fp16(out, blk, 0, d)
        # MIN(2nmax-1, (int8_t)(x*id + nmax + .5f))
        if finite & _finite(inv):
            _store_levels(out, blk, 2, x, inv, _ZERO, bias, top, True, five_bits, True)
        else:
            _store_levels(out, blk, 2, x, inv, _ZERO, bias, top, True, five_bits, False)


@inline
def _offset_ref(x, out, nmax, five_bits):
    """``quantize_row_q4_1_ref`` (nmax 15) / ``q5_1_ref`` (31): ``d = (max-min)/nmax``, ``m = min``.

    With finite values, ``d`` and ``1/d``, ``(x - min)/d <= nmax`` (within rounding):
    the levels need no range guard.
    """
    for blk in range(x.shape[0]):
        lo, hi, finite = _min_max(x, blk)
        d = (hi - lo) / f32(nmax)
        inv = pick(d != _ZERO, _ONE / d, _ZERO)
        put_fp16(out, blk, 0, d)
        put_fp16(out, blk, 2, lo)
        # Q4_1: MIN(15, (int8_t)((x - min)*id + .5f)); Q5_1: (uint8_t)(...)
        if finite & _finite(d) & _finite(inv):
            _store_levels(out, blk, 4, x, inv, lo, _HALF, nmax, not five_bits, five_bits, True)
        else:
            _store_levels(out, blk, 4, x, inv, lo, _HALF, nmax, not five_bits, five_bits, False)


@streaming_kernel
def q4_0_ref(x, qw, blocks_per_row, out):
    _symmetric_ref(x, out, 8, False)


@streaming_kernel
def q5_0_ref(x, qw, blocks_per_row, out):
    _symmetric_ref(x, out, 16, True)


@streaming_kernel
def q4_1_ref(x, qw, blocks_per_row, out):
    _offset_ref(x, out, 15, False)


@streaming_kernel
def q5_1_ref(x, qw, blocks_per_row, out):
    _offset_ref(x, out, 31, True)


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
