"""The vision half of an image-text checkpoint as a :class:`~quantize.source.TensorSource`
for llama.cpp's ``clip`` (mmproj) file.

``MmprojSource(hf_source)`` takes an open :class:`~quantize.convert.hf_source.HFSource`
whose class has a :mod:`vision family <quantize.convert.vision>`, and exposes the mmproj's
metadata and tensors without reading any weights; :meth:`MmprojSource.output_type` is
convert_hf_to_gguf's per-tensor type rule for mmproj files (the family's fixed types, then
F32 for 1-D tensors, norms, biases and position embeddings, else the requested type).
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

import numpy as np

from models.foundation.errors import QuantDeskError
from quantize.convert.archs.hparams import u32
from quantize.convert.convert import whole_blocks
from quantize.convert.general_info import general_entries
from quantize.convert.hf_folder import read_json
from quantize.convert.hf_source import STORED_TYPES, HFSource
from quantize.convert.safetensors_reader import TensorRecord
from quantize.convert.vision import Piece, VisionFamily, find_vision_family
from quantize.ggml_types import GGMLQuantizationType as T
from quantize.ggml_types import GGUFValueType
from quantize.source import MetadataEntry, SourceTensor

#: Where convert_hf_to_gguf looks for each common ``clip.vision.*`` value in ``vision_config``.
BLOCK_COUNT_NAMES = ("n_layers", "num_hidden_layers", "n_layer", "num_layers", "depth", "layers",
                     "encoder_layers", "vt_num_hidden_layers")
_VISION_KEYS = (
    ("clip.vision.image_size", ("image_size",)),
    ("clip.vision.patch_size", ("patch_size",)),
    ("clip.vision.embedding_length", ("hidden_size", "width", "vt_hidden_size")),
    ("clip.vision.feed_forward_length", ("intermediate_size", "vt_intermediate_size")),
    ("clip.vision.block_count", BLOCK_COUNT_NAMES),
    ("clip.vision.attention.head_count", ("num_attention_heads", "num_heads", "heads", "vt_num_attention_heads")),
)


def vision_param(vision: dict, names: Iterable[str], folder: str) -> Any:
    """The first of ``names`` in ``vision_config``; a sentence when none is there."""
    for name in names:
        if name in vision:
            return vision[name]
    names = tuple(names)
    raise QuantDeskError(f"The vision_config in {folder}'s config.json has no \"{names[0]}\", "
                         "which the vision encoder's file needs.",
                         "Use the config.json published with the model.")


def preprocessor_config(source: HFSource) -> dict:
    """``preprocessor_config.json`` merged with ``processor_config.json``'s image processor,
    as convert_hf_to_gguf merges them."""
    merged: dict = {}
    pre = read_json(source.folder.path / "preprocessor_config.json")
    if pre is not None:
        merged.update({**pre, **pre.get("media_proc_cfg", {})} if isinstance(pre.get("media_proc_cfg"), dict) else pre)
    proc = read_json(source.folder.path / "processor_config.json")
    if proc is not None:
        image = proc.get("image_processor")
        merged.update({**proc, **image} if isinstance(image, dict) else proc)
    return merged


class MmprojSource:
    """The mmproj file of an image-text checkpoint: metadata and lazily loaded tensors.

    Attributes:
        arch: ``clip``.
        family: The checkpoint's :class:`~quantize.convert.vision.VisionFamily`.
    """

    arch = "clip"

    def __init__(self, source: HFSource, family: VisionFamily) -> None:
        self.source, self.family = source, family
        self.description = f"{source.description} (vision encoder)"
        name = source.folder.path.name
        vision = source.folder.raw_config.get("vision_config")
        if not isinstance(vision, dict):
            raise QuantDeskError(f"{name}'s config.json has no vision_config, so its vision encoder "
                                 "cannot be converted.", "Use the config.json published with the model.")
        self.vision = family.vision_config(vision)
        self.preprocessor = preprocessor_config(source)
        self._hf_names: dict[str, str] = {}
        self._tensors = self._plan_tensors()

    # TensorSource -------------------------------------------------------------------
    def metadata(self) -> list[MetadataEntry]:
        folder = self.source.folder
        name = folder.path.name
        n_params = sum(int(np.prod(t.shape, dtype=np.int64)) for t in self._tensors)
        out = general_entries(name, n_params, folder.text("README.md"), folder.json("generation_config.json"),
                              kind="mmproj")
        out += [MetadataEntry("clip.has_vision_encoder", True, GGUFValueType.BOOL),
                u32("clip.vision.projection_dim", self.source.config["hidden_size"])]
        out += [u32(key, vision_param(self.vision, names, name)) for key, names in _VISION_KEYS]
        for key in ("image_mean", "image_std"):
            values = self.preprocessor.get(key)
            if not isinstance(values, list) or not values:
                raise QuantDeskError(f"{name} has no {key} in preprocessor_config.json, which the "
                                     "vision encoder's file needs.",
                                     "Download preprocessor_config.json from the model's page too.")
            out.append(MetadataEntry(f"clip.vision.{key}", [float(v) for v in values],
                                     GGUFValueType.ARRAY, GGUFValueType.FLOAT32))
        projector = self.family.projector_type
        projector = projector(folder.raw_config) if callable(projector) else projector
        out.append(MetadataEntry("clip.projector_type", projector, GGUFValueType.STRING))
        if self.family.metadata is not None:
            out += self.family.metadata(self.vision, folder.raw_config, self.preprocessor,
                                        int(self.source.config["hidden_size"]))
        return out

    def tensors(self) -> list[SourceTensor]:
        return list(self._tensors)

    def output_type(self, tensor: SourceTensor, requested: T) -> T:
        """The type ``tensor`` is written as when ``requested`` (F32, F16, BF16) is asked for."""
        hf_name, name = self._hf_names[tensor.name], tensor.name
        forced: Optional[T] = None
        if self.family.forced_type is not None:
            forced = self.family.forced_type(hf_name, name, requested)
        if forced is None and (".patch_embd.weight" in name or ".patch_merger.weight" in name):
            forced = T.F16 if requested == T.F16 else T.F32
        if len(tensor.shape) <= 1 or name.endswith("_norm.weight"):
            return T.F32
        if forced is None and (name == "v.position_embd.weight" or not name.endswith(".weight")):
            return T.F32
        return whole_blocks(tensor, requested) if forced is None else forced

    # ---------------------------------------------------------------------------------
    def _plan_tensors(self) -> list[SourceTensor]:
        family, folder = self.family, self.source.folder
        out = []
        for stored_name, record in folder.vision_tensors.items():
            name = family.canonical(stored_name)
            if name is None or family.skipped(name):
                continue
            shape = tuple(record.shape)
            pieces = family.pieces(name, shape, self.vision) if family.pieces is not None else None
            for piece in pieces or [Piece(name, shape, lambda values: values)]:
                gguf_name = piece.name if piece.gguf else family.gguf_name(piece.name)
                if gguf_name is None:
                    raise QuantDeskError(
                        f"{record.file.path.name} holds tensor {stored_name}, which QuantDesk does not "
                        f"know how to place in the vision encoder of a {self.source.hf_class} model.",
                        "The checkpoint may be a variant QuantDesk does not support yet.")
                if gguf_name in self._hf_names:
                    raise QuantDeskError(f"{folder.path.name} holds the vision tensor {name} twice "
                                         "(in both on-disk layouts).", "Download the model again.")
                self._hf_names[gguf_name] = name
                out.append(SourceTensor(gguf_name, piece.shape, STORED_TYPES.get(record.dtype, T.F32),
                                        *self._loaders(name, record, piece.take)))
        if not out:
            raise QuantDeskError(f"{folder.path.name} has no vision encoder weights.",
                                 "Download all of the model's *.safetensors files.")
        return out

    def _loaders(self, name: str, record: TensorRecord, take=lambda values: values):
        """``load`` (float32) and ``load_stored`` (None for a rewritten tensor) of the part
        ``take`` cuts from the checkpoint tensor."""
        rewrite = self.family.rewrite if self.family.rewritten(name) else None
        if rewrite is None:
            return (lambda: np.ascontiguousarray(take(record.load_f32()), dtype=np.float32),
                    lambda: np.ascontiguousarray(take(record.load_stored())))

        def load() -> np.ndarray:
            values = rewrite(name, take(record.load_f32()).astype(np.float32))
            if record.dtype == "F16":  # torch computes on a float16 tensor in float16
                values = values.astype(np.float16).astype(np.float32)
            return np.ascontiguousarray(values, dtype=np.float32)

        return load, None


def mmproj_source(source: HFSource) -> Optional[MmprojSource]:
    """The vision half of ``source`` as an mmproj source, or ``None`` for a text-only model."""
    family = find_vision_family(source.hf_class)
    if family is None or not source.folder.vision_tensors:
        return None
    return MmprojSource(source, family)
