"""ggml's functions are taken from the library that exports them, on every system.

On Windows a function is found only in the DLL that exports it (``GetProcAddress`` does not
search dependencies as Linux's ``dlsym`` does), and an early build looked up the device
functions in ``ggml.dll`` while they live in ``ggml-base.dll``: ``quantdesk doctor`` failed on
every Windows install. These tests hold the rule on Linux, where a wrong library would
still seem to work.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from models.llama_lib import GGML_LIBRARIES, GGML_SIGNATURES, _lib_file, exporting_library, ggml_api

ROOT = Path(__file__).resolve().parents[2]


def _defined_functions(stem: str) -> set[str]:
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("nm (binutils) is needed to read a library's own exports")
    out = subprocess.run([nm, "-D", "--defined-only", str(_lib_file(stem))], check=True,
                         capture_output=True, text=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def test_each_ggml_function_comes_from_the_library_that_defines_it():
    defined = {stem: _defined_functions(stem) for stem in GGML_LIBRARIES}
    for name in GGML_SIGNATURES:
        stem = exporting_library(name)
        assert name in defined[stem], f"{name} is taken from {stem}, which does not export it"
    # Both libraries are needed: the registry is in libggml, devices in libggml-base.
    assert exporting_library("ggml_backend_dev_count") == "libggml"
    assert exporting_library("ggml_backend_dev_name") == "libggml-base"


def test_ggml_api_lists_the_cpu_device():
    ggml = ggml_api()
    names = [ggml.ggml_backend_dev_name(ggml.ggml_backend_dev_get(i)).decode()
             for i in range(ggml.ggml_backend_dev_count())]
    assert "CPU" in names


def test_no_module_opens_a_ggml_library_for_its_functions_itself():
    """Every ggml function goes through ggml_api (one place knows where each one lives)."""
    offenders = []
    for folder in ("app", "models", "quantize"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if re.search(r'open_lib\("libggml', text) and path.name != "llama_lib.py":
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
