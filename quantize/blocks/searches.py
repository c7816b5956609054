"""The scale searches of ggml-quants.c, vectorized across groups.

Each function here is one static helper of ``ggml-quants.c`` (``make_qx_quants``,
``make_q3_quants``, ``make_qkx2_quants``/``make_qkx3_quants``, ``make_qp_quants``) run
on many groups at once. Inputs are positions-major: ``x[i, g]`` is value ``i`` of group
``g`` (a 16- or 32-value sub-block), so the C loop over ``i`` becomes a walk down
contiguous rows and the C sums keep their left-to-right order (:func:`seq_sum`).

Every expression keeps the C association: ``w*x[i]*l`` is ``(w*x)*l``, ``w*l*l`` is
``(w*l)*l``; integer constants become float32 exactly where C converts them. Where C
takes a branch per group (``if (cur_error < best_error)``), we compute both sides for
all groups and select with a mask, which yields the same values.
"""

from __future__ import annotations

import functools

import numpy as np

from quantize.blocks.float_ops import (F32, first_abs_max, nearest_clipped, nearest_int, round_clip_inplace, select,
                                       seq_min_max, seq_sum, seq_sum_from_first, zero_where)


def _at_least_two_groups(search):
    """Run ``search`` on a duplicated column when there is one group.

    With a single column numpy's ``add.reduce`` over axis 0 sums pairwise instead of
    left to right (see :func:`quantize.blocks.float_ops.seq_sum`); the hot loops call it
    directly, so they get two identical columns and we keep the first result.
    """
    @functools.wraps(search)
    def wrapper(x: np.ndarray, *args, **kwargs):
        if x.shape[1] != 1:
            return search(x, *args, **kwargs)
        twice = [np.repeat(a, 2, axis=1) if isinstance(a, np.ndarray) else a for a in args]
        results = search(np.repeat(x, 2, axis=1), *twice, **kwargs)
        return tuple(r[..., :1] for r in results)
    return wrapper


#: ggml's threshold below which a group counts as all zero.
GROUP_MAX_EPS = F32(1e-15)
_TENTH = F32(0.1)


@_at_least_two_groups
def qx_quants(x: np.ndarray, nmax: int, weights: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``make_qx_quants(n, nmax, x, L, rmse_type=1, qw)`` for every column of ``x``.

    Symmetric quantization to ``[-nmax, nmax-1]``: tries 19 scales around ``nmax/max``
    and keeps the one with the best weighted least-squares fit. Only the winning inverse
    scale is tracked per group; the levels are rounded again from it at the end (the
    same float32 operations, so the same levels).

    Args:
        x: ``(n, groups)`` float32.
        nmax: Half the number of levels.
        weights: ``(n, groups)`` float32, or ``None`` for ``x*x`` (C's ``qw == NULL``).

    Returns:
        ``(scale[groups], L[n, groups] uint8)`` with ``L = l + nmax``.
    """
    signed_max = first_abs_max(x)
    zero = np.abs(signed_max) < GROUP_MAX_EPS
    w = x * x if weights is None else weights
    wx = w * x
    trial = np.empty_like(x)
    products = np.empty_like(x)
    with np.errstate(all="ignore"):
        # |iscale * x| <= |iscale * max| = nmax + 0.1*|step| for every non-zero group.
        guard = np.asarray(np.where(zero, F32(0), np.abs(F32(nmax + 1) / signed_max) * np.abs(signed_max)))

        def levels_for(iscale: np.ndarray) -> np.ndarray:
            np.multiply(x, iscale, out=trial)
            return round_clip_inplace(trial, -nmax, nmax - 1, guard)

        def fit(levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            np.multiply(wx, levels, out=products)
            sumlx = np.add.reduce(products, axis=0)
            sumlx += F32(0)  # C sums from 0.0f: an all-zero sum is +0.0
            np.multiply(w, levels, out=products)
            np.multiply(products, levels, out=products)
            suml2 = np.add.reduce(products, axis=0)
            suml2 += F32(0)
            return sumlx, suml2

        best_iscale = F32(-nmax) / signed_max
        sumlx, suml2 = fit(levels_for(best_iscale))
        scale = np.where(suml2 != 0, sumlx / suml2, F32(0))
        best = scale * sumlx
        for step in range(-9, 10):
            if step == 0:
                continue
            iscale = -(F32(nmax) + _TENTH * F32(step)) / signed_max
            slx, sl2 = fit(levels_for(iscale))
            better = (sl2 > 0) & (slx * slx > best * sl2)
            if better.any():
                best_iscale = select(better, iscale, best_iscale)
                scale = select(better, slx / sl2, scale)
                best = select(better, scale * slx, best)
        levels = nearest_clipped(best_iscale * x, -nmax, nmax - 1)
    out = (levels + F32(nmax)).astype(np.uint8)
    out[:, zero] = 0
    scale[zero] = 0
    return scale, out


def _refine_levels(x: np.ndarray, w: np.ndarray, levels: np.ndarray, sumlx: np.ndarray,
                   suml2: np.ndarray, nmax: int, symmetric: bool, active: np.ndarray | None = None) -> None:
    """The coordinate descent shared by ``make_q3_quants`` and ``make_qp_quants``, in place.

    Up to five passes over the positions; at each, the level that best fits the others'
    sums replaces the current one if the weighted fit ``sumlx**2 / suml2`` improves. The
    positions are sequential (each uses the sums the previous one left), so we loop over
    them with whole-group vectors. A group whose pass changed nothing would repeat the
    same pass forever (C's ``break``), so each pass only revisits the groups that moved.

    ``symmetric`` selects ``make_q3_quants`` (levels in ``[-nmax, nmax-1]``, the new
    ``sl2`` must stay positive) over ``make_qp_quants`` (levels ``<= nmax``, stored in a
    ``uint8_t``, the old ``sl2`` must be positive). ``active``: the only groups that
    can change (default all).
    """
    if active is None:
        active = np.arange(x.shape[1])
        xa, wa, la, sx, s2 = x, w, levels, sumlx, suml2
    else:
        xa, wa, la, sx, s2 = x[:, active], w[:, active], levels[:, active], sumlx[active], suml2[active]
    for _ in range(5):
        wxa = wa * xa
        changed = np.zeros(active.size, dtype=bool)
        for i in range(x.shape[0]):
            li = la[i]
            slx = sx - wxa[i] * li
            sl2 = s2 - (wa[i] * li) * li
            ratio = (xa[i] * sl2) / slx
            if symmetric:
                new_l = nearest_clipped(ratio, -nmax, nmax - 1)
            else:
                new_l = np.minimum(nearest_int(ratio), nmax).astype(F32)
            slx_new = slx + wxa[i] * new_l
            sl2_new = sl2 + (wa[i] * new_l) * new_l
            accept = (slx > 0) & (new_l != li) & ((slx_new * slx_new) * s2 > (sx * sx) * sl2_new)
            accept &= (sl2_new > 0) if symmetric else (sl2 > 0)
            if accept.any():
                changed |= accept
                if not symmetric:
                    new_l = (new_l.astype(np.int32) & 0xFF).astype(F32)
                la[i] = select(accept, new_l, li)
                sx = select(accept, slx_new, sx)
                s2 = select(accept, sl2_new, s2)
        if la is not levels:
            levels[:, active] = la
        sumlx[active] = sx
        suml2[active] = s2
        if not changed.any():
            return
        active = active[changed]
        xa, wa, la, sx, s2 = x[:, active], w[:, active], levels[:, active], sumlx[active], suml2[active]


def q3_quants(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """``make_q3_quants(n, nmax, x, L, do_rmse=true)``: Q3_K's reference scale search.

    A first guess from the largest magnitude, then :func:`_refine_levels`.

    Returns:
        ``(scale[groups], L[n, groups] uint8)`` with ``L = l + nmax`` (0 for zero groups).
    """
    signed_max = first_abs_max(x)
    zero = np.abs(signed_max) < GROUP_MAX_EPS
    w = x * x
    with np.errstate(all="ignore"):
        levels = nearest_clipped((F32(-nmax) / signed_max) * x, -nmax, nmax - 1)
        terms = (w * x) * levels
        sumlx = seq_sum(terms)
        suml2 = seq_sum((w * levels) * levels)
        # A level changes only where the other positions' sum ``slx`` is > 0. When no
        # term w*x*l is positive, every partial sum is <= 0 (rounding a sum of
        # non-positive numbers keeps it non-positive and at least as large in magnitude
        # as any term), so the group never moves: that is every group whose largest
        # magnitude is positive, as its first guess has levels of the opposite sign.
        movable = np.flatnonzero((terms > 0).any(axis=0))
        _refine_levels(x, w, levels, sumlx, suml2, nmax, symmetric=True, active=movable)
        scale = np.where(suml2 > 0, sumlx / suml2, F32(0))
    out = (levels + F32(nmax)).astype(np.uint8)
    out[:, zero] = 0
    scale[zero] = 0
    return scale, out


@_at_least_two_groups
def qkx_quants(x: np.ndarray, weights: np.ndarray, nmax: int, rmin: float, rdelta: float,
               nstep: int, use_mad: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``make_qkx2_quants`` / ``make_qkx3_quants`` (with weights): asymmetric ``x ≈ s*L - m``.

    Starts from the min/max grid, then tries ``nstep + 1`` grid densities; for each it
    solves the weighted least-squares scale and offset and keeps the one with the
    smallest weighted error (absolute with ``use_mad``, squared otherwise). C reuses its
    ``min`` variable, so once a step is accepted the later grids start from the new
    offset: the steps are sequential per group, vectorized across groups.

    This is the hot loop of the k-quants, so it works in preallocated buffers.

    Returns:
        ``(scale[groups], the_min[groups], L[n, groups] uint8)``; ``the_min`` is C's
        ``*the_min`` (the negated offset, ``-0.0`` included).
    """
    lo, hi = seq_min_max(x)
    lo = np.where(lo > 0, F32(0), lo)
    flat = ~(hi > lo)  # C: max == min (qkx2) / max <= min (qkx3); the same once min <= 0
    sum_w = seq_sum_from_first(weights)
    sum_x = seq_sum_from_first(weights * x)
    x_bound = np.maximum(np.abs(lo), np.abs(hi))
    shifted = x - lo
    trial = np.empty_like(x)
    products = np.empty_like(x)
    diff = np.empty_like(x)

    def add_up(terms: np.ndarray) -> np.ndarray:
        # seq_sum without its checks: ``terms`` is a C-contiguous scratch buffer.
        total = np.add.reduce(terms, axis=0)
        total += F32(0)
        return total

    def error_of(scale: np.ndarray, offset: np.ndarray, levels: np.ndarray) -> np.ndarray:
        np.multiply(levels, scale, out=diff)
        np.add(diff, offset, out=diff)
        np.subtract(diff, x, out=diff)
        if use_mad:
            np.abs(diff, out=diff)
        else:
            np.multiply(diff, diff, out=diff)
        np.multiply(diff, weights, out=diff)
        return add_up(diff)

    with np.errstate(all="ignore"):
        span = hi - lo
        offset = lo
        iscale = F32(nmax) / span
        scale = F32(1) / iscale
        best_iscale, best_shift = iscale, lo
        best = error_of(scale, lo, _levels(x, iscale, lo, nmax))

        # |iscale*(x - offset)| <= |iscale| * reach_per_span; recomputed when an offset moves.
        def reach(offset: np.ndarray, span: np.ndarray) -> np.ndarray:
            # Flat groups (span 0) are overwritten at the end; keep them out of the guard.
            return np.max(np.where(flat, F32(0), (x_bound + np.abs(offset)) / np.abs(span)), initial=F32(0))

        reach_per_span = reach(offset, span)
        moved = moved_ever = False
        for step in range(nstep + 1):
            if moved:
                span = hi - offset
                np.subtract(x, offset, out=shifted)
                reach_per_span = reach(offset, span)
            stretch = F32(rmin) + F32(rdelta) * F32(step)
            iscale = (stretch + F32(nmax)) / span
            np.multiply(shifted, iscale, out=trial)
            # v = iscale*(x - offset) <= nmax + stretch while span > 0: no upper clip while
            # stretch < 1/2; v >= 0 while every offset is still at or below its group's min.
            clip_lo, clip_hi = False, bool(stretch >= F32(0.45))
            if moved_ever:
                clip_lo = bool((offset > lo).any())
                clip_hi = clip_hi or bool((span <= 0).any())
            levels_step = round_clip_inplace(
                trial, 0, nmax, np.asarray(abs(stretch + F32(nmax)) * reach_per_span * F32(1.001)),
                clip_lo=clip_lo, clip_hi=clip_hi)
            np.multiply(weights, levels_step, out=products)
            sum_l = add_up(products)
            np.multiply(products, x, out=diff)
            sum_xl = add_up(diff)
            np.multiply(products, levels_step, out=products)
            sum_l2 = add_up(products)
            det = sum_w * sum_l2 - sum_l * sum_l
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / det
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det
            positive = this_min > 0
            if positive.any():
                this_min = zero_where(positive, this_min)
                this_scale = select(positive, sum_xl / sum_l2, this_scale)
            cur = error_of(this_scale, this_min, levels_step)
            better = (det > 0) & (cur < best)
            moved = bool(better.any())
            if moved:
                moved_ever = True
                best = select(better, cur, best)
                scale = select(better, this_scale, scale)
                best_iscale = select(better, iscale, best_iscale)
                best_shift = select(better, offset, best_shift)
                offset = select(better, this_min, offset)
        levels = _levels(x, best_iscale, best_shift, nmax)
    out = levels.astype(np.uint8)
    if flat.any():
        out[:, flat] = 0
        scale = np.where(flat, F32(0), scale)
        offset = np.where(flat, lo, offset)
    return scale, -offset, out


def _levels(x: np.ndarray, iscale: np.ndarray, shift: np.ndarray, nmax: int) -> np.ndarray:
    """``MAX(0, MIN(nmax, nearest_int(iscale*(x - shift))))`` as float32."""
    return nearest_clipped(iscale * (x - shift), 0, nmax)


def qp_quants(x: np.ndarray, nmax: int, quant_weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``make_qp_quants(n, nmax, x, L, quant_weights)``: non-negative levels ``0..nmax``.

    Used to quantize a super-block's sub-block scales and mins: eight trial scales, then
    :func:`_refine_levels`. C stores ``L`` as ``uint8_t``, so levels are kept modulo 256
    exactly as C reads them back.

    Returns:
        ``(scale[groups], L[n, groups] uint8)``.
    """
    top = np.maximum(x.max(axis=0), F32(0))
    zero = top < GROUP_MAX_EPS
    w = quant_weights
    with np.errstate(all="ignore"):
        iscale = F32(nmax) / top
        stored = (nearest_int(iscale * x) & 0xFF).astype(F32)
        diff = x - (F32(1) / iscale) * stored
        best = seq_sum((w * diff) * diff)
        for step in range(-4, 5):
            if step == 0:
                continue
            iscale_is = (_TENTH * F32(step) + F32(nmax)) / top
            trial = np.minimum(nearest_int(iscale_is * x), nmax).astype(F32)
            diff = x - (F32(1) / iscale_is) * trial
            mse = seq_sum((w * diff) * diff)
            better = mse < best
            best = np.where(better, mse, best)
            iscale = np.where(better, iscale_is, iscale)
        ints = np.minimum(nearest_int(iscale * x), nmax).astype(F32)
        sumlx = seq_sum((w * x) * ints)
        suml2 = seq_sum((w * ints) * ints)
        levels = (ints.astype(np.int32) & 0xFF).astype(F32)
        _refine_levels(x, w, levels, sumlx, suml2, nmax, symmetric=False)
        scale = np.where(suml2 > 0, sumlx / suml2, F32(0))
    out = levels.astype(np.uint8)
    out[:, zero] = 0
    scale[zero] = 0
    return scale, out
