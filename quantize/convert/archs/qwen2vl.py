"""Qwen2-VL / Qwen2.5-VL's text model: → GGUF ``qwen2vl`` (its vision half:
:mod:`quantize.convert.vision.qwenvl`).

The text model is a Qwen2 whose RoPE is multimodal (M-RoPE): the rotary dimensions are
split in sections for time, height and width (``mrope_section``, e.g. 16/24/24), written
as ``qwen2vl.rope.dimension_sections`` padded to four; text tokens use the same position
in every section, an image's tokens their place in the picture's grid.
"""

from __future__ import annotations

from quantize.convert.archs import Architecture, register
from quantize.convert.archs.hparams import ARR, rope_parameters
from quantize.ggml_types import GGUFValueType
from quantize.source import MetadataEntry


def qwen2vl_metadata(config: dict, arch: str) -> list[MetadataEntry]:
    sections = list(rope_parameters(config).get("mrope_section") or [])
    if not sections:
        return []
    sections = (sections + [0, 0, 0, 0])[:4]
    return [MetadataEntry(f"{arch}.rope.dimension_sections", [int(s) for s in sections], ARR,
                          GGUFValueType.INT32)]


QWEN2VL = register(Architecture(
    gguf_arch="qwen2vl",
    hf_classes=("Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration"),
    metadata=qwen2vl_metadata,
))
