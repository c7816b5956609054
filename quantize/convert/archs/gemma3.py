"""Gemma 3 (text): ``Gemma3ForCausalLM`` → GGUF ``gemma3``.

Gemma 3 replaces Gemma 2's attention soft-capping with per-head Q/K RMS norms (also
``1 + w``), interleaves sliding-window layers (with their own RoPE base,
``rope.freq_base_swa``) with global ones, and may scale RoPE linearly on global layers.
Embedding rows past the tokenizer's vocabulary are cut, as llama.cpp expects one row per
token. Image-text checkpoints (``Gemma3ForConditionalGeneration``) convert as their text
model: ``hf_folder`` unnests the language model's tensors and config and leaves the
vision tower out; keys their ``text_config`` omits take transformers' defaults.
"""

from __future__ import annotations

from models.foundation.errors import QuantDeskError
from quantize.convert.archs import Architecture, register
from quantize.convert.archs.gemma_common import GEMMA_LAYER_OVERRIDES, check_attention_scale
from quantize.convert.archs.hparams import f32, sliding_rope_theta, sliding_window_entries


def gemma3_metadata(config: dict, arch: str) -> list:
    out = []
    if config.get("sliding_window_pattern") != 1:
        out += sliding_window_entries(config, arch)
    local_theta = sliding_rope_theta(config)
    if local_theta is not None:
        out.append(f32(f"{arch}.rope.freq_base_swa", local_theta))
    if config.get("final_logit_softcapping"):
        out.append(f32(f"{arch}.final_logit_softcapping", config["final_logit_softcapping"]))
    return out


def gemma3_check(config: dict) -> None:
    if config.get("attn_logit_softcapping") is not None:
        raise QuantDeskError("config.json sets attn_logit_softcapping for a Gemma 3 model, which "
                             "llama.cpp's gemma3 graph does not apply.",
                             "This checkpoint cannot be converted faithfully.")
    check_attention_scale(config, layers_27b=62)


#: transformers' Gemma3TextConfig defaults, which Gemma 3 configs rely on.
GEMMA3_DEFAULTS = {
    "vocab_size": 262208, "hidden_size": 2304, "intermediate_size": 9216, "num_hidden_layers": 26,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "rms_norm_eps": 1e-6,
    "rope_theta": 1_000_000.0, "rope_local_base_freq": 10_000.0, "sliding_window": 4096,
    "query_pre_attn_scalar": 256, "max_position_embeddings": 131072,
}

GEMMA3 = register(Architecture(
    gguf_arch="gemma3",
    # The image-text checkpoint converts as its text model (vision tensors are left out).
    hf_classes=("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration"),
    config_defaults=GEMMA3_DEFAULTS,
    layer_overrides=GEMMA_LAYER_OVERRIDES,
    norm_offset=1.0,
    trim_embeddings=True,
    add_space_prefix=False,
    metadata=gemma3_metadata,
    check=gemma3_check,
))
