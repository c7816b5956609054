"""Print the CMAKE_ARGS that build llama.cpp (inside llama-cpp-python) for this computer.

Why not pip's default (``-march=native``)? On CPUs that advertise AMX, llama.cpp then
compiles its AMX kernels, and on virtual machines whose hypervisor does not really
enable AMX tiles the first decode segfaults in ``ggml_backend_amx_mul_mat``. So on x86-64
we build with ``GGML_NATIVE=OFF`` and switch on exactly the SIMD features this CPU
advertises, never AMX: the same speed, no crash.

Backends: Metal on Apple silicon (llama.cpp's default there), CUDA when an NVIDIA driver
is present or ``QUANTDESK_GPU=cuda``, Vulkan with ``QUANTDESK_GPU=vulkan``, plain CPU with
``QUANTDESK_GPU=cpu``.

Usage: ``python3 packaging/llama_cmake_args.py`` → one line for ``CMAKE_ARGS``.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
from pathlib import Path

# /proc/cpuinfo flag → llama.cpp CMake option (GGML_NATIVE=OFF needs them spelled out).
X86_FEATURES = [
    ("avx", "GGML_AVX"),
    ("avx2", "GGML_AVX2"),
    ("fma", "GGML_FMA"),
    ("f16c", "GGML_F16C"),
    ("bmi2", "GGML_BMI2"),
    ("avx512f", "GGML_AVX512"),
    ("avx512_vnni", "GGML_AVX512_VNNI"),
    ("avx512_bf16", "GGML_AVX512_BF16"),
    ("avx512vbmi", "GGML_AVX512_VBMI"),
    ("avx_vnni", "GGML_AVX_VNNI"),
]


def cpu_flags() -> set[str]:
    """The CPU's feature flags on Linux; empty elsewhere."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def gpu_args() -> list[str]:
    """CMake options for the GPU backend chosen by QUANTDESK_GPU or auto-detected."""
    choice = os.environ.get("QUANTDESK_GPU", "auto").lower()
    if choice == "auto":
        if sys.platform == "darwin":
            choice = "metal"
        elif shutil.which("nvidia-smi") and shutil.which("nvcc"):
            choice = "cuda"
        else:
            choice = "cpu"
    return {
        "cuda": ["-DGGML_CUDA=ON"],
        "vulkan": ["-DGGML_VULKAN=ON"],
        "metal": ["-DGGML_METAL=ON"],
        "cpu": ["-DGGML_METAL=OFF"] if sys.platform == "darwin" else [],
    }.get(choice, [])


def cmake_args() -> list[str]:
    """All options: portable x86 SIMD set without AMX, plus the GPU backend."""
    args: list[str] = []
    if platform.machine().lower() in ("x86_64", "amd64"):
        flags = cpu_flags()
        if flags:  # Linux: we know the features, so spell them out and leave AMX off.
            args.append("-DGGML_NATIVE=OFF")
            args += [f"-D{option}={'ON' if flag in flags else 'OFF'}" for flag, option in X86_FEATURES]
    return args + gpu_args()


if __name__ == "__main__":
    print(" ".join(cmake_args()))
