"""OLMoE: ``OlmoeForCausalLM`` → GGUF ``olmoe``.

Qwen-MoE's expert layout (``mlp.experts.E.{gate,up,down}_proj``, router ``mlp.gate``)
with experts ``intermediate_size`` wide, no shared expert, no renormalisation of the
chosen experts' weights, and RMS norms over the whole query and key vectors (all heads
at once, not per head) before RoPE. llama.cpp's olmoe loader gives the key norm the
model width, so grouped-query variants (fewer key/value heads) are refused, as is QKV
clipping, which its graph does not apply.
"""

from __future__ import annotations

from models.foundation.errors import QuantDeskError
from quantize.convert.archs import MLP_EXPERTS, Architecture, register
from quantize.convert.archs.moe import check_routing


def olmoe_check(config: dict) -> None:
    check_routing(config, "OLMoE", renormalises=False)
    heads = config.get("num_attention_heads")
    if (config.get("num_key_value_heads") or heads) != heads:
        raise QuantDeskError("This OLMoE model shares key/value heads between query heads, which "
                             "llama.cpp's olmoe graph does not support.",
                             "This checkpoint cannot be converted faithfully.")
    if config.get("clip_qkv") is not None:
        raise QuantDeskError("config.json sets clip_qkv for this OLMoE model, which llama.cpp's "
                             "olmoe graph does not apply.",
                             "This checkpoint cannot be converted faithfully.")


OLMOE = register(Architecture(
    gguf_arch="olmoe",
    hf_classes=("OlmoeForCausalLM",),
    experts=MLP_EXPERTS,
    qk_norm_whole=True,
    check=olmoe_check,
))
