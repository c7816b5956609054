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

The kernels take a batch of blocks at a time: each group's weights, order and prefix
sums one group at a time; the split search for all the batch's groups at once, one group
per vector lane (:func:`_split_search_s`, :func:`_split_search_m`: a ``select`` per
candidate split instead of C's ``if``, so each lane sees C's sequence of best updates);
then each group's grid points and each block's bytes. Measured per block on one
thread against libggml (a million blocks of the oracle's data): 0.30x (IQ1_S), 0.34x
(IQ1_M), from 1.03x and 1.14x group at a time (search, insertion sort and neighbour
distances one group or point at a time were nearly all of it).
"""

from __future__ import annotations

import numpy as np

from quantize.blocks.grid_search import sum_squares
from quantize.blocks.jit import (F32, F32_MAX, f32, fp32_to_fp16, helper, inline, kernel, nearest_int, order_key, pick,
                                put_fp16)

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
_NO_KEY = np.int32(0x7FFFFFFF)  # above every finite distance's order_key
_IQ1M_MASKS = np.array([0x00, 0x80, 0x08, 0x88], np.int32)


@inline
def _stable_order(xb, at, n, order, rank):
    """The positions of ``xb[at:at+n]`` by increasing value, equal values in their order
    (glibc's ``qsort`` is a stable merge sort).

    Each value's place is counted, without a branch, as the number of values below it
    plus the equal ones before it (one vector comparison per value); a group holding NaN
    (no order at all) is sorted by insertion instead, as before.
    """
    has_nan = False
    for i in range(n):
        v = xb[at + i]
        has_nan |= v != v
        r = np.int32(0)
        for j in range(n):
            u = xb[at + j]
            r += pick((u < v) | ((u == v) & (j < i)), np.int32(1), np.int32(0))
        rank[i] = r
    if not has_nan:
        for i in range(n):
            order[rank[i]] = i
        return
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


@inline
def _grid_codes(points):
    """Each grid point's eight levels (0, 1, 2) packed two bits apiece, position 0 lowest."""
    codes = np.empty(points.shape[0], np.int32)
    for p in range(points.shape[0]):
        c = 0
        for i in range(8):
            c |= ((np.int32(points[p, i]) - 1) // 2) << (2 * i)
        codes[p] = c
    return codes


@helper
def _best_neighbour(neighbours, start, codes, xb, at, weight, w_at, scale, levels3, levels, l_at, terms, listed, keys):
    """``iq1_find_best_neighbour2``: the listed point nearest ``xb[at:at+8]`` in
    ``sum w*(scale*q - x)²`` (first of equals); its levels go to ``levels[l_at:]``.

    Each position's term ``w*diff*diff`` takes one of three values (one per level), so
    the 24 are computed first, with C's operations; every listed point's distance is
    then its eight terms summed in C's order, the points side by side as vector lanes
    (each picks its terms by its packed levels), and the first least distance wins as
    in C's loop.
    """
    for lv in range(3):
        q = scale * levels3[lv]
        for i in range(8):
            diff = q - xb[at + i]
            terms[8 * lv + i] = weight[w_at + i] * diff * diff
    n = np.int32(neighbours[start])
    for j in range(n):
        listed[j] = codes[np.int32(neighbours[start + 1 + j])]
    for j in range(n):
        c = listed[j]
        d2 = _ZERO
        for i in range(8):
            lv = (c >> (2 * i)) & 3
            d2 += pick(lv == 0, terms[i], pick(lv == 1, terms[8 + i], terms[16 + i]))
        keys[j] = pick(d2 < F32_MAX, order_key(d2), _NO_KEY)  # C's best starts at FLT_MAX
    least = _NO_KEY
    for j in range(n):
        least = min(least, keys[j])
    best = 0  # NaN distances: llama.cpp aborts; the nearest listed point instead
    if least != _NO_KEY:
        while keys[best] != least:  # the first of equals, as C's strict "<"
            best += 1
    index = np.int32(neighbours[start + 1 + best])
    c = codes[index]
    for i in range(8):
        levels[l_at + i] = (c >> (2 * i)) & 3
    return index


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


#: Groups searched side by side as lanes: 8 IQ1_S blocks (8 groups of 32) or 4 IQ1_M
#: blocks (16 groups of 16) at a time.
_LANES = 64


@inline
def _consider(qx, q2, best, scale, choice, this):
    """C's ``if (sumq2 > 0 && sumqx*sumqx > best*sumq2) { scale = sumqx/sumq2; best =
    scale*sumqx; ... }`` for one candidate, as selects: the new ``(best, scale, choice)``
    and whether it won (``choice`` becomes ``this``)."""
    won = (q2 > _ZERO) & (qx * qx > best * q2)
    r = qx / q2
    return won, pick(won, r * qx, best), pick(won, r, scale), pick(won, this, choice)


@helper
def _split_search_s(sumx, sumw, lanes, best, scale, cut1, cut2, shift):
    """IQ1_S's exhaustive split search for ``lanes`` groups at once.

    ``sumx[j, g]``/``sumw[j, g]``: group ``g``'s prefix sums over its sorted values. Every
    lane runs C's loop (splits ``i1 <= i2`` in order, +delta before -delta, an update only
    on a strictly better ``sumqx²`` vs ``best*sumq2``) with C's float32 operations; the
    choice is a ``select`` instead of a branch, so one split is one vector step across the
    lanes and the sequence of updates in each lane is C's.
    """
    n = sumx.shape[0] - 1
    for i1 in range(n + 1):
        for i2 in range(i1, n + 1):
            c1 = np.int32(i1)
            c2 = np.int32(i2)
            for g in range(lanes):
                x0 = sumx[0, g]
                w0 = sumw[0, g]
                x1 = sumx[i1, g] - x0
                w1 = sumw[i1, g] - w0
                x2 = sumx[i2, g] - sumx[i1, g]
                x3 = sumx[n, g] - sumx[i2, g]
                w2 = sumw[i2, g] - sumw[i1, g]
                w3 = sumw[n, g] - sumw[i2, g]
                up_p, b, sc, sh = _consider(x1 * _P0 + x2 * _P1 + x3 * _P2,  # +delta
                                            w1 * _P0 * _P0 + w2 * _P1 * _P1 + w3 * _P2 * _P2,
                                            best[g], scale[g], shift[g], np.int32(1))
                up_m, best[g], scale[g], shift[g] = _consider(x1 * _M0 + x2 * _M1 + x3 * _M2,  # -delta
                                                              w1 * _M0 * _M0 + w2 * _M1 * _M1 + w3 * _M2 * _M2,
                                                              b, sc, sh, np.int32(-1))
                found = up_p | up_m
                cut1[g] = pick(found, c1, cut1[g])
                cut2[g] = pick(found, c2, cut2[g])


@helper
def _split_search_m(px0, px1, pw0, pw1, lanes, best, scale, cut1, cut2, signs):
    """IQ1_M's exhaustive split search for ``lanes`` groups at once (see
    :func:`_split_search_s`): prefix sums per half of each group (``px0``/``pw0`` the
    first eight values', ``px1``/``pw1`` the last eight's), the four sign choices
    ``k`` (0: +,+; 1: +,-; 2: -,+; 3: -,-) in C's order and operations."""
    n = px0.shape[0] - 1
    cp1 = _P0 * _P0 - _P1 * _P1
    cp2 = _P1 * _P1 - _P2 * _P2
    cm1 = _M0 * _M0 - _M1 * _M1
    cm2 = _M1 * _M1 - _M2 * _M2
    for i1 in range(n + 1):
        for i2 in range(i1, n + 1):
            c1 = np.int32(i1)
            c2 = np.int32(i2)
            for g in range(lanes):
                tx0 = px0[n, g]
                tx1 = px1[n, g]
                tw0 = pw0[n, g]
                tw1 = pw1[n, g]
                sx0 = px0[i1, g] + px0[i2, g]
                sx1 = px1[i1, g] + px1[i2, g]
                qx_p0 = tx0 * _P2 - sx0
                qx_m0 = tx0 * _M2 - sx0
                qx_p1 = tx1 * _P2 - sx1
                qx_m1 = tx1 * _M2 - sx1
                q2_p0 = tw0 * _P2 * _P2 + pw0[i1, g] * cp1 + pw0[i2, g] * cp2
                q2_m0 = tw0 * _M2 * _M2 + pw0[i1, g] * cm1 + pw0[i2, g] * cm2
                q2_p1 = tw1 * _P2 * _P2 + pw1[i1, g] * cp1 + pw1[i2, g] * cp2
                q2_m1 = tw1 * _M2 * _M2 + pw1[i1, g] * cm1 + pw1[i2, g] * cm2
                up0, b, sc, k = _consider(qx_p0 + qx_p1, q2_p0 + q2_p1, best[g], scale[g], signs[g], np.int32(0))
                up1, b, sc, k = _consider(qx_p0 + qx_m1, q2_p0 + q2_m1, b, sc, k, np.int32(1))
                up2, b, sc, k = _consider(qx_m0 + qx_p1, q2_m0 + q2_p1, b, sc, k, np.int32(2))
                up3, best[g], scale[g], signs[g] = _consider(qx_m0 + qx_m1, q2_m0 + q2_m1, b, sc, k, np.int32(3))
                found = up0 | up1 | up2 | up3
                cut1[g] = pick(found, c1, cut1[g])
                cut2[g] = pick(found, c2, cut2[g])


@inline
def _search_state(lanes):
    """Per lane: best score, scale, the two cuts and the sign choice (C's initial values
    are set per group)."""
    return (np.empty(lanes, np.float32), np.empty(lanes, np.float32), np.empty(lanes, np.int32),
            np.empty(lanes, np.int32), np.empty(lanes, np.int32))


@inline
def _start_group(xb, at, n, qw, qw_at, use_qw, sigma2, weight, g, tops, best, scale, cut1, cut2, choice, unset):
    """A group's weights and largest magnitude, and C's starting search state in lane ``g``."""
    _weights(xb, at, n, qw, qw_at + at, use_qw, sigma2, weight)
    top = _abs_max(xb, at, n)
    tops[g] = top
    best[g] = -F32_MAX
    scale[g] = top
    cut1[g] = -1
    cut2[g] = -1
    choice[g] = unset
    return top


@inline
def _cut_levels(order, n, best1, best2, scale, levels):
    """Levels 0, 1, 2 of the sorted values by the two cuts; when the scale came out
    negative, the levels flipped and the scale made positive. Returns (scale, flipped)."""
    for j in range(n):
        levels[order[j]] = 0 if j < best1 else 1 if j < best2 else 2
    if scale < _ZERO:
        for j in range(n):
            levels[j] = 2 - levels[j]
        return -scale, True
    return scale, False


@inline
def _grid_points(levels, n_points, minus, kmap, neighbours, codes, points, xb, at, weight, scale, index, terms,
                 listed, keys):
    """Each 8-value point's grid index into ``index`` (the nearest listed neighbour when
    off the grid; ``minus[k]``: point ``k`` is shifted by -delta); when one was off, the
    scale re-fitted to the points as C does. Returns the scale."""
    all_on_grid = True
    for k in range(n_points):
        xs = _X_M if minus[k] else _X_P
        gi = _point_of(levels, 8 * k, kmap)
        if gi < 0:
            all_on_grid = False
            gi = _best_neighbour(neighbours, -gi - 1, codes, xb, at + 8 * k, weight, 8 * k, scale, xs, levels, 8 * k,
                                 terms, listed, keys)
        index[k] = gi
    if not all_on_grid:
        sumqx = _ZERO
        sumq2 = _ZERO
        for k in range(n_points):
            xs = _X_M if minus[k] else _X_P
            for j in range(8):
                w = weight[8 * k + j]
                q = xs[(points[index[k], j] - 1) // 2]
                sumqx += w * q * xb[at + 8 * k + j]
                sumq2 += w * q * q
        if sumqx > _ZERO and sumq2 > _ZERO:
            scale = sumqx / sumq2
    return scale


@kernel
def iq1_s(x, qw, blocks_per_row, out, points, kmap, neighbours):
    """``quantize_iq1_s``: ``x`` ``(blocks, 256)`` float32, ``qw`` one row's imatrix.

    Per batch of blocks: each group's weights, order and prefix sums (one group at a
    time), the split search across all the batch's groups (:func:`_split_search_s`), then
    each group's grid points and each block's bytes.
    """
    per_block = 8
    batch = _LANES // per_block
    weights = np.empty((_LANES, 32), np.float32)
    orders = np.empty((_LANES, 32), np.int32)
    tops = np.empty(_LANES, np.float32)
    sumx = np.empty((33, _LANES), np.float32)
    sumw = np.empty((33, _LANES), np.float32)
    best, found_scale, cut1, cut2, shift = _search_state(_LANES)
    levels = np.empty(32, np.int32)
    rank = np.empty(32, np.int32)
    codes = _grid_codes(points)
    terms = np.empty(32, np.float32)
    listed = np.empty(points.shape[0], np.int32)
    keys = np.empty(points.shape[0], np.int32)
    scales = np.empty(8, np.float32)
    shifts = np.empty(8, np.int32)
    index = np.empty(4, np.int32)
    minus = np.empty(4, np.bool_)
    for first in range(0, x.shape[0], batch):
        count = min(batch, x.shape[0] - first)
        for b in range(count):
            xb = x[first + b]
            sigma2 = F32(2.0) * sum_squares(xb, 256) / F32(256.0)
            qw_at = ((first + b) % blocks_per_row) * 256
            for ib in range(per_block):
                g = b * per_block + ib
                at = 32 * ib
                weight = weights[g]
                top = _start_group(xb, at, 32, qw, qw_at, True, sigma2, weight, g, tops, best, found_scale, cut1, cut2,
                                   shift, np.int32(0))
                sumx[0, g] = _ZERO
                sumw[0, g] = _ZERO
                if top < _EPS_IQ1_S:  # not searched: all sums 0, so no split scores
                    for j in range(32):
                        sumx[j + 1, g] = _ZERO
                        sumw[j + 1, g] = _ZERO
                    continue
                order = orders[g]
                _stable_order(xb, at, 32, order, rank)
                for j in range(32):
                    i = order[j]
                    sumx[j + 1, g] = sumx[j, g] + weight[i] * xb[at + i]
                    sumw[j + 1, g] = sumw[j, g] + weight[i]
        _split_search_s(sumx, sumw, count * per_block, best, found_scale, cut1, cut2, shift)
        for b in range(count):
            blk = first + b
            xb = x[blk]
            out[blk, :] = 0
            max_scale = _ZERO
            for ib in range(per_block):
                g = b * per_block + ib
                at = 32 * ib
                scales[ib] = _ZERO
                shifts[ib] = 1
                best1 = cut1[g]
                best2 = cut2[g]
                best_shift = shift[g]
                if tops[g] < _EPS_IQ1_S or best1 < 0 or best2 < 0 or best_shift == 0:
                    continue
                scale, flipped = _cut_levels(orders[g], 32, best1, best2, found_scale[g], levels)
                if flipped:
                    best_shift = -best_shift
                for k in range(4):
                    minus[k] = best_shift == -1
                scale = _grid_points(levels, 4, minus, kmap, neighbours, codes, points, xb, at, weights[g], scale,
                                     index, terms, listed, keys)
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
            for ib in range(per_block):
                l = max(0, min(7, nearest_int(_HALF * (inv * scales[ib] - _ONE))))
                if shifts[ib] == -1:
                    l |= 8
                out[blk, 35 + 2 * ib] |= np.uint8((l << 4) & 0xFF)


@kernel
def iq1_m(x, qw, blocks_per_row, out, points, kmap, neighbours):
    """``quantize_iq1_m``: ``x`` ``(blocks, 256)`` float32, ``qw`` one row's imatrix or empty.

    Batched like :func:`iq1_s`, the split search in :func:`_split_search_m`.
    """
    use_qw = qw.shape[0] > 0
    per_block = 16
    batch = _LANES // per_block
    weights = np.empty((_LANES, 16), np.float32)
    orders = np.empty((_LANES, 16), np.int32)
    tops = np.empty(_LANES, np.float32)
    px0 = np.empty((17, _LANES), np.float32)
    px1 = np.empty((17, _LANES), np.float32)
    pw0 = np.empty((17, _LANES), np.float32)
    pw1 = np.empty((17, _LANES), np.float32)
    best, found_scale, cut1, cut2, signs = _search_state(_LANES)
    levels = np.empty(16, np.int32)
    rank = np.empty(16, np.int32)
    codes = _grid_codes(points)
    terms = np.empty(32, np.float32)
    listed = np.empty(points.shape[0], np.int32)
    keys = np.empty(points.shape[0], np.int32)
    scales = np.empty(16, np.float32)
    shifts = np.empty(16, np.int32)
    index = np.empty(2, np.int32)
    minus = np.empty(2, np.bool_)
    sc = np.empty(4, np.int64)
    for first in range(0, x.shape[0], batch):
        count = min(batch, x.shape[0] - first)
        for b in range(count):
            xb = x[first + b]
            sigma2 = F32(2.0) * sum_squares(xb, 256) / F32(256.0)
            qw_at = ((first + b) % blocks_per_row) * 256
            for ib in range(per_block):
                g = b * per_block + ib
                at = 16 * ib
                wg = weights[g]
                top = _start_group(xb, at, 16, qw, qw_at, use_qw, sigma2, wg, g, tops, best, found_scale, cut1, cut2,
                                   signs, np.int32(-1))
                px0[0, g] = _ZERO
                px1[0, g] = _ZERO
                pw0[0, g] = _ZERO
                pw1[0, g] = _ZERO
                if top < _EPS_IQ1_M:  # not searched: all sums 0, so no split scores
                    for j in range(16):
                        px0[j + 1, g] = _ZERO
                        px1[j + 1, g] = _ZERO
                        pw0[j + 1, g] = _ZERO
                        pw1[j + 1, g] = _ZERO
                    continue
                order = orders[g]
                _stable_order(xb, at, 16, order, rank)
                x0 = _ZERO
                x1 = _ZERO
                w0 = _ZERO
                w1 = _ZERO
                for j in range(16):  # selects, not branches: the half a value is in is a coin toss
                    i = order[j]
                    wx = wg[i] * xb[at + i]
                    first_half = i < 8
                    x0 = pick(first_half, x0 + wx, x0)
                    w0 = pick(first_half, w0 + wg[i], w0)
                    x1 = pick(first_half, x1, x1 + wx)
                    w1 = pick(first_half, w1, w1 + wg[i])
                    px0[j + 1, g] = x0
                    pw0[j + 1, g] = w0
                    px1[j + 1, g] = x1
                    pw1[j + 1, g] = w1
        _split_search_m(px0, px1, pw0, pw1, count * per_block, best, found_scale, cut1, cut2, signs)
        for b in range(count):
            blk = first + b
            xb = x[blk]
            out[blk, :] = 0
            max_scale = _ZERO
            for ib in range(per_block):
                g = b * per_block + ib
                at = 16 * ib
                scales[ib] = _ZERO
                shifts[ib] = 0
                best1 = cut1[g]
                best2 = cut2[g]
                best_k = signs[g]
                if tops[g] < _EPS_IQ1_M or best1 < 0 or best2 < 0 or best_k < 0:
                    continue
                scale, flipped = _cut_levels(orders[g], 16, best1, best2, found_scale[g], levels)
                if flipped:
                    best_k = 3 - best_k
                minus[0] = best_k >= 2  # k: the first half's sign in bit 1, the second's in bit 0
                minus[1] = best_k % 2 == 1
                scale = _grid_points(levels, 2, minus, kmap, neighbours, codes, points, xb, at, weights[g], scale,
                                     index, terms, listed, keys)
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
            for ib in range(per_block):
                at = 16 * ib
                l = max(0, min(7, nearest_int(_HALF * (inv * scales[ib] - _ONE))))
                sc[ib // 4] |= np.int64(l) << (3 * (ib % 4))
                qh = np.int32(out[blk, 32 + ib]) | _IQ1M_MASKS[shifts[ib]]
                out[blk, 32 + ib] = np.uint8(qh)
                weight = weights[b * per_block + ib]  # as computed for the search
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
