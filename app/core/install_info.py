"""Where this copy of QuantDesk runs from, and what its installer bundle was built with.

A frozen bundle (PyInstaller) carries ``quantdesk-build.json``, written by
``packaging/build.py``: the llama.cpp backend, its CMake options and the CPU level the
binary needs. Each package format adds a one-word ``install-kind`` file beside the
executables (``deb``, ``tar``, ``dmg``, ``nsis``): the bundle inside the ``.deb`` and the
``.tar.gz`` is the same, only the packer knows which one it is making. ``quantdesk
doctor`` and the About box show both, so a bug report says how QuantDesk was installed.

Qt-free: the CLI and the GUI share it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Optional

BUILD_INFO_FILE = "quantdesk-build.json"
INSTALL_KIND_FILE = "install-kind"

#: What each ``install-kind`` word means, in the words doctor and About print.
KIND_DESCRIPTIONS = {
    "deb": "installed (.deb)",
    "tar": "portable (.tar.gz)",
    "dmg": "installed (macOS app)",
    "nsis": "installed (Windows installer)",
}


@dataclass(frozen=True)
class InstallInfo:
    """How this QuantDesk was installed.

    Attributes:
        kind: ``source``, ``package`` (pip-installed), or a frozen bundle's
            ``deb``/``tar``/``dmg``/``nsis``, or ``frozen`` for an unpacked bundle.
        description: ``kind`` in words, e.g. "installed (.deb)".
        location: The checkout, the package folder, or the bundle folder.
        build: The bundle's ``quantdesk-build.json`` (empty when not frozen).
    """

    kind: str
    description: str
    location: Path
    build: dict = field(default_factory=dict)

    @property
    def frozen(self) -> bool:
        return self.kind not in ("source", "package")

    def backend_text(self) -> str:
        """The llama.cpp build of a bundle in one line, "" when not frozen."""
        if not self.build:
            return ""
        return (f"{self.build.get('backend', '?')} backend, CPU level "
                f"{self.build.get('cpu_level', '?')}, llama-cpp-python "
                f"{self.build.get('llama_cpp_python', '?')}, built {self.build.get('built', '?')} "
                f"from commit {self.build.get('commit', '?')}")


def bundle_dir() -> Optional[Path]:
    """The frozen bundle's data folder (PyInstaller's ``sys._MEIPASS``), else ``None``."""
    folder = getattr(sys, "_MEIPASS", None)
    return Path(folder) if getattr(sys, "frozen", False) and folder else None


def _read_kind(executable_dir: Path, data_dir: Path) -> str:
    # A macOS app keeps it in Contents/Resources: Contents/MacOS may hold only signed code.
    for folder in (executable_dir, data_dir, executable_dir.parent / "Resources"):
        try:
            word = (folder / INSTALL_KIND_FILE).read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if word in KIND_DESCRIPTIONS:
            return word
    return "frozen"


def _read_build(data_dir: Path) -> dict:
    try:
        data = json.loads((data_dir / BUILD_INFO_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@lru_cache(maxsize=1)
def install_info() -> InstallInfo:
    """How this process's QuantDesk was installed (computed once)."""
    data_dir = bundle_dir()
    if data_dir is not None:
        executable_dir = Path(sys.executable).resolve().parent
        kind = _read_kind(executable_dir, data_dir)
        return InstallInfo(kind, KIND_DESCRIPTIONS.get(kind, "frozen bundle (not packed)"),
                           executable_dir, _read_build(data_dir))
    package_root = Path(__file__).resolve().parents[2]
    if (package_root / "pyproject.toml").exists():
        return InstallInfo("source", "source checkout", package_root)
    return InstallInfo("package", "Python package (pip)", package_root)


def missing_cpu_flags(cpu_flags: set[str], info: Optional[InstallInfo] = None,
                      readable: Optional[frozenset[str]] = None) -> list[str]:
    """The CPU features the bundle's llama.cpp needs and this CPU lacks.

    Empty when not frozen, when the CPU's flags are unknown, or when all are there. Only
    features the OS can report count (``readable``, all when None): Windows tells AVX2 but
    not FMA, so a missing FMA there is not a finding. A non-empty answer means the engine
    would die of an illegal instruction.
    """
    info = info or install_info()
    needed = info.build.get("required_cpu_flags") or []
    if not cpu_flags:
        return []
    return [flag for flag in needed
            if flag not in cpu_flags and (readable is None or flag in readable)]
