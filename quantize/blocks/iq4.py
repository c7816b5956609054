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
"""

from __future__ import annotations

import numpy as np

from quantize.blocks.jit import F32, GROUP_MAX_EPS, f32, fp32_to_fp16, helper, inline, kernel, nearest_int

#: ggml's ``kvalues_iq4nl``: the 16 levels of IQ4_NL and IQ4_XS.
IQ4_LEVELS = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int8)
_LEVELS = IQ4_LEVELS.astype(np.float32)
_ZERO = F32(0.0)
_ONE = F32(1.0)
_NTRY = 7


@inline
def best_index_int8(values, x):
    """ggml's ``best_index_int8(16, values, x)``: the nearest level by bisection (ties upward)."""
    if x <= values[0]:
        return 0
    if x >= values[15]:
        return 15
    ml = 0
    mu = 15
    while mu - ml > 1:
        mav = (ml + mu) // 2
        if x < values[mav]:
            mu = mav
        else:
            ml = mav
    return mu - 1 if x - values[mu - 1] < values[mu] - x else mu


@inline
def _trial_sums(x, at, weight, inv):
    """``sumqx = sum w*q*x`` and ``sumq2 = sum w*q*q`` with each value at its nearest level of ``inv*x``."""
    sumqx = _ZERO
    sumq2 = _ZERO
    for j in range(32):
        q = _LEVELS[best_index_int8(_LEVELS, inv * x[at + j])]
        w = weight[j]
        sumqx += w * q * x[at + j]
        sumq2 += w * q * q
    return sumqx, sumq2


@helper
def _group_scale(x, at, weight):
    """The scale search of one 32-value group starting at ``x[at]`` (``ntry = 7``)."""
    amax = _ZERO
    mx = _ZERO
    for j in range(32):
        ax = np.abs(x[at + j])
        if ax > amax:
            amax = ax
            mx = x[at + j]
    if amax < GROUP_MAX_EPS:
        return _ZERO
    d = -mx / _LEVELS[0]
    sumqx, sumq2 = _trial_sums(x, at, weight, _ONE / d)
    d = sumqx / sumq2 if sumq2 > _ZERO else _ZERO
    best = d * sumqx
    for itry in range(-_NTRY, _NTRY + 1):
        sumqx, sumq2 = _trial_sums(x, at, weight, f32(itry - 127) / mx)
        if sumq2 > _ZERO and sumqx * sumqx > best * sumq2:
            d = sumqx / sumq2
            best = d * sumqx
    return d


@inline
def _weights(x, at, qw, qw_at, use_qw, sigma2, weight):
    for j in range(32):
        v = x[at + j]
        weight[j] = qw[qw_at + j] * np.sqrt(sigma2 + v * v) if use_qw else v * v


@inline
def _sigma2(x, n):
    total = _ZERO
    for j in range(n):
        total += x[j] * x[j]
    return total * (F32(2.0) / f32(n))


@helper
def _pack_nibbles(out, blk, at, levels, n):
    for i in range(n // 32):
        for j in range(16):
            out[blk, at + 16 * i + j] = np.uint8(levels[32 * i + j] | (levels[32 * i + 16 + j] << 4))


@kernel
def iq4_nl(x, qw, blocks_per_row, out):
    """``quantize_iq4_nl``: ``x`` ``(blocks, 32)`` float32, ``qw`` one row's imatrix or empty."""
    use_qw = qw.shape[0] > 0
    weight = np.empty(32, np.float32)
    levels = np.empty(32, np.uint8)
    for blk in range(x.shape[0]):
        xb = x[blk]
        sigma2 = _sigma2(xb, 32)
        _weights(xb, 0, qw, (blk % blocks_per_row) * 32, use_qw, sigma2, weight)
        d = _group_scale(xb, 0, weight)
        h = fp32_to_fp16(d)
        out[blk, 0] = np.uint8(h & 0xFF)
        out[blk, 1] = np.uint8(h >> 8)
        inv = _ONE / d if d != _ZERO else _ZERO
        for j in range(32):
            levels[j] = best_index_int8(_LEVELS, inv * xb[j])
        _pack_nibbles(out, blk, 2, levels, 32)


@kernel
def iq4_xs(x, qw, blocks_per_row, out):
    """``quantize_iq4_xs``: ``x`` ``(blocks, 256)`` float32, ``qw`` one row's imatrix or empty."""
    use_qw = qw.shape[0] > 0
    weight = np.empty(32, np.float32)
    scales = np.empty(8, np.float32)
    levels = np.empty(256, np.uint8)
    for blk in range(x.shape[0]):
        xb = x[blk]
        sigma2 = _sigma2(xb, 256)
        qw_at = (blk % blocks_per_row) * 256
        max_scale = _ZERO
        amax_scale = _ZERO
        for ib in range(8):
            _weights(xb, 32 * ib, qw, qw_at + 32 * ib, use_qw, sigma2, weight)
            d = _group_scale(xb, 32 * ib, weight)
            scales[ib] = d
            if np.abs(d) > amax_scale:
                amax_scale = np.abs(d)
                max_scale = d
        d = -max_scale / F32(32.0)
        h = fp32_to_fp16(d)
        out[blk, 0] = np.uint8(h & 0xFF)
        out[blk, 1] = np.uint8(h >> 8)
        inv = _ONE / d if d != _ZERO else _ZERO
        scales_h = 0
        for ib in range(8):
            l = nearest_int(inv * scales[ib])
            l = max(-32, min(31, l))
            dl = d * f32(l)
            idl = _ONE / dl if dl != _ZERO else _ZERO
            for j in range(32):
                levels[32 * ib + j] = best_index_int8(_LEVELS, idl * xb[32 * ib + j])
            l += 32
            if ib % 2 == 0:
                out[blk, 4 + ib // 2] = np.uint8(l & 0xF)
            else:
                out[blk, 4 + ib // 2] |= np.uint8((l & 0xF) << 4)
            scales_h |= (l >> 4) << (2 * ib)
        out[blk, 2] = np.uint8(scales_h & 0xFF)
        out[blk, 3] = np.uint8((scales_h >> 8) & 0xFF)
        _pack_nibbles(out, blk, 8, levels, 256)
