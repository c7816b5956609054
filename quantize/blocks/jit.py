"""numba set-up for the block kernels: the compile options, the disk cache, C's float32 steps.

Why numba: ggml-quants.c is scalar float32 C. Reproducing its bytes with numpy meant
~15 full-array passes per search candidate; compiled, each candidate is one pass that
keeps values in registers, and because our kernels work positions-major ("lanes": one
sub-block per SIMD lane, see :mod:`quantize.blocks.searches`) LLVM puts 8 groups in one
AVX2 register while every lane performs exactly C's scalar operations in C's order.

Exactness rules every kernel follows (checked by ``tests/quantize/test_blocks_bitexact.py``
against libggml, and the IR by ``test_kernels_compute_in_float32_without_fma``):

* ``fastmath=False``: no reassociation and no ``contract`` flag, so LLVM never fuses
  ``a*b + c`` into an FMA (ggml-base is built for the x86-64 baseline: no FMA either);
* every value is float32: constants are ``np.float32`` module globals and integers are
  converted with ``f32(...)`` where C converts them (numba would widen a float32 mixed
  with a Python float or an int64 to float64);
* ``error_model="numpy"``: division by zero gives C's inf/NaN instead of an exception;
* :func:`nearest_int` is C's ``fval + 12582912.f`` bit trick in 32-bit integers (an LLVM
  intrinsic, so it vectorizes and matches C even for NaN and out-of-range values).

The disk cache: numba's own locators need the ``.py`` file beside the module, which a
frozen (PyInstaller) app does not have, and they would write into the package folder.
:class:`_AppCacheLocator` puts every compiled kernel in ``<app cache>/numba`` (or
``NUMBA_CACHE_DIR`` when the user set it) and keys freshness on the sources of this
package (or the frozen executable), so editing a helper here recompiles the kernels
that inline it. Kernels compile lazily, on a type's first use.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import Callable, Optional

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import caching, cgutils
from numba.extending import intrinsic

F32 = np.float32
MAGIC = F32(12582912.0)  # 1.5 * 2**23: adding it leaves round-half-even(v) in the low bits
GROUP_MAX_EPS = F32(1e-15)  # ggml's threshold below which a group counts as all zero
F32_MAX = F32(np.finfo(np.float32).max)

_PACKAGE_DIR = Path(__file__).resolve().parent
_PACKAGE = __name__.rsplit(".", 1)[0]  # "quantize.blocks"


def cache_dir() -> Path:
    """Where compiled kernels are kept: ``NUMBA_CACHE_DIR`` if set, else ``<app cache>/numba``."""
    chosen = os.environ.get("NUMBA_CACHE_DIR", "").strip()
    if chosen:
        return Path(chosen)
    from models.foundation.paths import app_paths

    return app_paths().cache / "numba"


def _sources_stamp() -> str:
    """Freshness of every kernel: a hash of this package's sources, or of the frozen app."""
    digest = hashlib.sha256()
    files = sorted(_PACKAGE_DIR.glob("*.py"))
    if getattr(sys, "frozen", False) or not files:
        exe = Path(sys.executable)
        stat = exe.stat()
        digest.update(f"{exe}:{stat.st_mtime_ns}:{stat.st_size}".encode())
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


class _AppCacheLocator(caching._CacheLocator):
    """numba cache locator for this package's kernels: the app's cache folder, any install."""

    _stamp: Optional[str] = None

    def __init__(self, py_func, folder: Path) -> None:
        self._lineno = py_func.__code__.co_firstlineno
        self._path = str(folder / py_func.__module__)

    def get_cache_path(self) -> str:
        return self._path

    def get_source_stamp(self) -> str:
        if _AppCacheLocator._stamp is None:
            _AppCacheLocator._stamp = _sources_stamp()
        return _AppCacheLocator._stamp

    def get_disambiguator(self) -> str:
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func, py_file):
        if not getattr(py_func, "__module__", "").startswith(_PACKAGE):
            return None
        try:
            self = cls(py_func, cache_dir())
            self.ensure_cache_path()
        except OSError:
            return None  # an unwritable cache: the next locator (or no caching) takes over
        return self


if _AppCacheLocator not in caching.CacheImpl._locator_classes:
    caching.CacheImpl._locator_classes.insert(0, _AppCacheLocator)


def _can_cache() -> bool:
    """Whether the cache folder is usable; without it the kernels compile in every process."""
    try:
        folder = cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        return os.access(folder, os.W_OK)
    except OSError:
        return False


_CACHE = _can_cache()


def kernel(fn: Callable) -> Callable:
    """Compile ``fn`` lazily with the exactness options above, cached on disk, GIL released."""
    return njit(cache=_CACHE, nogil=True, fastmath=False, error_model="numpy", boundscheck=False)(fn)


def streaming_kernel(fn: Callable) -> Callable:
    """:func:`kernel` for a kernel that allocates nothing (one pass per block): compiled
    without numba's reference counting, which otherwise adds atomic increments and
    decrements around every inlined per-block step (measured: as costly as the step)."""
    return njit(cache=_CACHE, nogil=True, fastmath=False, error_model="numpy", boundscheck=False,
                _nrt=False)(fn)


def helper(fn: Callable) -> Callable:
    """A function the kernels call: compiled once per signature, linked into (and inlined
    by LLVM into) each kernel. numba-level ``inline="always"`` would re-type the big
    searches inside every caller and made first-use compiles several times slower."""
    return njit(cache=False, nogil=True, fastmath=False, error_model="numpy", boundscheck=False)(fn)


def inline(fn: Callable) -> Callable:
    """A small per-value or per-block step, inlined by numba into its caller: a call per
    block (arrays passed as a dozen scalars, a tuple returned) cost 3x the step itself."""
    return njit(cache=False, nogil=True, fastmath=False, error_model="numpy", boundscheck=False,
                inline="always")(fn)


# Constants passed to a compiled helper are typed as literals, and numba compiles the helper
# once per distinct literal: a search used by eight kernels was compiled eight times.
# Wrapped as ``Int(3)`` / ``Flag(True)`` they are plain runtime values, so each helper is
# compiled once for all its callers (the values are loop-invariant: no speed is lost).
Int = np.int64
Flag = np.bool_


# ---- C's bit-level float32 steps as LLVM intrinsics --------------------------------------

@intrinsic
def f32_bits(typingctx, value):
    """``memcpy(&i, &f, 4)``: the int32 bit pattern of a float32."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))
    return types.int32(types.float32), codegen


@intrinsic
def bits_f32(typingctx, bits):
    """The float32 whose bit pattern is the low 32 bits of ``bits``."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        low = builder.trunc(args[0], ir.IntType(32)) if bits.bitwidth > 32 else args[0]
        return builder.bitcast(low, ir.FloatType())
    return types.float32(bits), codegen


def _emit_nearest_int(builder, value):
    """LLVM IR of ``nearest_int``: ``(bits(v + 12582912.f) & 0x7fffff) - 0x400000`` in i32."""
    i32 = ir.IntType(32)
    bits = builder.bitcast(builder.fadd(value, ir.Constant(ir.FloatType(), 12582912.0)), i32)
    return builder.sub(builder.and_(bits, ir.Constant(i32, 0x007FFFFF)), ir.Constant(i32, 0x00400000))


def _emit_order_flip(builder, bits):
    """LLVM IR of the involution between float32 bits and :func:`order_key`: flip the
    magnitude bits of negative values (``bits ^ ((bits >> 31) & 0x7fffffff)``)."""
    negative = builder.ashr(bits, lane_constant(bits.type, 31))
    return builder.xor(bits, builder.and_(negative, lane_constant(bits.type, 0x7FFFFFFF)))


def lane_constant(of_type, value):
    """An LLVM constant of an integer type, or ``value`` in every lane of a vector type."""
    if isinstance(of_type, ir.VectorType):
        return ir.Constant(of_type, [ir.Constant(of_type.element, value)] * of_type.count)
    return ir.Constant(of_type, value)


@intrinsic
def nearest_int(typingctx, value):
    """C's ``nearest_int``: ``(bits(f + 12582912.f) & 0x7fffff) - 0x400000`` as int32.

    All in 32-bit integers (numba would widen ``&`` and ``-`` to int64, which AVX2 cannot
    convert back to float in a vector), and bit-exact for NaN and huge values too.
    """
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return _emit_nearest_int(builder, args[0])
    return types.int32(types.float32), codegen


@intrinsic
def nearest_f(typingctx, value):
    """``(float) nearest_int(value)``: the level as the float32 C's sums convert it to."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.sitofp(_emit_nearest_int(builder, args[0]), ir.FloatType())
    return types.float32(types.float32), codegen


@intrinsic
def c_trunc_i32(typingctx, value):
    """C's float -> int conversion on x86 (``cvttss2si``): truncate; NaN or out of range -> INT_MIN.

    LLVM's ``fptosi`` is undefined out of range, so the value is clamped first and the
    x86 answer selected for the out-of-range lanes.
    """
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        f32, i32 = ir.FloatType(), ir.IntType(32)
        v = args[0]
        inside = builder.and_(builder.fcmp_ordered(">=", v, ir.Constant(f32, -2147483648.0)),
                              builder.fcmp_ordered("<", v, ir.Constant(f32, 2147483648.0)))
        safe = builder.select(inside, v, ir.Constant(f32, 0.0))
        return builder.select(inside, builder.fptosi(safe, i32), ir.Constant(i32, -2147483648))
    return types.int32(types.float32), codegen


@intrinsic
def pick(typingctx, condition, if_true, if_false):
    """``if_true if condition else if_false`` as one LLVM ``select``: no branch, so lanes
    vectorize and numba types and lowers one block instead of a diamond per choice
    (first-use compile time)."""
    if not isinstance(condition, types.Boolean) or if_true != if_false:
        return None

    def codegen(context, builder, signature, args):
        flag = context.cast(builder, args[0], signature.args[0], types.boolean)
        return builder.select(builder.trunc(flag, ir.IntType(1)) if flag.type != ir.IntType(1) else flag,
                              args[1], args[2])
    return if_true(condition, if_true, if_false), codegen


@intrinsic
def order_key(typingctx, value):
    """An int32 that orders like the float32 ``value`` (-0.0 just below +0.0; NaNs beyond
    the infinities). Integer min/max reductions vectorize without fast-math; float ones
    do not, and numba would widen the bit operations to int64 (half the lanes)."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return _emit_order_flip(builder, builder.bitcast(args[0], ir.IntType(32)))
    return types.int32(types.float32), codegen


@intrinsic
def key_value(typingctx, key):
    """The float32 of an :func:`order_key`."""
    if key != types.int32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(_emit_order_flip(builder, args[0]), ir.FloatType())
    return types.float32(types.int32), codegen


@intrinsic
def row_key_range(typingctx, x, row):
    """``(min, max)`` of :func:`order_key` over ``x[row, 0:32]`` (a C-contiguous float32 array
    with rows of at least 32), NaNs included.

    Written as four 8-lane vectors and LLVM's vector reductions: the same integer
    min/max as a loop, without the loop's set-up per row (a loop the vectorizer handles
    needs a run-time trip count, and unrolled LLVM leaves it scalar).
    """
    if not (isinstance(x, types.Array) and x.ndim == 2 and x.layout == "C" and x.dtype == types.float32
            and isinstance(row, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        lanes = ir.VectorType(i32, 8)
        first = _row_pointer(context, builder, signature, args)
        keys = []
        for k in range(4):
            eight = builder.gep(first, [context.get_constant(types.intp, 8 * k)])
            bits = builder.load(builder.bitcast(eight, lanes.as_pointer()), typ=lanes, align=4)
            keys.append(_emit_order_flip(builder, bits))

        def reduce(kind):
            pairwise = cgutils.get_or_insert_function(builder.module, ir.FunctionType(lanes, [lanes, lanes]),
                                                      f"llvm.{kind}.v8i32")
            across = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, [lanes]),
                                                    f"llvm.vector.reduce.{kind}.v8i32")
            both = builder.call(pairwise, [builder.call(pairwise, keys[:2]), builder.call(pairwise, keys[2:])])
            return builder.call(across, [both])
        return context.make_tuple(builder, signature.return_type, [reduce("smin"), reduce("smax")])
    return types.UniTuple(types.int32, 2)(x, row), codegen


@intrinsic
def half_row_magnitude(typingctx, bits, row):
    """The largest ``h & 0x7FFF`` over ``bits[row, 0:32]`` (a C-contiguous uint16 array of
    float16 bits with rows of at least 32), NaNs (above ``0x7C00``) counted as 0: the bits
    of the block's largest magnitude, which orders like ``fabsf`` of the widened values.

    One 32-lane vector and LLVM's vector reduction; as a loop, LLVM unrolls it and leaves
    it scalar (numba widens each uint16 to 64 bits), which cost as much as the rest of a
    Q8_0 block.
    """
    if not (isinstance(bits, types.Array) and bits.ndim == 2 and bits.layout == "C" and bits.dtype == types.uint16
            and isinstance(row, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        i16 = ir.IntType(16)
        lanes = ir.VectorType(i16, 32)
        first = _row_pointer(context, builder, signature, args)
        values = builder.load(builder.bitcast(first, lanes.as_pointer()), typ=lanes, align=2)
        magnitude = builder.and_(values, ir.Constant(lanes, [0x7FFF] * 32))
        nan = builder.icmp_unsigned(">", magnitude, ir.Constant(lanes, [0x7C00] * 32))
        magnitude = builder.select(nan, ir.Constant(lanes, [0] * 32), magnitude)
        across = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i16, [lanes]),
                                                "llvm.vector.reduce.umax.v32i16")
        return builder.zext(builder.call(across, [magnitude]), ir.IntType(32))
    return types.int32(bits, row), codegen


@intrinsic
def store_nibbles_in_range(typingctx, x, row, shift, scale, bias, top, out, out_row, at):
    """Levels ``L[j] = min(top, (int)((x[row, j] - shift)*scale + bias))`` of one 32-value
    block, stored as ``out[out_row, at + j] = L[j] & 0xF | (L[j+16] & 0xF) << 4``
    (j = 0..15); returns the 32-bit word whose bit ``j`` is bit 4 of ``L[j]`` (Q5's ``qh``).

    The caller guarantees every ``(x - shift)*scale + bias`` lies in ``[0, 2**31)``: the
    conversion is a plain truncation (C's, for such values). Float32 steps in C's order,
    as four 8-lane vectors; the bit-4 word is one ``movmsk`` per vector.
    """
    if not (isinstance(x, types.Array) and x.ndim == 2 and x.layout == "C" and x.dtype == types.float32
            and isinstance(out, types.Array) and out.ndim == 2 and out.layout == "C" and out.dtype == types.uint8
            and shift == scale == bias == types.float32 and isinstance(top, types.Integer)
            and isinstance(row, types.Integer) and isinstance(out_row, types.Integer)
            and isinstance(at, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        floats, ints = ir.VectorType(ir.FloatType(), 8), ir.VectorType(i32, 8)
        shift, scale, bias, top, out = args[2:7]
        first = _row_pointer(context, builder, signature, args)
        shift, scale, bias = (splat(builder, v, floats) for v in (shift, scale, bias))
        top = splat(builder, context.cast(builder, top, signature.args[5], types.int32), ints)
        smin = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ints, [ints, ints]), "llvm.smin.v8i32")
        levels = []
        for k in range(4):
            eight = builder.gep(first, [context.get_constant(types.intp, 8 * k)])
            v = builder.load(builder.bitcast(eight, floats.as_pointer()), typ=floats, align=4)
            v = builder.fadd(builder.fmul(builder.fsub(v, shift), scale), bias)
            levels.append(builder.call(smin, [builder.fptosi(v, ints), top]))
        wide = ir.VectorType(i32, 16)
        low, high = _concatenate(builder, levels[:2]), _concatenate(builder, levels[2:])
        nibbles = builder.or_(builder.and_(low, lane_constant(wide, 0xF)),
                              builder.shl(builder.and_(high, lane_constant(wide, 0xF)), lane_constant(wide, 4)))
        packed = builder.trunc(nibbles, ir.VectorType(ir.IntType(8), 16))
        target = context.make_array(signature.args[6])(context, builder, out)
        where = cgutils.get_item_pointer(context, builder, signature.args[6], target,
                                         [context.cast(builder, args[k], signature.args[k], types.intp) for k in (7, 8)])
        builder.store(packed, builder.bitcast(where, packed.type.as_pointer()), align=1)
        bit4 = [builder.icmp_unsigned("!=", builder.and_(v, lane_constant(ints, 0x10)), lane_constant(ints, 0)) for v in levels]
        return builder.bitcast(_concatenate(builder, bit4), i32)
    return types.int32(x, row, shift, scale, bias, top, out, out_row, at), codegen


@intrinsic
def first_equal(typingctx, x, row, value, absolute):
    """The first ``j`` with ``x[row, j] == value`` (``fabsf(x[row, j]) == value`` when
    ``absolute``) in a 32-value row, or 32: C's "the first one wins" scans, as one
    compare per 8 values and a count of trailing zeros (no loop for LLVM to unroll and
    hoist into the common path)."""
    if not (isinstance(x, types.Array) and x.ndim == 2 and x.layout == "C" and x.dtype == types.float32
            and isinstance(row, types.Integer) and value == types.float32 and isinstance(absolute, types.Boolean)):
        return None

    def codegen(context, builder, signature, args):
        i1, i32 = ir.IntType(1), ir.IntType(32)
        floats, ints = ir.VectorType(ir.FloatType(), 8), ir.VectorType(i32, 8)
        first = _row_pointer(context, builder, signature, args)
        flag = context.cast(builder, args[3], signature.args[3], types.boolean)
        flag = builder.trunc(flag, i1) if flag.type != i1 else flag
        wanted = splat(builder, args[2], floats)
        hits = []
        for k in range(4):
            eight = builder.gep(first, [context.get_constant(types.intp, 8 * k)])
            bits = builder.load(builder.bitcast(eight, ints.as_pointer()), typ=ints, align=4)
            magnitude = builder.bitcast(builder.and_(bits, lane_constant(ints, 0x7FFFFFFF)), floats)
            v = builder.select(flag, magnitude, builder.bitcast(bits, floats))
            hits.append(builder.fcmp_ordered("==", v, wanted))
        mask = builder.bitcast(_concatenate(builder, hits), i32)
        count = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, [i32, i1]), "llvm.cttz.i32")
        return builder.zext(builder.call(count, [mask, ir.Constant(i1, 0)]), ir.IntType(64))
    return types.int64(x, row, value, absolute), codegen


@intrinsic
def transpose_8x8(typingctx, x, row, col, out, out_row, out_col):
    """``out[out_row + u, out_col + t] = x[row + t, col + u]`` for t, u = 0..7 (2-D C float32
    arrays): eight 8-float loads, the usual unpack / shuffle / 128-bit-swap network, eight
    8-float stores. Only moves bits; 64 values in ~40 instructions instead of 128."""
    if not (all(isinstance(a, types.Array) and a.ndim == 2 and a.layout == "C" and a.dtype == types.float32
                for a in (x, out)) and all(isinstance(v, types.Integer) for v in (row, col, out_row, out_col))):
        return None

    def codegen(context, builder, signature, args):
        floats = ir.VectorType(ir.FloatType(), 8)

        def pointer(k, at_row, at_col, t):
            array = context.make_array(signature.args[k])(context, builder, args[k])
            index = [builder.add(context.cast(builder, args[at_row], signature.args[at_row], types.intp),
                                 context.get_constant(types.intp, t)),
                     context.cast(builder, args[at_col], signature.args[at_col], types.intp)]
            item = cgutils.get_item_pointer(context, builder, signature.args[k], array, index)
            return builder.bitcast(item, floats.as_pointer())

        def shuffle(a, b, order):
            return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(ir.IntType(32), 8), order))

        rows = [builder.load(pointer(0, 1, 2, t), align=4) for t in range(8)]
        low, high = [0, 8, 1, 9, 4, 12, 5, 13], [2, 10, 3, 11, 6, 14, 7, 15]
        pairs = [shuffle(rows[t], rows[t + 1], order) for t in range(0, 8, 2) for order in (low, high)]
        even, odd = [0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15]
        quads = [shuffle(pairs[h + q], pairs[h + q + 2], order)
                 for h in (0, 4) for q in (0, 1) for order in (even, odd)]
        # quads[k] (k < 4) holds columns k and k + 4 of rows 0..3; quads[k + 4] of rows 4..7
        for k in range(4):
            builder.store(shuffle(quads[k], quads[k + 4], [0, 1, 2, 3, 8, 9, 10, 11]), pointer(3, 4, 5, k), align=4)
            builder.store(shuffle(quads[k], quads[k + 4], [4, 5, 6, 7, 12, 13, 14, 15]),
                          pointer(3, 4, 5, k + 4), align=4)
        return context.get_dummy_value()
    return types.none(x, row, col, out, out_row, out_col), codegen


@intrinsic
def prefetch_row(typingctx, x, row):
    """Ask the CPU to bring row ``row`` of the 2-D C array ``x`` into its caches
    (``llvm.prefetch`` of each 64-byte line; a hint only: no fault, no effect on values)."""
    if not (isinstance(x, types.Array) and x.ndim == 2 and x.layout == "C" and isinstance(row, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        i8, i32 = ir.IntType(8), ir.IntType(32)
        array = context.make_array(signature.args[0])(context, builder, args[0])
        start = builder.bitcast(_row_pointer(context, builder, signature, args), i8.as_pointer())
        columns = cgutils.unpack_tuple(builder, array.shape, 2)[1]
        size = builder.mul(columns, array.itemsize)
        lines = builder.udiv(builder.add(size, ir.Constant(size.type, 63)), ir.Constant(size.type, 64))
        hint = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8.as_pointer(), i32, i32, i32]),
                                              "llvm.prefetch.p0i8")
        with cgutils.for_range(builder, lines) as loop:
            at = builder.gep(start, [builder.mul(loop.index, ir.Constant(loop.index.type, 64))])
            builder.call(hint, [at, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()
    return types.none(x, row), codegen


def _row_pointer(context, builder, signature, args):
    """Pointer to ``x[row, 0]`` of an intrinsic called as ``(x, row, ...)``."""
    array = context.make_array(signature.args[0])(context, builder, args[0])
    row = context.cast(builder, args[1], signature.args[1], types.intp)
    return cgutils.get_item_pointer(context, builder, signature.args[0], array,
                                    [row, context.get_constant(types.intp, 0)])


def splat(builder, value, vector_type):
    """``value`` in every lane of ``vector_type``."""
    undef = ir.Constant(vector_type, ir.Undefined)
    one = builder.insert_element(undef, value, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(one, undef, ir.Constant(ir.VectorType(ir.IntType(32), vector_type.count),
                                                          [0] * vector_type.count))


def _concatenate(builder, vectors):
    """One vector of the lanes of ``vectors`` (all of one type), in order."""
    while len(vectors) > 1:
        lanes = 2 * vectors[0].type.count
        order = ir.Constant(ir.VectorType(ir.IntType(32), lanes), list(range(lanes)))
        vectors = [builder.shuffle_vector(a, b, order) for a, b in zip(vectors[::2], vectors[1::2])]
    return vectors[0]


@intrinsic
def magnitude_key(typingctx, value):
    """``fabsf(value)`` as an int32 that orders like it; NaN -> 0, so that it never wins."""
    if value != types.float32:
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        bits = builder.and_(builder.bitcast(args[0], i32), ir.Constant(i32, 0x7FFFFFFF))
        nan = builder.icmp_signed(">", bits, ir.Constant(i32, 0x7F800000))
        return builder.select(nan, ir.Constant(i32, 0), bits)
    return types.int32(types.float32), codegen


@intrinsic
def stack_array(typingctx, count, dtype):
    """``np.empty(count, dtype)`` on the kernel's stack (``count`` a constant).

    For scratch space in kernels compiled without numba's runtime (which cannot
    allocate), and LLVM knows it overlaps no argument: loops that read an input array
    and write one of these need no run-time overlap check to vectorize. Valid until the
    kernel returns (the ``alloca`` sits in its entry block, also when inlined).
    """
    if not isinstance(count, types.IntegerLiteral) or not isinstance(dtype, (types.NumberClass, types.DType)):
        return None
    element = dtype.instance_type if isinstance(dtype, types.NumberClass) else dtype.dtype
    array = types.Array(element, 1, "C")

    def codegen(context, builder, signature, args):
        data_type = context.get_data_type(element)
        size = context.get_abi_sizeof(data_type)
        made = context.make_array(array)(context, builder)
        intp = context.get_value_type(types.intp)
        context.populate_array(made, data=cgutils.alloca_once(builder, data_type, size=count.literal_value),
                               shape=[ir.Constant(intp, count.literal_value)], strides=[ir.Constant(intp, size)],
                               itemsize=ir.Constant(intp, size), meminfo=None)
        return made._getvalue()
    return array(count, dtype), codegen


# ---- small helpers -----------------------------------------------------------------------

@inline
def f32(value):
    """An int (or float) as C converts it to float."""
    return np.float32(value)


@inline
def fp32_to_fp16(f):
    """``GGML_FP32_TO_FP16`` (ggml's portable routine, as built into ggml-base): the fp16 bits.

    Round to nearest even, overflow to inf, NaN -> sign | 0x7E00.
    """
    base = (np.abs(f) * F32(5.192296858534828e+33)) * F32(7.703719777548943e-34)  # 2**112, 2**-110
    w = np.int64(f32_bits(f)) & 0xFFFFFFFF
    shl1_w = (w + w) & 0xFFFFFFFF
    sign = w & 0x80000000
    bias = shl1_w & 0xFF000000
    if bias < 0x71000000:
        bias = 0x71000000
    base = bits_f32((bias >> 1) + 0x07800000) + base
    bits = np.int64(f32_bits(base)) & 0xFFFFFFFF
    exp_bits = (bits >> 13) & 0x00007C00
    mantissa_bits = bits & 0x00000FFF
    nonsign = exp_bits + mantissa_bits
    if shl1_w > 0xFF000000:
        nonsign = 0x7E00
    return np.uint16((sign >> 16) | nonsign)


@intrinsic
def fp16_to_fp32(typingctx, h):
    """``GGML_FP16_TO_FP32`` of fp16 bits (any integer type; its low 16 bits), exact.

    ggml's portable routine in 32-bit integer IR, so that a loop of it vectorizes::

        two_w = h << 17
        normalized = bits((two_w >> 4) + (0xE0 << 23)) * 2**-112
        denormalized = bits((two_w >> 17) | (126 << 23)) - 0.5f
        result = (h << 16 & sign) | (two_w < 1 << 27 ? denormalized : normalized)
    """
    if not isinstance(h, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        i32, f32 = ir.IntType(32), ir.FloatType()
        bits = args[0]
        if bits.type.width > 16:
            bits = builder.trunc(bits, ir.IntType(16))
        w = builder.shl(builder.zext(bits, i32), ir.Constant(i32, 16))
        sign = builder.and_(w, ir.Constant(i32, -0x80000000))  # the sign bit
        two_w = builder.add(w, w)
        normalized = builder.fmul(
            builder.bitcast(builder.add(builder.lshr(two_w, ir.Constant(i32, 4)), ir.Constant(i32, 0xE0 << 23)), f32),
            ir.Constant(f32, 2.0 ** -112))
        denormalized = builder.fsub(
            builder.bitcast(builder.or_(builder.lshr(two_w, ir.Constant(i32, 17)), ir.Constant(i32, 126 << 23)), f32),
            ir.Constant(f32, 0.5))
        small = builder.icmp_unsigned("<", two_w, ir.Constant(i32, 1 << 27))
        magnitude = builder.select(small, builder.bitcast(denormalized, i32), builder.bitcast(normalized, i32))
        return builder.bitcast(builder.or_(sign, magnitude), f32)
    return types.float32(h), codegen


@intrinsic
def bf16_to_fp32(typingctx, h):
    """``GGML_BF16_TO_FP32`` of bfloat16 bits (any integer type; its low 16 bits): the top half."""
    if not isinstance(h, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        bits = args[0]
        if bits.type.width > 16:
            bits = builder.trunc(bits, ir.IntType(16))
        return builder.bitcast(builder.shl(builder.zext(bits, i32), ir.Constant(i32, 16)), ir.FloatType())
    return types.float32(h), codegen


@inline
def put_fp16(out, row, at, value):
    """Store ``GGML_FP32_TO_FP16(value)`` little-endian at ``out[row, at:at+2]``; return the bits."""
    h = fp32_to_fp16(value)
    out[row, at] = np.uint8(h & 0xFF)
    out[row, at + 1] = np.uint8(h >> 8)
    return h


@inline
def inverse(d):
    """``d ? 1.0f/d : 0.0f``."""
    return F32(1.0) / d if d != F32(0.0) else F32(0.0)


@inline
def roundf(v):
    """C's ``roundf`` (and ``lroundf`` in range): half away from zero (``v - trunc(v)`` is exact)."""
    t = np.trunc(v)
    if np.abs(v - t) >= F32(0.5):
        t = t + (F32(1.0) if v > F32(0.0) else F32(-1.0))
    return t


@inline
def c_int8(value):
    """``(int8_t) value`` of a float: C truncates to int32, then keeps the low byte."""
    return np.int8(c_trunc_i32(value))
