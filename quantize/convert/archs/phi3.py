"""Phi-3 (mini/medium, 4k context): ``Phi3ForCausalLM`` → GGUF ``phi3``.

Phi-3 stores Q, K and V fused in one ``qkv_proj`` and gate and up fused in one
``gate_up_proj``; llama.cpp's phi3 graph reads them fused too (``attn_qkv``, and
``ffn_up`` of twice the feed-forward width, split in the graph), so they pass unchanged.
RoPE is NeoX-style (no permutation). The 128k variants' LongRoPE factor tables are not
converted yet and are refused.
"""

from __future__ import annotations

from models.foundation.errors import QuantDeskError
from quantize.convert.archs import Architecture, register
from quantize.convert.archs.hparams import find, require, rope_parameters, u32

PHI3_LAYER_OVERRIDES = {"self_attn.qkv_proj": "attn_qkv", "mlp.gate_up_proj": "ffn_up"}


def phi3_metadata(config: dict, arch: str) -> list:
    params = rope_parameters(config)
    n_embd, n_head = require(config, "hidden_size"), require(config, "num_attention_heads")
    rope_dims = int(float(params.get("partial_rotary_factor", 1.0)) * n_embd) // n_head
    original = find(params, ("original_max_position_embeddings",),
                    config.get("max_position_embeddings"))
    return [u32(f"{arch}.rope.scaling.original_context_length", original),
            u32(f"{arch}.rope.dimension_count", rope_dims),
            # llama.cpp tells Phi-4 (no sliding window) apart from Phi-3 by a zero here.
            u32(f"{arch}.attention.sliding_window", config.get("sliding_window") or 0)]


def phi3_check(config: dict) -> None:
    params = rope_parameters(config)
    if params.get("long_factor") or str(params.get("rope_type", "")).lower() in ("longrope", "su"):
        raise QuantDeskError("This Phi-3 checkpoint uses LongRoPE (a 128k-context variant), "
                             "which QuantDesk cannot convert yet.",
                             "Convert the 4k-context variant of the model.")


PHI3 = register(Architecture(
    gguf_arch="phi3",
    hf_classes=("Phi3ForCausalLM",),
    layer_overrides=PHI3_LAYER_OVERRIDES,
    metadata=phi3_metadata,
    check=phi3_check,
))
