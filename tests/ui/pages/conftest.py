"""Fixtures for the Models, Quantize and Settings pages: a window, real drops, tiny models, the fake Hub."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDragMoveEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QWidget

# The core's fake Hub fixture (HF_ENDPOINT pointed at a local server with a few repos).
from tests.models.hub.conftest import GATED_TOKEN, hub  # noqa: F401 (fixture, and the token it accepts)


@pytest.fixture
def window(qtbot):
    """The real main window, shown offscreen; closing it runs every page's shutdown."""
    from app.ui.main_window import MainWindow

    win = MainWindow()
    qtbot.addWidget(win)
    win.show()
    yield win
    win.close()


def drag_and_drop(widget: QWidget, path: Path) -> tuple[bool, bool]:
    """Deliver a file manager's drag of ``path`` to ``widget``: enter, move, drop.

    The drag offers the URL and, as real file managers do, the path as plain text.
    Returns whether the enter and the move events were accepted.
    """
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    mime.setText(QUrl.fromLocalFile(str(path)).toString())
    point = QPointF(widget.rect().center())
    buttons, mods = Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    enter = QDragEnterEvent(point, Qt.DropAction.CopyAction, mime, buttons, mods)
    QApplication.sendEvent(widget, enter)
    move = QDragMoveEvent(point + QPointF(3, 2), Qt.DropAction.CopyAction, mime, buttons, mods)
    QApplication.sendEvent(widget, move)
    drop = QDropEvent(point, Qt.DropAction.CopyAction, mime, buttons, mods)
    QApplication.sendEvent(widget, drop)
    return enter.isAccepted(), move.isAccepted()


@pytest.fixture(scope="session")
def tiny_hf_master(tmp_path_factory) -> Path:
    """A tiny real-format llama checkpoint (written once per session)."""
    from tests.factory.checkpoints import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("ck") / "tiny-hf").path


@pytest.fixture
def tiny_hf(tiny_hf_master, tmp_path) -> Path:
    """A private copy of the tiny checkpoint (outputs are written inside it)."""
    import shutil

    return Path(shutil.copytree(tiny_hf_master, tmp_path / "tiny-hf"))


@pytest.fixture(scope="session", autouse=True)
def hub_threads_end_before_exit():
    """Let Hub requests the client is still retrying (the network-down test's) end before the
    interpreter does, so no pool thread runs Python while it shuts down."""
    yield
    from app.ui.models.hub_panel import hub_pool

    hub_pool().waitForDone(40000)
