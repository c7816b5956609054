"""The compiled conversions of stored weights: every value as libggml converts it.

A BF16 output of an F16 or F32 model is rounded in one compiled pass
(:func:`quantize.blocks.widen.to_bf16_bits`); libggml's ``ggml_quantize_chunk`` for BF16
(``ggml_fp32_to_bf16_row_ref``) is the oracle, on every float16 value and on random
float32 bit patterns with NaNs, infinities and subnormals in them.
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as T

from quantize.blocks.widen import to_bf16_bits, to_f32
from quantize.reference_ggml import ggml_quantize


def _ggml_bf16(values_f32: np.ndarray) -> np.ndarray:
    return ggml_quantize(values_f32.reshape(-1, 256), T.BF16).view(np.uint16).reshape(-1)


def test_every_float16_value_rounds_to_bfloat16_as_ggml_does():
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    assert np.array_equal(to_bf16_bits(every), _ggml_bf16(to_f32(every)))


def test_float32_bit_patterns_round_to_bfloat16_as_ggml_does():
    rng = np.random.default_rng(14)
    bits = rng.integers(0, 1 << 32, size=1 << 20, dtype=np.uint64).astype(np.uint32)
    special = [0x7F800000, 0xFF800000, 0x7F800001, 0xFFC00001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7F7FFFFF,
               0x7F7F8000, 0x3F808000, 0x3F818000, 0x00000001, 0x80008000, 0x00000000, 0x80000000]
    bits[:len(special) * 64] = np.repeat(np.array(special, np.uint32), 64)
    values = bits.view(np.float32)
    assert np.array_equal(to_bf16_bits(values), _ggml_bf16(values))


def test_bfloat16_bits_are_written_into_a_given_output():
    values = np.random.default_rng(3).standard_normal((6, 512)).astype(np.float16)
    out = np.zeros((6, 1024), np.uint8)
    to_bf16_bits(values[2:5], out[2:5].view(np.uint16))
    assert np.array_equal(out[2:5].view(np.uint16), _ggml_bf16(to_f32(values[2:5])).reshape(3, 512))
    assert not out[:2].any() and not out[5:].any()


def test_float32_and_bfloat16_bit_patterns_round_to_float16_as_ggml_or_numpy_do():
    """F16 outputs in one compiled pass: the quantizer's as llama_model_quantize writes them
    (ggml: one quiet NaN per sign), the converter's as numpy's cast (llama.cpp's converter),
    which keeps a NaN's payload. Every bfloat16 pattern, 1M float32 patterns with specials."""
    from quantize.blocks.widen import to_f16_bits

    rng = np.random.default_rng(16)
    bits = rng.integers(0, 1 << 32, size=1 << 20, dtype=np.uint64).astype(np.uint32)
    special = [0x7F800000, 0xFF800000, 0x7F800001, 0xFFC00001, 0x7FBFFFFF, 0xFFFFFFFF, 0x477FEFFF,
               0x477FF000, 0x33000000, 0x33000001, 0x387FC000, 0x38800000, 0x00000001, 0x80000000]
    bits[:len(special) * 64] = np.repeat(np.array(special, np.uint32), 64)
    every_bf16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    for stored, values in ((bits.view(np.float32), bits.view(np.float32)),
                           (every_bf16, (every_bf16.astype(np.uint32) << 16).view(np.float32))):
        assert np.isnan(values).sum() > 250
        ggml = ggml_quantize(values.reshape(-1, 256), T.F16).view(np.uint16).reshape(-1)
        with np.errstate(over="ignore", invalid="ignore"):
            numpy_cast = values.astype(np.float16).view(np.uint16)
        assert np.array_equal(to_f16_bits(stored), ggml)
        assert np.array_equal(to_f16_bits(stored, numpy_nan=True), numpy_cast)
        assert not np.array_equal(numpy_cast, ggml)  # NaNs: why both exist
