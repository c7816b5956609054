"""Locating and opening the native libraries that llama-cpp-python ships.

llama-cpp-python installs ``libllama``, ``libggml``, ``libggml-base`` and one library per
backend in ``llama_cpp/lib``. We open them with ctypes for what the Python bindings do
not expose: the ggml backend/device registry (doctor, offload report) and
``ggml_quantize_chunk`` (the byte oracle for our quantizer's tests).

Opening a library runs no inference, so doing it in the GUI process is safe; decoding
happens only in the engine's child process.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Optional

from app import installed_version
from app.core.errors import QuantDeskError


def llama_cpp_python_version() -> Optional[str]:
    """Installed llama-cpp-python version, or ``None`` when it is not installed."""
    return installed_version("llama-cpp-python")


def lib_dir() -> Path:
    """The folder holding llama-cpp-python's native libraries: ``LLAMA_CPP_LIB_PATH`` when
    set (llama-cpp-python itself loads its libraries from there then: a llama.cpp built
    apart from the package), else the package's ``lib`` folder.

    Raises:
        QuantDeskError: llama-cpp-python is not installed.
    """
    override = os.environ.get("LLAMA_CPP_LIB_PATH")
    if override:
        return Path(override)
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise QuantDeskError(
            "llama-cpp-python, the package that runs models, is not installed.",
            "Reinstall QuantDesk (see the README) so that it is built for this computer.",
        )
    return Path(list(spec.submodule_search_locations)[0]) / "lib"


def _lib_file(stem: str) -> Path:
    folder = lib_dir()
    if sys.platform == "win32":
        names = [f"{stem}.dll", f"{stem.removeprefix('lib')}.dll"]
    elif sys.platform == "darwin":
        names = [f"{stem}.dylib"]
    else:
        names = [f"{stem}.so"]
    for name in names:
        if (folder / name).exists():
            return folder / name
    raise QuantDeskError(
        f"llama-cpp-python is installed but its library {stem} is missing from {folder}.",
        "Reinstall QuantDesk so that llama.cpp is built again.",
    )


@lru_cache(maxsize=None)
def open_lib(stem: str) -> ctypes.CDLL:
    """Open ``stem`` (e.g. ``"libggml-base"``) from llama-cpp-python's lib folder."""
    path = _lib_file(stem)
    try:
        return ctypes.CDLL(str(path), mode=getattr(ctypes, "RTLD_GLOBAL", 0))
    except OSError as exc:
        raise QuantDeskError(
            f"The llama.cpp library {path} could not be loaded ({exc}).",
            "Reinstall QuantDesk so that llama.cpp is built for this computer.",
        ) from exc
