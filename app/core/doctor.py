"""``quantdesk doctor``: everything a bug report needs, gathered without Qt.

Each probe is independent and failure-tolerant: a missing or broken llama.cpp library
shows up as a line in the report, never as a crash of the report itself.
"""

from __future__ import annotations

import platform
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Callable

from app import __version__
from models.foundation import APP_NAME
from models.foundation.paths import HOME_ENV, app_paths

Section = list[tuple[str, str]]

_PACKAGES = (
    "llama-cpp-python", "gguf", "numpy", "huggingface-hub", "platformdirs", "PySide6-Essentials",
)


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def package_versions() -> Section:
    """Versions of Python and the packages QuantDesk is built on."""
    rows = [(APP_NAME, __version__), ("Python", f"{platform.python_version()} ({sys.executable})")]
    for name in _PACKAGES:
        try:
            rows.append((name, version(name)))
        except PackageNotFoundError:
            rows.append((name, "not installed"))
    return rows


def install_section() -> Section:
    """How QuantDesk was installed: source checkout, portable bundle, .deb...; and for a
    bundle, the llama.cpp build it carries and whether this CPU can run it."""
    from app.core.install_info import install_info, missing_cpu_flags
    from models import hardware

    info = install_info()
    rows = [("Installed as", info.description), ("Location", str(info.location))]
    if info.build:
        rows.append(("Bundle build", info.backend_text()))
        missing = missing_cpu_flags(set(hardware.cpu_flags()), info, hardware.readable_cpu_flags())
        if missing:
            rows.append(("Problem", f"this CPU lacks {', '.join(missing)}, which this build of "
                                    "llama.cpp needs; models will not run. Install from source "
                                    "(packaging/install.sh) to build for this CPU."))
    return rows


def system_section() -> Section:
    """OS, CPU and its features, RAM."""
    from models import hardware

    mem = hardware.memory_info()
    flags = hardware.cpu_flags()
    rows = [
        ("OS", f"{platform.system()} {platform.release()} ({platform.machine()})"),
        ("CPU", f"{hardware.cpu_name()}, {_logical_cpus()} logical cores"),
        ("CPU features", " ".join(flags) if flags else "not readable on this OS"),
        ("RAM", f"{_gib(mem.total)} total, {_gib(mem.available)} available"),
    ]
    if hardware.cpu_advertises_amx():
        rows.append(("Note", "this CPU advertises AMX; llama.cpp's AMX kernels crash on some "
                             "virtual machines, so QuantDesk's install builds llama.cpp without them"))
    return rows


def _logical_cpus() -> int:
    import os

    return os.cpu_count() or 1


def llama_section() -> Section:
    """llama.cpp: build features and the backends and devices it can use."""
    from models import hardware

    rows: Section = []
    info = hardware.backend_system_info()
    rows.append(("llama.cpp build", info or "unknown"))
    rows.append(("Backends compiled in", ", ".join(hardware.backend_names()) or "none"))
    for dev in hardware.devices():
        memory = f", {_gib(dev.memory_free)} free of {_gib(dev.memory_total)}" if dev.memory_total else ""
        rows.append((f"Device {dev.name}", f"{dev.kind} via {dev.backend or '?'}: {dev.description}{memory}"))
    wanted = ("CPU", "CUDA", "Metal", "Vulkan")
    present = set(hardware.backend_names())
    rows.append(("Available", ", ".join(f"{b}: {'yes' if b in present else 'no'}" for b in wanted)))
    rows.append(("RPC", rpc_line("RPC" in present)))
    return rows


def rpc_line(available: bool) -> str:
    """Whether this build can split a model across computers (llama.cpp's RPC backend),
    with the build id both sides of a split must share."""
    if not available:
        return ("no: this llama.cpp was built without GGML_RPC, so models cannot use other "
                "computers' devices; reinstall with packaging/install.sh")
    from models.rpc.worker import build_id

    return (f"available: models can use other computers' devices (`quantdesk worker` there); "
            f"{build_id().text()}")


def folders_section() -> Section:
    """The app's folders and the free disk space where models go."""
    from models import hardware

    paths = app_paths()
    rows = [(name, str(folder)) for name, folder in paths.all().items()]
    rows.append((f"{HOME_ENV}", "set" if HOME_ENV in __import__("os").environ else "not set"))
    rows.append(("Free disk (models)", _gib(hardware.free_disk_bytes(paths.models))))
    return rows


SECTIONS: list[tuple[str, Callable[[], Section]]] = [
    ("Versions", package_versions),
    ("Installation", install_section),
    ("System", system_section),
    ("llama.cpp", llama_section),
    ("Folders", folders_section),
]


def collect() -> list[tuple[str, Section]]:
    """Run every probe; a probe that fails contributes its error as one line."""
    report = []
    for title, probe in SECTIONS:
        try:
            rows = probe()
        except Exception as exc:  # a report must survive a broken install to describe it
            rows = [("error", f"{type(exc).__name__}: {exc}")]
        report.append((title, rows))
    return report


def format_report(report: list[tuple[str, Section]]) -> str:
    """The report as aligned plain text, ready to paste into an issue."""
    lines = []
    for title, rows in report:
        lines.append(f"== {title}")
        width = max((len(k) for k, _ in rows), default=0)
        lines.extend(f"  {k.ljust(width)}  {v}" for k, v in rows)
    return "\n".join(lines)
