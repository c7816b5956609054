"""What this computer offers for running models: CPU features, RAM, disk, ggml devices.

Used by ``quantdesk doctor``, by the memory-fit prediction and by the engine's offload
report. Everything here is read-only and cheap; nothing decodes.
"""

from __future__ import annotations

import ctypes
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from models.foundation.system_programs import find_program, system_environment
from models.llama_lib import ggml_api, open_lib

# enum ggml_backend_dev_type in ggml-backend.h, in declaration order.
_DEVICE_TYPES = {0: "CPU", 1: "GPU", 2: "integrated GPU", 3: "accelerator"}

# CPU flags worth a line in a bug report: the ones ggml's kernels are chosen by.
_INTERESTING_FLAGS = (
    "sse3", "ssse3", "avx", "avx2", "fma", "f16c", "bmi2", "avx512f", "avx512bw", "avx512vl",
    "avx512_vnni", "avx512_bf16", "avx512vbmi", "avx_vnni", "amx_tile", "amx_int8",
    "amx_bf16", "neon", "asimd", "sve", "dotprod", "i8mm",
)


@dataclass(frozen=True)
class Device:
    """One ggml backend device (the CPU, a CUDA GPU, a Metal GPU, ...)."""

    name: str
    description: str
    kind: str
    backend: str
    memory_free: int
    memory_total: int


@dataclass(frozen=True)
class MemoryInfo:
    """Physical memory in bytes; ``available`` is what new allocations can use."""

    total: int
    available: int


def cpu_name() -> str:
    """A human name for the processor, e.g. ``Intel(R) Xeon(R) ...``."""
    if sys.platform.startswith("linux"):
        try:
            for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
                if line.startswith("model name") or line.startswith("Model"):
                    return line.split(":", 1)[1].strip()
        except OSError:
            pass
    if sys.platform == "darwin":
        name = system_output(["sysctl", "-n", "machdep.cpu.brand_string"]).strip()
        if name:
            return name
    return platform.processor() or platform.machine()


def system_output(args: list[str]) -> str:
    """What a program of the system (macOS ``sysctl``, ``vm_stat``) prints; "" when it is
    missing or fails. Found with ``find_program`` (``sysctl`` is in ``/usr/sbin``)."""
    program = find_program(args[0])
    if program is None:
        return ""
    try:
        return subprocess.run([program, *args[1:]], capture_output=True, text=True, timeout=5,
                              check=False, env=system_environment()).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


#: The features Windows reports (``IsProcessorFeaturePresent``, winnt.h's PF_* numbers).
#: It has no numbers for FMA, F16C or BMI2, so those stay unknown there.
_WINDOWS_PROCESSOR_FEATURES = {"sse3": 13, "ssse3": 36, "avx": 39, "avx2": 40, "avx512f": 41}


def readable_cpu_flags(platform_name: str = sys.platform) -> frozenset[str]:
    """The features :func:`cpu_flags` can tell present or absent on this OS."""
    if platform_name.startswith("linux"):
        return frozenset(_INTERESTING_FLAGS)
    if platform_name == "win32":
        return frozenset(_WINDOWS_PROCESSOR_FEATURES)
    return frozenset()


def cpu_flags() -> list[str]:
    """Instruction-set features the CPU advertises that matter to ggml's kernels.

    On Linux these come from ``/proc/cpuinfo``, on Windows from ``IsProcessorFeaturePresent``
    (the features of :func:`readable_cpu_flags`); elsewhere the list is empty and
    ``backend_system_info`` (what llama.cpp was built to use) is the reference.
    """
    flags: set[str] = set()
    if sys.platform == "win32":
        present = ctypes.windll.kernel32.IsProcessorFeaturePresent  # type: ignore[attr-defined]
        flags = {name for name, number in _WINDOWS_PROCESSOR_FEATURES.items() if present(number)}
    elif sys.platform.startswith("linux"):
        try:
            for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
                if line.startswith("flags") or line.startswith("Features"):
                    flags.update(line.split(":", 1)[1].split())
                    break
        except OSError:
            pass
    return [f for f in _INTERESTING_FLAGS if f in flags]


def cpu_advertises_amx() -> bool:
    """True when the CPU advertises AMX tiles (see DESIGN.md: the AMX decode crash)."""
    return "amx_tile" in cpu_flags()


def memory_info() -> MemoryInfo:
    """Total and available physical memory of this computer."""
    if sys.platform.startswith("linux"):
        fields: dict[str, int] = {}
        try:
            for line in Path("/proc/meminfo").read_text().splitlines():
                key, _, rest = line.partition(":")
                fields[key] = int(rest.split()[0]) * 1024
        except (OSError, ValueError, IndexError):
            fields = {}
        if "MemTotal" in fields:
            return MemoryInfo(fields["MemTotal"], fields.get("MemAvailable", fields.get("MemFree", 0)))
    if sys.platform == "win32":
        class _MemoryStatusEx(ctypes.Structure):
            _fields_ = [
                ("dwLength", ctypes.c_ulong), ("dwMemoryLoad", ctypes.c_ulong),
                ("ullTotalPhys", ctypes.c_ulonglong), ("ullAvailPhys", ctypes.c_ulonglong),
                ("ullTotalPageFile", ctypes.c_ulonglong), ("ullAvailPageFile", ctypes.c_ulonglong),
                ("ullTotalVirtual", ctypes.c_ulonglong), ("ullAvailVirtual", ctypes.c_ulonglong),
                ("ullAvailExtendedVirtual", ctypes.c_ulonglong),
            ]

        status = _MemoryStatusEx()
        status.dwLength = ctypes.sizeof(_MemoryStatusEx)
        ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status))  # type: ignore[attr-defined]
        return MemoryInfo(status.ullTotalPhys, status.ullAvailPhys)
    if sys.platform == "darwin":
        total = int(system_output(["sysctl", "-n", "hw.memsize"]).strip() or 0)
        vm = system_output(["vm_stat"])
        page = int((re.search(r"page size of (\d+)", vm) or ["", "4096"])[1])
        free_pages = sum(int(m) for m in re.findall(r"Pages (?:free|inactive|speculative):\s+(\d+)", vm))
        return MemoryInfo(total, free_pages * page)
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return MemoryInfo(pages, pages)


def free_disk_bytes(path: Path) -> int:
    """Free bytes on the disk holding ``path`` (or its nearest existing parent)."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def devices() -> list[Device]:
    """The devices llama.cpp can run on, from ggml's backend registry.

    The CPU is always listed; CUDA, Metal, Vulkan or other GPUs appear only when this
    llama.cpp build includes that backend and the driver finds a device.
    """
    ggml = ggml_api()
    found = []
    for index in range(ggml.ggml_backend_dev_count()):
        dev = ggml.ggml_backend_dev_get(index)
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        ggml.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
        reg = ggml.ggml_backend_dev_backend_reg(dev)
        found.append(Device(
            name=(ggml.ggml_backend_dev_name(dev) or b"").decode(errors="replace"),
            description=(ggml.ggml_backend_dev_description(dev) or b"").decode(errors="replace"),
            kind=_DEVICE_TYPES.get(ggml.ggml_backend_dev_type(dev), "unknown"),
            backend=(ggml.ggml_backend_reg_name(reg) or b"").decode(errors="replace") if reg else "",
            memory_free=free.value,
            memory_total=total.value,
        ))
    return found


def backend_names() -> list[str]:
    """Names of the backends compiled into this llama.cpp build (``CPU``, ``CUDA``, ...)."""
    ggml = ggml_api()
    return [
        (ggml.ggml_backend_reg_name(ggml.ggml_backend_reg_get(i)) or b"").decode(errors="replace")
        for i in range(ggml.ggml_backend_reg_count())
    ]


def backend_system_info() -> Optional[str]:
    """llama.cpp's own one-line summary of the CPU features it was built to use."""
    lib = open_lib("libllama")
    lib.llama_print_system_info.restype = ctypes.c_char_p
    text = lib.llama_print_system_info()
    return text.decode(errors="replace").strip() if text else None
