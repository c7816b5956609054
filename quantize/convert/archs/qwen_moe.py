"""Qwen2-MoE and Qwen3-MoE: ``Qwen2MoeForCausalLM`` → ``qwen2moe``, ``Qwen3MoeForCausalLM`` →
``qwen3moe``.

Each layer's MLP is a router (``mlp.gate`` → ``ffn_gate_inp``, kept F32) over
``num_experts`` SwiGLU experts of ``moe_intermediate_size`` (merged into the 3-D
``ffn_{gate,up,down}_exps``), of which ``num_experts_per_tok`` run per token. Qwen2-MoE
adds a shared expert that every token uses (``ffn_*_shexp``, ``shared_expert_intermediate_size``
wide), scaled by a sigmoid gate (``ffn_gate_inp_shexp``); Qwen3-MoE has none but Q/K
norms like dense Qwen3. Qwen3-MoE renormalises the chosen experts' weights, Qwen2-MoE
does not (:func:`quantize.convert.archs.moe.check_routing`).
"""

from __future__ import annotations

from quantize.convert.archs import MLP_EXPERTS, Architecture, register
from quantize.convert.archs.moe import check_routing, expert_width_entries

QWEN2_MOE = register(Architecture(
    gguf_arch="qwen2moe",
    hf_classes=("Qwen2MoeForCausalLM",),
    experts=MLP_EXPERTS,
    metadata=expert_width_entries,
    check=lambda config: check_routing(config, "Qwen2-MoE", renormalises=False),
))

QWEN3_MOE = register(Architecture(
    gguf_arch="qwen3moe",
    hf_classes=("Qwen3MoeForCausalLM",),
    experts=MLP_EXPERTS,
    metadata=expert_width_entries,
    check=lambda config: check_routing(config, "Qwen3-MoE", renormalises=True),
))
