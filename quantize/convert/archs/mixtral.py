"""Mixtral: ``MixtralForCausalLM`` → GGUF ``llama`` with experts.

llama.cpp runs Mixtral with its ``llama`` graph: Llama's attention (Q/K rows permuted to
the interleaved RoPE order) and, where ``expert_count`` is set, a MoE feed-forward. The
checkpoint keeps each expert under ``block_sparse_moe.experts.E`` as ``w1`` (gate), ``w3``
(up) and ``w2`` (down); the router is ``block_sparse_moe.gate``. The experts are
``intermediate_size`` wide, so no expert width key is written. Mixtral always
renormalises the chosen experts' weights, as the ``llama`` graph does.
"""

from __future__ import annotations

import dataclasses

from quantize.convert.archs import ExpertLayout, register
from quantize.convert.archs.llama import LLAMA
from quantize.convert.archs.moe import check_routing

MIXTRAL = register(dataclasses.replace(
    LLAMA,
    hf_classes=("MixtralForCausalLM",),
    experts=ExpertLayout("block_sparse_moe.experts",
                         {"w1": "ffn_gate_exps", "w3": "ffn_up_exps", "w2": "ffn_down_exps"}),
    check=lambda config: check_routing(config, "Mixtral", renormalises=True, default_norm=None),
))
