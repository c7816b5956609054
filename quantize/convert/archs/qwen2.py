"""Qwen2 / Qwen2.5: ``Qwen2ForCausalLM`` → GGUF ``qwen2``.

Qwen2 has biases on the Q, K and V projections (``attn_q.bias`` ...), which map like the
weights; llama.cpp's ``qwen2`` graph uses NeoX-style RoPE, so no Q/K permutation.
"""

from __future__ import annotations

from quantize.convert.archs import Architecture, register

QWEN2 = register(Architecture(gguf_arch="qwen2", hf_classes=("Qwen2ForCausalLM",)))
