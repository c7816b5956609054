"""Locating and opening the native libraries that llama-cpp-python ships.

llama-cpp-python installs ``libllama``, ``libggml``, ``libggml-base`` and one library per
backend in ``llama_cpp/lib``. We open them with ctypes for what the Python bindings do
not expose: the ggml backend/device registry (doctor, offload report) and
``ggml_quantize_chunk`` (the byte oracle for our quantizer's tests).

Opening a library runs no inference, so doing it in the GUI process is safe; decoding
happens only in the engine's child process.

ggml's C API is spread over two libraries: the backend registry (``ggml_backend_dev_count``,
``ggml_backend_reg_by_name`` ...) is in ``libggml``, devices, buffers, tensors and the
quantizer in ``libggml-base``. Linux's ``dlsym`` also searches a library's dependencies, so
every function seemed to be in libggml; Windows' ``GetProcAddress`` sees only the DLL's own
exports. :func:`ggml_api` is the one place that finds each function in the library that
exports it, with its C signature.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Optional

from types import SimpleNamespace

from models.foundation.errors import QuantDeskError
from models.foundation.versions import installed_version


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


_P, _S, _STR, _INT = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_int

#: The ggml functions QuantDesk calls: name -> (restype, argtypes), from ggml.h and
#: ggml-backend.h. A function not listed here cannot be called through :func:`ggml_api`.
GGML_SIGNATURES: dict[str, tuple] = {
    # the backend registry (libggml)
    "ggml_backend_dev_count": (_S, []),
    "ggml_backend_dev_get": (_P, [_S]),
    "ggml_backend_dev_by_type": (_P, [_INT]),
    "ggml_backend_reg_count": (_S, []),
    "ggml_backend_reg_get": (_P, [_S]),
    "ggml_backend_reg_by_name": (_P, [_STR]),
    # devices, backends and buffers (libggml-base)
    "ggml_backend_dev_name": (_STR, [_P]),
    "ggml_backend_dev_description": (_STR, [_P]),
    "ggml_backend_dev_type": (_INT, [_P]),
    "ggml_backend_dev_memory": (None, [_P, ctypes.POINTER(_S), ctypes.POINTER(_S)]),
    "ggml_backend_dev_backend_reg": (_P, [_P]),
    "ggml_backend_dev_buffer_type": (_P, [_P]),
    "ggml_backend_dev_host_buffer_type": (_P, [_P]),
    "ggml_backend_reg_name": (_STR, [_P]),
    "ggml_backend_reg_dev_count": (_S, [_P]),
    "ggml_backend_reg_dev_get": (_P, [_P, _S]),
    "ggml_backend_reg_get_proc_address": (_P, [_P, _STR]),
    "ggml_backend_buft_name": (_STR, [_P]),
    "ggml_backend_buffer_is_host": (ctypes.c_bool, [_P]),
    "ggml_backend_tensor_get": (None, [_P, _P, _S, _S]),
    # tensors, the build, the quantizer (libggml-base)
    "ggml_op_name": (_STR, [_INT]),
    "ggml_nbytes": (_S, [_P]),
    "ggml_tensor_overhead": (_S, []),
    "ggml_version": (_STR, []),
    "ggml_commit": (_STR, []),
    "ggml_quantize_chunk": (_S, [_INT, _P, _P, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, _P]),
    "ggml_quantize_requires_imatrix": (ctypes.c_bool, [_INT]),
    "ggml_quantize_init": (None, [_INT]),
}

#: Searched in this order. libggml-base depends on nothing of ggml's, so even where the
#: loader searches dependencies (Linux) a function is found in the library that defines it.
GGML_LIBRARIES = ("libggml-base", "libggml")


def exporting_library(name: str) -> str:
    """The stem of the ggml library that exports the function ``name``.

    Raises:
        QuantDeskError: neither library exports it (a llama.cpp build this QuantDesk does
            not know).
    """
    for stem in GGML_LIBRARIES:
        if hasattr(open_lib(stem), name):
            return stem
    raise QuantDeskError(
        f"This build of llama.cpp has no function {name}.",
        "Reinstall QuantDesk with the llama-cpp-python version it was made for.")


@lru_cache(maxsize=None)
def ggml_api() -> SimpleNamespace:
    """Every function of :data:`GGML_SIGNATURES`, typed, each from the library exporting it."""
    functions = {}
    for name, (restype, argtypes) in GGML_SIGNATURES.items():
        function = getattr(open_lib(exporting_library(name)), name)
        function.restype, function.argtypes = restype, argtypes
        functions[name] = function
    return SimpleNamespace(**functions)
