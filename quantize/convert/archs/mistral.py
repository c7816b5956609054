"""Mistral (7B v0.1–v0.3 and friends): ``MistralForCausalLM`` → GGUF ``llama``.

llama.cpp runs Mistral with its ``llama`` graph (convert_hf_to_gguf registers
``MistralForCausalLM`` on ``LlamaModel``), so the conversion is Llama's: permuted Q/K,
SentencePiece or BPE tokenizer. ``sliding_window`` is not written: the ``llama`` graph
attends to the whole context, as the reference converter's files do.
"""

from __future__ import annotations

import dataclasses

from quantize.convert.archs import register
from quantize.convert.archs.llama import LLAMA

MISTRAL = register(dataclasses.replace(LLAMA, hf_classes=("MistralForCausalLM",)))
