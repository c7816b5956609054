"""Encoding float32 rows into a GGML tensor type: the one entry point for block quantizers.

``encode_rows(values, qtype, imatrix)`` turns a ``(rows, n_per_row)`` float32 array into
the ``(rows, row_bytes)`` uint8 array llama.cpp stores for ``qtype``. Float types are
plain casts; quantized types dispatch to the encoder registered for them in
:data:`ENCODERS` (our numpy block quantizers register themselves on import).
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np
from quantize.ggml_types import GGML_QUANT_SIZES, GGMLQuantizationType

from models.foundation.errors import QuantDeskError

#: ``encoder(values_f32[rows, n_per_row], imatrix_or_None[n_per_row]) -> uint8[rows, row_bytes]``
Encoder = Callable[[np.ndarray, Optional[np.ndarray]], np.ndarray]
ENCODERS: dict[GGMLQuantizationType, Encoder] = {}


def register_encoder(qtype: GGMLQuantizationType) -> Callable[[Encoder], Encoder]:
    """Decorator: make ``fn`` the encoder of ``qtype``."""
    def deco(fn: Encoder) -> Encoder:
        ENCODERS[qtype] = fn
        return fn
    return deco


def row_bytes(n_per_row: int, qtype: GGMLQuantizationType) -> int:
    """Bytes of one row of ``n_per_row`` values stored as ``qtype``."""
    block, size = GGML_QUANT_SIZES[qtype]
    if n_per_row % block:
        raise ValueError(f"a row of {n_per_row} values is not a multiple of {qtype.name}'s block of {block}")
    return n_per_row // block * size


def tensor_bytes(shape: tuple[int, ...], qtype: GGMLQuantizationType) -> int:
    """Bytes of a whole tensor of numpy-order ``shape`` stored as ``qtype``."""
    rows = int(math.prod(shape[:-1]))  # Python ints: numpy's prod costs ~5 us a call, paid per tensor
    return rows * row_bytes(shape[-1], qtype)


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) → float32 values (exact: bf16 is float32's top half)."""
    widened = bits.astype(np.uint32)
    widened <<= np.uint32(16)  # in place: one buffer for the widen and the shift
    return widened.view(np.float32)


def f32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 → bfloat16 bit patterns (uint16), rounded as ggml_compute_fp32_to_bf16 does.

    Round to nearest even; NaN stays a (quiet) NaN instead of rounding into infinity.
    """
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)).astype(np.uint16)
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    if nan.any():
        rounded[nan] = ((bits[nan] >> np.uint32(16)) | np.uint32(64)).astype(np.uint16)
    return rounded


def quiet_bf16_nans(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bits as :func:`f32_to_bf16_bits` gives them back after widening: the same,
    but every NaN quiet (bit 6 set, as ggml and gguf-py round). In place when ``bits`` is
    writable (a read-only array holding a NaN is copied first); returns the result."""
    nan = (bits & np.uint16(0x7FFF)) > np.uint16(0x7F80)
    if nan.any():
        if not bits.flags.writeable:
            bits = bits.copy()
        bits[nan] |= np.uint16(0x0040)
    return bits


def encode_rows(values: np.ndarray, qtype: GGMLQuantizationType,
                imatrix: Optional[np.ndarray] = None) -> np.ndarray:
    """Encode float32 ``values`` of shape ``(rows, n_per_row)`` as ``qtype``.

    Returns:
        A ``(rows, row_bytes)`` uint8 array: exactly the bytes llama.cpp writes.
    """
    values = np.ascontiguousarray(values, dtype=np.float32)
    if values.ndim == 1:
        values = values.reshape(1, -1)
    rows = values.shape[0]
    if qtype == GGMLQuantizationType.F32:
        return values.view(np.uint8).reshape(rows, -1)
    if qtype == GGMLQuantizationType.F16:  # numpy's cast: NaN payloads kept (ggml's NaN: blocks.widen.to_f16_bits)
        return values.astype(np.float16).view(np.uint8).reshape(rows, -1)
    if qtype == GGMLQuantizationType.BF16:
        return f32_to_bf16_bits(values).view(np.uint8).reshape(rows, -1)
    encoder = ENCODERS.get(qtype)
    if encoder is None:
        # Lazy: the block quantizers register themselves when their package is imported.
        import quantize.blocks  # noqa: F401
        encoder = ENCODERS.get(qtype)
    if encoder is None:
        raise QuantDeskError(f"QuantDesk cannot write {qtype.name} tensors yet.",
                             "Choose another quantization type.")
    row_bytes(values.shape[1], qtype)  # validates the block multiple
    return encoder(values, imatrix)
