"""IQ4_NL and IQ4_XS: llama.cpp's 4-bit non-linear types, compiled, byte-exact.

Both store 4-bit indices into one fixed table of 16 non-uniform levels
(:data:`IQ4_LEVELS`, ggml's ``kvalues_iq4nl``) times a scale. Layouts (bytes)::

    IQ4_NL  | d | qs[16] |                                                   18 (32 values)
    IQ4_XS  | d | scales_h (uint16) | scales_l[4] | qs[128] |                 136 (256 values)

    qs[16i + j] = L[32i + j] | L[32i + 16 + j] << 4      (i = 32-value group, j = 0..15)
    IQ4_XS scales: 6-bit s_k = l_k + 32 for the eight 32-value groups k,
        low nibble in scales_l[k/2] (k even: bits 0-3, odd: bits 4-7),
        high 2 bits in scales_h at bit 2k;  group scale = d * l_k, l_k in -32..31

Both go through ggml's ``quantize_row_iq4_nl_impl`` with ``ntry = 7`` (what
``quantize_iq4_nl`` / ``quantize_iq4_xs``, hence ``llama-quantize``, call, with or
without an imatrix): per 32-value group a first scale from the largest magnitude, then
15 scales ``(itry - 127)/max`` tried, keeping the one with the largest ``sumqx²/sumq2``.
Weights are ``x²`` without an imatrix, ``qw * sqrt(sigma2 + x²)`` with one (``sigma2``:
twice the super-block's mean square). IQ4_XS then quantizes the group scales against
``d = -max_scale/32`` (the float32 ``d``, not its fp16 rounding) and re-picks every
level with the stored group scale; IQ4_NL re-picks with its one scale.

The 32-value groups of a batch of blocks are lanes (:mod:`.lanes`): every trial runs
over all of them at once, each lane summing in C's order, and the nearest level is
found without branches (:func:`best_index_int8`), so LLVM vectorizes across lanes.
"""

from __future__ import annotations

import numpy as np

from quantize.blocks.jit import F32, GROUP_MAX_EPS, f32, fp32_to_fp16, helper, inline, kernel, nearest_int, pick
from quantize.blocks.lanes import block_sum_squares, gather, imatrix_weights

#: ggml's ``kvalues_iq4nl``: the 16 levels of IQ4_NL and IQ4_XS.
IQ4_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int8)
_LEVELS = IQ4_LEVELS.astype(np.float32)
_ZERO = F32(0.0)
_ONE = F32(1.0)
_NTRY = 7
BATCH = 64  # 32-value groups per batch (IQ4_NL: blocks; IQ4_XS: 8 a block)


@inline
def best_index_int8(values, x):
    """ggml's ``best_index_int8(16, values, x)``, without branches: the bisection ends at
    the last level not above ``x`` (x strictly inside the table), then the nearer of it
    and the next, the upper one on a tie; the ends clamp. NaN (a scale from weights that
    overflowed) compares as C's bisection reads it, "not below": index 15."""
    ml = 0
    for k in range(1, 15):
        ml += np.int32(x < values[k]) ^ 1
    index = pick(x - values[ml] < values[ml + 1] - x, ml, ml + 1)
    index = pick(x <= values[0], 0, index)
    return pick(x >= values[15], 15, index)


@helper
def _group_scales(xt, wt, d):
    """The scale search of every lane (``ntry = 7``); ``d[g]`` gets lane ``g``'s scale."""
    n, lanes = xt.shape
    mx = np.empty(lanes, np.float32)
    amax = np.empty(lanes, np.float32)
    inv = np.empty(lanes, np.float32)
    sumqx = np.empty(lanes, np.float32)
    sumq2 = np.empty(lanes, np.float32)
    best = np.empty(lanes, np.float32)
    for g in range(lanes):
        amax[g] = _ZERO
        mx[g] = _ZERO
    for j in range(n):
        for g in range(lanes):
            ax = np.abs(xt[j, g])
            take = ax > amax[g]
            amax[g] = pick(take, ax, amax[g])
            mx[g] = pick(take, xt[j, g], mx[g])
    for t in range(-_NTRY - 1, _NTRY + 1):
        for g in range(lanes):
            # the first pass: -max/values[0]; then (itry + values[0])/max
            inv[g] = _ONE / (-mx[g] / _LEVELS[0]) if t < -_NTRY else f32(t - 127) / mx[g]
            sumqx[g] = _ZERO
            sumq2[g] = _ZERO
        for j in range(n):
            for g in range(lanes):
                v = xt[j, g]
                q = _LEVELS[best_index_int8(_LEVELS, inv[g] * v)]
                w = wt[j, g]
                sumqx[g] += w * q * v
                sumq2[g] += w * q * q
        for g in range(lanes):
            if t < -_NTRY:
                d[g] = pick(sumq2[g] > _ZERO, sumqx[g] / sumq2[g], _ZERO)
                best[g] = d[g] * sumqx[g]
            else:
                better = (sumq2[g] > _ZERO) & (sumqx[g] * sumqx[g] > best[g] * sumq2[g])
                d[g] = pick(better, sumqx[g] / sumq2[g], d[g])
                best[g] = pick(better, d[g] * sumqx[g], best[g])
    for g in range(lanes):
        d[g] = pick(amax[g] < GROUP_MAX_EPS, _ZERO, d[g])


@helper
def _batch_scales(x, qw, use_qw, first, count, blocks_per_row, xt, wt, d):
    """Gather blocks ``first .. first+count`` as 32-value lanes, weigh them, search their scales."""
    gather(x, first, count, 32, xt)
    lanes = xt.shape[1]
    if use_qw:
        sigma2 = np.empty(count, np.float32)
        for b in range(count):
            sigma2[b] = block_sum_squares(x, first + b) * (F32(2.0) / f32(x.shape[1]))
        imatrix_weights(xt, qw, first, count, blocks_per_row, 32, sigma2, False, wt)
    else:
        for j in range(32):
            for g in range(lanes):
                wt[j, g] = xt[j, g] * xt[j, g]
    _group_scales(xt, wt, d)


@inline
def _store_levels(out, blk, at, xb, base, inv):
    """``qs[16i + j] = L[j] | L[j + 16] << 4`` of 32 values at ``xb[base:]`` picked at ``inv``."""
    for j in range(16):
        lo = best_index_int8(_LEVELS, inv * xb[base + j])
        hi = best_index_int8(_LEVELS, inv * xb[base + 16 + j])
        out[blk, at + j] = np.uint8(lo | (hi << 4))


@kernel
def iq4_nl(x, qw, blocks_per_row, out):
    """``quantize_iq4_nl``: ``x`` ``(blocks, 32)`` float32, ``qw`` one row's imatrix or empty."""
    use_qw = qw.shape[0] > 0
    xt = np.empty((32, BATCH), np.float32)
    wt = np.empty((32, BATCH), np.float32)
    d = np.empty(BATCH, np.float32)
    for first in range(0, x.shape[0], BATCH):
        count = min(BATCH, x.shape[0] - first)
        if count < BATCH:  # the last batch: lane arrays of its width (contiguous, as gather wants)
            xt = np.empty((32, count), np.float32)
            wt = np.empty((32, count), np.float32)
        _batch_scales(x, qw, use_qw, first, count, blocks_per_row, xt, wt, d)
        for b in range(count):
            blk = first + b
            h = fp32_to_fp16(d[b])
            out[blk, 0] = np.uint8(h & 0xFF)
            out[blk, 1] = np.uint8(h >> 8)
            inv = _ONE / d[b] if d[b] != _ZERO else _ZERO
            _store_levels(out, blk, 2, x[blk], 0, inv)


@kernel
def iq4_xs(x, qw, blocks_per_row, out):
    """``quantize_iq4_xs``: ``x`` ``(blocks, 256)`` float32, ``qw`` one row's imatrix or empty."""
    use_qw = qw.shape[0] > 0
    per = BATCH // 8
    xt = np.empty((32, BATCH), np.float32)
    wt = np.empty((32, BATCH), np.float32)
    d = np.empty(BATCH, np.float32)
    for first in range(0, x.shape[0], per):
        count = min(per, x.shape[0] - first)
        if count < per:
            xt = np.empty((32, 8 * count), np.float32)
            wt = np.empty((32, 8 * count), np.float32)
        _batch_scales(x, qw, use_qw, first, count, blocks_per_row, xt, wt, d)
        for b in range(count):
            blk = first + b
            max_scale = _ZERO
            amax_scale = _ZERO
            for ib in range(8):
                s = d[ib * count + b]
                if np.abs(s) > amax_scale:
                    amax_scale = np.abs(s)
                    max_scale = s
            dd = -max_scale / F32(32.0)
            h = fp32_to_fp16(dd)
            out[blk, 0] = np.uint8(h & 0xFF)
            out[blk, 1] = np.uint8(h >> 8)
            inv = _ONE / dd if dd != _ZERO else _ZERO
            scales_h = 0
            for ib in range(8):
                l = max(-32, min(31, nearest_int(inv * d[ib * count + b])))
                dl = dd * f32(l)
                _store_levels(out, blk, 8 + 16 * ib, x[blk], 32 * ib, _ONE / dl if dl != _ZERO else _ZERO)
                l += 32
                if ib % 2 == 0:
                    out[blk, 4 + ib // 2] = np.uint8(l & 0xF)
                else:
                    out[blk, 4 + ib // 2] |= np.uint8((l & 0xF) << 4)
                scales_h |= (l >> 4) << (2 * ib)
            out[blk, 2] = np.uint8(scales_h & 0xFF)
            out[blk, 3] = np.uint8((scales_h >> 8) & 0xFF)
