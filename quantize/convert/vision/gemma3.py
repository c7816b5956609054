"""Gemma 3's vision half (``Gemma3ForConditionalGeneration``) → mmproj with projector ``gemma3``.

A SigLIP encoder (``vision_tower.vision_model``) and a projector that average-pools the
patch grid, normalizes with Gemma's ``1 + w`` RMS norm (``mm_soft_emb_norm``, so +1 here)
and multiplies by ``mm_input_projection_weight`` (stored as a bare parameter, hence the
``_weight`` name). llama.cpp pools by 4 (896 px, 14 px patches → 64 → 16×16 = 256 tokens)
unless ``clip.vision.projector.scale_factor`` says otherwise, which is written only for
other shapes. The projection is kept in F16 and the embeddings in F32 whatever the output
type (llama.cpp issue 13025: its CPU kernels need it).
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from quantize.convert.archs.hparams import f32, u32
from quantize.convert.vision import VisionFamily, register, siglip_names
from quantize.ggml_types import GGMLQuantizationType as T
from quantize.ggml_types import GGUFValueType
from quantize.source import MetadataEntry

_VISION_PREFIXES = ("vision_tower.", "multi_modal_projector.")


def canonical_name(name: str) -> Optional[str]:
    """Both layouts' names → the original checkpoints' (``vision_tower.vision_model...``)."""
    if name.startswith("model.") and name[len("model."):].startswith(_VISION_PREFIXES):
        name = name[len("model."):]
    if not name.startswith(_VISION_PREFIXES):
        return None
    return name.replace("_weight", ".weight")


def gemma3_vision_metadata(vision: dict, config: dict, preprocessor: dict, n_embd_text: int) -> list[MetadataEntry]:
    out = [f32("clip.vision.attention.layer_norm_epsilon", vision.get("layer_norm_eps", 1e-6)),
           MetadataEntry("clip.use_gelu", True, GGUFValueType.BOOL)]
    tokens_per_side = int(math.sqrt(preprocessor.get("image_seq_length", 256)))
    scale = (vision["image_size"] // vision["patch_size"]) // tokens_per_side if tokens_per_side else 0
    if scale > 0 and scale != 4:
        out.append(u32("clip.vision.projector.scale_factor", scale))
    return out


def gemma3_forced_type(hf_name: str, gguf_name: str, outtype: T) -> Optional[T]:
    if "input_projection" in hf_name:
        return T.F16
    if ".embeddings." in hf_name:
        return T.F32
    return None


def soft_emb_norm_plus_one(name: str, values: np.ndarray) -> np.ndarray:
    return values + np.float32(1.0)


GEMMA3_VISION = register(VisionFamily(
    hf_classes=("Gemma3ForConditionalGeneration",),
    projector_type="gemma3",
    names={**siglip_names("vision_tower.vision_model."),
           "multi_modal_projector.mm_input_projection": "mm.input_projection",
           "multi_modal_projector.mm_soft_emb_norm": "mm.soft_emb_norm"},
    canonical=canonical_name,
    skipped=lambda name: "vision_model.head." in name,
    metadata=gemma3_vision_metadata,
    forced_type=gemma3_forced_type,
    rewrite=soft_emb_norm_plus_one,
    rewritten=lambda name: "soft_emb_norm.weight" in name,
))
