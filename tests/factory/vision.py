"""Tiny image-text checkpoints, written as the Hub ships them (or as transformers saves them).

An image-text checkpoint is a text model (written by :func:`write_tiny_checkpoint`) plus a
vision encoder and a projector, in one set of safetensors files, with ``config.json``
nesting ``text_config`` and ``vision_config`` and ``preprocessor_config.json`` carrying the
image processor's settings. Two on-disk layouts exist for the same weights:

- ``"hub"``: the original checkpoints' names (Gemma 3: ``language_model.model.layers...``,
  ``vision_tower.vision_model...``, ``multi_modal_projector.mm_input_projection_weight``);
- ``"transformers"``: what transformers ≥ 4.52 saves (``model.language_model.layers...``,
  ``model.vision_tower.vision_model...``, ``model.multi_modal_projector...``).

Families register as :class:`VisionSpec` entries in :data:`VISION_ARCHITECTURES`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from quantize.convert.safetensors_reader import SafetensorsFile
from tests.factory.checkpoints import TinyCheckpoint, write_tiny_checkpoint, write_weights
from tests.factory.tokenizer_flavours import GEMMA_IMAGE_SPECIALS


@dataclass(frozen=True)
class VisionSpec:
    """How to write one image-text family.

    Attributes:
        text_arch: The :data:`tests.factory.checkpoints.ARCHITECTURES` key of its text model.
        hf_class: ``config.json``'s ``architectures[0]``.
        model_type: ``config.json``'s top-level ``model_type``.
        vision_config: ``vision_config`` (the encoder's shape).
        extra_config: Other top-level keys (image token ids, tokens per image...).
        vision_tensors: Given the finished config, HF name (hub layout) → shape.
        rename: HF name in the hub layout → the name in the given layout.
        preprocessor: ``preprocessor_config.json``.
        text_extra: Keys added to ``text_config``.
        flat_hub_config: The original checkpoints' config.json has the text model's keys
            at the top level (Qwen2-VL) rather than in ``text_config``.
        text_overrides: Keys replacing the text model's tiny defaults (its layer count).
    """

    text_arch: str
    hf_class: str
    model_type: str
    vision_config: dict
    extra_config: dict
    vision_tensors: Callable[[dict], dict[str, tuple[int, ...]]]
    rename: Callable[[str, str], str]
    preprocessor: dict
    text_extra: dict = None  # type: ignore[assignment]
    flat_hub_config: bool = False
    text_overrides: dict = None  # type: ignore[assignment]


def siglip_tensors(prefix: str, vision: dict) -> dict[str, tuple[int, ...]]:
    """A SigLIP vision transformer's tensors (no pooling head) under ``prefix``."""
    h, ff, p = vision["hidden_size"], vision["intermediate_size"], vision["patch_size"]
    n_patches = (vision["image_size"] // p) ** 2
    shapes: dict[str, tuple[int, ...]] = {
        f"{prefix}embeddings.patch_embedding.weight": (h, vision.get("num_channels", 3), p, p),
        f"{prefix}embeddings.patch_embedding.bias": (h,),
        f"{prefix}embeddings.position_embedding.weight": (n_patches, h),
    }
    for i in range(vision["num_hidden_layers"]):
        q = f"{prefix}encoder.layers.{i}."
        for norm in ("layer_norm1", "layer_norm2"):
            shapes[q + f"{norm}.weight"] = (h,)
            shapes[q + f"{norm}.bias"] = (h,)
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            shapes[q + f"self_attn.{proj}.weight"] = (h, h)
            shapes[q + f"self_attn.{proj}.bias"] = (h,)
        shapes.update({q + "mlp.fc1.weight": (ff, h), q + "mlp.fc1.bias": (ff,),
                       q + "mlp.fc2.weight": (h, ff), q + "mlp.fc2.bias": (h,)})
    shapes[f"{prefix}post_layernorm.weight"] = (h,)
    shapes[f"{prefix}post_layernorm.bias"] = (h,)
    return shapes


def _gemma3_vision_tensors(config: dict) -> dict[str, tuple[int, ...]]:
    vision = config["vision_config"]
    shapes = siglip_tensors("vision_tower.vision_model.", vision)
    shapes["multi_modal_projector.mm_input_projection_weight"] = (
        vision["hidden_size"], config["text_config"]["hidden_size"])
    shapes["multi_modal_projector.mm_soft_emb_norm.weight"] = (vision["hidden_size"],)
    return shapes


def _gemma3_rename(name: str, layout: str) -> str:
    """Gemma 3's hub names (``language_model.model.*``) → the ``layout``'s."""
    if layout == "hub":
        return name
    if name.startswith("language_model.model."):
        return "model.language_model." + name[len("language_model.model."):]
    if name.startswith("language_model.lm_head."):
        return name[len("language_model."):]
    return "model." + name


def _qwen_vision_tensors(config: dict) -> dict[str, tuple[int, ...]]:
    """Qwen2-VL's ViT (LayerNorms, GELU MLP) or Qwen2.5-VL's (RMS norms, gated MLP)."""
    vision = config["vision_config"]
    qwen25 = config["model_type"] == "qwen2_5_vl"
    width = vision["hidden_size"] if qwen25 else vision["embed_dim"]
    ff = vision["intermediate_size"] if qwen25 else width * vision["mlp_ratio"]
    p, merged = vision["patch_size"], width * vision["spatial_merge_size"] ** 2
    text_width = vision["out_hidden_size"] if qwen25 else vision["hidden_size"]
    shapes: dict[str, tuple[int, ...]] = {
        "visual.patch_embed.proj.weight": (width, vision["in_chans"], vision["temporal_patch_size"], p, p)}
    for i in range(vision["depth"]):
        q = f"visual.blocks.{i}."
        for norm in ("norm1", "norm2"):
            shapes[q + f"{norm}.weight"] = (width,)
            if not qwen25:
                shapes[q + f"{norm}.bias"] = (width,)
        shapes.update({q + "attn.qkv.weight": (3 * width, width), q + "attn.qkv.bias": (3 * width,),
                       q + "attn.proj.weight": (width, width), q + "attn.proj.bias": (width,)})
        mlp = [("gate_proj", ff, width), ("up_proj", ff, width), ("down_proj", width, ff)] if qwen25 else \
            [("fc1", ff, width), ("fc2", width, ff)]
        for leaf, rows, cols in mlp:
            shapes[q + f"mlp.{leaf}.weight"] = (rows, cols)
            shapes[q + f"mlp.{leaf}.bias"] = (rows,)
    shapes["visual.merger.ln_q.weight"] = (width,)
    if not qwen25:
        shapes["visual.merger.ln_q.bias"] = (width,)
    shapes.update({"visual.merger.mlp.0.weight": (merged, merged), "visual.merger.mlp.0.bias": (merged,),
                   "visual.merger.mlp.2.weight": (text_width, merged), "visual.merger.mlp.2.bias": (text_width,)})
    return shapes


def _qwen_rename(name: str, layout: str) -> str:
    """Qwen-VL's hub names are the causal LM's (``model.layers...``) and ``visual.``."""
    if name.startswith("language_model."):
        name = name[len("language_model."):]
        if layout == "transformers" and name.startswith("model."):
            return "model.language_model." + name[len("model."):]
        return name
    return "model." + name if layout == "transformers" else name


def _qwen3vl_vision_tensors(config: dict) -> dict[str, tuple[int, ...]]:
    """Qwen3-VL's ViT: LayerNorms, a fused QKV, a GELU MLP, learned position embeddings, a
    merger, and one more merger (norm after the 2×2 fold) per deepstack layer."""
    vision = config["vision_config"]
    width, ff, p = vision["hidden_size"], vision["intermediate_size"], vision["patch_size"]
    merged, text_width = width * vision["spatial_merge_size"] ** 2, vision["out_hidden_size"]
    shapes: dict[str, tuple[int, ...]] = {
        "visual.patch_embed.proj.weight": (width, vision["in_channels"], vision["temporal_patch_size"], p, p),
        "visual.patch_embed.proj.bias": (width,),
        "visual.pos_embed.weight": (vision["num_position_embeddings"], width)}
    for i in range(vision["depth"]):
        q = f"visual.blocks.{i}."
        for leaf, shape in (("norm1", (width,)), ("norm2", (width,)), ("attn.qkv", (3 * width, width)),
                            ("attn.proj", (width, width)), ("mlp.linear_fc1", (ff, width)),
                            ("mlp.linear_fc2", (width, ff))):
            shapes[q + leaf + ".weight"] = shape
            shapes[q + leaf + ".bias"] = shape[:1]
    mergers = ["visual.merger."] + [f"visual.deepstack_merger_list.{k}."
                                    for k in range(len(vision["deepstack_visual_indexes"]))]
    for prefix in mergers:
        norm = width if prefix == "visual.merger." else merged
        shapes.update({prefix + "norm.weight": (norm,), prefix + "norm.bias": (norm,),
                       prefix + "linear_fc1.weight": (merged, merged), prefix + "linear_fc1.bias": (merged,),
                       prefix + "linear_fc2.weight": (text_width, merged),
                       prefix + "linear_fc2.bias": (text_width,)})
    return shapes


def _qwen3vl_rename(name: str, layout: str) -> str:
    """Qwen3-VL came out after transformers 4.52: the Hub's checkpoints already carry the
    names transformers saves (``model.language_model.*``, ``model.visual.*``), so both
    layouts are that one."""
    return _gemma3_rename(name, "transformers")


_QWEN_PREPROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessor", "do_convert_rgb": True, "do_normalize": True,
    "do_rescale": True, "do_resize": True, "image_mean": [0.48, 0.46, 0.41],
    "image_std": [0.27, 0.26, 0.28], "min_pixels": 1024, "max_pixels": 16384, "merge_size": 2,
    "patch_size": 8, "temporal_patch_size": 2, "resample": 3, "rescale_factor": 0.00392156862745098}
_QWEN_TEXT = {"rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]}}
#: Qwen3-VL's processor: 16-pixel patches merged 2×2 and mean/std 0.5 on the Hub (other
#: values here, so that a converter or preprocessor ignoring them is caught).
_QWEN3VL_PREPROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessorFast", "processor_class": "Qwen3VLProcessor",
    "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
    "image_mean": [0.48, 0.46, 0.41], "image_std": [0.27, 0.26, 0.28], "merge_size": 2, "patch_size": 8,
    "temporal_patch_size": 2, "resample": 3, "rescale_factor": 0.00392156862745098,
    "size": {"longest_edge": 16384, "shortest_edge": 1024}}


def _smolvlm_vision_tensors(config: dict) -> dict[str, tuple[int, ...]]:
    vision = config["vision_config"]
    shapes = siglip_tensors("model.vision_model.", vision)
    folded = vision["hidden_size"] * config["scale_factor"] ** 2
    shapes["model.connector.modality_projection.proj.weight"] = (config["text_config"]["hidden_size"], folded)
    return shapes


def _smolvlm_rename(name: str, layout: str) -> str:
    """SmolVLM's text model sits under ``model.text_model.`` in both layouts."""
    if name.startswith("language_model.model."):
        return "model.text_model." + name[len("language_model.model."):]
    if name.startswith("language_model.lm_head."):
        return name[len("language_model."):]
    return name


VISION_ARCHITECTURES: dict[str, VisionSpec] = {
    # 64×64 pixels in 8×8 patches (an 8×8 grid) pooled to 4×4 = 16 tokens per image: the
    # projector's pooling factor is 2, not Gemma 3's 4, so the converter must write it.
    "gemma3": VisionSpec(
        text_arch="gemma3vl",
        hf_class="Gemma3ForConditionalGeneration",
        model_type="gemma3",
        vision_config={"model_type": "siglip_vision_model", "hidden_size": 32, "intermediate_size": 64,
                       "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 64,
                       "patch_size": 8, "num_channels": 3, "layer_norm_eps": 1e-6,
                       "hidden_act": "gelu_pytorch_tanh", "attention_dropout": 0.0,
                       "vision_use_head": False},
        extra_config={"mm_tokens_per_image": 16, "initializer_range": 0.02},
        vision_tensors=_gemma3_vision_tensors,
        rename=_gemma3_rename,
        preprocessor={
            "image_processor_type": "Gemma3ImageProcessor", "processor_class": "Gemma3Processor",
            "do_convert_rgb": None, "do_normalize": True, "do_rescale": True, "do_resize": True,
            "do_pan_and_scan": None, "image_seq_length": 16,
            # Not Gemma's 0.5s: a converter or preprocessor that ignores them is caught.
            "image_mean": [0.48, 0.46, 0.41], "image_std": [0.27, 0.26, 0.28],
            "resample": 2, "rescale_factor": 0.00392156862745098, "size": {"height": 64, "width": 64},
        },
    ),
    # Tiles of 64×64 pixels in 8×8 patches, folded 2×2 into 16 tokens per tile; a longest
    # edge of 128 pixels (up to 2×2 tiles and the whole image).
    "smolvlm": VisionSpec(
        text_arch="smolvlm",
        hf_class="Idefics3ForConditionalGeneration",
        model_type="idefics3",
        vision_config={"model_type": "idefics3_vision", "hidden_size": 32, "intermediate_size": 64,
                       "num_hidden_layers": 2, "num_attention_heads": 2, "image_size": 64,
                       "patch_size": 8, "num_channels": 3, "layer_norm_eps": 1e-5,
                       "hidden_act": "gelu_pytorch_tanh", "attention_dropout": 0.0},
        extra_config={"scale_factor": 2, "tie_word_embeddings": False},
        text_extra={"architectures": ["VLlama3ForCausalLM"]},  # as SmolVLM's config.json has it
        vision_tensors=_smolvlm_vision_tensors,
        rename=_smolvlm_rename,
        preprocessor={
            "image_processor_type": "Idefics3ImageProcessor", "processor_class": "Idefics3Processor",
            "do_convert_rgb": True, "do_image_splitting": True, "do_normalize": True, "do_pad": True,
            "do_rescale": True, "do_resize": True, "image_mean": [0.48, 0.46, 0.41],
            "image_std": [0.27, 0.26, 0.28], "max_image_size": {"longest_edge": 64},
            "resample": 1, "rescale_factor": 0.00392156862745098, "size": {"longest_edge": 128},
        },
    ),
    # 8-pixel patches of two frames, merged 2×2 into the text model's 64 values. Three
    # blocks at least: llama.cpp's converter names the merger's mlp.2 by a block number.
    "qwen2vl": VisionSpec(
        text_arch="qwen2", hf_class="Qwen2VLForConditionalGeneration", model_type="qwen2_vl",
        vision_config={"depth": 3, "embed_dim": 32, "mlp_ratio": 2, "num_heads": 2, "in_chans": 3,
                       "hidden_size": 64, "patch_size": 8, "spatial_merge_size": 2,
                       "spatial_patch_size": 8, "temporal_patch_size": 2},
        extra_config={"vision_start_token_id": 3, "vision_end_token_id": 4, "image_token_id": 5},
        vision_tensors=_qwen_vision_tensors, rename=_qwen_rename, preprocessor=_QWEN_PREPROCESSOR,
        text_extra=_QWEN_TEXT, flat_hub_config=True),
    # Window attention in blocks 0 and 2, full attention in 1 and 3 (n_wa_pattern 2).
    "qwen2_5_vl": VisionSpec(
        text_arch="qwen2", hf_class="Qwen2_5_VLForConditionalGeneration", model_type="qwen2_5_vl",
        vision_config={"depth": 4, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
                       "in_chans": 3, "out_hidden_size": 64, "patch_size": 8, "spatial_merge_size": 2,
                       "temporal_patch_size": 2, "window_size": 32, "fullatt_block_indexes": [1, 3],
                       "tokens_per_second": 2, "hidden_act": "silu"},
        extra_config={"vision_start_token_id": 3, "vision_end_token_id": 4, "image_token_id": 5},
        vision_tensors=_qwen_vision_tensors, rename=_qwen_rename, preprocessor=_QWEN_PREPROCESSOR,
        text_extra=_QWEN_TEXT, flat_hub_config=True),
    # Qwen3-VL: 8-pixel patches (an 8×8 grid of learned positions, so 64 pixels), three
    # blocks whose first and last also feed the text model's first two layers (deepstack);
    # three text layers, as llama.cpp adds no deepstack slice to the last one.
    "qwen3vl": VisionSpec(
        text_arch="qwen3", hf_class="Qwen3VLForConditionalGeneration", model_type="qwen3_vl",
        vision_config={"model_type": "qwen3_vl", "depth": 3, "hidden_size": 32, "intermediate_size": 64,
                       "num_heads": 2, "in_channels": 3, "out_hidden_size": 64, "patch_size": 8,
                       "spatial_merge_size": 2, "temporal_patch_size": 2, "num_position_embeddings": 64,
                       "deepstack_visual_indexes": [0, 2], "hidden_act": "gelu_pytorch_tanh",
                       "initializer_range": 0.02},
        extra_config={"vision_start_token_id": 3, "vision_end_token_id": 4, "image_token_id": 5,
                      "video_token_id": 6, "tie_word_embeddings": False},
        vision_tensors=_qwen3vl_vision_tensors, rename=_qwen3vl_rename, preprocessor=_QWEN3VL_PREPROCESSOR,
        text_overrides={"num_hidden_layers": 3},
        text_extra={"model_type": "qwen3_vl_text",
                    "rope_scaling": {"mrope_interleaved": True, "mrope_section": [2, 3, 3],
                                     "rope_type": "default"}}),
}


@dataclass
class TinyVisionCheckpoint(TinyCheckpoint):
    """What the factory wrote: the text checkpoint's record plus the vision half's."""

    vision_shapes: dict[str, tuple[int, ...]] | None = None
    layout: str = "hub"


def _vision_weights(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    """Random weights: norm scales near 1, biases and matrices small (a stable encoder)."""
    rng = np.random.default_rng(seed + 1000)
    out = {}
    for name, shape in shapes.items():
        if len(shape) == 1 and "norm" in name and name.endswith("weight"):
            out[name] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        elif len(shape) == 1:
            out[name] = (0.02 * rng.standard_normal(shape)).astype(np.float32)
        else:
            out[name] = (rng.standard_normal(shape) * 0.08).astype(np.float32)
    return out


def write_tiny_vision_checkpoint(dest: Path, family: str = "gemma3", layout: str = "hub",
                                 dtype: str = "float32", shards: int = 1, seed: int = 0,
                                 generation_config: dict | None = None,
                                 sizes: dict | None = None) -> TinyVisionCheckpoint:
    """Write a tiny image-text checkpoint of ``family`` into ``dest``.

    Args:
        dest: Folder to write into.
        family: A key of :data:`VISION_ARCHITECTURES`.
        layout: ``"hub"`` (the original checkpoints' tensor names) or ``"transformers"``
            (what current transformers saves).
        dtype: Storage type of every tensor.
        shards: Number of safetensors files (more than one writes an index).
        seed: Seed of the random weights (the text model's and the encoder's).
        generation_config: Keys added to ``generation_config.json`` (sampling defaults).
        sizes: Keys replacing the family's tiny ones in ``vision_config``, the top-level
            config and ``preprocessor_config.json`` (``{"vision_config": {...},
            "config": {...}, "preprocessor": {...}}``): a real model's encoder shape
            for benchmarks.
    """
    spec = VISION_ARCHITECTURES[family]
    dest = Path(dest)
    text = write_tiny_checkpoint(dest, arch=spec.text_arch, dtype=dtype, seed=seed,
                                 config_overrides=spec.text_overrides)
    weights: dict[str, np.ndarray] = {}
    for file in text.weight_files:
        st = SafetensorsFile(file)
        try:
            for name, record in st.tensors.items():
                weights[spec.rename("language_model." + name, layout)] = record.load_f32().copy()
        finally:
            st.close()
        file.unlink()

    text_config = {k: v for k, v in text.config.items() if k not in ("architectures", "torch_dtype")}
    text_config.update(spec.text_extra or {})
    sizes = sizes or {}
    config = {"architectures": [spec.hf_class], "model_type": spec.model_type,
              "text_config": text_config, "vision_config": {**spec.vision_config, **sizes.get("vision_config", {})},
              "torch_dtype": dtype, **spec.extra_config, **sizes.get("config", {})}
    if spec.flat_hub_config and layout == "hub":
        config = {**{k: v for k, v in text_config.items() if k != "model_type"},
                  **{k: v for k, v in config.items() if k != "text_config"}}
    if family == "gemma3":
        import sentencepiece

        pieces = sentencepiece.SentencePieceProcessor(model_file=str(dest / "tokenizer.model"))
        boi, eoi, image = (pieces.piece_to_id(t) for t in GEMMA_IMAGE_SPECIALS)
        config.update(boi_token_index=boi, eoi_token_index=eoi, image_token_index=image)
    if family == "smolvlm":
        config["image_token_id"] = json.loads((dest / "tokenizer.json").read_text())["model"]["vocab"]["<image>"]
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    preprocessor = {**spec.preprocessor, **sizes.get("preprocessor", {})}
    (dest / "preprocessor_config.json").write_text(json.dumps(preprocessor, indent=2))
    if generation_config:
        path = dest / "generation_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **generation_config}, indent=2))

    vision_shapes = spec.vision_tensors(config)
    for name, values in _vision_weights(vision_shapes, seed).items():
        weights[spec.rename(name, layout)] = values
    files = write_weights(dest, weights, dtype, shards)
    return TinyVisionCheckpoint(dest, spec.text_arch, dtype, config, text.tensor_shapes, files,
                                vision_shapes=vision_shapes, layout=layout)


def model_with_and_without_projector(root: Path) -> tuple[Path, Path]:
    """The tiny Gemma 3 converted to F16 (``root/vision/gemma3.gguf``, its mmproj beside
    it), and the same text model alone in another folder (``root/plain/gemma3-text.gguf``)."""
    import shutil

    from quantize.convert.convert import convert_with_projector

    ck = write_tiny_vision_checkpoint(Path(root) / "hf" / "gemma3")
    (Path(root) / "vision").mkdir()
    text, _ = convert_with_projector(ck.path, Path(root) / "vision" / "gemma3.gguf", "f16")
    (Path(root) / "plain").mkdir()
    return text, Path(shutil.copy(text, Path(root) / "plain" / "gemma3-text.gguf"))
