"""Chat page fixtures: a window on the Chat page, SmolLM2 loaded with small fast settings."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.models.conftest import FAST_SETTINGS


def wait_reply(qtbot, page, timeout=120_000) -> None:
    """Wait until the reply in progress has ended and been stored."""
    qtbot.waitUntil(lambda: not page.engine.streaming, timeout=timeout)


def open_chat_window(qtbot, model=None, max_tokens=16, client=None):
    """A shown MainWindow on the Chat page; with ``model``, that model loaded (by
    ``client``, an EngineClient to share, or the page's own engine)."""
    from app.core.preferences import Preferences
    from app.ui.main_window import MainWindow

    Preferences().set("default_load_settings", dict(FAST_SETTINGS))
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    window.activateWindow()  # shortcuts need the window active
    qtbot.waitUntil(window.isActiveWindow, timeout=5_000)
    page = window.show_page("Chat")
    page.ensure_started()
    if client is not None:
        page.engine.use_client(client)
    page.panel.sampling.temperature.setValue(0.0)
    page.panel.sampling.max_tokens.setValue(max_tokens)
    if model is not None:
        window.open_path(model)
        qtbot.waitUntil(lambda: page.engine.ready, timeout=120_000)
    return window, page


def second_model_file(model: Path, folder: Path) -> Path:
    """Another model file (the same weights under another name): a hard link, else a copy."""
    other = folder / "SmolLM2-copy.Q4_1.gguf"
    try:
        os.link(model, other)
    except OSError:
        shutil.copyfile(model, other)
    return other


@pytest.fixture(scope="module")
def shared_engine():
    """One engine process for a test module (starting one costs seconds on CI)."""
    from models.engine import EngineClient

    client = EngineClient()
    yield client
    client.shutdown()


@pytest.fixture
def chat(qtbot, smollm2_gguf, shared_engine):
    """(window, page) with SmolLM2 loaded in the module's shared engine."""
    window, page = open_chat_window(qtbot, smollm2_gguf, client=shared_engine)
    yield window, page
    page.shutdown()
