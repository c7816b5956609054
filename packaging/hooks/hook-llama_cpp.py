"""PyInstaller hook for llama-cpp-python, which PyInstaller has no hook of its own for.

llama_cpp loads ``libllama``, ``libggml*`` (one library per backend: CPU, CUDA, Metal,
Vulkan, and RPC — ``libggml-rpc``, which ``quantdesk worker`` and remote devices use) and
``libmtmd`` with ctypes from ``llama_cpp/lib`` next to its package, so import
analysis never sees them. Collect them at the same relative place; PyInstaller then finds
their own dependencies (libgomp, CUDA runtime, libvulkan) through its binary analysis.
"""

from PyInstaller.utils.hooks import collect_data_files, collect_dynamic_libs

binaries = collect_dynamic_libs("llama_cpp")
# A Metal build without an embedded shader library reads it from lib/ at run time.
datas = collect_data_files("llama_cpp", includes=["**/*.metal", "**/*.metallib"])

# A CUDA build: the CUDA runtime and cuBLAS come from NVIDIA's PyPI wheels (build.py
# installs them into the build environment), not from a toolkit the user would need.
# They go next to libggml-cuda, whose RPATH is $ORIGIN on Linux and whose folder llama_cpp
# adds to the DLL search path on Windows. The driver (libcuda.so.1, nvcuda.dll) is the
# user's own and is never bundled.
import importlib.util  # noqa: E402
from pathlib import Path  # noqa: E402

for _package in ("nvidia.cuda_runtime", "nvidia.cublas"):
    try:
        _spec = importlib.util.find_spec(_package)
    except ModuleNotFoundError:
        _spec = None
    if _spec is None or not _spec.submodule_search_locations:
        continue
    for _folder in _spec.submodule_search_locations:
        for _pattern in ("lib/*.so*", "bin/*.dll"):
            binaries += [(str(_lib), "llama_cpp/lib") for _lib in Path(_folder).glob(_pattern)]
