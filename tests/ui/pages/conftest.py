"""Fixtures for the Models, Quantize and Settings pages: real drops, tiny models, the fake Hub (the window is tests/ui/conftest.py's)."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QWidget

# The core's fake Hub fixture (HF_ENDPOINT pointed at a local server with a few repos).
from tests.models.hub.conftest import GATED_TOKEN, hub  # noqa: F401 (fixture, and the token it accepts)
from tests.ui.drag import drag_and_drop as _drag_and_drop


def drag_and_drop(widget: QWidget, path: Path) -> tuple[bool, bool]:
    """Drag ``path`` over ``widget`` as a file manager does and drop it; whether the
    enter and the move events were accepted."""
    return _drag_and_drop(widget, path)[:2]


@pytest.fixture(scope="session")
def tiny_hf_master(tmp_path_factory) -> Path:
    """A tiny real-format llama checkpoint (written once per session)."""
    from tests.conftest import SESSION_DIR_PREFIX
    from tests.factory.checkpoints import write_tiny_checkpoint

    folder = tmp_path_factory.mktemp(SESSION_DIR_PREFIX + "ck")
    return write_tiny_checkpoint(folder / "tiny-hf").path


@pytest.fixture
def tiny_hf(tiny_hf_master, tmp_path) -> Path:
    """A private copy of the tiny checkpoint (outputs are written inside it)."""
    import shutil

    return Path(shutil.copytree(tiny_hf_master, tmp_path / "tiny-hf"))


@pytest.fixture(scope="session", autouse=True)
def hub_threads_end_before_exit():
    """Let Hub requests still ending (cancelled ones stop at once) end before the interpreter
    does, so no pool thread runs Python while it shuts down."""
    yield
    from app.ui.models.hub_panel import hub_pool

    hub_pool().waitForDone(40000)
