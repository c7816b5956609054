"""Llama (Llama 1/2/3.x, SmolLM, TinyLlama, ...): ``LlamaForCausalLM`` → GGUF ``llama``.

HF stores Q/K rows in the half-split layout of its ``rotate_half`` RoPE; llama.cpp's
``llama`` graph rotates interleaved pairs, so Q and K are permuted back (``permute_qk``).
Llama 3.1+ "llama3" RoPE scaling becomes a ``rope_freqs`` tensor of per-dimension factors,
computed exactly as convert_hf_to_gguf's ``LlamaModel.generate_extra_tensors``.
"""

from __future__ import annotations

import math

import numpy as np

from quantize.convert.archs import Architecture, register
from quantize.convert.archs.hparams import head_dim, rope_parameters, u32


def llama_metadata(config: dict, arch: str) -> list:
    return [u32(f"{arch}.vocab_size", config["vocab_size"]),
            u32(f"{arch}.rope.dimension_count", head_dim(config))]


def llama3_rope_freqs(config: dict) -> list[tuple[str, np.ndarray]]:
    """``rope_freqs.weight``: divisors of each RoPE frequency under "llama3" scaling.

    Wavelengths shorter than ``original_ctx / high_freq_factor`` keep their frequency (1),
    longer than ``original_ctx / low_freq_factor`` are slowed by ``factor``, and the band in
    between blends the two smoothly.
    """
    params = rope_parameters(config)
    if str(params.get("rope_type", "")).lower() != "llama3":
        return []
    base = float(params.get("rope_theta", 10000.0))
    dim = head_dim(config)
    factor = float(params.get("factor", 8.0))
    low = float(params.get("low_freq_factor", 1.0))
    high = float(params.get("high_freq_factor", 4.0))
    old_ctx = float(params.get("original_max_position_embeddings", 8192))
    # float32 like the reference (torch.arange(..., dtype=float32) / dim), then per element.
    exponents = np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)
    freqs = (1.0 / (np.float32(base) ** exponents)).astype(np.float32)
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / float(freq)
        if wavelen < old_ctx / high:
            factors.append(1.0)
        elif wavelen > old_ctx / low:
            factors.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return [("rope_freqs.weight", np.asarray(factors, dtype=np.float32))]


LLAMA = register(Architecture(
    gguf_arch="llama",
    # SmolVLM's text model is a Llama (its vision half: quantize/convert/vision/smolvlm.py).
    hf_classes=("LlamaForCausalLM", "LLaMAForCausalLM", "Idefics3ForConditionalGeneration",
                "SmolVLMForConditionalGeneration"),
    permute_qk=True,
    metadata=llama_metadata,
    extra_tensors=llama3_rope_freqs,
))
