"""Remembering that this computer needs the safe CPU kernels (the AMX crash of DESIGN.md).

When the engine's load self-test kills the process with llama.cpp's extra buffer types
on (weight repacking for AMX and similar kernels) and the retry without them works, the
client records that here, so later launches go straight to the setting that works. The
record lives in ``engine_fallbacks.json`` in the app's config folder, keyed by the CPU
and the llama-cpp-python version: a new CPU or a rebuilt llama.cpp gets a fresh chance.

File format::

    {"<cpu name> | llama-cpp-python <version>": {
        "use_extra_bufts": false, "reason": "...", "recorded": "2026-11-22T13:00:00Z"}}
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Optional

from models.foundation.jobs import atomic_output
from models.foundation.paths import AppPaths, app_paths

log = logging.getLogger(__name__)

FALLBACK_FILE_NAME = "engine_fallbacks.json"


def machine_key() -> str:
    """The key of this computer's record: CPU name and llama-cpp-python version."""
    from models.hardware import cpu_name
    from models.llama_lib import llama_cpp_python_version

    return f"{cpu_name()} | llama-cpp-python {llama_cpp_python_version() or 'unknown'}"


def fallback_file(paths: Optional[AppPaths] = None) -> Path:
    """Where the records are kept."""
    return (paths or app_paths()).config / FALLBACK_FILE_NAME


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        # A damaged record only costs one crashing self-test; it is rewritten then.
        log.warning("ignoring unreadable %s: %s", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def needs_safe_kernels(paths: Optional[AppPaths] = None) -> bool:
    """Whether this computer has a record saying extra buffer types crash it."""
    record = _read(fallback_file(paths)).get(machine_key())
    return isinstance(record, dict) and record.get("use_extra_bufts") is False


def extra_bufts_for(requested: bool, paths: Optional[AppPaths] = None) -> bool:
    """The ``use_extra_bufts`` a load of these settings really gets: off where this
    computer has the record, so a memory prediction made before loading matches the load."""
    return requested and not needs_safe_kernels(paths)


def remember_safe_kernels(reason: str, paths: Optional[AppPaths] = None) -> Path:
    """Record that this computer must load models with ``use_extra_bufts=False``."""
    path = fallback_file(paths)
    data = _read(path)
    data[machine_key()] = {
        "use_extra_bufts": False,
        "reason": reason,
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    log.warning("engine: extra buffer types disabled on this computer (%s); recorded in %s",
                reason, path)
    return path
