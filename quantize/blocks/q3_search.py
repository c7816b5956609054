"""``make_q3_quants``: Q3_K's reference scale search, with its descent written as 8-lane LLVM IR.

C (ggml-quants.c), for one group of ``n`` values, ``do_rmse`` true::

    first guess:  L[i] = clamp(nearest_int(-nmax/max * x[i]), -nmax, nmax-1), w = x[i]*x[i]
                  sumlx += w*x[i]*L[i];  suml2 += w*L[i]*L[i]
    up to 5 passes, stopping after one that changed nothing; for each i:
        slx = sumlx - w*x[i]*L[i]
        if (slx > 0) {
            sl2 = suml2 - w*L[i]*L[i]
            new_l = clamp(nearest_int(x[i] * sl2 / slx), -nmax, nmax-1)
            if (new_l != L[i]) {
                slx += w*x[i]*new_l;  sl2 += w*new_l*new_l
                if (sl2 > 0 && slx*slx*suml2 > sumlx*sumlx*sl2) { L[i] = new_l; sumlx = slx; suml2 = sl2 }
            }
        }
    scale = sumlx/suml2

Each step depends on the one before through ``sumlx``/``suml2``, and a group has 16
positions: a pass is a chain of dependent divisions. So groups are lanes (positions-major
arrays ``x[i, g]``, see :mod:`.searches`) and a pass walks the positions of 32 lanes at
once (four 8-lane vectors, independent chains that the CPU overlaps), keeping each
lane's ``sumlx``, ``suml2``, ``sumlx*sumlx`` and "moved" flag in registers. Written for
numba's loop vectorizer instead, the state went through memory at every position
(loads, stores, and two buffers to avoid AVX masked stores): ~1.6x slower per pass.

Every lane performs C's float32 operations in C's order, without FMA (no ``contract``
flags) and with the division kept: ``sumlx*sumlx`` is carried instead of recomputed,
which is the same product of the same value. Only the branches become selects.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from quantize.blocks.jit import F32, GROUP_MAX_EPS, MAGIC, f32, helper, lane_constant, nearest_f, pick, splat
from quantize.blocks.searches import first_abs_max

_ZERO = F32(0.0)
_PASSES = 5  # make_q3_quants' itry < 5
_WIDE = 4  # 8-lane vectors walked together: enough independent chains to hide a step's latency


class _Lanes:
    """Pointers to element ``(i, g)`` of the pass's arrays, and 8-float loads and stores."""

    def __init__(self, context, builder, sig, args):
        self.builder = builder
        self.floats = ir.VectorType(ir.FloatType(), 8)
        arrays = [context.make_array(t)(context, builder, a) for t, a in zip(sig.args[:5], args[:5])]
        self.x, self.cur, self.sumlx, self.suml2, self.moved = (a.data for a in arrays)
        self.n, self.lanes = cgutils.unpack_tuple(builder, arrays[0].shape, 2)

    def at(self, pointer, offset):
        vector_pointer = self.builder.bitcast(self.builder.gep(pointer, [offset]), self.floats.as_pointer())
        return vector_pointer

    def load(self, pointer, offset):
        return self.builder.load(self.at(pointer, offset), align=4)

    def store(self, value, pointer, offset):
        self.builder.store(value, self.at(pointer, offset), align=4)


def _emit_group(lanes: _Lanes, first, wide: int, lo, hi):
    """One descent pass over every position of the ``wide`` 8-lane vectors from lane ``first``."""
    builder = lanes.builder
    floats = lanes.floats
    ints = ir.VectorType(ir.IntType(32), 8)
    zero = lane_constant(floats, 0.0)
    starts = [builder.add(first, ir.Constant(first.type, 8 * c)) for c in range(wide)]
    # the state of each vector, in stack slots that LLVM promotes to registers
    state = []
    for c in range(wide):
        sumlx = lanes.load(lanes.sumlx, starts[c])
        slots = [cgutils.alloca_once(builder, floats) for _ in range(3)] + [cgutils.alloca_once(builder, ints)]
        builder.store(sumlx, slots[0])
        builder.store(lanes.load(lanes.suml2, starts[c]), slots[1])
        builder.store(builder.fmul(sumlx, sumlx), slots[2])
        builder.store(lane_constant(ints, 0), slots[3])
        state.append(slots)
    with cgutils.for_range(builder, lanes.n) as loop:
        row = builder.mul(loop.index, lanes.lanes)
        for c in range(wide):
            at = builder.add(row, starts[c])
            sumlx, suml2, square, moved = (builder.load(s) for s in state[c])
            x = lanes.load(lanes.x, at)
            li = lanes.load(lanes.cur, at)
            w = builder.fmul(x, x)
            wx = builder.fmul(w, x)
            slx = builder.fsub(sumlx, builder.fmul(wx, li))
            sl2 = builder.fsub(suml2, builder.fmul(builder.fmul(w, li), li))
            ratio = builder.fdiv(builder.fmul(x, sl2), slx)
            bits = builder.bitcast(builder.fadd(ratio, lane_constant(floats, float(MAGIC))), ints)
            level = builder.sub(builder.and_(bits, lane_constant(ints, 0x007FFFFF)),
                                lane_constant(ints, 0x00400000))
            new_l = builder.sitofp(level, floats)
            new_l = builder.select(builder.fcmp_ordered(">", new_l, hi), hi, new_l)
            new_l = builder.select(builder.fcmp_ordered("<", new_l, lo), lo, new_l)
            slx_new = builder.fadd(slx, builder.fmul(wx, new_l))
            sl2_new = builder.fadd(sl2, builder.fmul(builder.fmul(w, new_l), new_l))
            square_new = builder.fmul(slx_new, slx_new)
            better = builder.fcmp_ordered(">", builder.fmul(square_new, suml2), builder.fmul(square, sl2_new))
            accept = builder.and_(builder.and_(builder.fcmp_ordered(">", slx, zero),
                                               builder.fcmp_unordered("!=", new_l, li)),
                                  builder.and_(builder.fcmp_ordered(">", sl2_new, zero), better))
            # li + (accept ? new_l - li : 0), exact for these small integers: a select of the
            # loaded value stored back in place compiles to an AVX masked store (slow)
            step = builder.select(accept, builder.fsub(new_l, li), zero)
            lanes.store(builder.fadd(li, step), lanes.cur, at)
            builder.store(builder.select(accept, slx_new, sumlx), state[c][0])
            builder.store(builder.select(accept, sl2_new, suml2), state[c][1])
            builder.store(builder.select(accept, square_new, square), state[c][2])
            builder.store(builder.or_(moved, builder.sext(accept, ints)), state[c][3])
    one = lane_constant(floats, 1.0)
    for c in range(wide):
        lanes.store(builder.load(state[c][0]), lanes.sumlx, starts[c])
        lanes.store(builder.load(state[c][1]), lanes.suml2, starts[c])
        moved = builder.icmp_signed("!=", builder.load(state[c][3]), lane_constant(ints, 0))
        lanes.store(builder.select(moved, one, zero), lanes.moved, starts[c])


@intrinsic
def q3_pass(typingctx, x, cur, sumlx, suml2, moved, lo, hi):
    """One pass of make_q3_quants' descent over every position of every lane of
    ``x[n, lanes]`` (``lanes`` a multiple of 8): updates the levels ``cur`` (as floats)
    and the lane sums in place; ``moved[g]`` becomes 1 where lane ``g`` changed, else 0."""
    arrays = (x, cur, sumlx, suml2, moved)
    if not (all(isinstance(a, types.Array) and a.dtype == types.float32 and a.layout == "C" for a in arrays)
            and x.ndim == cur.ndim == 2 and sumlx.ndim == suml2.ndim == moved.ndim == 1
            and lo == hi == types.float32):
        return None

    def codegen(context, builder, signature, args):
        lanes = _Lanes(context, builder, signature, args)
        lo, hi = (splat(builder, v, lanes.floats) for v in args[5:7])
        span = ir.Constant(lanes.lanes.type, 8 * _WIDE)
        groups = builder.udiv(lanes.lanes, span)
        with cgutils.for_range(builder, groups) as loop:
            _emit_group(lanes, builder.mul(loop.index, span), _WIDE, lo, hi)
        done = builder.mul(groups, span)
        rest = builder.udiv(builder.sub(lanes.lanes, done), ir.Constant(done.type, 8))
        with cgutils.for_range(builder, rest) as loop:
            _emit_group(lanes, builder.add(done, builder.mul(loop.index, ir.Constant(done.type, 8))), 1, lo, hi)
        return context.get_dummy_value()
    return types.none(x, cur, sumlx, suml2, moved, lo, hi), codegen


@helper
def q3_quants(x, nmax, scale, levels):
    """``make_q3_quants(n, nmax, x, L, do_rmse=true)`` on every lane of ``x[n, lanes]``
    (``lanes`` a multiple of 8); ``levels = l + nmax``, 0 for an all-zero group.

    C stops a group after the first pass that changed nothing: most groups stop after
    one (on normal data ~19% take a second pass, ~5% a third). The first pass runs on
    every lane; the lanes it changed are copied side by side, padded with all-zero lanes
    (a zero lane never moves: ``slx > 0`` fails) to whole 32-lane steps of :func:`q3_pass`
    (a pass costs its slowest chain: one 8-lane vector takes as long as four), and
    passes 2..5 run on that set until none of it moves: a pass on a lane that has
    stopped changes nothing, and copying the moving lanes again before every pass
    measured no faster.
    """
    n, lanes = x.shape
    state = np.empty((6, lanes), np.float32)  # one allocation for the per-lane values
    signed_max, amax, iscale, sumlx, suml2, moved = state[0], state[1], state[2], state[3], state[4], state[5]
    first_abs_max(x, signed_max, amax)
    lo = f32(-nmax)
    hi = f32(nmax - 1)
    cur = np.empty((n, lanes), np.float32)  # L as floats (small integers: exact)
    for g in range(lanes):
        iscale[g] = lo / signed_max[g]
        sumlx[g] = _ZERO
        suml2[g] = _ZERO
    for i in range(n):
        for g in range(lanes):
            v = x[i, g]
            weight = v * v
            level = nearest_f(iscale[g] * v)
            level = pick(level > hi, hi, level)
            level = pick(level < lo, lo, level)
            cur[i, g] = level
            sumlx[g] += (weight * v) * level
            suml2[g] += (weight * level) * level
    q3_pass(x, cur, sumlx, suml2, moved, lo, hi)
    active = np.empty(lanes, np.uintp)  # unsigned: indexing needs no wrap-around code
    count = 0
    for g in range(lanes):  # no branch: which lanes moved is random
        active[count] = np.uintp(g)
        count += moved[g] != _ZERO
    if count > 0:
        _later_passes(x, cur, lo, hi, sumlx, suml2, active[:count])
    fnmax = f32(nmax)
    for g in range(lanes):
        zero = not amax[g] >= GROUP_MAX_EPS
        s = pick(suml2[g] > _ZERO, sumlx[g] / suml2[g], _ZERO)
        scale[g] = pick(zero, _ZERO, s)
    for i in range(n):
        for g in range(lanes):
            levels[i, g] = pick(amax[g] >= GROUP_MAX_EPS, np.uint8(np.int32(cur[i, g] + fnmax)), np.uint8(0))


@helper
def _later_passes(x, cur, lo, hi, sumlx, suml2, active):
    """Passes 2..5 on the lanes ``active``, copied side by side and padded with zero lanes."""
    n = x.shape[0]
    count = active.size
    width = (count + 8 * _WIDE - 1) // (8 * _WIDE) * (8 * _WIDE)  # q3_pass's widest step: equally fast
    part_x = np.empty((n, width), np.float32)
    part_cur = np.empty((n, width), np.float32)
    sums = np.empty((3, width), np.float32)  # sumlx, suml2, moved
    for i in range(n):
        for k in range(count):
            g = active[k]
            part_x[i, k] = x[i, g]
            part_cur[i, k] = cur[i, g]
        for k in range(count, width):
            part_x[i, k] = _ZERO
            part_cur[i, k] = _ZERO
    for k in range(count):
        sums[0, k] = sumlx[active[k]]
        sums[1, k] = suml2[active[k]]
    for k in range(count, width):
        sums[0, k] = _ZERO
        sums[1, k] = _ZERO
    for _ in range(_PASSES - 1):
        q3_pass(part_x, part_cur, sums[0], sums[1], sums[2], lo, hi)
        still = 0
        for k in range(width):
            still += sums[2, k] != _ZERO
        if still == 0:
            break
    for i in range(n):
        for k in range(count):
            cur[i, active[k]] = part_cur[i, k]
    for k in range(count):
        sumlx[active[k]] = sums[0, k]
        suml2[active[k]] = sums[1, k]
