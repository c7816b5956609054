"""The steps the grid i-quants (IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S) share, as ggml-quants.c does them.

A *group* (16 or 32 values) gets one scale; it is cut into *points* of ``width`` values
(8 for the IQ2 grids, 4 for the IQ3 ones) that must each be a point of the type's grid
(:mod:`.iq_grids`). Magnitudes are quantized; signs are stored apart. :func:`group_search`
is the loop every ``quantize_row_iq*_impl`` runs per group::

    for each of 2*n_trials + 1 trial scales  inv = (2*kmax - 1 + step*t) / top:
        levels = clip(nearest_int(0.5*(inv*|x| - 1)), 0, kmax - 1)
        a point off the grid -> its best-weighted listed neighbour at 1/inv
        keep the trial with the largest sumqx²/sumq2 (q = 2*level + 1)
    re-fit points to the winning scale (which ones: see the ``REFIT_*`` modes), and
    the scale to them

All float32, in C's operation order (``w*x*q`` is ``(w*x)*q``); C's ``if`` on a strictly
better value keeps the first of equals.
"""

from __future__ import annotations

import numpy as np

from quantize.blocks.jit import F32, F32_MAX, f32, helper, inline, nearest_int

_ZERO = F32(0.0)
_ONE = F32(1.0)
_HALF = F32(0.5)

#: After the trials, re-fit the points that were off the grid (IQ3_XXS, IQ2_XS) ...
REFIT_OFF_GRID = 0
#: ... every point, when one was off the grid (IQ3_S) ...
REFIT_ALL_IF_OFF_GRID = 1
#: ... every point, always (IQ2_XXS, IQ2_S).
REFIT_ALL = 2


@helper
def find_best_neighbour(neighbours, start, points, xval, waux, at, scale, levels, width):
    """``iq2_find_best_neighbour`` / ``iq3_find_best_neighbour``: the listed grid point with
    the least ``sum w*(scale*q - x)²`` (the first of equals); its levels go to ``levels[at:]``.

    Where every distance is NaN (weights that overflowed float32) llama.cpp aborts; here the
    nearest listed point is taken.
    """
    best_d2 = F32_MAX
    best = -1
    for j in range(1, np.int32(neighbours[start]) + 1):
        index = np.int32(neighbours[start + j])
        d2 = _ZERO
        for i in range(width):
            diff = scale * f32(points[index, i]) - xval[at + i]
            d2 += waux[at + i] * diff * diff
        if d2 < best_d2:
            best_d2 = d2
            best = index
    if best < 0:
        best = np.int32(neighbours[start + 1])
    for i in range(width):
        levels[at + i] = (points[best, i] - 1) // 2
    return best


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
def point_index(levels, at, width, bits):
    """The lattice index ``u`` of the point whose levels start at ``levels[at]``."""
    u = 0
    for i in range(width):
        u |= levels[at + i] << (bits * i)
    return u


@helper
def _weighted_sums(weight, xval, levels, n):
    sumqx = _ZERO
    sumq2 = _ZERO
    for i in range(n):
        w = weight[i]
        q = f32(2 * levels[i] + 1)
        sumqx += w * xval[i] * q
        sumq2 += w * q * q
    return sumqx, sumq2


@helper
def group_search(xval, weight, waux, n, width, bits, kmax, top, scale, step, n_trials, refit,
                 points, kmap, neighbours, levels, trial):
    """The scale search of one group (see the module docstring); returns the scale and
    leaves the points' levels in ``levels`` (which holds the caller's start levels)."""
    n_points = n // width
    on_grid = np.empty(n_points, np.bool_)
    on_grid_trial = np.empty(n_points, np.bool_)
    for k in range(n_points):
        on_grid[k] = refit == REFIT_OFF_GRID
    best = _ZERO
    center = f32(2 * kmax - 1)
    for t in range(-n_trials, n_trials + 1):
        inv = (center + f32(t) * step) / top
        this_scale = _ONE / inv
        for k in range(n_points):
            for i in range(width):
                l = nearest_int(_HALF * (inv * xval[width * k + i] - _ONE))
                trial[width * k + i] = max(0, min(kmax - 1, l))
            index = kmap[point_index(trial, width * k, width, bits)]
            on_grid_trial[k] = index >= 0
            if index < 0:
                find_best_neighbour(neighbours, -index - 1, points, xval, waux, width * k, this_scale, trial, width)
        sumqx, sumq2 = _weighted_sums(weight, xval, trial, n)
        if sumq2 > _ZERO and sumqx * sumqx > best * sumq2:
            scale = sumqx / sumq2
            best = scale * sumqx
            for i in range(n):
                levels[i] = trial[i]
            for k in range(n_points):
                on_grid[k] = on_grid_trial[k]
    off_grid = 0
    for k in range(n_points):
        if not on_grid[k]:
            off_grid += 1
    if (refit == REFIT_ALL or off_grid > 0) and scale > _ZERO:
        inv = _ONE / scale
        for k in range(n_points):
            if refit == REFIT_OFF_GRID and on_grid[k]:
                continue
            u = 0
            for i in range(width):
                l = nearest_int(_HALF * (inv * xval[width * k + i] - _ONE))
                u |= max(0, min(kmax - 1, l)) << (bits * i)
            index = kmap[u]
            if index < 0:
                index = find_best_neighbour(neighbours, -index - 1, points, xval, waux, width * k, scale, levels,
                                            width)
            for i in range(width):
                levels[width * k + i] = (points[index, i] - 1) // 2
        sumqx, sumq2 = _weighted_sums(weight, xval, levels, n)
        if sumq2 > _ZERO:
            scale = sumqx / sumq2
    return scale


@inline
def scale_nibble(inv, scale):
    """``MAX(0, MIN(15, nearest_int(0.5f*(id*scale - 1))))``: a group scale's 4 bits."""
    return max(0, min(15, nearest_int(_HALF * (inv * scale - _ONE))))
