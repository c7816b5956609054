"""PyInstaller hook for llama-cpp-python, which PyInstaller has no hook of its own for.

llama_cpp loads ``libllama``, ``libggml*`` (one library per backend: CPU, CUDA, Metal,
Vulkan) and ``libmtmd`` with ctypes from ``llama_cpp/lib`` next to its package, so import
analysis never sees them. Collect them at the same relative place; PyInstaller then finds
their own dependencies (libgomp, CUDA runtime, libvulkan) through its binary analysis.
"""

from PyInstaller.utils.hooks import collect_data_files, collect_dynamic_libs

binaries = collect_dynamic_libs("llama_cpp")
# A Metal build without an embedded shader library reads it from lib/ at run time.
datas = collect_data_files("llama_cpp", includes=["**/*.metal", "**/*.metallib"])
