"""Files dragged onto the window: accepted anywhere over it, opened through one entry.

An event filter on the window's ``QWindow`` sees every drag event before the widget
under the pointer does: the platform delivers drags to the QWindow, which hands them on
to the child widget. For a drag that carries local files the filter accepts the proposed
action on enter and move — over any child, text boxes included, which would otherwise
take the ``file:///…`` URL as text to paste — and on drop hands the first path to
``MainWindow.open_path``, the same function ``quantdesk PATH`` uses. Drags without local
files (text dragged inside a text box) pass through untouched.

Why the QWindow and not the QApplication: an application-level filter is called for
every event of every object (each timer tick, paint and posted event) — a Python call
each time, measured at about a sixth of the GUI thread's work while a reply streams.
The QWindow gets only input, expose and drag events.
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

    It installs itself on the window's QWindow (creating the native window if needed).
    """

    def __init__(self, window: QWidget, open_path: Callable[[Path], None]) -> None:
        super().__init__(window)
        self._open_path = open_path
        window.winId()  # the QWindow exists from here on (it would be created at show)
        self._handle = window.windowHandle()
        self._handle.installEventFilter(self)

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        if event.type() not in _DRAG_EVENTS or obj is not self._handle:
            return False
        assert isinstance(event, QDropEvent)  # DragEnter and DragMove derive from it
        paths = dropped_paths(event.mimeData())
        if not paths:
            return False
        event.acceptProposedAction()
        if event.type() == QEvent.Type.Drop:
            self._open_path(paths[0])
        return True
