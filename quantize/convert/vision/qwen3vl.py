"""Qwen3-VL's vision half (``model.visual.*``) → mmproj with projector ``qwen3vl_merger``.

Qwen2-VL's ViT changed in three ways: 16-pixel patches with a bias and learned position
embeddings (``pos_embed``, an √n × √n grid that llama.cpp resizes to the picture, hence
``clip.vision.image_size`` = √n × patch), LayerNorms and a GELU MLP, and *deepstack*: the
outputs of blocks ``deepstack_visual_indexes`` are each merged 2×2 by their own merger
(``deepstack_merger_list.K``, llama.cpp's ``v.deepstack.<block>.*``) and handed to the
text model's first layers beside the image embedding (``clip.vision.is_deepstack_layers``
marks those blocks). The QKV projection stays fused (``attn_qkv``); the Conv3D patch
embedding is split into its two frames as for Qwen2-VL. The attention norm epsilon is the
text model's ``rms_norm_eps``, as llama.cpp's converter writes it.
"""

from __future__ import annotations

import math
from typing import Optional

from models.foundation.errors import QuantDeskError
from quantize.convert.archs.hparams import f32, u32
from quantize.convert.vision import Piece, VisionFamily, register
from quantize.convert.vision.qwenvl import canonical_name, patch_embedding_frames
from quantize.ggml_types import GGUFValueType
from quantize.source import MetadataEntry

_DEEPSTACK = "visual.deepstack_merger_list."
_DEEPSTACK_PARTS = {"norm": "norm", "linear_fc1": "fc1", "linear_fc2": "fc2"}


def qwen3vl_vision_config(vision: dict) -> dict:
    """Qwen3-VL's names for the common values; the image size from the position grid."""
    out = dict(vision)
    out["num_attention_heads"] = out.get("num_heads")
    out["num_hidden_layers"] = out.get("depth")
    if "image_size" not in out:
        side = math.sqrt(out.get("num_position_embeddings", 2304))
        out["image_size"] = int(side * out.get("patch_size", 16))
    return out


def qwen3vl_metadata(vision: dict, config: dict, preprocessor: dict, n_embd_text: int) -> list[MetadataEntry]:
    out = [MetadataEntry("clip.use_gelu", True, GGUFValueType.BOOL)]
    if vision.get("spatial_merge_size") is not None:
        out.append(u32("clip.vision.spatial_merge_size", vision["spatial_merge_size"]))
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    out.append(f32("clip.vision.attention.layer_norm_epsilon", text.get("rms_norm_eps", 1e-6)))
    blocks = int(vision.get("depth") or 0)
    if blocks:
        marked = set(vision.get("deepstack_visual_indexes") or [])
        out.append(MetadataEntry("clip.vision.is_deepstack_layers", [i in marked for i in range(blocks)],
                                 GGUFValueType.ARRAY, GGUFValueType.BOOL))
    return out


def qwen3vl_pieces(name: str, shape: tuple, vision: dict) -> Optional[list[Piece]]:
    """The patch embedding's two frames; each deepstack merger under its block's number."""
    if name == "visual.patch_embed.proj.weight":
        return patch_embedding_frames(name, shape)
    if name.startswith(_DEEPSTACK):
        k, part, kind = name[len(_DEEPSTACK):].split(".")
        indexes = vision.get("deepstack_visual_indexes") or []
        if part not in _DEEPSTACK_PARTS or not k.isdecimal() or int(k) >= len(indexes):
            raise QuantDeskError(f"The checkpoint holds {name}, which does not match its "
                                 f"deepstack_visual_indexes {indexes}.", "Use the config.json published with the model.")
        gguf = f"v.deepstack.{int(indexes[int(k)])}.{_DEEPSTACK_PARTS[part]}.{kind}"
        return [Piece(gguf, shape, lambda values: values, gguf=True)]
    return None


_LAYER = "visual.blocks.{bid}."
QWEN3VL_VISION = register(VisionFamily(
    hf_classes=("Qwen3VLForConditionalGeneration",),
    projector_type="qwen3vl_merger",
    names={"visual.patch_embed.proj": "v.patch_embd", "visual.pos_embed": "v.position_embd",
           _LAYER + "norm1": "v.blk.{bid}.ln1", _LAYER + "norm2": "v.blk.{bid}.ln2",
           _LAYER + "attn.qkv": "v.blk.{bid}.attn_qkv", _LAYER + "attn.proj": "v.blk.{bid}.attn_out",
           _LAYER + "mlp.linear_fc1": "v.blk.{bid}.ffn_up", _LAYER + "mlp.linear_fc2": "v.blk.{bid}.ffn_down",
           "visual.merger.norm": "v.post_ln", "visual.merger.linear_fc1": "mm.0",
           "visual.merger.linear_fc2": "mm.2"},
    canonical=canonical_name,
    metadata=qwen3vl_metadata,
    vision_config=qwen3vl_vision_config,
    pieces=qwen3vl_pieces,
))
