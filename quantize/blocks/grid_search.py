"""The steps the grid i-quants (IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S) share, as ggml-quants.c does them.

A *group* (16 or 32 values) gets one scale; it is cut into *points* of ``width`` values
(8 for the IQ2 grids, 4 for the IQ3 ones) that must each be a point of the type's grid
(:mod:`.iq_grids`). Magnitudes are quantized; signs are stored apart. This is the search
every ``quantize_row_iq*_impl`` runs per group::

    for each of 2*n_trials + 1 trial scales  inv = (2*kmax - 1 + step*t) / top:
        levels = clip(nearest_int(0.5*(inv*|x| - 1)), 0, kmax - 1)
        a point off the grid -> its best-weighted listed neighbour at 1/inv
        keep the trial with the largest sumqx²/sumq2 (q = 2*level + 1)
    re-fit points to the winning scale (which ones: see the ``REFIT_*`` modes), and
    the scale to them

All float32, in C's operation order (``w*x*q`` is ``(w*x)*q``); C's ``if`` on a strictly
better value keeps the first of equals.

:func:`group_search_lanes` runs it for many groups at once: the kernels put the groups
of a batch of blocks side by side as *lanes* (``xt[i, g]``: value ``i`` of group ``g``),
so each trial's rounding, grid lookup, sums and choice is one loop across the lanes that
LLVM vectorizes, each lane still summing in C's order; only the off-grid points' neighbour
searches go one at a time. Measured against the group-at-a-time loop on the same data:
the trials outside the neighbour searches became 5-10x cheaper, leaving those searches
(a few to a few dozen listed points each, 70-80 % of the off-grid points) most of the time.
"""

from __future__ import annotations

import numpy as np

from quantize.blocks.jit import F32, F32_MAX, f32, helper, inline, nearest_int, pick

_ZERO = F32(0.0)
_ONE = F32(1.0)
_HALF = F32(0.5)

#: After the trials, re-fit the points that were off the grid (IQ3_XXS, IQ2_XS) ...
REFIT_OFF_GRID = 0
#: ... every point, when one was off the grid (IQ3_S) ...
REFIT_ALL_IF_OFF_GRID = 1
#: ... every point, always (IQ2_XXS, IQ2_S).
REFIT_ALL = 2


@inline
def group_weights(xb, at, n, qw, qw_at, use_qw, sigma2, weight, waux):
    """``qw * sqrtf(sigma2 + x²)`` (or ``x²`` without an imatrix), and its square root."""
    for i in range(n):
        v = xb[at + i]
        weight[i] = qw[qw_at + i] * np.sqrt(sigma2 + v * v) if use_qw else v * v
        waux[i] = np.sqrt(weight[i])


@inline
def sum_squares(xb, n):
    """``sumx2`` of a super-block, left to right."""
    total = _ZERO
    for i in range(n):
        total += xb[i] * xb[i]
    return total


@inline
def plain_signs(xb, at, xval, x_at):
    """Eight values' magnitudes into ``xval``; their 8 sign bits (IQ3_S, IQ2_S)."""
    s = 0
    for i in range(8):
        v = xb[at + i]
        if v >= _ZERO:
            xval[x_at + i] = v
        else:
            xval[x_at + i] = -v
            s |= 1 << i
    return s


@inline
def even_signs(xb, at, weight, w_at, xval, x_at):
    """Eight values' magnitudes into ``xval`` and their sign bits, made even in number by
    flipping the value whose ``w*x*x`` is least (its 8th sign is implied): the low 7 bits."""
    flips = 0
    s = 0
    for i in range(8):
        v = xb[at + i]
        if v >= _ZERO:
            xval[x_at + i] = v
        else:
            xval[x_at + i] = -v
            flips += 1
            s |= 1 << i
    if flips % 2:
        imin = 0
        v = xb[at]
        least = weight[w_at] * v * v
        for i in range(1, 8):
            v = xb[at + i]
            cost = weight[w_at + i] * v * v
            if cost < least:
                least = cost
                imin = i
        xval[x_at + imin] = -xval[x_at + imin]
        s ^= 1 << imin
    return s & 127


@inline
def group_max(xval, n):
    """``max = xval[0]; max = MAX(max, xval[i])``."""
    largest = xval[0]
    for i in range(1, n):
        largest = largest if largest > xval[i] else xval[i]
    return largest


@inline
def lane_arrays(n, lanes, sign_words):
    """A kernel's lane arrays: magnitudes, weights, their square roots and levels
    ``(n, lanes)``; per lane the largest magnitude, the scale, whether it is searched and
    its sign words."""
    return (np.empty((n, lanes), np.float32), np.empty((n, lanes), np.float32), np.empty((n, lanes), np.float32),
            np.empty((n, lanes), np.int32), np.empty(lanes, np.float32), np.empty(lanes, np.float32),
            np.empty(lanes, np.bool_), np.empty((lanes, sign_words), np.int32))


@inline
def positive_scale(g, scale, signs, mask):
    """Lane ``g``'s scale made positive, its signs flipped when it was negative (ggml's
    ``if (scale < 0)``)."""
    s = scale[g]
    if s < _ZERO:
        s = -s
        scale[g] = s
        for k in range(signs.shape[1]):
            signs[g, k] = (~signs[g, k]) & mask
    return s


@inline
def reset_lanes(count, xt, wt, waux, levels, top, scale, active):
    """Every lane inactive (scale 0, top 1), and the lanes from ``count`` on zeroed: a
    short last batch searches lanes nobody reads, on harmless values."""
    n, lanes = xt.shape
    for g in range(lanes):
        active[g] = False
        top[g] = _ONE
        scale[g] = _ZERO
    for i in range(n):
        for g in range(count, lanes):
            xt[i, g] = _ZERO
            wt[i, g] = _ZERO
            waux[i, g] = _ZERO
            levels[i, g] = 0


@inline
def put_lane(g, n, xval, weight, waux, xt, wt, at, levels):
    """One group's magnitudes and weights into lane ``g``, its start levels 0."""
    for i in range(n):
        xt[i, g] = xval[i]
        wt[i, g] = weight[i]
        at[i, g] = waux[i]
        levels[i, g] = 0


@inline
def lane_point(levels, g, at, width, bits):
    """The lattice index ``u`` (:mod:`.iq_grids`) of lane ``g``'s point whose levels start
    at ``levels[at, g]``."""
    u = 0
    for i in range(width):
        u |= levels[at + i, g] << (bits * i)
    return u


@inline
def best_neighbour(neighbours, start, points, xt, wt, g, at, scale, levels, width):
    """``iq2_find_best_neighbour`` / ``iq3_find_best_neighbour`` for lane ``g``: of the
    grid points listed at ``neighbours[start]`` (:mod:`.iq_grids`), the one with the least
    ``sum w*(scale*q - x)²`` (the first of equals: only a smaller sum replaces the best);
    its levels go to ``levels[at:, g]``. The best is kept with selects, not a branch:
    which point wins is data, and a mispredicted branch per listed point cost more than
    its sum.

    Where every distance is NaN (weights that overflowed float32) llama.cpp aborts; here the
    nearest listed point is taken.
    """
    best_d2 = F32_MAX
    best = np.int32(neighbours[start + 1])
    for j in range(1, np.int32(neighbours[start]) + 1):
        index = np.int32(neighbours[start + j])
        d2 = _ZERO
        for i in range(width):
            diff = scale * f32(points[index, i]) - xt[at + i, g]
            d2 += wt[at + i, g] * diff * diff
        better = d2 < best_d2
        best_d2 = pick(better, d2, best_d2)
        best = pick(better, index, best)
    for i in range(width):
        levels[at + i, g] = (points[best, i] - 1) // 2


@helper
def _refit(xt, wt, waux, g, width, bits, kmax, scale, on_grid, refit, points, kmap, neighbours, levels):
    """After the trials, lane ``g``: the points ``refit`` names re-fitted to ``scale``, and
    the scale to them (when some point was off the grid, or always for ``REFIT_ALL``);
    returns the scale."""
    n = xt.shape[0]
    n_points = n // width
    off_grid = 0
    for k in range(n_points):
        if not on_grid[k, g]:
            off_grid += 1
    if (refit == REFIT_ALL or off_grid > 0) and scale > _ZERO:
        inv = _ONE / scale
        for k in range(n_points):
            if refit == REFIT_OFF_GRID and on_grid[k, g]:
                continue
            u = 0
            for i in range(width):
                l = nearest_int(_HALF * (inv * xt[width * k + i, g] - _ONE))
                u |= max(0, min(kmax - 1, l)) << (bits * i)
            index = kmap[u]
            if index < 0:
                best_neighbour(neighbours, -index - 1, points, xt, waux, g, width * k, scale, levels, width)
            else:
                for i in range(width):
                    levels[width * k + i, g] = (points[index, i] - 1) // 2
        sumqx = _ZERO
        sumq2 = _ZERO
        for i in range(n):
            w = wt[i, g]
            q = f32(2 * levels[i, g] + 1)
            sumqx += w * xt[i, g] * q
            sumq2 += w * q * q
        if sumq2 > _ZERO:
            scale = sumqx / sumq2
    return scale


@helper
def group_search_lanes(xt, wt, waux, active, width, bits, kmax, top, scale, step, n_trials, refit,
                       points, kmap, neighbours, levels):
    """The scale search of every lane of ``xt`` (``(n, lanes)``: one group's magnitudes a
    lane, ``wt`` its weights, ``waux`` their square roots) at once, as the module docstring
    says: each trial runs over all lanes, each lane summing in C's order, so the lanes
    vectorize; points off the grid go to their best neighbour one at a time; then each
    active lane's re-fit. ``scale`` and ``levels`` (``(n, lanes)``) hold the start values
    and get the results; inactive lanes are left as they are."""
    n, lanes = xt.shape
    n_points = n // width
    trial = np.empty((n, lanes), np.int32)
    on_grid = np.empty((n_points, lanes), np.bool_)
    on_trial = np.empty((n_points, lanes), np.bool_)
    best = np.empty(lanes, np.float32)
    inv = np.empty(lanes, np.float32)
    sumqx = np.empty(lanes, np.float32)
    sumq2 = np.empty(lanes, np.float32)
    better = np.empty(lanes, np.bool_)
    index = np.empty(lanes, np.int32)
    for g in range(lanes):
        best[g] = _ZERO
    for k in range(n_points):
        for g in range(lanes):
            on_grid[k, g] = refit == REFIT_OFF_GRID
    center = f32(2 * kmax - 1)
    for t in range(-n_trials, n_trials + 1):
        numerator = center + f32(t) * step
        for g in range(lanes):
            inv[g] = numerator / top[g]
            sumqx[g] = _ZERO
            sumq2[g] = _ZERO
        for i in range(n):
            for g in range(lanes):
                l = nearest_int(_HALF * (inv[g] * xt[i, g] - _ONE))
                trial[i, g] = max(0, min(kmax - 1, l))
        for k in range(n_points):
            for g in range(lanes):
                u = 0
                for i in range(width):
                    u |= trial[width * k + i, g] << (bits * i)
                index[g] = kmap[u]
            for g in range(lanes):
                on_trial[k, g] = index[g] >= 0
                if index[g] < 0 and active[g]:
                    best_neighbour(neighbours, -index[g] - 1, points, xt, waux, g, width * k, _ONE / inv[g], trial,
                                   width)
        for i in range(n):
            for g in range(lanes):
                w = wt[i, g]
                q = f32(2 * trial[i, g] + 1)
                sumqx[g] += w * xt[i, g] * q
                sumq2[g] += w * q * q
        for g in range(lanes):
            better[g] = (sumq2[g] > _ZERO) & (sumqx[g] * sumqx[g] > best[g] * sumq2[g]) & active[g]
            fitted = sumqx[g] / sumq2[g]
            scale[g] = pick(better[g], fitted, scale[g])
            best[g] = pick(better[g], fitted * sumqx[g], best[g])
        for i in range(n):
            for g in range(lanes):
                levels[i, g] = pick(better[g], trial[i, g], levels[i, g])
        for k in range(n_points):
            for g in range(lanes):
                on_grid[k, g] = pick(better[g], on_trial[k, g], on_grid[k, g])
    for g in range(lanes):
        if active[g]:
            scale[g] = _refit(xt, wt, waux, g, width, bits, kmax, scale[g], on_grid, refit, points, kmap, neighbours,
                              levels)


@inline
def scale_nibble(inv, scale):
    """``MAX(0, MIN(15, nearest_int(0.5f*(id*scale - 1))))``: a group scale's 4 bits."""
    return max(0, min(15, nearest_int(_HALF * (inv * scale - _ONE))))
