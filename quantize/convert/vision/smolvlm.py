"""SmolVLM / Idefics3's vision half → mmproj with projector ``idefics3``.

A SigLIP encoder (``model.vision_model``) whose patch grid is folded ``scale_factor`` ×
``scale_factor`` into the channels (pixel shuffle) and projected by one matrix
(``model.connector.modality_projection.proj``, llama.cpp's ``mm.model.fc``). The image
processor splits big images into tiles of ``image_size``; the size it first scales the
longest edge to is ``clip.vision.preproc_image_size``. Embeddings stay F32.
"""

from __future__ import annotations

from typing import Optional

from quantize.convert.archs.hparams import f32, u32
from quantize.convert.vision import VisionFamily, register, siglip_names
from quantize.ggml_types import GGMLQuantizationType as T
from quantize.ggml_types import GGUFValueType
from quantize.source import MetadataEntry

#: transformers' SmolVLMVisionConfig defaults that SmolVLM2's config.json leaves out.
SMOLVLM_VISION_DEFAULTS = {"hidden_size": 1152, "num_attention_heads": 16, "intermediate_size": 3072}


def canonical_name(name: str) -> Optional[str]:
    return name if name.startswith(("model.vision_model.", "model.connector.")) else None


def smolvlm_vision_config(vision: dict) -> dict:
    if vision.get("model_type") == "smolvlm_vision":
        return {**SMOLVLM_VISION_DEFAULTS, **vision}
    return vision


def smolvlm_metadata(vision: dict, config: dict, preprocessor: dict, n_embd_text: int) -> list[MetadataEntry]:
    size = preprocessor.get("size") or {}
    return [f32("clip.vision.attention.layer_norm_epsilon", vision.get("layer_norm_eps", 1e-5)),
            u32("clip.vision.projector.scale_factor", config.get("scale_factor", 2)),
            MetadataEntry("clip.use_gelu", True, GGUFValueType.BOOL),
            u32("clip.vision.preproc_image_size", size.get("longest_edge", vision["image_size"]))]


def smolvlm_forced_type(hf_name: str, gguf_name: str, outtype: T) -> Optional[T]:
    return T.F32 if ".embeddings." in hf_name else None


SMOLVLM_VISION = register(VisionFamily(
    hf_classes=("Idefics3ForConditionalGeneration", "SmolVLMForConditionalGeneration"),
    projector_type="idefics3",
    names={**siglip_names("model.vision_model."),
           "model.connector.modality_projection.proj": "mm.model.fc"},
    canonical=canonical_name,
    metadata=smolvlm_metadata,
    forced_type=smolvlm_forced_type,
    vision_config=smolvlm_vision_config,
))
