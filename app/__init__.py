"""QuantDesk: run large language models locally.

``app.core`` is the Qt-free glue that the CLI and the GUI share; ``app.ui`` is the only
package that imports PySide6. The lower packages ``quantize`` and ``models`` import only
the leaf modules ``app.core.jobs``, ``app.core.errors``, ``app.core.paths`` and
``app.core.system_programs`` (and :func:`installed_version` from here).
"""

from __future__ import annotations

import os
import sys
from typing import Optional


def _normalized(name: str) -> str:
    return name.replace("-", "_").replace(".", "_").lower()


def installed_version(distribution: str) -> Optional[str]:
    """The installed version of ``distribution`` ("llama-cpp-python"), or ``None``.

    Read from the name of its ``NAME-VERSION.dist-info`` folder on ``sys.path`` (the first
    one, as imports find them; the name there has ``-`` escaped as ``_``), because
    ``importlib.metadata`` imports the ``email`` package to parse files — 30 ms of every
    ``quantdesk`` command's start. Falls back to ``importlib.metadata`` when no such
    folder is found (an ``.egg-info`` install, a zip).
    """
    wanted = _normalized(distribution)
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                project, _, version = name[:-len(".dist-info")].partition("-")
                if version and _normalized(project) == wanted:
                    return version
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


#: QuantDesk's version ("0.0.0+unknown" in a source tree that was never installed).
__version__ = installed_version("quantdesk") or "0.0.0+unknown"

APP_NAME = "QuantDesk"
