"""Qwen3 (dense): ``Qwen3ForCausalLM`` → GGUF ``qwen3``.

Qwen3 adds RMS norms on each head's queries and keys (``attn_q_norm``/``attn_k_norm``,
one weight of ``head_dim``) and drops Qwen2's QKV biases; ``head_dim`` is explicit in the
config and need not equal hidden_size / heads, so key/value lengths are written.
"""

from __future__ import annotations

from quantize.convert.archs import Architecture, register

QWEN3 = register(Architecture(gguf_arch="qwen3", hf_classes=("Qwen3ForCausalLM",)))
