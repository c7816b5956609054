"""The composer: the message box ("Message") with Send and Stop.

Enter sends, Shift+Enter starts a new line, Esc stops the reply. The box stays enabled
while a reply streams (the page refuses a second send instead), so keyboard focus is
never lost. Dropped or pasted file URLs are not inserted as ``file:///`` text: the
window's drop filter opens them (:mod:`app.ui.drops`).
"""

from __future__ import annotations

from PySide6.QtCore import QMimeData, Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget


class MessageBox(QPlainTextEdit):
    """The text box a person types into."""

    send_requested = Signal()
    stop_requested = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("messageBox")
        self.setAccessibleName("Message")
        self.setPlaceholderText("Message — Enter sends, Shift+Enter adds a line, Esc stops")
        self.setTabChangesFocus(True)
        self.setMaximumHeight(140)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt
        key, mods = event.key(), event.modifiers()
        if key in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and \
                not mods & Qt.KeyboardModifier.ShiftModifier:
            self.send_requested.emit()
            return
        if key == Qt.Key.Key_Escape:
            self.stop_requested.emit()
            return
        super().keyPressEvent(event)

    @staticmethod
    def _is_file(source: QMimeData) -> bool:
        return source.hasUrls() and any(url.isLocalFile() for url in source.urls())

    def canInsertFromMimeData(self, source: QMimeData) -> bool:  # noqa: N802 - Qt
        return not self._is_file(source) and super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source: QMimeData) -> None:  # noqa: N802 - Qt
        if not self._is_file(source):  # a file is opened by the window, never pasted as a URL
            super().insertFromMimeData(source)


class Composer(QWidget):
    """Message box, Send and Stop, and a line saying when a message is being edited."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.box = MessageBox()
        self.send_button = QPushButton("Send")
        self.send_button.setAccessibleName("Send")
        self.send_button.setDefault(True)
        self.stop_button = QPushButton("Stop")
        self.stop_button.setAccessibleName("Stop")
        self.stop_button.setToolTip("Stop the reply (Esc); the text so far is kept")
        self.stop_button.setEnabled(False)
        self.note = QLabel()
        self.note.setObjectName("composerNote")
        self.note.setWordWrap(True)
        self.note.hide()
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addStretch(1)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.box, 1)
        row.addLayout(buttons)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 4, 12, 10)
        layout.addWidget(self.note)
        layout.addLayout(row)

    def set_streaming(self, streaming: bool) -> None:
        """Stop is on while a reply streams; the box stays enabled and focused."""
        self.stop_button.setEnabled(streaming)

    def show_note(self, text: str) -> None:
        """A line above the box ("Editing your message…", an error); "" hides it."""
        self.note.setText(text)
        self.note.setVisible(bool(text))
