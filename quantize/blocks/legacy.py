"""Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0: llama.cpp's 32-value block types, byte-exact.

Block layouts (little endian, ``d``/``m`` are fp16)::

    Q8_0  | d | qs[32] int8 |                                          34 bytes
    Q4_0  | d | qs[16] |                                                18 bytes
    Q4_1  | d | m | qs[16] |                                            20 bytes
    Q5_0  | d | qh[4] | qs[16] |                                        22 bytes
    Q5_1  | d | m | qh[4] | qs[16] |                                    24 bytes

    qs[j] = q[j] & 0xF | (q[j + 16] & 0xF) << 4      (j = 0..15)
    qh    = bit i holds (q[i] >> 4) & 1              (i = 0..31, a little-endian uint32)

Without an imatrix these are ggml's ``quantize_row_*_ref`` (straight min/max or abs-max
scaling). Kernels work positions-major (``xt[i, block]``): numpy reduces a short row
slowly, but reduces rows of a tall array fast, and the imatrix searches want it anyway.
With one they follow ``quantize_row_*_impl``: weights ``qw * sqrt(sigma2 + x*x)`` with
``sigma2`` the mean square of the *whole row*, then the ``make_qx_quants`` (symmetric)
or ``make_qkx3_quants`` (with offset) searches. Q8_0 ignores the imatrix, as ggml does.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from gguf import GGMLQuantizationType as QT

from quantize.blocks.chunking import encode_blocks
from quantize.blocks.float_ops import F32, first_abs_max, lane_reduce, seq_min_max, signed_int8, to_fp16
from quantize.blocks.searches import qkx_quants, qx_quants
from quantize.encode import register_encoder

_CHUNK = 2048  # blocks per kernel call: 256 KiB of input


def _inverse(d: np.ndarray) -> np.ndarray:
    """``d ? 1.0f/d : 0.0f``."""
    with np.errstate(divide="ignore", over="ignore"):
        return np.where(d != 0, F32(1) / d, F32(0))


def _truncated_levels(biased: np.ndarray, top: Optional[int], finite: bool) -> np.ndarray:
    """C's ``(uint8_t) MIN(top, (int8_t) v)`` (``top=None``: ``(uint8_t) v``) of ``v = biased``.

    When every value is finite the callers' ``v`` lie in ``[0, 2*nmax + 1)``, where a
    float -> uint8 cast truncates exactly like C; otherwise take the int8 route, which
    also reproduces C's conversions of NaN and overflow.
    """
    if finite:
        if top is not None:
            np.minimum(biased, F32(top), out=biased)
        return biased.astype(np.uint8)
    q = signed_int8(biased)
    if top is not None:
        q = np.minimum(q, top)
    return q.view(np.uint8)


def _all_finite(xt: np.ndarray, *per_block: np.ndarray) -> bool:
    """Whether the chunk and its per-block factors are all finite (a sum finds NaN and inf)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(np.add.reduce(xt, axis=0)).all()
                    and all(np.isfinite(a).all() for a in per_block))


class _BlockWriter:
    """Fills the ``(blocks, block_bytes)`` output field by field from positions-major data."""

    def __init__(self, blocks: int, block_bytes: int) -> None:
        self.out = np.empty((blocks, block_bytes), dtype=np.uint8)
        self.at = 0

    def put(self, field: np.ndarray) -> None:
        """``field``: fp16 per block, or ``(bytes, blocks)`` uint8 (written transposed)."""
        if field.dtype == np.float16:
            field = field.view(np.uint8).reshape(-1, 2).T
        width = field.shape[0]
        self.out[:, self.at:self.at + width] = field.T
        self.at += width


def _nibbles(q: np.ndarray, masked: bool) -> np.ndarray:
    """``q[j] | q[j+16] << 4``; Q5 masks both (``& 0x0F``), Q4's C code masks neither."""
    if masked:
        return (q[:16] & 0x0F) | ((q[16:] & 0x0F) << 4)
    return q[:16] | (q[16:] << 4)


def _high_bits(q: np.ndarray) -> np.ndarray:
    """The Q5 ``qh`` word: bit ``i`` is bit 4 of ``q[i]``, as 4 little-endian bytes."""
    bits = ((q >> 4) & 1).reshape(4, 8, -1)  # [byte, bit, block]
    packed = bits[:, 0].copy()
    for bit in range(1, 8):  # np.packbits along axis 0 is several times slower
        packed |= bits[:, bit] << bit
    return packed


def _imatrix_weights(xt: np.ndarray, qw: np.ndarray, sigma2: np.ndarray) -> np.ndarray:
    """``qw[j] * sqrtf(sigma2 + x[j]*x[j])`` positions-major."""
    return np.ascontiguousarray(qw.T) * np.sqrt(sigma2[None, :] + xt * xt)


# ---- Q8_0 --------------------------------------------------------------------------------

def _q8_0_kernel(x: np.ndarray, qw: Optional[np.ndarray], sigma2: Optional[np.ndarray]) -> np.ndarray:
    xt = np.ascontiguousarray(x.T)
    amax = np.maximum(lane_reduce(np.maximum, xt, 0), -lane_reduce(np.minimum, xt, 0))
    amax += F32(0)  # C's amax is a fabsf: never -0.0
    d = amax / F32(127)
    inv = _inverse(d)
    scaled = xt * inv
    if _all_finite(xt, inv):
        # roundf (half away from zero) = trunc(v + copysign(.5, v)) except for
        # |v| = 0.5 - 2**-25, where the addition itself rounds up to 1.
        shifted = scaled + np.copysign(F32(0.5), scaled)
        q = shifted.astype(np.int8)
        q[np.abs(scaled) == F32(0.49999997)] = 0
    else:
        truncated = np.trunc(scaled)
        away = np.abs(scaled - truncated) >= F32(0.5)
        q = signed_int8(truncated + np.where(away, np.sign(scaled), F32(0)))
    writer = _BlockWriter(x.shape[0], 34)
    writer.put(to_fp16(d))
    writer.put(q.view(np.uint8))
    return writer.out


@register_encoder(QT.Q8_0)
def encode_q8_0(values: np.ndarray, imatrix: Optional[np.ndarray]) -> np.ndarray:
    """Q8_0 (the imatrix is ignored, as in ggml)."""
    return encode_blocks(values, None, 32, 34, _q8_0_kernel, _CHUNK)


# ---- Q4_0 / Q5_0 (symmetric) ---------------------------------------------------------------

def _symmetric(x: np.ndarray, qw: Optional[np.ndarray], sigma2: Optional[np.ndarray],
               nmax: int) -> tuple[np.ndarray, None, np.ndarray]:
    """``(d, None, q[32, blocks])`` of Q4_0 (``nmax`` 8) or Q5_0 (16).

    ``_ref``: ``d = max / -nmax``, ``q = MIN(2nmax-1, (int8)(x/d + nmax + .5))``;
    ``_impl``: ``make_qx_quants`` with imatrix weights.
    """
    xt = np.ascontiguousarray(x.T)
    if qw is not None:
        d, levels = qx_quants(xt, nmax, _imatrix_weights(xt, qw, sigma2))
        return d, None, levels
    d = first_abs_max(xt, axis=0) / F32(-nmax)
    inv = _inverse(d)
    biased = xt * inv
    biased += F32(nmax + 0.5)
    return d, None, _truncated_levels(biased, 2 * nmax - 1, _all_finite(xt, inv))


# ---- Q4_1 / Q5_1 (with offset) -------------------------------------------------------------

def _with_offset(x: np.ndarray, qw: Optional[np.ndarray], sigma2: Optional[np.ndarray],
                 nmax: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(d, m, q[32, blocks])`` of Q4_1 (``nmax`` 15) or Q5_1 (31).

    ``_ref``: ``d = (max - min) / nmax``, ``m = min``, ``q = (int8)((x - min)/d + .5)``
    (Q4_1 also clamps to 15); ``_impl``: ``make_qkx3_quants`` with imatrix weights, whose
    ``the_min`` is ``-m``.
    """
    xt = np.ascontiguousarray(x.T)
    if qw is not None:
        scale, the_min, levels = qkx_quants(xt, _imatrix_weights(xt, qw, sigma2), nmax, -0.9, 0.05, 36,
                                            use_mad=False)
        return scale, -the_min, levels
    lo, hi = seq_min_max(xt, axis=0)
    d = (hi - lo) / F32(nmax)
    inv = _inverse(d)
    biased = xt - lo
    biased *= inv
    biased += F32(0.5)
    return d, lo, _truncated_levels(biased, 15 if nmax == 15 else None, _all_finite(xt, inv))


# ---- Q4_0, Q5_0, Q4_1, Q5_1: kernels from their field layouts ---------------------------------

def _field(name: str, d: np.ndarray, m: Optional[np.ndarray], q: np.ndarray) -> np.ndarray:
    return {"d": lambda: to_fp16(d), "m": lambda: to_fp16(m), "qh": lambda: _high_bits(q),
            "qs4": lambda: _nibbles(q, masked=False), "qs5": lambda: _nibbles(q, masked=True)}[name]()


def _register(qtype: QT, levels_of, nmax: int, block_bytes: int, fields: tuple[str, ...]) -> None:
    def kernel(x: np.ndarray, qw: Optional[np.ndarray], sigma2: Optional[np.ndarray]) -> np.ndarray:
        d, m, q = levels_of(x, qw, sigma2, nmax)
        writer = _BlockWriter(x.shape[0], block_bytes)
        for name in fields:
            writer.put(_field(name, d, m, q))
        return writer.out

    def encode(values: np.ndarray, imatrix: Optional[np.ndarray]) -> np.ndarray:
        return encode_blocks(values, imatrix, 32, block_bytes, kernel, _CHUNK, needs_row_sigma2=True)

    encode.__name__ = f"encode_{qtype.name.lower()}"
    encode.__doc__ = f"{qtype.name}: ggml's quantize_row_{qtype.name.lower()}_ref, or _impl with an imatrix."
    register_encoder(qtype)(encode)


_register(QT.Q4_0, _symmetric, 8, 18, ("d", "qs4"))
_register(QT.Q5_0, _symmetric, 16, 22, ("d", "qh", "qs5"))
_register(QT.Q4_1, _with_offset, 15, 20, ("d", "m", "qs4"))
_register(QT.Q5_1, _with_offset, 31, 24, ("d", "m", "qh", "qs5"))
