"""Dragging files onto a window in tests, the way the platform delivers a real drag."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDragMoveEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QWidget


def file_mime(path: Path) -> QMimeData:
    """What a file manager's drag carries: the URL and the same as plain text."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    mime.setText(QUrl.fromLocalFile(str(path)).toString())
    return mime


def drag_and_drop(widget: QWidget, data: Path | QMimeData) -> tuple[bool, bool, bool]:
    """Drag ``data`` (a path, or any mime data) over the middle of ``widget`` and drop it.

    The events go to the top-level window's QWindow at that point — as the platform
    sends them (X11's XDND, Windows' OLE, macOS's NSDraggingDestination) — and Qt hands
    them to the widget under the pointer. Returns whether enter, move and drop were accepted.
    """
    mime = file_mime(data) if isinstance(data, Path) else data
    top = widget.window()
    point = widget.mapTo(top, widget.rect().center())
    moved = point + QPoint(3, 2)
    target = top.windowHandle()
    action = Qt.DropAction.CopyAction
    buttons, mods = Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    enter = _event(QDragEnterEvent, point, action, mime, buttons, mods)
    QApplication.sendEvent(target, enter)
    move = _event(QDragMoveEvent, moved, action, mime, buttons, mods)
    QApplication.sendEvent(target, move)
    drop = QDropEvent(QPointF(moved), action, mime, buttons, mods)
    QApplication.sendEvent(target, drop)
    return enter.isAccepted(), move.isAccepted(), drop.isAccepted()


def _event(kind, point: QPoint, *args):
    """A drag event at ``point``: Qt 6.12 takes a QPointF (its QPoint form is deprecated),
    earlier versions only a QPoint."""
    try:
        return kind(QPointF(point), *args)
    except TypeError:
        return kind(point, *args)
