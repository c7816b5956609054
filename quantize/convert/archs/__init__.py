"""Supported architecture families, one small declarative module each, in a registry.

An :class:`Architecture` says how a Hugging Face ``architectures[0]`` class becomes a
llama.cpp model: the GGUF architecture name, how HF tensor names map to GGUF names, the
per-tensor rewrites llama.cpp needs (Q/K permutation, Gemma's ``norm + 1``), the extra
hyperparameter keys the family's loader in ``src/models/<arch>.cpp`` reads, generated
tensors (Llama 3's ``rope_freqs``), and which tokenizer the family ships.

To add a family: write ``quantize/convert/archs/<family>.py`` that calls :func:`register`
with an :class:`Architecture`, and list the module in :data:`_MODULES`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from app.core.errors import QuantDeskError
from quantize.source import MetadataEntry

#: HF module path inside a decoder layer → GGUF tensor base name, shared by every family
#: here (gguf-py's tensor_mapping.py lists the same pairs among many others).
LAYER_TENSORS = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.qkv_proj": "attn_qkv",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "post_attention_layernorm": "ffn_norm",
    "pre_feedforward_layernorm": "ffn_norm",
    "post_feedforward_layernorm": "post_ffw_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "mlp.gate_up_proj": "ffn_up",
}
GLOBAL_TENSORS = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}

#: Tensors checkpoints carry that no family here uses (recomputed buffers).
IGNORED_SUFFIXES = (".rotary_emb.inv_freq", ".attention.masked_bias", ".attention.bias")

MetadataFn = Callable[[dict, str], list[MetadataEntry]]
ExtraTensorsFn = Callable[[dict], list[tuple[str, np.ndarray]]]


@dataclass(frozen=True)
class Architecture:
    """How one HF model family converts to GGUF.

    Attributes:
        gguf_arch: ``general.architecture`` (llama.cpp's name: ``llama``, ``qwen2``...).
        hf_classes: ``config.json`` ``architectures[0]`` values this family handles.
        layer_overrides: Per-layer HF module → GGUF name entries replacing the defaults.
        permute_qk: Reorder Q/K rows from HF's half-split RoPE layout to llama.cpp's
            interleaved one (llama-family weights only).
        norm_offset: Added to every ``*norm.weight`` (Gemma stores ``w`` and uses ``1 + w``).
        dropped: HF tensor names the family's llama.cpp loader never reads.
        trim_embeddings: Cut ``token_embd`` rows beyond the tokenizer's real vocabulary.
        tokenizer: ``"auto"`` (SentencePiece if tokenizer.model exists, else BPE),
            ``"spm"`` or ``"bpe"``.
        add_space_prefix: Written as ``tokenizer.ggml.add_space_prefix`` when not None.
        metadata: Family-specific hyperparameter keys: ``fn(config, arch) -> entries``.
        extra_tensors: Generated tensors: ``fn(config) -> [(gguf_name, float32 array)]``.
        check: Raises :class:`QuantDeskError` for variants llama.cpp would run wrongly.
        config_defaults: Values transformers assumes when config.json omits them (Gemma 3
            configs often leave out heads, head_dim...); config.json wins.
    """

    gguf_arch: str
    hf_classes: tuple[str, ...]
    layer_overrides: dict[str, str] = field(default_factory=dict)
    permute_qk: bool = False
    norm_offset: float = 0.0
    dropped: tuple[str, ...] = ()
    trim_embeddings: bool = False
    tokenizer: str = "auto"
    add_space_prefix: Optional[bool] = None
    metadata: Optional[MetadataFn] = None
    extra_tensors: Optional[ExtraTensorsFn] = None
    check: Optional[Callable[[dict], None]] = None
    config_defaults: dict = field(default_factory=dict)

    def complete_config(self, config: dict) -> dict:
        """``config`` with the family's defaults filled in, checked for faithfulness."""
        full = dict(config)
        for key, value in self.config_defaults.items():
            if full.get(key) is None:
                full[key] = value
        if self.check is not None:
            self.check(full)
        return full

    def gguf_name(self, hf_name: str) -> Optional[str]:
        """The GGUF name of an HF tensor, or ``None`` when no mapping is known."""
        module, _, kind = hf_name.rpartition(".")
        if kind not in ("weight", "bias"):
            return None
        if module in GLOBAL_TENSORS:
            return f"{GLOBAL_TENSORS[module]}.{kind}"
        parts = module.split(".", 3)
        if len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[2].isdecimal():
            base = self.layer_overrides.get(parts[3], LAYER_TENSORS.get(parts[3]))
            if base is not None:
                return f"blk.{int(parts[2])}.{base}.{kind}"
        return None


ARCHITECTURES: dict[str, Architecture] = {}
_MODULES = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3")


def register(arch: Architecture) -> Architecture:
    """Make ``arch`` the converter of each of its ``hf_classes``."""
    for name in arch.hf_classes:
        ARCHITECTURES[name] = arch
    return arch


def find_architecture(config: dict, folder_name: str) -> tuple[str, Architecture]:
    """The HF class named by ``config.json`` and the family converting it."""
    if not ARCHITECTURES:
        for module in _MODULES:
            importlib.import_module(f"{__name__}.{module}")
    classes = config.get("architectures") or []
    if not classes or not isinstance(classes, list):
        raise QuantDeskError(
            f"config.json in {folder_name} does not name the model's architecture "
            "(no \"architectures\" list).",
            "Use the config.json published with the model.")
    hf_class = str(classes[0])
    arch = ARCHITECTURES.get(hf_class)
    if arch is None:
        supported = ", ".join(sorted(ARCHITECTURES))
        raise QuantDeskError(
            f"{folder_name} is a {hf_class} model, which QuantDesk cannot convert yet.",
            f"Supported architectures: {supported}.")
    return hf_class, arch
