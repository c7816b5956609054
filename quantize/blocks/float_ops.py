"""float32 building blocks that reproduce ggml-quants.c's arithmetic bit for bit.

ggml's quantizers are scalar C on float32. To produce the same bytes with numpy we
must perform the *same* IEEE operations in the *same* order:

* every value stays float32 (numpy scalars are wrapped in ``np.float32`` so that no
  operation silently widens to float64);
* sums are accumulated left to right like the C ``for`` loops. numpy's ``sum`` along a
  contiguous axis is pairwise (a different rounding), so all our sequential sums run
  over axis 0 of a C-contiguous ``(positions, groups)`` array, where numpy adds whole rows
  one after the other (see :func:`seq_sum`);
* ``nearest_int`` is C's ``fval + 12582912.f`` bit trick (round half to even, and the
  same garbage for out-of-range values);
* ``GGML_FP32_TO_FP16`` rounds to nearest even, as numpy's ``astype(float16)`` does;
* signed zeros and NaNs follow C's comparisons (``first_abs_max``, ``seq_min_max``).

For speed the hot loops use in-place ``out=`` operations, ``np.rint`` where it provably
equals ``nearest_int``, and a branch-free :func:`select` instead of ``np.where``.

Arrays in this package are laid out positions-major: ``x[i, g]`` is position ``i``
of group (block or sub-block) ``g``, so one C loop iteration ``i`` is one contiguous
numpy row across all groups.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32
#: 1.5 * 2**23: adding it leaves round-half-even(v) in the low mantissa bits.
MAGIC = F32(12582912.0)


def nearest_int(values: np.ndarray) -> np.ndarray:
    """C's ``nearest_int``: int32 of ``values`` rounded half to even, via the bit trick.

    Matches C for every input, including NaN/inf and out-of-range values (which the C
    ``assert`` does not catch in release builds).
    """
    bits = (values + MAGIC).view(np.int32)
    bits &= 0x007FFFFF
    bits -= 0x00400000
    return bits


def nearest_clipped(values: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``MAX(lo, MIN(hi, nearest_int(values)))`` as float32 (the form the sums use)."""
    ints = nearest_int(values)
    np.maximum(ints, lo, out=ints)
    np.minimum(ints, hi, out=ints)
    return ints.astype(F32)


_ROUND_SAFE = F32(4194303.0)  # nearest_int's exact range (C asserts |v| <= this)


def round_clip_inplace(values: np.ndarray, lo: int, hi: int, bound: np.ndarray,
                       clip_lo: bool = True, clip_hi: bool = True) -> np.ndarray:
    """:func:`nearest_clipped` computed in place in float32, in 1 to 3 passes instead of 6.

    ``np.rint`` rounds half to even exactly like the C bit trick for ``|v| < 2**22``, and
    clipping commutes with rounding to integer bounds. ``bound`` is an upper bound of
    ``|v|`` per column; when any is out of that range (or NaN) we take the exact integer
    route instead. Callers that know a side cannot be exceeded skip that clip.
    """
    if not bound.max(initial=F32(0)) < _ROUND_SAFE:
        return nearest_clipped(values, lo, hi)
    np.rint(values, out=values)
    if clip_lo or clip_hi:
        # One np.clip pass costs about what one np.maximum pass does.
        np.clip(values, F32(lo) if clip_lo else F32(-np.inf), F32(hi) if clip_hi else F32(np.inf), out=values)
    return values


def select(mask: np.ndarray, if_true: np.ndarray, if_false: np.ndarray) -> np.ndarray:
    """``np.where(mask, if_true, if_false)`` for float32 arrays of one shape, branch-free.

    ``np.where`` branches per element; on the unpredictable masks of the searches'
    "is this step better" tests it is ~10x slower than this bitwise select.
    """
    keep = mask.view(np.int8).astype(np.int32)
    np.negative(keep, out=keep)  # all ones where the mask is set
    chosen = if_true.view(np.int32) & keep
    np.invert(keep, out=keep)
    keep &= if_false.view(np.int32)
    chosen |= keep
    return chosen.view(F32)


def zero_where(mask: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``np.where(mask, +0.0, values)`` for float32, branch-free."""
    keep = mask.view(np.int8).astype(np.int32)
    keep -= 1  # all ones where the mask is clear
    keep &= values.view(np.int32)
    return keep.view(F32)


def seq_sum(terms: np.ndarray) -> np.ndarray:
    """Left-to-right float32 sum over axis 0, like ``for (i...) s += t[i]`` in C.

    Starting the C loop from ``s = 0`` only differs from starting at ``t[0]`` in the sign
    of an all-zero sum; the final ``+ 0`` reproduces that (``-0.0 + 0.0 == +0.0``).
    """
    if terms.ndim == 2 and terms.shape[1] == 1:
        # With one column numpy would reduce along a contiguous axis, pairwise.
        total = np.cumsum(terms, axis=0, dtype=F32)[-1]
    else:
        total = np.add.reduce(np.ascontiguousarray(terms), axis=0, dtype=F32)
    total += F32(0.0)
    return total


def seq_sum_from_first(terms: np.ndarray) -> np.ndarray:
    """Left-to-right sum whose C loop starts from ``s = t[0]`` (not from ``0``)."""
    if terms.ndim == 2 and terms.shape[1] == 1:
        return np.cumsum(terms, axis=0, dtype=F32)[-1]
    return np.add.reduce(np.ascontiguousarray(terms), axis=0, dtype=F32)


def row_sums_sequential(values: np.ndarray) -> np.ndarray:
    """Per-row left-to-right sum of a ``(rows, n)`` array (accumulate is always sequential)."""
    return np.cumsum(values, axis=1, dtype=F32)[:, -1] + F32(0.0)


def to_fp16(values: np.ndarray) -> np.ndarray:
    """``GGML_FP32_TO_FP16``: round to nearest even, overflow to infinity."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(values, dtype=F32).astype(np.float16)


def fp16_round(values: np.ndarray) -> np.ndarray:
    """``GGML_FP16_TO_FP32(GGML_FP32_TO_FP16(v))``: what the stored scale reads back as."""
    return to_fp16(values).astype(F32)


def lane_reduce(ufunc: np.ufunc, x: np.ndarray, axis: int) -> np.ndarray:
    """``ufunc.reduce(x, axis)`` for order-free reductions (max, min), fast on short rows.

    numpy reduces a short contiguous last axis one row at a time, which costs ~10x an
    elementwise pass; folding the row in halves does the same work as a few passes.
    Only for ``maximum``/``minimum``, whose result does not depend on the order.
    """
    if axis == 0 or x.shape[1] & (x.shape[1] - 1):
        return ufunc.reduce(x, axis=axis)
    while x.shape[1] > 1:
        half = x.shape[1] // 2
        x = ufunc(x[:, :half], x[:, half:])
    return x[:, 0]


def first_abs_max(x: np.ndarray, axis: int = 0) -> np.ndarray:
    """The signed value of largest magnitude along ``axis``; the first one wins ties.

    This is C's ``if (fabsf(v) > amax) { amax = fabsf(v); max = v; }`` from
    ``amax = max = 0``: zeros and NaNs never win, so such a lane yields ``+0.0``.
    ``max``/``min`` (fast row-wise reductions) settle every lane except exact ``+a``/``-a``
    ties and lanes holding a NaN; those few take the slow first-index route.
    """
    hi = lane_reduce(np.maximum, x, axis)
    lo = lane_reduce(np.minimum, x, axis)
    neg_lo = -lo
    result = np.where(hi >= neg_lo, hi, lo)
    slow = np.flatnonzero((hi == neg_lo) | np.isnan(hi))
    if slow.size:
        lanes = np.take(x, slow, axis=1 - axis)
        magnitude = np.abs(lanes)
        magnitude[np.isnan(magnitude)] = -1
        first = np.expand_dims(np.argmax(magnitude, axis=axis), axis)
        result[slow] = np.take_along_axis(lanes, first, axis=axis).reshape(-1)
    result[~(np.abs(result) > 0)] = 0
    return result


def positive_max(values: np.ndarray, axis: int) -> np.ndarray:
    """C's ``if (v > m) m = v`` from ``m = 0``: NaNs are skipped, the result is never -0.0."""
    top = np.fmax.reduce(values, axis=axis)
    return np.where(top > 0, top, F32(0))


def seq_min_max(x: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """C's ``if (x[i] < min) min = x[i]; if (x[i] > max) max = x[i];`` along ``axis``.

    Plain ``min``/``max`` agree except for which zero is kept when ``+0.0`` and ``-0.0``
    tie: C keeps the first one met. The sign matters where ``-min`` is stored as fp16.
    """
    lo = lane_reduce(np.minimum, x, axis)
    hi = lane_reduce(np.maximum, x, axis)
    for extreme in (lo, hi):
        zero = np.flatnonzero(extreme == 0)
        if zero.size:
            lanes = np.take(x, zero, axis=1 - axis)
            first = np.expand_dims(np.argmax(lanes == 0, axis=axis), axis)
            extreme[zero] = np.take_along_axis(lanes, first, axis=axis).reshape(-1)
    return lo, hi


def signed_int8(values: np.ndarray) -> np.ndarray:
    """C's ``(int8_t)`` of a float: truncate to int32 (cvttss2si), keep the low byte."""
    with np.errstate(invalid="ignore"):
        ints = values.astype(np.int32)
    return ints.astype(np.int8)
