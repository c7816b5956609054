"""What Gemma 2 and Gemma 3 share: ``1 + w`` norms, post-norms, the attention scale check.

Gemma's RMSNorm multiplies by ``1 + weight``; llama.cpp multiplies by the stored weight,
so every ``*norm.weight`` gets +1 (``norm_offset``). Gemma's sandwich norms map
``post_attention_layernorm`` to ``post_attention_norm`` (not ``ffn_norm`` as in Llama).
"""

from __future__ import annotations

from models.foundation.errors import QuantDeskError
from quantize.convert.archs.hparams import head_dim

GEMMA_LAYER_OVERRIDES = {"post_attention_layernorm": "post_attention_norm"}


def check_attention_scale(config: dict, layers_27b: int) -> None:
    """Refuse configs whose query scaling llama.cpp would not reproduce.

    HF scales queries by ``query_pre_attn_scalar ** -0.5``; llama.cpp's Gemma loaders
    hard-code ``head_dim`` (or hidden/heads for the 27B layer count) with no GGUF key to
    override it, so another value would give silently different outputs.
    """
    scalar = config.get("query_pre_attn_scalar")
    if scalar is None:
        return
    layers = config.get("num_hidden_layers")
    if layers == layers_27b:
        expected = config["hidden_size"] // config["num_attention_heads"]
    else:
        expected = head_dim(config)
    if float(scalar) != float(expected):
        raise QuantDeskError(
            f"config.json sets query_pre_attn_scalar={scalar}, but llama.cpp scales Gemma "
            f"queries by {expected} for a model of this shape, so the converted model would "
            "compute different outputs.", "This checkpoint cannot be converted faithfully.")
