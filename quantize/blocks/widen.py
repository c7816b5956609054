"""Widening stored 16-bit weights to float32 as llama.cpp does, compiled.

``llama_model_quantize`` converts an F16 or BF16 tensor to float32 before quantizing it
(``ggml_fp16_to_fp32_row`` / ``ggml_bf16_to_fp32_row``); the quantize job does the same,
a few hundred kilobytes at a time on its worker threads, right before a block kernel
reads them. numpy's ``astype(np.float32)`` of float16 ran at ~150 M values/s here, more
than the Q4_0 kernel that followed it; this loop vectorizes (ggml's own integer routine,
:func:`quantize.blocks.jit.fp16_to_fp32`) and is bound by memory.
"""

from __future__ import annotations

import numpy as np

from quantize.blocks.jit import bf16_to_fp32, fp16_to_fp32, streaming_kernel


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
