"""Which models the server offers: the Library's GGUF models, each under a short id.

A model's id is its file name without ``.gguf`` (the first shard's, without the
``-00001-of-0000N`` part), as ``/v1/models`` lists it and clients put in ``model``.
When two files share a name, both ids get their folder's name in front
(``folder/name``). A request may also name a model by its full path.
Safetensors folders are left out: the engine runs GGUF files.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from models.library import Library, LibraryModel

_SHARD_SUFFIX = re.compile(r"-\d{5}-of-\d{5}$", re.IGNORECASE)


@dataclass(frozen=True)
class ServedModel:
    """A model clients can ask for."""

    id: str
    path: Path
    name: str
    context_length: Optional[int]  # the length it was trained for (header)
    created: int  # when it joined the library (seconds since the epoch)
    embedding: bool = False  # an embedding model: vectors, not replies


def _stem(model: LibraryModel) -> str:
    return _SHARD_SUFFIX.sub("", Path(model.path).stem)


def served_models(library: Library, rescan: bool = False) -> list[ServedModel]:
    """The library's servable models, by id."""
    if rescan:
        library.scan()
    # A vision encoder (llama.cpp's clip architecture) is part of a model, not one to serve.
    usable = [m for m in library.models() if m.kind == "gguf" and not m.error and not m.is_projector]
    counts: dict[str, int] = {}
    for model in usable:
        counts[_stem(model)] = counts.get(_stem(model), 0) + 1
    served = []
    for model in usable:
        stem = _stem(model)
        model_id = stem if counts[stem] == 1 else f"{Path(model.path).parent.name}/{stem}"
        served.append(ServedModel(model_id, Path(model.path), model.name, model.context_length,
                                  int(model.added), bool(model.embedding)))
    return sorted(served, key=lambda m: m.id.lower())


def find_model(library: Library, model_id: str) -> Optional[ServedModel]:
    """The model a request names (its id or path); rescans once when it is not known."""
    for rescan in (False, True):
        for model in served_models(library, rescan=rescan):
            if model_id in (model.id, str(model.path)):
                return model
    return None


@functools.lru_cache(maxsize=32)
def _template_at(path: str, mtime: float) -> Optional[str]:
    from models.engine.gguf_info import read_model_info

    return read_model_info(path).chat_template


@functools.lru_cache(maxsize=64)
def _modalities_at(path: str, chosen: Optional[str], folder_mtime: float) -> tuple[str, ...]:
    from models.projector import input_modalities as read_modalities

    return tuple(read_modalities(path, chosen))


def input_modalities(path: Any, chosen: Optional[str] = None) -> list[str]:
    """What a model reads: ``text``, and ``image`` when it loads with a vision encoder
    (``chosen``, its load settings' mmproj, while that file is there; else one that fits
    it beside it); looked up again when its folder changes."""
    return list(_modalities_at(str(path), chosen, os.path.getmtime(Path(path).parent)))


def template_of(path: Any) -> Optional[str]:
    """The chat template in a GGUF file's header (``None``: it has none); read once per
    version of the file."""
    return _template_at(str(path), os.path.getmtime(path))
