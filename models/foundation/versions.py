"""Installed versions of Python distributions, read without ``importlib.metadata``."""

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
