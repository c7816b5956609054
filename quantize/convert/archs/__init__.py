"""Supported architecture families, one small declarative module each, in a registry.

An :class:`Architecture` says how a Hugging Face ``architectures[0]`` class becomes a
llama.cpp model: the GGUF architecture name, how HF tensor names map to GGUF names, the
per-tensor rewrites llama.cpp needs (Q/K permutation, Gemma's ``norm + 1``), the extra
hyperparameter keys the family's loader in ``src/models/<arch>.cpp`` reads, generated
tensors (Llama 3's ``rope_freqs``), which tokenizer the family ships, and for
mixture-of-experts families where each expert's weights sit (:class:`ExpertLayout`), so
that they are merged into llama.cpp's 3-D ``ffn_{gate,up,down}_exps`` tensors.

To add a family: write ``quantize/convert/archs/<family>.py`` that calls :func:`register`
with an :class:`Architecture`, and list the module in :data:`_MODULES`.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from models.foundation.errors import QuantDeskError
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
    # Mixture of experts: the router, and Qwen2-MoE's shared expert with its sigmoid gate.
    "mlp.gate": "ffn_gate_inp",
    "block_sparse_moe.gate": "ffn_gate_inp",
    "mlp.shared_expert.gate_proj": "ffn_gate_shexp",
    "mlp.shared_expert.up_proj": "ffn_up_shexp",
    "mlp.shared_expert.down_proj": "ffn_down_shexp",
    "mlp.shared_expert_gate": "ffn_gate_inp_shexp",
}
GLOBAL_TENSORS = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}

#: Tensors checkpoints carry that no family here uses (recomputed buffers).
IGNORED_SUFFIXES = (".rotary_emb.inv_freq", ".attention.masked_bias", ".attention.bias")



@dataclass(frozen=True)
class ExpertLayout:
    """Where a MoE checkpoint keeps its experts: ``model.layers.N.<module>.E.<leaf>.weight``.

    Attributes:
        module: The experts' module inside a layer (``mlp.experts``,
            ``block_sparse_moe.experts``).
        projections: Each expert's HF leaf → the merged GGUF base name (Mixtral's ``w1``
            → ``ffn_gate_exps``). llama.cpp stacks expert E's matrix as slice E of one
            tensor of shape (n_expert, rows, cols).
    """

    module: str
    projections: dict[str, str]

    def __post_init__(self) -> None:
        leaves = "|".join(re.escape(leaf) for leaf in self.projections)
        object.__setattr__(self, "_pattern", re.compile(
            rf"model\.layers\.(\d+)\.{re.escape(self.module)}\.(\d+)\.({leaves})\.weight"))

    def slot(self, hf_name: str) -> Optional[tuple[str, int]]:
        """``(merged GGUF name, expert index)`` of one expert's weight, else ``None``."""
        m = self._pattern.fullmatch(hf_name)  # type: ignore[attr-defined]
        if m is None:
            return None
        return f"blk.{int(m.group(1))}.{self.projections[m.group(3)]}.weight", int(m.group(2))


#: The expert layout of Qwen2/Qwen3-MoE and OLMoE checkpoints.
MLP_EXPERTS = ExpertLayout("mlp.experts", {"gate_proj": "ffn_gate_exps", "up_proj": "ffn_up_exps",
                                           "down_proj": "ffn_down_exps"})

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
        experts: Where a mixture-of-experts family keeps its experts; ``None`` for dense.
        qk_norm_whole: Q/K norms span all heads at once (OLMoE) rather than one head.
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
    experts: Optional[ExpertLayout] = None
    qk_norm_whole: bool = False

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
_MODULES = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3", "mixtral", "qwen_moe",
            "olmoe", "qwen2vl", "qwen3vl")


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
