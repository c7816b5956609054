"""IQ1_S and IQ1_M: llama.cpp's 1.5- and 1.75-bit grid types, compiled, byte-exact.

Each value is one of three levels ``-1, 0, +1`` shifted by ``±delta`` (``IQ1S_DELTA =
IQ1M_DELTA = 1/8``); an 8-value point of levels is the index of one of 2048 grid points
(:mod:`.iq_grids`, shared by both types). Layouts (bytes, 256 values)::

    IQ1_S | d | idx_lo[32] | qh[8] (uint16: 3 high index bits per point, bits 0-11;
            3-bit scale << 12; delta sign << 15) |                                   50
    IQ1_M | idx_lo[32] | qh[16] (a byte per 16 values: high index bits of its two
            points in bits 0-2 and 4-6, delta signs in bits 3 and 7) |
            scales[8] (four uint16: 3-bit scales of 16-value groups, and the fp16
            super-scale's four nibbles in bits 12-15) |                              56

A group's levels come from an exhaustive search: the group's values sorted (C's
``qsort`` as glibc runs it: a stable merge sort, so equal values keep their order), every
split of the sorted values into three runs scored as ``sumqx²/sumq2`` for both delta
signs (IQ1_M: each half of the group its own sign). Points off the grid go to the
listed neighbour nearest in weighted distance, and the scale is re-fitted. These are
ggml's ``quantize_row_iq1_s_impl`` / ``quantize_row_iq1_m_impl``; IQ1_S needs an
importance matrix (libggml asserts one), IQ1_M weighs ``x²`` without one.
"""

from __future__ import annotations

import numpy as np

from quantize.blocks.grid_search import sum_squares
from quantize.blocks.jit import F32, F32_MAX, f32, fp32_to_fp16, helper, inline, kernel, nearest_int, put_fp16

_ZERO = F32(0.0)
_ONE = F32(1.0)
_HALF = F32(0.5)
_DELTA = F32(0.125)
_EPS_IQ1_S = F32(1e-12)
_EPS_IQ1_M = F32(1e-7)
#: the three levels with +delta (``x_p``) and with -delta (``x_m``)
_X_P = np.array([-1.0 + 0.125, 0.125, 1.0 + 0.125], np.float32)
_X_M = np.array([-1.0 - 0.125, -0.125, 1.0 - 0.125], np.float32)
_P0, _P1, _P2 = (F32(v) for v in _X_P)
_M0, _M1, _M2 = (F32(v) for v in _X_M)
_IQ1M_MASKS = np.array([0x00, 0x80, 0x08, 0x88], np.int32)


@inline
def _stable_order(xb, at, n, order):
    """The positions of ``xb[at:at+n]`` by increasing value, equal values in their order."""
    for j in range(n):
        order[j] = j
    for j in range(1, n):
        key = order[j]
        v = xb[at + key]
        m = j
        while m > 0 and xb[at + order[m - 1]] > v:
            order[m] = order[m - 1]
            m -= 1
        order[m] = key


@helper
def _best_neighbour(neighbours, start, points, xb, at, weight, w_at, scale, levels3, levels, l_at):
    """``iq1_find_best_neighbour2``: the listed point nearest ``xb[at:at+8]`` in
    ``sum w*(scale*q - x)²`` (first of equals); its levels go to ``levels[l_at:]``."""
    best_d2 = F32_MAX
    best = -1
    for j in range(1, np.int32(neighbours[start]) + 1):
        index = np.int32(neighbours[start + j])
        d2 = _ZERO
        for i in range(8):
            q = levels3[(points[index, i] - 1) // 2]
            diff = scale * q - xb[at + i]
            d2 += weight[w_at + i] * diff * diff
        if d2 < best_d2:
            best_d2 = d2
            best = index
    if best < 0:  # NaN distances: llama.cpp aborts; the nearest listed point instead
        best = np.int32(neighbours[start + 1])
    for i in range(8):
        levels[l_at + i] = (points[best, i] - 1) // 2
    return best


@inline
def _point_of(levels, at, kmap):
    u = 0
    for j in range(8):
        u |= levels[at + j] << (2 * j)
    return kmap[u]


@inline
def _weights(xb, at, n, qw, qw_at, use_qw, sigma2, weight):
    for i in range(n):
        v = xb[at + i]
        weight[i] = qw[qw_at + i] * np.sqrt(sigma2 + v * v) if use_qw else v * v


@inline
def _abs_max(xb, at, n):
    top = np.abs(xb[at])
    for i in range(1, n):
        a = np.abs(xb[at + i])
        top = top if top > a else a
    return top


@kernel
def iq1_s(x, qw, blocks_per_row, out, points, kmap, neighbours):
    """``quantize_iq1_s``: ``x`` ``(blocks, 256)`` float32, ``qw`` one row's imatrix."""
    weight = np.empty(32, np.float32)
    order = np.empty(32, np.int32)
    levels = np.empty(32, np.int32)
    sumx = np.empty(33, np.float32)
    sumw = np.empty(33, np.float32)
    scales = np.empty(8, np.float32)
    shifts = np.empty(8, np.int32)
    index = np.empty(4, np.int32)
    for blk in range(x.shape[0]):
        xb = x[blk]
        out[blk, :] = 0
        sigma2 = F32(2.0) * sum_squares(xb, 256) / F32(256.0)
        qw_at = (blk % blocks_per_row) * 256
        max_scale = _ZERO
        for ib in range(8):
            at = 32 * ib
            _weights(xb, at, 32, qw, qw_at + at, True, sigma2, weight)
            top = _abs_max(xb, at, 32)
            scales[ib] = _ZERO
            shifts[ib] = 1
            if top < _EPS_IQ1_S:
                continue
            _stable_order(xb, at, 32, order)
            sumx[0] = _ZERO
            sumw[0] = _ZERO
            for j in range(32):
                i = order[j]
                sumx[j + 1] = sumx[j] + weight[i] * xb[at + i]
                sumw[j + 1] = sumw[j] + weight[i]
            best_score = -F32_MAX
            scale = top
            best1 = -1
            best2 = -1
            best_shift = 0
            for i1 in range(33):
                x1 = sumx[i1] - sumx[0]
                w1 = sumw[i1] - sumw[0]
                for i2 in range(i1, 33):
                    x2 = sumx[i2] - sumx[i1]
                    x3 = sumx[32] - sumx[i2]
                    w2 = sumw[i2] - sumw[i1]
                    w3 = sumw[32] - sumw[i2]
                    sumqx = x1 * _P0 + x2 * _P1 + x3 * _P2  # +delta
                    sumq2 = w1 * _P0 * _P0 + w2 * _P1 * _P1 + w3 * _P2 * _P2
                    if sumq2 > _ZERO and sumqx * sumqx > best_score * sumq2:
                        scale = sumqx / sumq2
                        best_score = scale * sumqx
                        best1 = i1
                        best2 = i2
                        best_shift = 1
                    sumqx = x1 * _M0 + x2 * _M1 + x3 * _M2  # -delta
                    sumq2 = w1 * _M0 * _M0 + w2 * _M1 * _M1 + w3 * _M2 * _M2
                    if sumq2 > _ZERO and sumqx * sumqx > best_score * sumq2:
                        scale = sumqx / sumq2
                        best_score = scale * sumqx
                        best1 = i1
                        best2 = i2
                        best_shift = -1
            if best1 < 0 or best2 < 0 or best_shift == 0:
                continue
            for j in range(32):
                levels[order[j]] = 0 if j < best1 else 1 if j < best2 else 2
            if scale < _ZERO:
                for j in range(32):
                    levels[j] = 2 - levels[j]
                scale = -scale
                best_shift = -best_shift
            xs = _X_P if best_shift == 1 else _X_M
            all_on_grid = True
            for k in range(4):
                gi = _point_of(levels, 8 * k, kmap)
                if gi < 0:
                    all_on_grid = False
                    gi = _best_neighbour(neighbours, -gi - 1, points, xb, at + 8 * k, weight, 8 * k, scale, xs,
                                         levels, 8 * k)
                index[k] = gi
            if not all_on_grid:
                sumqx = _ZERO
                sumq2 = _ZERO
                for k in range(4):
                    for j in range(8):
                        w = weight[8 * k + j]
                        q = xs[(points[index[k], j] - 1) // 2]
                        sumqx += w * q * xb[at + 8 * k + j]
                        sumq2 += w * q * q
                if sumqx > _ZERO and sumq2 > _ZERO:
                    scale = sumqx / sumq2
            h = 0
            for k in range(4):
                out[blk, 2 + 4 * ib + k] = np.uint8(index[k] & 0xFF)
                h |= (index[k] >> 8) << (3 * k)
            out[blk, 34 + 2 * ib] = np.uint8(h & 0xFF)
            out[blk, 35 + 2 * ib] = np.uint8((h >> 8) & 0xFF)
            scales[ib] = scale
            shifts[ib] = best_shift
            max_scale = max_scale if max_scale > scale else scale
        if max_scale == _ZERO:
            continue
        d = max_scale / F32(15.0)
        put_fp16(out, blk, 0, d * F32(1.125))  # ggml's fudge factor
        inv = _ONE / d
        for ib in range(8):
            l = max(0, min(7, nearest_int(_HALF * (inv * scales[ib] - _ONE))))
            if shifts[ib] == -1:
                l |= 8
            out[blk, 35 + 2 * ib] |= np.uint8((l << 4) & 0xFF)


@kernel
def iq1_m(x, qw, blocks_per_row, out, points, kmap, neighbours):
    """``quantize_iq1_m``: ``x`` ``(blocks, 256)`` float32, ``qw`` one row's imatrix or empty."""
    use_qw = qw.shape[0] > 0
    weight = np.empty(16, np.float32)
    order = np.empty(16, np.int32)
    levels = np.empty(16, np.int32)
    px = np.empty((2, 17), np.float32)
    pw = np.empty((2, 17), np.float32)
    sumqx = np.empty(4, np.float32)
    sumq2 = np.empty(4, np.float32)
    scales = np.empty(16, np.float32)
    shifts = np.empty(16, np.int32)
    index = np.empty(2, np.int32)
    sc = np.empty(4, np.int64)
    cp1 = _X_P[0] * _X_P[0] - _X_P[1] * _X_P[1]
    cp2 = _X_P[1] * _X_P[1] - _X_P[2] * _X_P[2]
    cm1 = _X_M[0] * _X_M[0] - _X_M[1] * _X_M[1]
    cm2 = _X_M[1] * _X_M[1] - _X_M[2] * _X_M[2]
    for blk in range(x.shape[0]):
        xb = x[blk]
        out[blk, :] = 0
        sigma2 = F32(2.0) * sum_squares(xb, 256) / F32(256.0)
        qw_at = (blk % blocks_per_row) * 256
        max_scale = _ZERO
        for ib in range(16):
            at = 16 * ib
            _weights(xb, at, 16, qw, qw_at + at, use_qw, sigma2, weight)
            top = _abs_max(xb, at, 16)
            scales[ib] = _ZERO
            shifts[ib] = 0
            if top < _EPS_IQ1_M:
                continue
            _stable_order(xb, at, 16, order)
            for h in range(2):
                px[h, 0] = _ZERO
                pw[h, 0] = _ZERO
            for j in range(16):
                i = order[j]
                h = 0 if i < 8 else 1
                px[h, j + 1] = px[h, j] + weight[i] * xb[at + i]
                px[1 - h, j + 1] = px[1 - h, j]
                pw[h, j + 1] = pw[h, j] + weight[i]
                pw[1 - h, j + 1] = pw[1 - h, j]
            best_score = -F32_MAX
            scale = top
            best1 = -1
            best2 = -1
            best_k = -1
            tx0 = px[0, 16]
            tx1 = px[1, 16]
            tw0 = pw[0, 16]
            tw1 = pw[1, 16]
            for i1 in range(17):
                for i2 in range(i1, 17):
                    sx0 = px[0, i1] + px[0, i2]
                    sx1 = px[1, i1] + px[1, i2]
                    qx_p0 = tx0 * _P2 - sx0
                    qx_m0 = tx0 * _M2 - sx0
                    qx_p1 = tx1 * _P2 - sx1
                    qx_m1 = tx1 * _M2 - sx1
                    q2_p0 = tw0 * _P2 * _P2 + pw[0, i1] * cp1 + pw[0, i2] * cp2
                    q2_m0 = tw0 * _M2 * _M2 + pw[0, i1] * cm1 + pw[0, i2] * cm2
                    q2_p1 = tw1 * _P2 * _P2 + pw[1, i1] * cp1 + pw[1, i2] * cp2
                    q2_m1 = tw1 * _M2 * _M2 + pw[1, i1] * cm1 + pw[1, i2] * cm2
                    sumqx[0] = qx_p0 + qx_p1
                    sumqx[1] = qx_p0 + qx_m1
                    sumqx[2] = qx_m0 + qx_p1
                    sumqx[3] = qx_m0 + qx_m1
                    sumq2[0] = q2_p0 + q2_p1
                    sumq2[1] = q2_p0 + q2_m1
                    sumq2[2] = q2_m0 + q2_p1
                    sumq2[3] = q2_m0 + q2_m1
                    for k in range(4):
                        if sumq2[k] > _ZERO and sumqx[k] * sumqx[k] > best_score * sumq2[k]:
                            scale = sumqx[k] / sumq2[k]
                            best_score = scale * sumqx[k]
                            best1 = i1
                            best2 = i2
                            best_k = k
            if best1 < 0 or best2 < 0 or best_k < 0:
                continue
            for j in range(16):
                levels[order[j]] = 0 if j < best1 else 1 if j < best2 else 2
            if scale < _ZERO:
                for j in range(16):
                    levels[j] = 2 - levels[j]
                scale = -scale
                best_k = 3 - best_k
            all_on_grid = True
            for k in range(2):
                xs = (_X_P if best_k < 2 else _X_M) if k == 0 else (_X_P if best_k % 2 == 0 else _X_M)
                gi = _point_of(levels, 8 * k, kmap)
                if gi < 0:
                    all_on_grid = False
                    gi = _best_neighbour(neighbours, -gi - 1, points, xb, at + 8 * k, weight, 8 * k, scale, xs,
                                         levels, 8 * k)
                index[k] = gi
            if not all_on_grid:
                fx = _ZERO
                f2 = _ZERO
                for k in range(2):
                    xs = (_X_P if best_k < 2 else _X_M) if k == 0 else (_X_P if best_k % 2 == 0 else _X_M)
                    for j in range(8):
                        w = weight[8 * k + j]
                        q = xs[(points[index[k], j] - 1) // 2]
                        fx += w * q * xb[at + 8 * k + j]
                        f2 += w * q * q
                if fx > _ZERO and f2 > _ZERO:
                    scale = fx / f2
            out[blk, 2 * ib] = np.uint8(index[0] & 0xFF)
            out[blk, 2 * ib + 1] = np.uint8(index[1] & 0xFF)
            out[blk, 32 + ib] = np.uint8(((index[0] >> 8) | ((index[1] >> 8) << 4)) & 0xFF)
            scales[ib] = scale
            shifts[ib] = best_k
            max_scale = max_scale if max_scale > scale else scale
        if max_scale == _ZERO:
            continue
        for j in range(4):
            sc[j] = 0
        d = max_scale / F32(15.0)
        inv = _ONE / d
        fx = _ZERO
        f2 = _ZERO
        for ib in range(16):
            at = 16 * ib
            l = max(0, min(7, nearest_int(_HALF * (inv * scales[ib] - _ONE))))
            sc[ib // 4] |= np.int64(l) << (3 * (ib % 4))
            qh = np.int32(out[blk, 32 + ib]) | _IQ1M_MASKS[shifts[ib]]
            out[blk, 32 + ib] = np.uint8(qh)
            _weights(xb, at, 16, qw, qw_at + at, use_qw, sigma2, weight)
            for k in range(2):
                xs = (_X_P if shifts[ib] < 2 else _X_M) if k == 0 else (_X_P if shifts[ib] % 2 == 0 else _X_M)
                gi = np.int32(out[blk, 2 * ib + k]) + ((qh << (8 - 4 * k)) & 0x700)
                for j in range(8):
                    w = weight[8 * k + j]
                    q = xs[(points[gi, j] - 1) // 2] * f32(2 * l + 1)
                    fx += w * q * xb[at + 8 * k + j]
                    f2 += w * q * q
        if f2 > _ZERO:
            d = fx / f2
        s = np.int64(fp32_to_fp16(d * F32(1.1125)))  # ggml's fudge factor
        sc[0] |= (s & 0x000F) << 12
        sc[1] |= (s & 0x00F0) << 8
        sc[2] |= (s & 0x0F00) << 4
        sc[3] |= s & 0xF000
        for j in range(4):
            out[blk, 48 + 2 * j] = np.uint8(sc[j] & 0xFF)
            out[blk, 49 + 2 * j] = np.uint8((sc[j] >> 8) & 0xFF)
