"""Files dragged onto the window: accepted anywhere over it, opened through one entry.

An application-level event filter sees every drag event before the widget under the
pointer does. For a drag that carries local files it accepts the proposed action on
enter and move — over any child, text boxes included, which would otherwise take the
``file:///…`` URL as text to paste — and on drop hands the first path to
``MainWindow.open_path``, the same function ``quantdesk PATH`` uses. Drags without local
files (text dragged inside a text box) pass through untouched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from PySide6.QtCore import QEvent, QMimeData, QObject
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QWidget

_DRAG_EVENTS = (QEvent.Type.DragEnter, QEvent.Type.DragMove, QEvent.Type.Drop)


def dropped_paths(mime: Optional[QMimeData]) -> list[Path]:
    """The local files and folders in a drag's data, in the order given.

    A file manager's drag offers both ``text/uri-list`` and ``text/plain``; the URLs are
    what counts. Remote URLs (``https://…``) are not files and are left out.
    """
    if mime is None or not mime.hasUrls():
        return []
    return [Path(url.toLocalFile()) for url in mime.urls() if url.isLocalFile() and url.toLocalFile()]


class FileDropFilter(QObject):
    """Routes file drops on ``window`` (and every widget inside it) to ``open_path``.

    Install it on the QApplication: ``app.installEventFilter(FileDropFilter(window, window.open_path))``.
    """

    def __init__(self, window: QWidget, open_path: Callable[[Path], None]) -> None:
        super().__init__(window)
        self._window = window
        self._open_path = open_path

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if event.type() not in _DRAG_EVENTS:
            return False
        if not isinstance(obj, QWidget) or obj.window() is not self._window:
            return False
        assert isinstance(event, QDropEvent)  # DragEnter and DragMove derive from it
        paths = dropped_paths(event.mimeData())
        if not paths:
            return False
        event.acceptProposedAction()
        if event.type() == QEvent.Type.Drop:
            self._open_path(paths[0])
        return True
