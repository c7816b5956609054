"""Qwen2-VL and Qwen2.5-VL's vision half (``visual.*``) → mmproj with projector
``qwen2vl_merger`` / ``qwen2.5vl_merger``.

A ViT on 14-pixel patches of two frames (a picture is its own second frame), with 2-D
rotary positions, whose 2×2 neighbouring patches are merged (``merger``: a norm, then a
two-layer MLP into the text model's width). llama.cpp wants the fused ``attn.qkv`` split
into Q, K and V, and the Conv3D patch embedding split into its two temporal slices
(``v.patch_embd.weight`` and ``v.patch_embd.weight.1``). Qwen2.5-VL uses RMS norms, a
gated SiLU MLP, and window attention in all blocks but every ``n_wa_pattern``-th.
The original checkpoints name the tower ``visual.``; transformers ≥ 4.52 ``model.visual.``.
"""

from __future__ import annotations

from typing import Optional

from models.foundation.errors import QuantDeskError
from quantize.convert.archs.hparams import f32, u32
from quantize.convert.vision import Piece, VisionFamily, register
from quantize.ggml_types import GGUFValueType
from quantize.source import MetadataEntry

PROJECTORS = {"qwen2_vl": "qwen2vl_merger", "qwen2_5_vl": "qwen2.5vl_merger"}


def canonical_name(name: str) -> Optional[str]:
    if name.startswith("model.visual."):
        name = name[len("model."):]
    return name if name.startswith("visual.") else None


def qwen_vision_config(vision: dict) -> dict:
    """Qwen2-VL's names for the common values (and its 560-pixel default)."""
    out = dict(vision)
    out["image_size"] = out.get("image_size", 560)
    out["num_attention_heads"] = out.get("num_heads")
    out["num_hidden_layers"] = out.get("depth")
    if "embed_dim" in out:  # Qwen2-VL: hidden_size is the merger's output width
        out["intermediate_size"] = out.get("hidden_size")
        out["hidden_size"] = out.get("embed_dim")
    return out


def projector_type(config: dict) -> str:
    kind = config.get("model_type")
    if kind not in PROJECTORS:
        raise QuantDeskError(f"config.json's model_type is {kind!r}, not a Qwen-VL QuantDesk knows "
                             "(qwen2_vl, qwen2_5_vl).", "Use the config.json published with the model.")
    return PROJECTORS[kind]


def qwen_metadata(vision: dict, config: dict, preprocessor: dict, n_embd_text: int) -> list[MetadataEntry]:
    out = []
    if config.get("model_type") == "qwen2_5_vl":
        full = vision.get("fullatt_block_indexes")
        if not full:
            raise QuantDeskError("The vision_config of this Qwen2.5-VL has no fullatt_block_indexes.",
                                 "Use the config.json published with the model.")
        pattern = full[0] + 1
        if any(b - a != pattern for a, b in zip(full, full[1:])):
            raise QuantDeskError(f"fullatt_block_indexes {full} are not evenly spaced, which llama.cpp's "
                                 "window attention needs.", "This checkpoint cannot be converted faithfully.")
        out += [MetadataEntry("clip.use_silu", True, GGUFValueType.BOOL), u32("clip.vision.n_wa_pattern", pattern)]
    out.append(f32("clip.vision.attention.layer_norm_epsilon", config.get("rms_norm_eps", 1e-6)))
    return out


def patch_embedding_frames(name: str, shape: tuple) -> list[Piece]:
    """The Conv3D patch embedding → its two time slices (``v.patch_embd.weight``, ``.1``)."""
    if len(shape) != 5 or shape[2] != 2:
        raise QuantDeskError(f"{name} has the shape {list(shape)}; llama.cpp reads Qwen-VL patch "
                             "embeddings of two frames only.", "This checkpoint cannot be converted.")
    flat = (shape[0], shape[1], shape[3], shape[4])
    return [Piece("v.patch_embd.weight", flat, lambda v: v[:, :, 0], gguf=True),
            Piece("v.patch_embd.weight.1", flat, lambda v: v[:, :, 1], gguf=True)]


def qwen_pieces(name: str, shape: tuple, vision: dict) -> Optional[list[Piece]]:
    """Fused Q/K/V → three tensors; the Conv3D patch embedding → its two time slices."""
    if ".qkv." in name:
        third = shape[0] // 3
        return [Piece(name.replace("qkv", part), (third, *shape[1:]),
                      lambda v, i=i: v[i * third:(i + 1) * third]) for i, part in enumerate("qkv")]
    if "patch_embed.proj.weight" in name:
        return patch_embedding_frames(name, shape)
    return None


_LAYER = "visual.blocks.{bid}."
QWENVL_VISION = register(VisionFamily(
    hf_classes=("Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration"),
    projector_type=projector_type,
    names={_LAYER + "norm1": "v.blk.{bid}.ln1", _LAYER + "norm2": "v.blk.{bid}.ln2",
           _LAYER + "attn.q": "v.blk.{bid}.attn_q", _LAYER + "attn.k": "v.blk.{bid}.attn_k",
           _LAYER + "attn.v": "v.blk.{bid}.attn_v", _LAYER + "attn.proj": "v.blk.{bid}.attn_out",
           _LAYER + "mlp.fc1": "v.blk.{bid}.ffn_up", _LAYER + "mlp.fc2": "v.blk.{bid}.ffn_down",
           _LAYER + "mlp.up_proj": "v.blk.{bid}.ffn_up", _LAYER + "mlp.gate_proj": "v.blk.{bid}.ffn_gate",
           _LAYER + "mlp.down_proj": "v.blk.{bid}.ffn_down",
           "visual.merger.ln_q": "v.post_ln", "visual.merger.mlp.{bid}": "mm.{bid}"},
    canonical=canonical_name,
    metadata=qwen_metadata,
    vision_config=qwen_vision_config,
    pieces=qwen_pieces,
))
