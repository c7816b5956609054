"""Vision halves of image-text checkpoints → llama.cpp's ``clip`` (mmproj) GGUF, one module per family.

An image-text checkpoint holds a text model (converted by :mod:`quantize.convert.archs` as
usual) and a vision encoder with a projector into the text model's embedding space.
llama.cpp reads the second from its own file, the *mmproj*: ``general.architecture`` is
``clip``, ``general.type`` is ``mmproj``, its keys are ``clip.*`` and its tensors ``v.*``
(encoder) and ``mm.*`` (projector). :class:`VisionFamily` says, for one HF class, how the
checkpoint's vision tensors are named in the mmproj, which ``clip.*`` keys the family's
projector needs, which tensors llama.cpp wants in a fixed type, and which values it
rewrites. Facts come from convert_hf_to_gguf's ``MmprojModel`` and its subclasses (the
keys, names and forced types are the format's; the code is ours).

To add a family: write ``quantize/convert/vision/<family>.py`` that calls :func:`register`
with a :class:`VisionFamily`, and list the module in :data:`_MODULES`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable, Optional, Union

import numpy as np

from quantize.ggml_types import GGMLQuantizationType
from quantize.source import MetadataEntry

@dataclass(frozen=True)
class Piece:
    """One tensor made from part of a checkpoint tensor (a fused Q/K/V's Q, one frame of a
    3-D convolution): its name (canonical HF, or with ``gguf`` the mmproj name itself),
    its shape, and ``take(values)`` cutting it from the whole (slices only: exact on
    any storage type)."""

    name: str
    shape: tuple
    take: Callable[[np.ndarray], np.ndarray]
    gguf: bool = False


#: ``(hf_name, gguf_name, outtype) -> type or None``: a tensor's fixed output type.
ForcedType = Callable[[str, str, GGMLQuantizationType], Optional[GGMLQuantizationType]]
#: ``(vision_config, config, preprocessor, text_hidden_size) -> entries``.
VisionMetadata = Callable[[dict, dict, dict, int], list[MetadataEntry]]


def siglip_names(prefix: str) -> dict[str, str]:
    """A SigLIP/ViT encoder's module names under ``prefix`` → mmproj names (``{bid}`` per layer)."""
    layer = f"{prefix}encoder.layers.{{bid}}."
    return {
        f"{prefix}embeddings.patch_embedding": "v.patch_embd",
        f"{prefix}embeddings.position_embedding": "v.position_embd",
        f"{layer}self_attn.q_proj": "v.blk.{bid}.attn_q",
        f"{layer}self_attn.k_proj": "v.blk.{bid}.attn_k",
        f"{layer}self_attn.v_proj": "v.blk.{bid}.attn_v",
        f"{layer}self_attn.out_proj": "v.blk.{bid}.attn_out",
        f"{layer}layer_norm1": "v.blk.{bid}.ln1",
        f"{layer}layer_norm2": "v.blk.{bid}.ln2",
        f"{layer}mlp.fc1": "v.blk.{bid}.ffn_up",
        f"{layer}mlp.fc2": "v.blk.{bid}.ffn_down",
        f"{prefix}post_layernorm": "v.post_ln",
    }


@dataclass(frozen=True)
class VisionFamily:
    """How one image-text family's vision half becomes an mmproj file.

    Attributes:
        hf_classes: ``config.json`` ``architectures[0]`` values this family handles.
        projector_type: ``clip.projector_type`` (llama.cpp's name for the projector), or
            ``fn(config) -> name`` for families whose variants differ.
        names: HF module name (``{bid}`` for the layer number) → mmproj base name. HF names
            are first put in the family's canonical layout by :attr:`canonical`.
        canonical: The checkpoint's tensor name in the layout :attr:`names` uses, or
            ``None`` for a tensor of the text model (both on-disk layouts are read).
        skipped: Canonical names of vision tensors llama.cpp does not use.
        metadata: The family's keys beyond the common ones (:func:`common_vision_entries`).
        forced_type: Tensors llama.cpp wants in one type whatever the output type.
        rewrite: ``(canonical_name, float32 values) -> values`` for tensors whose values
            change (Gemma's ``1 + w`` norm), or ``None``.
        rewritten: Predicate on canonical names that :attr:`rewrite` changes (those tensors
            are always read as float32 and rewritten).
        vision_config: ``vision_config`` with the values transformers assumes when
            config.json leaves them out.
        pieces: ``(canonical_name, shape, vision_config) -> [Piece]`` for checkpoint
            tensors llama.cpp wants as several (or under a name the config decides), else
            ``None``.
    """

    hf_classes: tuple[str, ...]
    projector_type: Union[str, Callable[[dict], str]]
    names: dict[str, str]
    canonical: Callable[[str], Optional[str]]
    skipped: Callable[[str], bool] = lambda name: False
    metadata: Optional[VisionMetadata] = None
    forced_type: Optional[ForcedType] = None
    rewrite: Optional[Callable[[str, np.ndarray], np.ndarray]] = None
    rewritten: Callable[[str], bool] = lambda name: False
    vision_config: Callable[[dict], dict] = lambda vision: vision
    pieces: Optional[Callable[[str, tuple, dict], Optional[list[Piece]]]] = None

    def gguf_name(self, canonical_name: str) -> Optional[str]:
        """The mmproj name of a canonical HF tensor name, or ``None`` when not known."""
        module, _, kind = canonical_name.rpartition(".")
        if kind not in ("weight", "bias"):
            return None
        parts = module.split(".")
        bid = next((p for p in parts if p.isdecimal()), None)
        key = module if bid is None else ".".join("{bid}" if p == bid else p for p in parts)
        base = self.names.get(key)
        if base is None:
            return None
        return f"{base.format(bid=int(bid)) if bid is not None else base}.{kind}"


VISION_FAMILIES: dict[str, VisionFamily] = {}
_MODULES = ("gemma3", "smolvlm", "qwenvl", "qwen3vl")


def register(family: VisionFamily) -> VisionFamily:
    """Make ``family`` the mmproj converter of each of its ``hf_classes``."""
    for name in family.hf_classes:
        VISION_FAMILIES[name] = family
    return family


def find_vision_family(hf_class: str) -> Optional[VisionFamily]:
    """The vision family converting ``hf_class``, or ``None`` for a text-only class."""
    if not VISION_FAMILIES:
        for module in _MODULES:
            importlib.import_module(f"{__name__}.{module}")
    return VISION_FAMILIES.get(hf_class)
