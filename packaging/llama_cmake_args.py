"""Print the CMAKE_ARGS that build llama.cpp (inside llama-cpp-python).

Two uses, one set of rules:

* ``install.sh`` (source install) builds for *this* computer: the SIMD features its CPU
  advertises.
* ``build.py`` (installers, ``--portable``) builds for *other people's* computers: a fixed
  baseline that every x86-64 CPU sold since about 2015 has, whatever CPU the build runs on.

Why not pip's default (``-march=native``)? On CPUs that advertise AMX, llama.cpp then
compiles its AMX kernels, and on virtual machines whose hypervisor does not really
enable AMX tiles the first decode segfaults in ``ggml_backend_amx_mul_mat``. So on x86-64
we build with ``GGML_NATIVE=OFF`` and switch on SIMD features one by one, never AMX: the
same speed, no crash.

The portable baseline is x86-64-v3 (AVX, AVX2, FMA, F16C, BMI2: Intel Haswell 2013+, AMD
Excavator/Zen 2015+), the level LM Studio and GPT4All also require. AVX-512 is left out:
many current CPUs (most Intel desktop and laptop chips since Alder Lake) lack it, and a
binary using it dies with SIGILL there. llama.cpp's ``GGML_CPU_ALL_VARIANTS`` (one CPU
library per level, chosen at run time) would serve both, but builds the CPU code about
eight times and needs llama.cpp's dynamic backend loading, which llama-cpp-python 0.3.36
does not set up; the baseline costs AVX-512 machines some prompt-processing speed only.

Every build includes llama.cpp's RPC backend (``GGML_RPC=ON``), so a model can be split
across this computer and others (``quantdesk worker``); the option is part of the wheel
cache key, so a wheel built without it is never reused.

Backends: Metal on macOS (llama.cpp's default there), CUDA when an NVIDIA driver and
``nvcc`` are present or ``QUANTDESK_GPU=cuda``, Vulkan with ``QUANTDESK_GPU=vulkan``,
plain CPU with ``QUANTDESK_GPU=cpu``.

Usage::

    python3 packaging/llama_cmake_args.py                      # this computer, for install.sh
    python3 packaging/llama_cmake_args.py --portable --backend cuda   # an installer build
"""

from __future__ import annotations

import argparse
import hashlib
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

# The x86-64-v3 baseline of portable builds (see the module docstring), as cpuinfo flags.
PORTABLE_X86_FLAGS = frozenset({"avx", "avx2", "fma", "f16c", "bmi2"})
PORTABLE_X86_LEVEL = "x86-64-v3 (AVX, AVX2, FMA, F16C, BMI2; no AVX-512, no AMX)"

# CUDA GPU generations a portable CUDA build carries code for: Pascal (GTX 10xx) to
# Hopper; "-virtual" on the newest adds PTX so later GPUs JIT-compile it.
PORTABLE_CUDA_ARCHITECTURES = "61;70;75;80;86;89;90-virtual"

BACKENDS = ("cpu", "cuda", "metal", "vulkan")

#: The llama-cpp-python release every build uses (install.sh and build.py read it here).
LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"


def cpu_flags() -> set[str]:
    """The CPU's feature flags on Linux; empty elsewhere."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def default_backend() -> str:
    """The backend ``QUANTDESK_GPU`` names, or the one this computer can use."""
    choice = os.environ.get("QUANTDESK_GPU", "auto").lower()
    if choice in BACKENDS:
        return choice
    if sys.platform == "darwin":
        return "metal"
    if shutil.which("nvidia-smi") and shutil.which("nvcc"):
        return "cuda"
    return "cpu"


def backend_args(backend: str, portable: bool = False) -> list[str]:
    """CMake options that select ``backend`` (one of :data:`BACKENDS`)."""
    if backend == "cuda":
        args = ["-DGGML_CUDA=ON"]
        if portable:  # otherwise CMake picks the GPU(s) in this computer only
            args.append(f"-DCMAKE_CUDA_ARCHITECTURES={PORTABLE_CUDA_ARCHITECTURES}")
        return args
    if backend == "vulkan":
        return ["-DGGML_VULKAN=ON"]
    if backend == "metal":
        return ["-DGGML_METAL=ON"]
    return ["-DGGML_METAL=OFF"] if sys.platform == "darwin" else []


def cpu_args(portable: bool = False, machine: str | None = None) -> list[str]:
    """SIMD options: this CPU's features, or the portable baseline; never AMX."""
    machine = (machine or platform.machine()).lower()
    if machine in ("x86_64", "amd64"):
        flags = PORTABLE_X86_FLAGS if portable else cpu_flags()
        if flags:  # known features: spell them out and leave AMX off
            return ["-DGGML_NATIVE=OFF"] + [
                f"-D{option}={'ON' if flag in flags else 'OFF'}" for flag, option in X86_FEATURES]
        return []
    # ARM (Apple silicon, Linux arm64): the compiler's default target for the platform,
    # not this particular chip, when the binary is meant for others.
    return ["-DGGML_NATIVE=OFF"] if portable else []


#: Always built: llama.cpp's RPC backend (the ``ggml-rpc`` library), which lets a model's
#: layers live on other computers' devices (``quantdesk worker`` on them, remote devices
#: in the load settings here). It adds one small library and no cost when unused.
RPC_ARGS = ["-DGGML_RPC=ON"]


def cmake_args(backend: str | None = None, portable: bool = False) -> list[str]:
    """All options: the CPU SIMD set without AMX, the GPU backend, and the RPC backend."""
    return cpu_args(portable) + backend_args(backend or default_backend(), portable) + RPC_ARGS


def wheel_key(args: list[str]) -> str:
    """Cache key of a llama-cpp-python wheel built with ``args``.

    install.sh and build.py keep their wheels in ``build/wheels/<key>/``: when this CPU's
    options equal the portable ones (as on CI's machines), build.py reuses the wheel
    install.sh compiled instead of compiling llama.cpp a second time.
    """
    text = "\n".join([LLAMA_CPP_PYTHON, " ".join(args), sys.platform, platform.machine(),
                      f"cp{sys.version_info.major}{sys.version_info.minor}"])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=BACKENDS, help="default: QUANTDESK_GPU or detected")
    parser.add_argument("--portable", action="store_true",
                        help="baseline SIMD set for other computers instead of this CPU's")
    parser.add_argument("--wheel-key", action="store_true",
                        help="print the wheel cache key of these options instead")
    parser.add_argument("--requirement", action="store_true",
                        help="print the llama-cpp-python requirement instead")
    args = parser.parse_args(argv)
    chosen = cmake_args(args.backend, args.portable)
    if args.requirement:
        print(LLAMA_CPP_PYTHON)
    elif args.wheel_key:
        print(wheel_key(chosen))
    else:
        print(" ".join(chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
