"""Qwen3-VL's text model: ``Qwen3VLForConditionalGeneration`` → GGUF ``qwen3vl`` (its
vision half: :mod:`quantize.convert.vision.qwen3vl`).

A Qwen3 (per-head Q/K norms) whose RoPE is multimodal and interleaved (the rotary
dimensions cycle through time, height and width rather than sitting in three blocks:
``mrope_interleaved``; llama.cpp's ``qwen3vl`` graph always interleaves), with *deepstack*:
an image's embedding arrives with one extra slice per deepstack vision block, added to the
hidden state after each of the first layers. The number of those slices is
``qwen3vl.n_deepstack_layers``, from the vision config.
"""

from __future__ import annotations

from models.foundation.errors import QuantDeskError
from quantize.convert.archs import Architecture, register
from quantize.convert.archs.hparams import u32
from quantize.convert.archs.qwen2vl import qwen2vl_metadata
from quantize.source import MetadataEntry


def qwen3vl_metadata(config: dict, arch: str) -> list[MetadataEntry]:
    vision = config.get("vision_config") if isinstance(config.get("vision_config"), dict) else {}
    return qwen2vl_metadata(config, arch) + [
        u32(f"{arch}.n_deepstack_layers", len(vision.get("deepstack_visual_indexes") or []))]


def qwen3vl_check(config: dict) -> None:
    """llama.cpp adds no deepstack slice after the last layer (it drops the rows not read
    out before it): a model with as many deepstack slices as layers would abort there."""
    vision = config.get("vision_config") if isinstance(config.get("vision_config"), dict) else {}
    slices, layers = len(vision.get("deepstack_visual_indexes") or []), int(config.get("num_hidden_layers") or 0)
    if layers and slices >= layers:
        raise QuantDeskError(f"This Qwen3-VL feeds {slices} deepstack slices to a text model of {layers} "
                             "layers; llama.cpp's qwen3vl graph needs more layers than slices.",
                             "This checkpoint cannot be converted faithfully.")


QWEN3VL = register(Architecture(
    gguf_arch="qwen3vl",
    hf_classes=("Qwen3VLForConditionalGeneration",),
    metadata=qwen3vl_metadata,
    check=qwen3vl_check,
))
