"""The compiled kernels: cached in the app's cache folder, and compiled without float64 or FMA.

Each check runs in a fresh interpreter with an empty app home and without the test
session's shared ``NUMBA_CACHE_DIR``, as a user's first run would. The package is a
read-only copy and ``sys.frozen`` is set, as in the PyInstaller app: compiling must
not need to write beside the code, and the second run must load the machine code the
first one stored instead of compiling again.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_RUN = r"""
import json, re, sys, time
sys.frozen = True  # what PyInstaller sets: no .py files to stamp the cache with
import numpy as np
from gguf import GGMLQuantizationType as T
from quantize.encode import encode_rows
from quantize.blocks import KERNELS
values = np.random.default_rng(0).standard_normal((4, 256)).astype(np.float32)
start = time.perf_counter()
encode_rows(values, T.Q8_0)
encode_rows(values, T.Q4_1, np.ones(256, np.float32))
seconds = time.perf_counter() - start
report = {"seconds": seconds, "hits": 0, "misses": 0, "double": 0, "fma": 0}
for kernel in (KERNELS[T.Q8_0][0], KERNELS[T.Q4_1][1]):
    report["hits"] += sum(kernel.stats.cache_hits.values())
    report["misses"] += sum(kernel.stats.cache_misses.values())
    if sys.argv[1] == "inspect":
        for ir in kernel.inspect_llvm().values():
            report["double"] += len(re.findall(r"= (fadd|fsub|fmul|fdiv|fpext|fcmp \w+) double", ir))
            report["fma"] += len(re.findall(r"llvm\.(fma|fmuladd)\.", ir))
        for asm in kernel.inspect_asm().values():
            report["fma"] += len(re.findall(r"\bvf(n?)m(add|sub)", asm))
print(json.dumps(report))
"""


def _read_only_copy(tmp: Path) -> Path:
    """The packages the kernels need, copied and made read-only (like a frozen bundle)."""
    root = tmp / "app-bundle"
    for package in ("app", "quantize", "models"):
        shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__"))
    for path in root.rglob("*"):
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    root.chmod(0o555)
    return root


def _run(root: Path, home: Path, mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(QUANTDESK_HOME=str(home), PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([sys.executable, "-c", _RUN, mode], env=env, cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_kernels_are_cached_in_the_app_cache_folder_and_compiled_exactly(tmp_path: Path) -> None:
    root = _read_only_copy(tmp_path)
    home = tmp_path / "home"
    try:
        first = _run(root, home, "inspect")
        cached = sorted(p.name for p in (home / "cache" / "numba").rglob("*") if p.is_file())
        second = _run(root, home, "load")
    finally:
        for path in [root, *root.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
    print(f"first use (compile): {first['seconds']:.1f} s; cached: {second['seconds']:.2f} s")
    assert first["misses"] == 2 and first["hits"] == 0
    assert any(name.endswith(".nbi") for name in cached) and any(name.endswith(".nbc") for name in cached)
    assert second["hits"] == 2 and second["misses"] == 0
    # Exactness premises: float32 arithmetic only, and no fused multiply-add anywhere.
    assert first["double"] == 0
    assert first["fma"] == 0
