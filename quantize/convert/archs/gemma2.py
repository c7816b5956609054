"""Gemma 2: ``Gemma2ForCausalLM`` → GGUF ``gemma2``.

Beyond the Gemma basics (gemma_common): attention-logit and final-logit soft-capping
(``tanh(x / cap) * cap``), sliding-window attention on alternate layers, tied output
(``lm_head.weight`` is never read by llama.cpp's gemma2 loader, so it is dropped), and a
SentencePiece vocabulary without the leading-space prefix.
"""

from __future__ import annotations

from quantize.convert.archs import Architecture, register
from quantize.convert.archs.gemma_common import GEMMA_LAYER_OVERRIDES, check_attention_scale
from quantize.convert.archs.hparams import f32, sliding_window_entries


def gemma2_metadata(config: dict, arch: str) -> list:
    out = sliding_window_entries(config, arch)
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if config.get(key) is not None:
            out.append(f32(f"{arch}.{key}", config[key]))
    return out


GEMMA2 = register(Architecture(
    gguf_arch="gemma2",
    hf_classes=("Gemma2ForCausalLM",),
    layer_overrides=GEMMA_LAYER_OVERRIDES,
    norm_offset=1.0,
    dropped=("lm_head.weight",),
    tokenizer="spm",
    add_space_prefix=False,
    metadata=gemma2_metadata,
    check=lambda config: check_attention_scale(config, layers_27b=46),
))
