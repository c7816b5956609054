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
LLVM vectorizes, each lane still summing in C's order. The off-grid points' neighbour
searches (66-81 % of a trial's points, each listing a few to a few dozen grid points)
were then most of the time; :func:`_filtered_neighbours` finds the same neighbour from
per-point sums that do not depend on the trial scale, with a rigorous bound on C's
float32 rounding deciding when C's own scoring must be run instead (ties and near-ties:
about 0.1 % of the searches on normal data).
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
        levels[at + i, g] = (np.int32(points[best, i]) - 1) >> 1


@helper
def _refit(xt, wt, waux, g, width, bits, kmax, scale, on_grid, refit, points, kmap, neighbours, levels,
           chosen, grid_index, certified, trial_inv, q_top, codes, pair_a, pair_b, wf, xf):
    """After the trials, lane ``g``: the points ``refit`` names re-fitted to ``scale``, and
    the scale to them (when some point was off the grid, or always for ``REFIT_ALL``);
    returns the scale.

    ``levels`` hold trial ``chosen``'s levels (-1: no trial was chosen). A point that
    rounds at ``scale`` to the lattice point it had in that trial, whose neighbour there was
    certified over a range of trial scales (``1/trial_inv``) that holds ``scale`` (``certified``, see
    :func:`_filtered_neighbours`), keeps that neighbour: it is the one C's search finds at
    any scale of the range. Other off-grid points of an 8-wide grid are searched as in
    :func:`_filtered_neighbours`, at the one scale, and scored as C scores them only where
    the bound leaves the winner in doubt."""
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
                if chosen >= 0 and grid_index[chosen, k, g] == index and certified[chosen, k, g, 0] >= 0:
                    s = np.float64(scale)
                    if (np.float64(_ONE / trial_inv[certified[chosen, k, g, 1], g]) <= s
                            <= np.float64(_ONE / trial_inv[certified[chosen, k, g, 0], g])):
                        continue
                if width == 8:
                    s = np.float64(scale)
                    sum_w, sum_wx, sum_wx2, sum_x = _point_sums(xt, waux, width * k, g, width, wf, xf)
                    _pair_tables(wf, xf, (np.int32(q_top) + 1) // 2, pair_a, pair_b)
                    best, second, nearest = _scan_once(neighbours, -index - 1, codes, pair_a, pair_b, s)
                    total, bound = _rounding_bound(s, q_top, width, sum_w, sum_wx, sum_wx2, sum_x)
                    if total < _SAFE_TOTAL and s * (second - best) > 2.0 * bound:
                        for i in range(width):
                            levels[width * k + i, g] = (np.int32(points[nearest, i]) - 1) >> 1
                        continue
                best_neighbour(neighbours, -index - 1, points, xt, waux, g, width * k, scale, levels, width)
            else:
                for i in range(width):
                    levels[width * k + i, g] = (np.int32(points[index, i]) - 1) >> 1
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


#: The bound on how far C's float32 ``sum w*(s*q - x)²`` of ``width`` terms can be from its
#: exact value is ``(width + this) * 2**-24`` times ``sum w*(s*q_max + |x|)²``: ``width - 1``
#: roundings of the sum, about 6.2 in each term (see :func:`_filtered_neighbours`).
_ROUNDING_TERMS = 8.0
#: Absolute part (float32 underflow), far above the few ``2**-149`` each step can lose.
_UNDERFLOW = 2.0 ** -140
#: Beyond this the float32 sums might overflow; such points are scored as C scores them.
_SAFE_TOTAL = 1e37


@inline
def _pair_codes(points, n_levels, codes):
    """For an 8-wide grid: each grid point's four coordinate pairs (0-1, 2-3, 4-5, 6-7) as
    indices into the pair tables (:func:`_pair_tables`), a byte each."""
    square = n_levels * n_levels
    for j in range(points.shape[0]):
        c = 0
        for p in range(4):
            low = (np.int32(points[j, 2 * p]) - 1) >> 1
            high = (np.int32(points[j, 2 * p + 1]) - 1) >> 1
            c |= (p * square + low + n_levels * high) << (8 * p)
        codes[j] = c


@inline
def _pair_tables(wf, xf, n_levels, pair_a, pair_b):
    """A point position's ``w*q²`` and ``w*x*q`` summed over each pair of coordinates, for
    every two levels of the pair (float64; each term is exact), so that a grid point's
    ``A_q`` and ``B_q`` are four table entries added."""
    square = n_levels * n_levels
    for p in range(4):
        for low in range(n_levels):
            q = np.float64(2 * low + 1)
            wq = wf[2 * p] * q
            for high in range(n_levels):
                r = np.float64(2 * high + 1)
                wr = wf[2 * p + 1] * r
                entry = p * square + low + n_levels * high
                pair_a[entry] = wq * q + wr * r
                pair_b[entry] = wq * xf[2 * p] + wr * xf[2 * p + 1]


@inline
def _point_sums(xt, waux, at, g, width, wf, xf):
    """Lane ``g``'s point at ``at``: its weights and values as float64 into ``wf``, ``xf``,
    and the sums the rounding bound needs: ``sum w``, ``sum w|x|``, ``sum w*x²``, ``sum |x|``."""
    sum_w = 0.0
    sum_wx = 0.0
    sum_wx2 = 0.0
    sum_x = 0.0
    for i in range(width):
        w = np.float64(waux[at + i, g])
        v = np.float64(xt[at + i, g])
        wf[i] = w
        xf[i] = v
        sum_w += w
        sum_wx += w * abs(v)
        sum_wx2 += (w * v) * v
        sum_x += abs(v)
    return sum_w, sum_wx, sum_wx2, sum_x


@inline
def _rounding_bound(s, q_top, width, sum_w, sum_wx, sum_wx2, sum_x):
    """At scale ``s``: ``sum w*(s*q_max + |x|)²`` (past :data:`_SAFE_TOTAL` C's sums might
    overflow) and the bound on how far any of C's float32 distances is from its exact value
    (see :func:`_filtered_neighbours`)."""
    top = s * q_top
    total = (top * top) * sum_w + 2.0 * top * sum_wx + sum_wx2  # sum w*(s*q_max + |x|)²
    bound = ((width + _ROUNDING_TERMS) * 2.0 ** -24 * total
             + _UNDERFLOW * (top * sum_w + sum_wx + width * top + sum_x + width))
    return total, bound


@inline
def _pair_sums(codes, candidate, pair_a, pair_b):
    """Grid point ``candidate``'s ``A_q`` and ``2B_q`` from the pair tables."""
    c = codes[candidate]
    i0 = c & 0xFF
    i1 = (c >> 8) & 0xFF
    i2 = (c >> 16) & 0xFF
    i3 = (c >> 24) & 0xFF
    return ((pair_a[i0] + pair_a[i1]) + (pair_a[i2] + pair_a[i3]),
            2.0 * ((pair_b[i0] + pair_b[i1]) + (pair_b[i2] + pair_b[i3])))


@inline
def _scan_once(neighbours, start, codes, pair_a, pair_b, s):
    """:func:`_scan_list` at one scale, for an 8-wide grid, nothing kept: the least score,
    the second least and the grid point of the least."""
    best = np.inf
    second = np.inf
    chosen = np.int32(neighbours[start + 1])
    for j in range(1, np.int32(neighbours[start]) + 1):
        candidate = np.int32(neighbours[start + j])
        a, b = _pair_sums(codes, candidate, pair_a, pair_b)
        score = s * a - b
        chosen = pick(score < best, candidate, chosen)
        second = min(second, max(score, best))
        best = min(best, score)
    return best, second, chosen


@inline
def _scan_list(neighbours, start, points, wf, xf, width, tag, stamp, area, cross, s_a, s_b, codes, pair_a, pair_b):
    """One pass over a neighbour list scoring each listed grid point ``q`` at two scales
    (``s*A_q - 2B_q``, float64; ``A_q``, ``2B_q`` computed on first sight for this point
    position, marked by ``tag`` in ``stamp``, from the pair tables for an 8-wide grid):
    per scale the least score, the second least and the grid point of the least (the
    first of equals)."""
    best_a = np.inf
    second_a = np.inf
    best_b = np.inf
    second_b = np.inf
    chosen_a = np.int32(neighbours[start + 1])
    chosen_b = chosen_a
    for j in range(1, np.int32(neighbours[start]) + 1):
        candidate = np.int32(neighbours[start + j])
        if stamp[candidate] != tag:
            a = 0.0
            b = 0.0
            if width == 8:
                a, b = _pair_sums(codes, candidate, pair_a, pair_b)
            else:
                for i in range(width):
                    wq = wf[i] * np.float64(points[candidate, i])
                    a += wq * np.float64(points[candidate, i])
                    b += wq * xf[i]
                b *= 2.0
            area[candidate] = a
            cross[candidate] = b
            stamp[candidate] = tag
        score_a = s_a * area[candidate] - cross[candidate]
        score_b = s_b * area[candidate] - cross[candidate]
        chosen_a = pick(score_a < best_a, candidate, chosen_a)
        second_a = min(second_a, max(score_a, best_a))
        best_a = min(best_a, score_a)
        chosen_b = pick(score_b < best_b, candidate, chosen_b)
        second_b = min(second_b, max(score_b, best_b))
        best_b = min(best_b, score_b)
    return best_a, second_a, chosen_a, best_b, second_b, chosen_b


@inline
def _put_point(trials, t, at, g, points, index, width):
    """Grid point ``index``'s levels as trial ``t``'s point at ``at`` of lane ``g``."""
    for i in range(width):
        trials[t, at + i, g] = (np.int32(points[index, i]) - 1) >> 1


@helper
def _filtered_neighbours(trials, inv, grid_index, xt, waux, active, width, neighbours, points, certified,
                         q_top, codes, pair_a, pair_b, wf, xf):
    """The off-grid points of every trial of every active lane, each moved to its best
    listed neighbour, as ``best_neighbour`` would choose it, mostly without scoring the
    neighbours as C does.

    For a point ``x`` with weights ``w`` and a trial scale ``s``, C's distance to grid
    point ``q`` is ``sum w*(s*q - x)² = s(s*A_q - 2B_q) + C`` with ``A_q = sum w*q²``,
    ``B_q = sum w*x*q``: ``A`` and ``B`` do not depend on the scale, so they are computed
    once per point position and grid point (float64, exact to ~2**-50) and reused by every
    trial scale, whose candidates then cost one multiply-add each (for the 8-wide grids
    ``A`` and ``B`` are four entries of tables of each coordinate pair's sums,
    :func:`_pair_tables`). C rounds each of its
    float32 distances by at most ``E(s) = (width + 8) * 2**-24 * sum w*(s*q_max + |x|)²``
    (plus a tiny underflow term); when the best candidate's exact distance is more than
    ``2E`` below every other's, C's float32 comparison picks the same one. Otherwise (ties,
    near-ties, sums that could overflow or underflow float32) the point is scored exactly
    as C does, in its order (:func:`best_neighbour`), so the bytes never change.

    Neighbouring trial scales mostly round a point to the same lattice point (5-6 trials
    in a row on normal data). Such a run is scored once, at its largest and smallest
    scale: each ``s*A_q - 2B_q`` is linear in ``s``, so when one grid point is best at both
    ends by more than ``2E(s_max)/s_min`` it is best by that much at every scale between
    (and wins in C's float32 at each); otherwise each trial of the run is scored alone.

    ``trials[t]`` holds trial ``t``'s levels (``(n, lanes)``, rewritten where a point was
    off the grid), ``inv[t, g]`` its inverse scale, ``grid_index[t, k, g]`` what the map
    says of its point ``k``. ``certified[t, k, g]`` gets, for an off-grid point, the first
    and last trial of the range of scales over which its neighbour was shown best by the
    margin (a settled run, or the trial alone), or -1 where C's scoring decided.
    """
    n_trials, n_points = grid_index.shape[:2]
    lanes = active.shape[0]
    n_grid = points.shape[0]
    area = np.empty(n_grid, np.float64)  # A_q
    cross = np.empty(n_grid, np.float64)  # 2B_q
    stamp = np.zeros(n_grid, np.int32)  # which (lane, point) area and cross were computed for
    run_best = np.empty(n_trials, np.float64)
    run_second = np.empty(n_trials, np.float64)
    run_chosen = np.empty(n_trials, np.int32)
    pending = np.empty(2 * n_trials + 2, np.int64)  # (first, last) trial ranges still to settle
    n_levels = (np.int32(q_top) + 1) // 2
    tag = 0
    for k in range(n_points):
        at = width * k
        for g in range(lanes):
            if not active[g]:
                continue
            tag += 1
            sum_w, sum_wx, sum_wx2, sum_x = _point_sums(xt, waux, at, g, width, wf, xf)
            if width == 8:
                _pair_tables(wf, xf, n_levels, pair_a, pair_b)
            t = 0
            while t < n_trials:
                index = grid_index[t, k, g]
                if index >= 0:
                    t += 1
                    continue
                end = t + 1
                while end < n_trials and grid_index[end, k, g] == index:
                    end += 1
                start = -index - 1
                # the run's scored trials: its first and last, then splits where they disagree
                s_hi = np.float64(_ONE / inv[t, g])  # C's float32 trial scales, falling with t
                s_lo = np.float64(_ONE / inv[end - 1, g])
                (run_best[t], run_second[t], run_chosen[t], run_best[end - 1], run_second[end - 1],
                 run_chosen[end - 1]) = _scan_list(neighbours, start, points, wf, xf, width, tag, stamp, area, cross,
                                                   s_hi, s_lo, codes, pair_a, pair_b)
                pending[0] = t
                pending[1] = end - 1
                depth = 1
                while depth > 0:
                    depth -= 1
                    first = pending[2 * depth]
                    last = pending[2 * depth + 1]
                    s_hi = np.float64(_ONE / inv[first, g])
                    s_lo = np.float64(_ONE / inv[last, g])
                    total, bound = _rounding_bound(s_hi, q_top, width, sum_w, sum_wx, sum_wx2, sum_x)
                    margin = 2.0 * bound / s_lo
                    if (total < _SAFE_TOTAL and run_chosen[first] == run_chosen[last]
                            and run_second[first] - run_best[first] > margin
                            and run_second[last] - run_best[last] > margin):
                        for r in range(first, last + 1):
                            _put_point(trials, r, at, g, points, run_chosen[first], width)
                            certified[r, k, g, 0] = first
                            certified[r, k, g, 1] = last
                    elif last - first <= 1:
                        for r in (first, last):
                            scale = _ONE / inv[r, g]
                            s = np.float64(scale)
                            total, bound = _rounding_bound(s, q_top, width, sum_w, sum_wx, sum_wx2, sum_x)
                            if total < _SAFE_TOTAL and s * (run_second[r] - run_best[r]) > 2.0 * bound:
                                _put_point(trials, r, at, g, points, run_chosen[r], width)
                                certified[r, k, g, 0] = r
                                certified[r, k, g, 1] = r
                            else:
                                best_neighbour(neighbours, start, points, xt, waux, g, at, scale, trials[r], width)
                                certified[r, k, g, 0] = -1
                    else:
                        middle = (first + last) // 2  # score middle and middle + 1, then each half
                        (run_best[middle], run_second[middle], run_chosen[middle], run_best[middle + 1],
                         run_second[middle + 1], run_chosen[middle + 1]) = _scan_list(
                            neighbours, start, points, wf, xf, width, tag, stamp, area, cross,
                            np.float64(_ONE / inv[middle, g]), np.float64(_ONE / inv[middle + 1, g]),
                            codes, pair_a, pair_b)
                        pending[2 * depth] = first
                        pending[2 * depth + 1] = middle
                        pending[2 * depth + 2] = middle + 1
                        pending[2 * depth + 3] = last
                        depth += 2
                t = end


@helper
def group_search_lanes(xt, wt, waux, active, width, bits, kmax, top, scale, step, n_trials, refit,
                       points, kmap, neighbours, levels):
    """The scale search of every lane of ``xt`` (``(n, lanes)``: one group's magnitudes a
    lane, ``wt`` its weights, ``waux`` their square roots) at once, as the module docstring
    says: every trial's levels for all lanes (vectorized), then the off-grid points'
    neighbours lane by lane (:func:`_filtered_neighbours`), then each trial's sums and
    choice for all lanes, each lane summing in C's order; then each active lane's re-fit.
    ``scale`` and ``levels`` (``(n, lanes)``) hold the start values and get the results;
    inactive lanes are left as they are."""
    n, lanes = xt.shape
    n_points = n // width
    count = 2 * n_trials + 1
    trials = np.empty((count, n, lanes), np.int32)
    grid_index = np.empty((count, n_points, lanes), np.int32)
    u = np.empty(lanes, np.int32)
    inv = np.empty((count, lanes), np.float32)
    on_grid = np.empty((n_points, lanes), np.bool_)
    on_trials = np.empty((count, n_points, lanes), np.bool_)
    certified = np.empty((count, n_points, lanes, 2), np.int32)
    chosen = np.empty(lanes, np.int32)
    q_top = 0.0
    for j in range(points.shape[0]):
        for i in range(width):
            q_top = max(q_top, np.float64(points[j, i]))
    n_levels = (np.int32(q_top) + 1) // 2
    codes = np.empty(points.shape[0], np.int32)
    pair_a = np.empty(4 * n_levels * n_levels, np.float64)
    pair_b = np.empty(4 * n_levels * n_levels, np.float64)
    if width == 8:
        _pair_codes(points, n_levels, codes)
    wf = np.empty(width, np.float64)
    xf = np.empty(width, np.float64)
    best = np.empty(lanes, np.float32)
    sumqx = np.empty(lanes, np.float32)
    sumq2 = np.empty(lanes, np.float32)
    better = np.empty(lanes, np.bool_)
    for g in range(lanes):
        best[g] = _ZERO
        chosen[g] = -1
    for k in range(n_points):
        for g in range(lanes):
            on_grid[k, g] = refit == REFIT_OFF_GRID
    center = f32(2 * kmax - 1)
    for t in range(count):
        numerator = center + f32(t - n_trials) * step
        for g in range(lanes):
            inv[t, g] = numerator / top[g]
        for i in range(n):
            for g in range(lanes):
                l = nearest_int(_HALF * (inv[t, g] * xt[i, g] - _ONE))
                trials[t, i, g] = max(0, min(kmax - 1, l))
        for k in range(n_points):
            for g in range(lanes):
                u[g] = 0
            for i in range(width):
                for g in range(lanes):
                    u[g] |= trials[t, width * k + i, g] << (bits * i)
            for g in range(lanes):
                grid_index[t, k, g] = kmap[u[g]]
                on_trials[t, k, g] = grid_index[t, k, g] >= 0
    _filtered_neighbours(trials, inv, grid_index, xt, waux, active, width, neighbours, points, certified,
                         q_top, codes, pair_a, pair_b, wf, xf)
    for t in range(count):
        for g in range(lanes):
            sumqx[g] = _ZERO
            sumq2[g] = _ZERO
        for i in range(n):
            for g in range(lanes):
                w = wt[i, g]
                q = f32(2 * trials[t, i, g] + 1)
                sumqx[g] += w * xt[i, g] * q
                sumq2[g] += w * q * q
        for g in range(lanes):
            better[g] = (sumq2[g] > _ZERO) & (sumqx[g] * sumqx[g] > best[g] * sumq2[g]) & active[g]
            fitted = sumqx[g] / sumq2[g]
            scale[g] = pick(better[g], fitted, scale[g])
            best[g] = pick(better[g], fitted * sumqx[g], best[g])
            chosen[g] = pick(better[g], np.int32(t), chosen[g])
        for i in range(n):
            for g in range(lanes):
                levels[i, g] = pick(better[g], trials[t, i, g], levels[i, g])
        for k in range(n_points):
            for g in range(lanes):
                on_grid[k, g] = pick(better[g], on_trials[t, k, g], on_grid[k, g])
    for g in range(lanes):
        if active[g]:
            scale[g] = _refit(xt, wt, waux, g, width, bits, kmax, scale[g], on_grid, refit, points, kmap, neighbours,
                              levels, chosen[g], grid_index, certified, inv, q_top, codes, pair_a, pair_b, wf, xf)


@inline
def scale_nibble(inv, scale):
    """``MAX(0, MIN(15, nearest_int(0.5f*(id*scale - 1))))``: a group scale's 4 bits."""
    return max(0, min(15, nearest_int(_HALF * (inv * scale - _ONE))))
