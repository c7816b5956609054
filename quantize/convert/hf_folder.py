"""A Hugging Face model folder on disk: its config, its JSON side files and its weights.

What a user downloads from the Hub is a folder with ``config.json``, one or more
``*.safetensors`` files (several shards are listed in ``model.safetensors.index.json``),
and tokenizer files. This module finds and checks those files and indexes every tensor by
name across shards without reading any weights.

Pickle checkpoints (``*.bin``, ``*.pt``, ``*.pth``, ``*.ckpt``) are refused: unpickling
runs arbitrary code chosen by whoever made the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from models.foundation.errors import QuantDeskError
from quantize.convert.safetensors_reader import SafetensorsFile, TensorRecord

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
INDEX_FILE = "model.safetensors.index.json"

#: Tensors of the vision half of image-text checkpoints (Gemma3ForConditionalGeneration,
#: SmolVLM's connector, Qwen2-VL's ``visual``): the text model leaves them out, as llama.cpp reads them from a
#: separate mmproj (:mod:`quantize.convert.mmproj`).
VISION_PREFIXES = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.",
                   "model.multi_modal_projector.", "vision_model.", "model.vision_model.",
                   "model.connector.", "visual.", "model.visual.")


def text_tensor_name(name: str) -> Optional[str]:
    """The text model's name of a checkpoint tensor; ``None`` for vision tensors.

    Image-text wrappers nest the language model (``language_model.model.layers...`` or,
    since transformers 4.52, ``model.language_model.layers...``; SmolVLM's
    ``model.text_model.layers...``); dropping the ``language_model.`` (``text_model.``)
    part gives the plain causal-LM names, as convert_hf_to_gguf does.
    """
    if name.startswith(VISION_PREFIXES):
        return None
    for nesting in ("language_model.", "text_model."):
        if nesting in name:
            return name.replace(nesting, "")
    return name


def read_json(path: Path, required: bool = False) -> Optional[dict[str, Any]]:
    """Parse a JSON object file; ``None`` when absent and not required."""
    if not path.is_file():
        if required:
            raise QuantDeskError(
                f"{path.parent} has no {path.name}, so it is not a Hugging Face model folder.",
                "Choose the folder that holds config.json and the *.safetensors files.")
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise QuantDeskError(f"{path} is not valid JSON ({exc}).",
                             "The download may be damaged; download the model again.") from exc
    if not isinstance(data, dict):
        raise QuantDeskError(f"{path} does not hold a JSON object.",
                             "The download may be damaged; download the model again.")
    return data


class HFFolder:
    """The files of one local Hugging Face checkpoint, checked and indexed.

    Attributes:
        path: The folder.
        config: ``config.json`` (for multimodal wrappers, merged with ``text_config``).
        raw_config: ``config.json`` as written (``vision_config`` and all).
        tensors: Every text-model tensor record by its HF name, across all shards.
        vision_tensors: The vision half's records by their stored names (image-text
            checkpoints; :mod:`quantize.convert.mmproj` converts them).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._json_cache: dict[str, Optional[dict[str, Any]]] = {}
        if not self.path.is_dir():
            raise QuantDeskError(f"{self.path} is not a folder.",
                                 "Choose the folder of a downloaded Hugging Face model.")
        self.config = self._load_config()
        self._files: list[SafetensorsFile] = []
        self.tensors: dict[str, TensorRecord] = {}
        self.vision_tensors: dict[str, TensorRecord] = {}
        try:
            self._index_weights()
        except BaseException:
            self.close()
            raise

    def json(self, name: str) -> Optional[dict[str, Any]]:
        """A JSON side file of the folder (tokenizer_config.json, ...), or ``None``.

        Parsed once and shared: a real tokenizer.json is megabytes and several parts of
        the tokenizer export read it. Callers must not modify the result.
        """
        if name not in self._json_cache:
            self._json_cache[name] = read_json(self.path / name)
        return self._json_cache[name]

    def text(self, name: str) -> Optional[str]:
        """A text side file of the folder (chat_template.jinja, README.md), or ``None``."""
        file = self.path / name
        return file.read_text(encoding="utf-8") if file.is_file() else None

    def has(self, name: str) -> bool:
        return (self.path / name).is_file()

    def _load_config(self) -> dict[str, Any]:
        config = read_json(self.path / "config.json", required=True)
        self.raw_config = config
        text_config = config.get("text_config")
        if isinstance(text_config, dict):  # e.g. Gemma3ForConditionalGeneration
            config = {**config, **text_config, "architectures": config.get("architectures")}
        return config

    def _weight_files(self) -> list[Path]:
        index = read_json(self.path / INDEX_FILE)
        if index is not None:
            weight_map = index.get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise QuantDeskError(f"{self.path / INDEX_FILE} has no weight_map.",
                                     "Download the model again.")
            names = sorted(set(weight_map.values()))
            missing = [n for n in names if not (self.path / n).is_file()]
            if missing:
                raise QuantDeskError(
                    f"{self.path.name} is missing {len(missing)} weight shard(s) listed in "
                    f"{INDEX_FILE}, such as {missing[0]}.",
                    "Finish or repeat the download.")
            return [self.path / n for n in names]
        files = sorted(self.path.glob("*.safetensors"))
        if files:
            return files
        pickles = sorted(p.name for p in self.path.iterdir() if p.suffix in PICKLE_SUFFIXES)
        if pickles:
            raise QuantDeskError(
                f"{self.path.name} holds only PyTorch pickle weights ({', '.join(pickles[:3])}). "
                "QuantDesk does not open pickle files because loading one can run any code its "
                "author put in it.",
                "Download the model's safetensors version (most Hub models have one), or convert "
                "it to safetensors yourself in an environment you trust.")
        raise QuantDeskError(f"{self.path.name} has no *.safetensors weight files.",
                             "Choose a folder that holds the model's weights.")

    def _index_weights(self) -> None:
        for file in self._weight_files():
            st = SafetensorsFile(file)
            self._files.append(st)
            for stored_name, record in st.tensors.items():
                name = text_tensor_name(stored_name)
                if name is None:
                    self.vision_tensors[stored_name] = record
                    continue
                if name in self.tensors:
                    raise QuantDeskError(
                        f"Tensor {name} appears in both {self.tensors[name].file.path.name} and "
                        f"{file.name}.", "Download the model again.")
                self.tensors[name] = record

    @property
    def weight_bytes(self) -> int:
        return sum(r.end - r.begin for r in self.tensors.values())

    def close(self) -> None:
        for f in self._files:
            f.close()
        self._files.clear()
