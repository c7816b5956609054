"""Which vision encoder (mmproj file) goes with a model: found beside it, by llama.cpp's rule.

Image-text models ship their vision encoder as a separate GGUF, ``mmproj-*.gguf``,
published beside the quantized text models (several precisions in one repository). A
model's mmproj is the one in its own folder (else the folder above) that makes
embeddings of the model's width,
preferring F16 (llama.cpp's converter's default and the precision its authors test), then
the precisions closest to it. The file's own header (``clip.has_vision_encoder``) says
whether it reads images, not its name.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Iterable, Optional

from models.foundation.errors import QuantDeskError

log = logging.getLogger(__name__)

#: Preference among an mmproj's precisions (file type words in the file name).
PRECISION_ORDER = ("F16", "BF16", "F32", "Q8_0")


def _rank(path: Path) -> tuple[int, str]:
    name = path.stem.upper()
    for rank, word in enumerate(PRECISION_ORDER):
        if re.search(rf"(?<![A-Z0-9]){word}(?![A-Z0-9])", name):
            return rank, path.name
    return len(PRECISION_ORDER), path.name


def projector_candidates(model_path: Path | str) -> list[Path]:
    """The ``*mmproj*.gguf`` files beside ``model_path``, best first, then those in the
    folder above it (a repository that keeps each quantization in a folder of its own
    keeps the vision encoder at its top, and a download keeps the repository's layout)."""
    model_path = Path(model_path)
    out: list[Path] = []
    for folder in (model_path.parent, model_path.parent.parent):
        found = [p for p in folder.glob("*.gguf")
                 if "mmproj" in p.name.lower() and p != model_path and p.is_file()]
        out += sorted(found, key=_rank)
    return out


def find_projector(model_path: Path | str) -> Optional[Path]:
    """The vision encoder to load with ``model_path``, or ``None`` when it has none.

    A candidate whose width does not match the model, or that cannot be read, is skipped
    (the log says why) so that a folder of several models pairs each with its own.
    """
    from models.engine.gguf_info import read_model_info, read_projector_info

    candidates = projector_candidates(model_path)
    if not candidates:
        return None
    model = read_model_info(model_path)
    for candidate in candidates:
        try:
            info = read_projector_info(candidate, model)
        except QuantDeskError as exc:
            log.info("not pairing %s with %s: %s", candidate.name, Path(model_path).name, exc.what)
            continue
        if info.vision:
            return candidate
    return None


def projector_to_load(model_path: Path | str, chosen: Optional[str] = None) -> Optional[Path]:
    """The vision encoder ``model_path`` loads with: ``chosen`` (the one chosen on the Models
    page and remembered with the model's load settings, or ``--mmproj``) while that file
    is there, else the one beside it (:func:`find_projector`); ``None`` for text only."""
    if chosen and Path(chosen).is_file():
        return Path(chosen)
    return find_projector(model_path)


def with_projector(model_path: Path | str, settings):
    """``settings`` (:class:`~models.engine.settings.LoadSettings`) naming the mmproj
    ``model_path`` loads with (:func:`projector_to_load`), or none when there is none."""
    from dataclasses import replace

    projector = projector_to_load(model_path, settings.mmproj)
    return replace(settings, mmproj=str(projector) if projector is not None else None)


def input_modalities(model_path: Path | str, chosen: Optional[str] = None) -> list[str]:
    """What ``model_path`` reads when loaded with :func:`projector_to_load`'s encoder:
    ``text``, then ``image`` and ``audio`` as the encoder's own header says."""
    from models.engine.gguf_info import read_projector_info

    try:
        projector = projector_to_load(model_path, chosen)
        info = read_projector_info(projector) if projector is not None else None
    except QuantDeskError:
        return ["text"]
    return ["text"] + (["image"] if info and info.vision else []) + (["audio"] if info and info.audio else [])


def matching_projectors(model_path: Path | str, others: Iterable[Path | str] = ()) -> list[Path]:
    """The vision encoders that pair with ``model_path`` (embeddings of its width): those
    beside it, best first (:func:`projector_candidates`), then ``others`` (e.g. the
    Library's other mmproj files), each once. What the Models page offers to choose from."""
    from models.engine.gguf_info import read_model_info, read_projector_info

    model = read_model_info(model_path)
    out: list[Path] = []
    for candidate in [*projector_candidates(model_path), *map(Path, others)]:
        candidate = candidate.resolve()
        if candidate in out or candidate == Path(model_path).resolve():
            continue
        try:
            if read_projector_info(candidate, model).vision:
                out.append(candidate)
        except QuantDeskError:
            continue  # another model's encoder, or no encoder at all
    return out
