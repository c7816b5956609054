"""Converting stored 16-bit weights as llama.cpp does, compiled: widening and bfloat16.

``llama_model_quantize`` converts an F16 or BF16 tensor to float32 before quantizing it
(``ggml_fp16_to_fp32_row`` / ``ggml_bf16_to_fp32_row``); the quantize job does the same,
a few hundred kilobytes at a time on its worker threads, right before a block kernel
reads them. numpy's ``astype(np.float32)`` of float16 ran at ~150 M values/s here, more
than the Q4_0 kernel that followed it; this loop vectorizes (ggml's own integer routine,
:func:`quantize.blocks.jit.fp16_to_fp32`) and is bound by memory.

A BF16 file made from an F16 (or F32) model goes the same way in one pass per value:
widened, then rounded to bfloat16 as :func:`quantize.encode.f32_to_bf16_bits` (ggml's
``ggml_compute_fp32_to_bf16``) does, where numpy took five passes over float32 copies.
An F16 file from a BF16 (or F32) model likewise (:func:`to_f16_bits`): rounded to
nearest even, with a NaN written the way the caller's reference writes it — ggml's one
quiet NaN for the quantizer, numpy's payload-keeping NaN for the converter (llama.cpp's
converter casts with numpy). numpy's own cast ran at 60-240 M values/s here.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from quantize.blocks.jit import bf16_to_fp32, f32_bits, fp16_to_fp32, fp32_to_fp16, inline, streaming_kernel


@streaming_kernel
def _widen_f16(bits, out):
    for i in range(bits.shape[0]):
        out[i] = fp16_to_fp32(bits[i])


@streaming_kernel
def _widen_bf16(bits, out):
    for i in range(bits.shape[0]):
        out[i] = bf16_to_fp32(bits[i])


def to_f32(values: np.ndarray) -> np.ndarray:
    """float16, bfloat16 bits (uint16) or float32 ``values`` as a new float32 array (exact)."""
    if values.dtype == np.float32:
        return values
    if values.dtype not in (np.float16, np.uint16):
        raise TypeError(f"cannot widen {values.dtype} to float32")
    bits = np.ascontiguousarray(values).view(np.uint16)
    out = np.empty(values.shape, np.float32)
    (_widen_f16 if values.dtype == np.float16 else _widen_bf16)(bits.reshape(-1), out.reshape(-1))
    return out


@inline
def _bf16_bits(value):
    """``ggml_compute_fp32_to_bf16``: round to nearest even; a NaN stays a quiet NaN."""
    bits = np.uint32(f32_bits(value))
    if (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
        return np.uint16((bits >> np.uint32(16)) | np.uint32(64))
    return np.uint16((bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16))


@streaming_kernel
def _f16_to_bf16(bits, out):
    for i in range(bits.shape[0]):
        out[i] = _bf16_bits(fp16_to_fp32(bits[i]))


@streaming_kernel
def _f32_to_bf16(values, out):
    for i in range(values.shape[0]):
        out[i] = _bf16_bits(values[i])


def to_bf16_bits(values: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """float16 or float32 ``values`` as bfloat16 bits (uint16), rounded as ggml rounds.

    The same bits as ``f32_to_bf16_bits(to_f32(values))``; ``out`` (uint16, the shape of
    ``values``) receives them when given.
    """
    if values.dtype not in (np.float16, np.float32):
        raise TypeError(f"cannot round {values.dtype} to bfloat16")
    values = np.ascontiguousarray(values)
    if out is None:
        out = np.empty(values.shape, np.uint16)
    if values.dtype == np.float16:
        _f16_to_bf16(values.view(np.uint16).reshape(-1), out.reshape(-1))
    else:
        _f32_to_bf16(values.reshape(-1), out.reshape(-1))
    return out


@inline
def _f16_bits(value, numpy_nan):
    """float32 -> float16 bits, rounded to nearest even (ggml's routine). A NaN is ggml's
    ``sign | 0x7E00``, or with ``numpy_nan`` what ``npy_floatbits_to_halfbits`` makes of
    it: ``sign | 0x7C00 + (significand >> 13)``, and ``0x7C01`` where that would be 0."""
    h = fp32_to_fp16(value)
    if numpy_nan:
        bits = np.uint32(f32_bits(value))
        if (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
            payload = max((bits & np.uint32(0x007FFFFF)) >> np.uint32(13), np.uint32(1))
            h = np.uint16(((bits >> np.uint32(16)) & np.uint32(0x8000)) | (np.uint32(0x7C00) + payload))
    return h


@streaming_kernel
def _bf16_to_f16(bits, out, numpy_nan):
    for i in range(bits.shape[0]):
        out[i] = _f16_bits(bf16_to_fp32(bits[i]), numpy_nan)


@streaming_kernel
def _f32_to_f16(values, out, numpy_nan):
    for i in range(values.shape[0]):
        out[i] = _f16_bits(values[i], numpy_nan)


def to_f16_bits(values: np.ndarray, out: Optional[np.ndarray] = None, numpy_nan: bool = False) -> np.ndarray:
    """bfloat16 bits (uint16) or float32 ``values`` as float16 bits (uint16), in one pass.

    Rounded as ggml's ``GGML_FP32_TO_FP16`` and numpy's cast both round (nearest even,
    overflow to infinity); NaN as ggml writes it, or as numpy does with ``numpy_nan``.
    ``out`` (uint16, the shape of ``values``) receives the bits when given.
    """
    if values.dtype not in (np.uint16, np.float32):
        raise TypeError(f"cannot round {values.dtype} to float16")
    values = np.ascontiguousarray(values)
    if out is None:
        out = np.empty(values.shape, np.uint16)
    kernel = _bf16_to_f16 if values.dtype == np.uint16 else _f32_to_f16
    kernel(values.reshape(-1), out.reshape(-1), bool(numpy_nan))
    return out
