"""MXFP4: the OCP microscaling 4-bit float type (gpt-oss experts), compiled, byte-exact.

A block of 32 values shares one power-of-two scale (an E8M0 exponent byte ``e``); each
value is the E2M1 float nearest ``x / scale``, stored as a 4-bit index into ggml's
doubled table ``kvalues_mxfp4`` (0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6, times 2). Layout::

    MXFP4 | e | qs[16] |                                                   17 bytes
    e = floor(log2(max |x|)) - 2 + 127 (0 when the block is all zero), as a byte
    qs[j] = index(x[j]) | index(x[16 + j]) << 4;  value = kvalues[index] * 2^(e - 128)

The exponent comes from the C library's ``log2f`` (numba calls the same one), so a
magnitude just below a power of two takes the exponent that ``floorf(log2f(...))``
gives there. ggml ignores an importance matrix for this type.

C scans all 16 levels for every value; here a block's 32 values are placed as vectors by
counting the midpoints below each (:func:`store_nearest_nibbles`, the same indices), its
largest magnitude found as one vector reduction, and an F16 model's blocks are widened
as vectors too (:func:`mxfp4_from_f16`): 0.84 ns a value against the scan's 1.9 (one
thread, VM-C, 2026-11-28).
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from quantize.blocks.jit import F32, bits_f32, c_trunc_i32, inline, key_value, splat, stack_array, streaming_kernel

#: ggml's ``kvalues_mxfp4`` (E2M1 values, doubled).
MXFP4_LEVELS = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int8)
_LEVELS = MXFP4_LEVELS.astype(np.float32)
_ZERO = F32(0.0)
_INF = F32(np.inf)


@inline
def e8m0_to_fp32_half(e):
    """``ggml_e8m0_to_fp32_half``: ``2^(e - 128)`` (the two smallest as denormals)."""
    bits = np.int32(0x00200000) << e if e < 2 else np.int32(e - 1) << 23
    return bits_f32(bits)


@inline
def best_index_mxfp4(x, d):
    """The first index with the least ``|kvalues[i]*d - x|`` (C's scan)."""
    best = 0
    best_err = np.abs(_LEVELS[0] * d - x)
    for i in range(1, 16):
        err = np.abs(_LEVELS[i] * d - x)
        if err < best_err:
            best = i
            best_err = err
    return best


def _first(context, builder, array_type, array, index):
    """Pointer to ``array[index..., 0]``."""
    made = context.make_array(array_type)(context, builder, array)
    return cgutils.get_item_pointer(context, builder, array_type, made,
                                    [*index, context.get_constant(types.intp, 0)])


def _is_array(t, dtype, ndim) -> bool:
    return isinstance(t, types.Array) and t.layout == "C" and t.dtype == dtype and t.ndim == ndim


@intrinsic
def block_magnitude_key(typingctx, x):
    """C's ``amax = MAX(amax, fabsf(x[j]))`` from 0 over a block's 32 float32 values ``x``
    (contiguous), NaNs never taken, as an int32 that orders like it
    (:func:`quantize.blocks.jit.key_value` gives the float): one 32-lane vector and LLVM's
    reduction, where the loop stayed scalar."""
    if not _is_array(x, types.float32, 1):
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        lanes = ir.VectorType(i32, 32)
        first = _first(context, builder, signature.args[0], args[0], [])
        bits = builder.load(builder.bitcast(first, lanes.as_pointer()), typ=lanes, align=4)
        magnitude = builder.and_(bits, ir.Constant(lanes, [0x7FFFFFFF] * 32))
        nan = builder.icmp_signed(">", magnitude, ir.Constant(lanes, [0x7F800000] * 32))
        magnitude = builder.select(nan, ir.Constant(lanes, [0] * 32), magnitude)
        across = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, [lanes]),
                                                "llvm.vector.reduce.smax.v32i32")
        return builder.call(across, [magnitude])
    return types.int32(x), codegen


@intrinsic
def store_nearest_nibbles(typingctx, x, d, out, row):
    """``qs`` of a block's 32 float32 values ``x`` at scale ``d`` into ``out[row, 1:17]``, where the
    block's largest magnitude is finite: each index the number of midpoints between
    neighbouring magnitudes (0.5, 1.5, 2.5, 3.5, 5, 7, 10 times ``d``) below ``|x|``, plus 8
    for a negative ``x`` off zero; 32 lanes at once.

    :func:`best_index_mxfp4`'s index: ``d`` is the power of two that puts the block's
    largest magnitude in ``[4d, 16d]``, so ``|x|`` lies between two neighbouring
    magnitudes ``L*d`` whose distances to it C computes exactly (``L*d`` and the midpoints
    are exact, and neighbours are at most a factor 2 apart, so each difference is exact by
    Sterbenz's lemma); the nearer wins, the smaller on a tie (C's strict ``<``); farther
    magnitudes are at least ``d`` farther; the other sign's levels score ``L*d + |x|``,
    never below ``|x|``, index 0's score, which C sees first. A NaN compares false: 0, as
    in C.
    """
    if not (_is_array(x, types.float32, 1) and d == types.float32 and _is_array(out, types.uint8, 2)
            and isinstance(row, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        f32, i8 = ir.FloatType(), ir.IntType(8)
        floats, bytes32 = ir.VectorType(f32, 32), ir.VectorType(i8, 32)
        first = _first(context, builder, signature.args[0], args[0], [])
        values = builder.load(builder.bitcast(first, floats.as_pointer()), typ=floats, align=4)
        fabs = cgutils.get_or_insert_function(builder.module, ir.FunctionType(floats, [floats]), "llvm.fabs.v32f32")
        magnitude = builder.call(fabs, [values])
        count = ir.Constant(bytes32, [0] * 32)
        for midpoint in (0.5, 1.5, 2.5, 3.5, 5.0, 7.0, 10.0):
            bound = splat(builder, builder.fmul(args[1], ir.Constant(f32, midpoint)), floats)
            above = builder.fcmp_ordered(">", magnitude, bound)
            count = builder.add(count, builder.zext(above, bytes32))
        negative = builder.and_(builder.fcmp_ordered("<", values, ir.Constant(floats, [0.0] * 32)),
                                builder.icmp_unsigned(">", count, ir.Constant(bytes32, [0] * 32)))
        index = builder.select(negative, builder.or_(count, ir.Constant(bytes32, [8] * 32)), count)
        halves = ir.VectorType(i8, 16)
        low = builder.shuffle_vector(index, index, ir.Constant(ir.VectorType(ir.IntType(32), 16), list(range(16))))
        high = builder.shuffle_vector(index, index, ir.Constant(ir.VectorType(ir.IntType(32), 16), list(range(16, 32))))
        packed = builder.or_(low, builder.shl(high, ir.Constant(halves, [4] * 16)))
        row = context.cast(builder, args[3], signature.args[3], types.intp)
        target = builder.gep(_first(context, builder, signature.args[2], args[2], [row]),
                             [context.get_constant(types.intp, 1)])
        builder.store(packed, builder.bitcast(target, halves.as_pointer()), align=1)
        return context.get_dummy_value()
    return types.none(x, d, out, row), codegen


@inline
def _encode_block(x, out, blk):
    """``quantize_row_mxfp4_ref`` of a block's 32 float32 values ``x`` into ``out[blk]``."""
    amax = key_value(block_magnitude_key(x))
    e = 0
    if amax > _ZERO:
        exponent = np.floor(np.float32(math.log2(amax))) - F32(2.0) + F32(127.0)
        e = np.int32(c_trunc_i32(exponent)) & 0xFF  # (uint8_t) of the float, as x86 converts it
    d = e8m0_to_fp32_half(e)
    out[blk, 0] = np.uint8(e)
    if amax == _INF:  # d is tiny and C's rounded distances tie: its own scan
        for j in range(16):
            out[blk, 1 + j] = np.uint8(best_index_mxfp4(x[j], d) | (best_index_mxfp4(x[16 + j], d) << 4))
    else:
        store_nearest_nibbles(x, d, out, blk)


@streaming_kernel
def mxfp4(x, qw, blocks_per_row, out):
    """``quantize_row_mxfp4_ref``: ``x`` ``(blocks, 32)`` float32; ``qw`` ignored."""
    for blk in range(x.shape[0]):
        _encode_block(x[blk], out, blk)


@intrinsic
def widen_f16_block(typingctx, bits, values):
    """The 32 float16 ``bits`` (uint16, contiguous) as float32 into ``values``: LLVM's
    ``fpext`` of 32 lanes (exact, as ``ggml_fp16_to_fp32_row``; ``vcvtph2ps`` on x86),
    where the per-value integer routine stayed scalar in a 32-value loop."""
    if not (_is_array(bits, types.uint16, 1) and _is_array(values, types.float32, 1)):
        return None

    def codegen(context, builder, signature, args):
        halves, floats = ir.VectorType(ir.HalfType(), 32), ir.VectorType(ir.FloatType(), 32)
        source = _first(context, builder, signature.args[0], args[0], [])
        loaded = builder.load(builder.bitcast(source, halves.as_pointer()), typ=halves, align=2)
        target = _first(context, builder, signature.args[1], args[1], [])
        builder.store(builder.fpext(loaded, floats), builder.bitcast(target, floats.as_pointer()), align=4)
        return context.get_dummy_value()
    return types.none(bits, values), codegen


@streaming_kernel
def mxfp4_from_f16(bits, out):
    """:func:`mxfp4` of F16 values, read as their bits (``(blocks, 32)`` uint16): each block
    widened (exactly, as llama_model_quantize widens the tensor) into 32 floats on the
    stack, so an F16 model's tensor goes from the file to the output in one pass."""
    values = stack_array(32, np.float32)
    for blk in range(bits.shape[0]):
        widen_f16_block(bits[blk], values)
        _encode_block(values, out, blk)
