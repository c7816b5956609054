"""What a path handed to QuantDesk means: the one rule behind ``quantdesk PATH`` and drops.

A person gives the app a path in two ways: on the command line (``quantdesk model.gguf``,
or "Open with QuantDesk" in a file manager) and by dropping it on the window. Both go
through :func:`route_path`, which decides which page takes the path:

- a picture (``.png``, ``.jpg``, ``.jpeg``, ``.gif``, ``.bmp``) goes with the next chat
  message (page ``Chat``);
- a ``.gguf`` file is a model to chat with (page ``Chat``), except when it holds
  unquantized weights (F32, F16, BF16) and the person is on the Quantize page: then it is
  the input to quantize;
- a folder, a ``.safetensors`` file, a ``config.json`` or ``*.safetensors.index.json``,
  or a PyTorch pickle (``.bin``, ``.pt``, ``.pth``, ``.ckpt``) is a Hugging Face
  checkpoint to convert (page ``Quantize``, given the folder). Whether the folder is
  convertible is the converter's question; the page shows its sentence.

Anything else is a :class:`~models.foundation.errors.QuantDeskError` with a sentence.

A model opened this way joins the Library once it loads (:func:`add_opened_model`, undone
by :func:`forget_opened_model`), so it is still listed on the Models page and by the
server the next time, not only while the window is open.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from models.foundation.errors import QuantDeskError

CHAT = "Chat"
QUANTIZE = "Quantize"

#: GGUF ``general.file_type`` values of unquantized models (llama.cpp's LLAMA_FTYPE_*):
#: ALL_F32, MOSTLY_F16, MOSTLY_BF16.
UNQUANTIZED_FILE_TYPES = frozenset({0, 1, 32})
#: ggml tensor types that hold unquantized weights: F32, F16, BF16.
UNQUANTIZED_TENSOR_TYPES = frozenset({0, 1, 30})

CHECKPOINT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".bmp")
CHECKPOINT_FILE_NAMES = ("config.json",)


@dataclass(frozen=True)
class OpenRoute:
    """Where a path goes: the page's title and the path that page should open."""

    page: str
    path: Path


def is_unquantized_gguf(path: Path) -> bool:
    """Whether the GGUF file holds F32/F16/BF16 weights, the inputs the quantizer takes.

    Reads only the header. ``general.file_type`` decides when present; otherwise every
    tensor's type must be F32, F16 or BF16.

    Raises:
        QuantDeskError: The file is not a readable GGUF file.
    """
    from models.gguf_header import read_gguf_header

    header = read_gguf_header(path)
    file_type = header.metadata.get("general.file_type")
    if file_type is not None:
        return int(file_type) in UNQUANTIZED_FILE_TYPES
    return bool(header.tensors) and all(
        t.ggml_type in UNQUANTIZED_TENSOR_TYPES for t in header.tensors
    )


def is_image_file(path: str | Path) -> bool:
    """Whether ``path`` names a picture to attach to a message (by its suffix)."""
    return Path(path).suffix.lower() in IMAGE_SUFFIXES


def route_path(path: str | Path, current_page: Optional[str] = None) -> OpenRoute:
    """Decide which page opens ``path``.

    Args:
        path: What the person opened or dropped.
        current_page: The title of the page on screen (a dropped F16 GGUF goes to
            Quantize only when the person is there).

    Raises:
        QuantDeskError: The path does not exist or is not something QuantDesk opens.
    """
    path = Path(path).expanduser()
    if not path.exists():
        raise QuantDeskError(
            f"{path} does not exist.",
            "Check the path, or pick the file again.",
        )
    path = path.resolve()
    if path.is_dir():
        return OpenRoute(QUANTIZE, path)
    name = path.name.lower()
    if is_image_file(path):
        return OpenRoute(CHAT, path)
    if name.endswith(".gguf"):
        if current_page == QUANTIZE and is_unquantized_gguf(path):
            return OpenRoute(QUANTIZE, path)
        return OpenRoute(CHAT, path)
    if (name.endswith(CHECKPOINT_SUFFIXES) or name in CHECKPOINT_FILE_NAMES
            or name.endswith(".safetensors.index.json")):
        return OpenRoute(QUANTIZE, path.parent)
    raise QuantDeskError(
        f"QuantDesk cannot open {path.name}: it is neither a GGUF model file nor a "
        "Hugging Face model folder.",
        "Drop a .gguf file to chat with it, a picture to send it with your next message, or "
        "a folder with config.json and .safetensors files to convert and quantize it.",
    )


def add_opened_model(path: str | Path, library=None):
    """Add a model opened in the window (``quantdesk PATH``, File ▸ Open, a drop) to the
    Library, where it stays: the Models page lists it and the server offers it from then on.

    Returns the new :class:`~models.library.LibraryModel`, or ``None`` when there is nothing
    to add: the Library has the file already, or it lies in the models folder (which the
    Library finds by itself). The file is not moved or copied.

    Raises:
        QuantDeskError: The file cannot be read as a model.
    """
    from models.library import Library

    library = library if library is not None else Library()
    path = Path(path).expanduser().resolve()
    if path.is_relative_to(library.models_dir) or library.get(path) is not None:
        return None
    return library.import_path(path)


def forget_opened_model(path: str | Path, library=None) -> None:
    """Undo :func:`add_opened_model`: the Library forgets the file; the file stays."""
    from models.library import Library

    library = library if library is not None else Library()
    path = Path(path).expanduser().resolve()
    if path.is_relative_to(library.models_dir):
        raise ValueError(f"{path} is in the models folder: removing it would delete it")
    if library.get(path) is not None:
        library.remove(path)
