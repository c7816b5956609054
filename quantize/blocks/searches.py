"""The scale searches of ggml-quants.c, compiled, many groups at once ("lanes").

Each function here is one static helper of ``ggml-quants.c`` (``make_qx_quants``,
``make_q3_quants``, ``make_qkx2_quants``/``make_qkx3_quants``, ``make_qp_quants``) run on
every column of a positions-major array::

              lane (group) g  ->
    x[i, g]   g=0   g=1   g=2  ...        one group = one 16- or 32-value sub-block
       i=0    x00   x01   x02             (or, for the super-block scale searches,
       i=1    x10   x11   x12              the 8 or 16 sub-block scales of a block)
       ...

The C loop over ``i`` is the outer loop; the inner loop walks the lanes, so LLVM puts 8
of them in one AVX2 register while each lane does C's scalar float32 steps in C's order
(sums left to right, the same association: ``w*x[i]*l`` is ``(w*x)*l``). Where C takes
a branch per group (``if (cur_error < best_error)``) every lane computes both sides and
selects. C's "stop when a refinement pass changed nothing" is kept per batch: a pass
that changes nothing leaves a group's state as it was, so running it again on a
converged group is a no-op and the batch may stop when no lane changed
(:mod:`.q3_search` goes on with only the lanes that changed).

Outputs are per-lane arrays (``scale``, ``the_min``) and a ``levels`` array shaped like
``x`` (uint8, as C stores ``L``).
"""

from __future__ import annotations

import numpy as np

from quantize.blocks.jit import F32, GROUP_MAX_EPS, f32, helper, inline, nearest_f, nearest_int, pick

_ZERO = F32(0.0)
_ONE = F32(1.0)
_TENTH = F32(0.1)


@inline
def _abs_max_step(x, i, g, signed_in, amax_in, signed_out, amax_out):
    """C's ``if (fabsf(v) > amax) { amax = fabsf(v); max = v; }`` at position ``i`` of lane ``g``."""
    v = x[i, g]
    a = np.abs(v)
    take = a > amax_in[g]
    amax_out[g] = pick(take, a, amax_in[g])
    signed_out[g] = pick(take, v, signed_in[g])


@helper
def first_abs_max(x, signed_max, amax):
    """C's ``if (fabsf(v) > amax) { amax = fabsf(v); max = v; }`` from 0, per lane.

    The running values go back and forth between the outputs and a second pair of
    arrays: a select stored back in place compiles to AVX masked stores (measured: most
    of this function's time on Zen 3).
    """
    n, lanes = x.shape
    other_signed = np.empty(lanes, np.float32)
    other_amax = np.empty(lanes, np.float32)
    for g in range(lanes):
        signed_max[g] = _ZERO
        amax[g] = _ZERO
    for i in range(0, n - 1, 2):
        for g in range(lanes):
            _abs_max_step(x, i, g, signed_max, amax, other_signed, other_amax)
        for g in range(lanes):
            _abs_max_step(x, i + 1, g, other_signed, other_amax, signed_max, amax)
    if n % 2:
        for g in range(lanes):
            _abs_max_step(x, n - 1, g, signed_max, amax, other_signed, other_amax)
            signed_max[g] = other_signed[g]
            amax[g] = other_amax[g]


@helper
def _qx_sums(x, wx, w, iscale, lo, hi, sumlx, suml2):
    n, lanes = x.shape
    for g in range(lanes):
        sumlx[g] = _ZERO
        suml2[g] = _ZERO
    for i in range(n):
        for g in range(lanes):
            level = nearest_f(iscale[g] * x[i, g])
            level = pick(level > hi, hi, level)
            level = pick(level < lo, lo, level)
            sumlx[g] += wx[i, g] * level
            suml2[g] += (w[i, g] * level) * level


@helper
def qx_quants(x, w, nmax, scale, levels):
    """``make_qx_quants(n, nmax, x, L, rmse_type=1, w)``: symmetric levels ``[-nmax, nmax-1]``.

    Tries 19 scales around ``nmax/max`` and keeps the best weighted least-squares fit.
    ``w`` holds the weights (``x*x`` where C's ``qw`` is NULL). ``levels = l + nmax``,
    0 for an all-zero group (whose ``scale`` is 0).
    """
    n, lanes = x.shape
    signed_max = np.empty(lanes, np.float32)
    amax = np.empty(lanes, np.float32)
    first_abs_max(x, signed_max, amax)
    wx = np.empty((n, lanes), np.float32)
    for i in range(n):
        for g in range(lanes):
            wx[i, g] = w[i, g] * x[i, g]
    fnmax = f32(nmax)
    lo = f32(-nmax)
    hi = f32(nmax - 1)
    best_iscale = np.empty(lanes, np.float32)
    trial = np.empty(lanes, np.float32)
    sumlx = np.empty(lanes, np.float32)
    suml2 = np.empty(lanes, np.float32)
    best = np.empty(lanes, np.float32)
    for g in range(lanes):
        best_iscale[g] = lo / signed_max[g]
    _qx_sums(x, wx, w, best_iscale, lo, hi, sumlx, suml2)
    for g in range(lanes):
        s = pick(suml2[g] != _ZERO, sumlx[g] / suml2[g], _ZERO)
        scale[g] = s
        best[g] = s * sumlx[g]
    for step in range(-9, 10):
        if step == 0:
            continue
        stretch = fnmax + _TENTH * f32(step)
        for g in range(lanes):
            trial[g] = -stretch / signed_max[g]
        _qx_sums(x, wx, w, trial, lo, hi, sumlx, suml2)
        for g in range(lanes):
            better = (suml2[g] > _ZERO) & (sumlx[g] * sumlx[g] > best[g] * suml2[g])
            s = sumlx[g] / suml2[g]
            best_iscale[g] = pick(better, trial[g], best_iscale[g])
            scale[g] = pick(better, s, scale[g])
            best[g] = pick(better, s * sumlx[g], best[g])
    for i in range(n):
        for g in range(lanes):
            level = nearest_f(best_iscale[g] * x[i, g])
            level = pick(level > hi, hi, level)
            level = pick(level < lo, lo, level)
            levels[i, g] = pick(amax[g] >= GROUP_MAX_EPS, np.uint8(np.int32(level + fnmax)), np.uint8(0))
    for g in range(lanes):
        if not amax[g] >= GROUP_MAX_EPS:
            scale[g] = _ZERO


@helper
def qkx_quants(x, w, nmax, rmin, rdelta, nstep, use_mad, flat_if_equal, scale, the_min, levels):
    """``make_qkx2_quants`` / ``make_qkx3_quants`` with weights: ``x ≈ scale*L - the_min``.

    Starts from the min/max grid, then tries ``nstep + 1`` grid densities, each solved
    for the weighted least-squares scale and offset; keeps the smallest weighted error
    (absolute with ``use_mad``, squared otherwise). C reuses its ``min`` variable, so an
    accepted step moves the offset the later grids start from. ``flat_if_equal``: qkx2's
    ``max == min`` test (qkx3 has ``max <= min``). ``the_min`` is C's ``*the_min``.
    """
    n, lanes = x.shape
    fnmax = f32(nmax)
    lo = np.empty(lanes, np.float32)
    hi = np.empty(lanes, np.float32)
    sum_w = np.empty(lanes, np.float32)
    sum_x = np.empty(lanes, np.float32)
    for g in range(lanes):
        v = x[0, g]
        lo[g] = v
        hi[g] = v
        sum_w[g] = w[0, g]
        sum_x[g] = w[0, g] * v
    for i in range(1, n):
        for g in range(lanes):
            v = x[i, g]
            lo[g] = pick(v < lo[g], v, lo[g])
            hi[g] = pick(v > hi[g], v, hi[g])
            sum_w[g] += w[i, g]
            sum_x[g] += w[i, g] * v
    offset = np.empty(lanes, np.float32)  # C's ``min`` as the search moves it
    best_iscale = np.empty(lanes, np.float32)
    best_shift = np.empty(lanes, np.float32)
    best_error = np.zeros(lanes, np.float32)
    step_scale = np.empty(lanes, np.float32)
    for g in range(lanes):
        lo[g] = pick(lo[g] > _ZERO, _ZERO, lo[g])
        offset[g] = lo[g]
        iscale = fnmax / (hi[g] - lo[g])
        best_iscale[g] = iscale
        best_shift[g] = lo[g]
        step_scale[g] = _ONE / iscale
    for i in range(n):
        for g in range(lanes):
            level = nearest_f(best_iscale[g] * (x[i, g] - lo[g]))
            level = pick(level > fnmax, fnmax, level)
            level = pick(level < _ZERO, _ZERO, level)
            diff = (step_scale[g] * level + lo[g]) - x[i, g]
            diff = pick(use_mad, np.abs(diff), diff * diff)
            best_error[g] += w[i, g] * diff
    for g in range(lanes):
        scale[g] = step_scale[g]
    trial = np.empty(lanes, np.float32)
    sum_l = np.empty(lanes, np.float32)
    sum_l2 = np.empty(lanes, np.float32)
    sum_xl = np.empty(lanes, np.float32)
    this_min = np.empty(lanes, np.float32)
    error = np.empty(lanes, np.float32)
    aux = np.empty((n, lanes), np.float32)
    for step in range(nstep + 1):
        stretch = rmin + rdelta * f32(step) + fnmax
        for g in range(lanes):
            trial[g] = stretch / (hi[g] - offset[g])
            sum_l[g] = _ZERO
            sum_l2[g] = _ZERO
            sum_xl[g] = _ZERO
            error[g] = _ZERO
        for i in range(n):
            for g in range(lanes):
                level = nearest_f(trial[g] * (x[i, g] - offset[g]))
                level = pick(level > fnmax, fnmax, level)
                level = pick(level < _ZERO, _ZERO, level)
                aux[i, g] = level
                wl = w[i, g] * level
                sum_l[g] += wl
                sum_l2[g] += wl * level
                sum_xl[g] += wl * x[i, g]
        for g in range(lanes):
            det = sum_w[g] * sum_l2[g] - sum_l[g] * sum_l[g]
            s = (sum_w[g] * sum_xl[g] - sum_x[g] * sum_l[g]) / det
            m = (sum_l2[g] * sum_x[g] - sum_l[g] * sum_xl[g]) / det
            positive = m > _ZERO
            step_scale[g] = pick(positive, sum_xl[g] / sum_l2[g], s)
            this_min[g] = pick(positive, _ZERO, m)
            sum_l[g] = det  # kept for the acceptance test below
        for i in range(n):
            for g in range(lanes):
                diff = (step_scale[g] * aux[i, g] + this_min[g]) - x[i, g]
                diff = pick(use_mad, np.abs(diff), diff * diff)
                error[g] += w[i, g] * diff
        for g in range(lanes):
            better = (sum_l[g] > _ZERO) & (error[g] < best_error[g])
            best_error[g] = pick(better, error[g], best_error[g])
            scale[g] = pick(better, step_scale[g], scale[g])
            best_iscale[g] = pick(better, trial[g], best_iscale[g])
            best_shift[g] = pick(better, offset[g], best_shift[g])
            offset[g] = pick(better, this_min[g], offset[g])
    for g in range(lanes):
        flat = pick(flat_if_equal, hi[g] == lo[g], hi[g] <= lo[g])
        scale[g] = pick(flat, _ZERO, scale[g])
        the_min[g] = -pick(flat, lo[g], offset[g])
        best_iscale[g] = pick(flat, _ZERO, best_iscale[g])
        best_shift[g] = pick(flat, _ONE, best_shift[g])  # levels of a flat group are 0 below
    for i in range(n):
        for g in range(lanes):
            level = nearest_f(best_iscale[g] * (x[i, g] - best_shift[g]))
            level = pick(level > fnmax, fnmax, level)
            level = pick(level < _ZERO, _ZERO, level)
            levels[i, g] = np.uint8(np.int32(level))
    for g in range(lanes):
        flat = pick(flat_if_equal, hi[g] == lo[g], hi[g] <= lo[g])
        if flat:
            for i in range(n):
                levels[i, g] = np.uint8(0)


@helper
def qp_quants(x, w, nmax, scale, levels):
    """``make_qp_quants(n, nmax, x, L, quant_weights)``: non-negative levels ``0..nmax``.

    Quantizes a super-block's sub-block scales (or mins): nine trial scales, then the
    coordinate descent. C stores ``L`` as ``uint8_t``, so levels wrap modulo 256 exactly
    as C reads them back, while its sums use the unwrapped ints.
    """
    n, lanes = x.shape
    fnmax = f32(nmax)
    top = np.empty(lanes, np.float32)
    for g in range(lanes):
        top[g] = _ZERO
    for i in range(n):
        for g in range(lanes):
            top[g] = pick(top[g] > x[i, g], top[g], x[i, g])  # MAX(max, x[i])
    iscale = np.empty(lanes, np.float32)
    best = np.zeros(lanes, np.float32)
    for g in range(lanes):
        iscale[g] = fnmax / top[g]
    for i in range(n):
        for g in range(lanes):
            stored = f32(nearest_int(iscale[g] * x[i, g]) & 0xFF)
            diff = x[i, g] - (_ONE / iscale[g]) * stored
            best[g] += (w[i, g] * diff) * diff
    trial = np.empty(lanes, np.float32)
    mse = np.empty(lanes, np.float32)
    for step in range(-4, 5):
        if step == 0:
            continue
        stretch = _TENTH * f32(step) + fnmax
        for g in range(lanes):
            trial[g] = stretch / top[g]
            mse[g] = _ZERO
        for i in range(n):
            for g in range(lanes):
                level = nearest_f(trial[g] * x[i, g])
                level = pick(level > fnmax, fnmax, level)
                diff = x[i, g] - (_ONE / trial[g]) * level
                mse[g] += (w[i, g] * diff) * diff
        for g in range(lanes):
            better = mse[g] < best[g]
            best[g] = pick(better, mse[g], best[g])
            iscale[g] = pick(better, trial[g], iscale[g])
    sumlx = np.zeros(lanes, np.float32)
    suml2 = np.zeros(lanes, np.float32)
    cur = np.empty((n, lanes), np.float32)  # L[i] as C reads it back (modulo 256)
    for i in range(n):
        for g in range(lanes):
            level = nearest_f(iscale[g] * x[i, g])
            level = pick(level > fnmax, fnmax, level)
            cur[i, g] = f32(np.int32(level) & 0xFF)
            wl = w[i, g] * level
            sumlx[g] += (w[i, g] * x[i, g]) * level
            suml2[g] += wl * level
    for _ in range(5):
        changed = 0
        for i in range(n):
            for g in range(lanes):
                li = cur[i, g]
                wx = w[i, g] * x[i, g]
                slx = sumlx[g] - wx * li
                sl2 = suml2[g] - (w[i, g] * li) * li
                new_l = nearest_f((x[i, g] * sl2) / slx)
                new_l = pick(new_l > fnmax, fnmax, new_l)
                slx_new = slx + wx * new_l
                sl2_new = sl2 + (w[i, g] * new_l) * new_l
                accept = ((slx > _ZERO) & (sl2 > _ZERO) & (new_l != li)
                          & ((slx_new * slx_new) * suml2[g] > (sumlx[g] * sumlx[g]) * sl2_new))
                cur[i, g] = pick(accept, f32(np.int32(new_l) & 0xFF), li)
                sumlx[g] = pick(accept, slx_new, sumlx[g])
                suml2[g] = pick(accept, sl2_new, suml2[g])
                changed += accept
        if changed == 0:
            break
    for g in range(lanes):
        zero = top[g] < GROUP_MAX_EPS
        s = pick(suml2[g] > _ZERO, sumlx[g] / suml2[g], _ZERO)
        scale[g] = pick(zero, _ZERO, s)
    for i in range(n):
        for g in range(lanes):
            levels[i, g] = pick(top[g] < GROUP_MAX_EPS, np.uint8(0), np.uint8(np.int32(cur[i, g])))
