"""The composer: the message box ("Message") with Send, Stop and Attach image, and the
pictures attached to the next message (:mod:`app.ui.chat.attachments`).

Enter sends, Shift+Enter starts a new line, Esc stops the reply. The box stays enabled
while a reply streams (the page refuses a second send instead), so keyboard focus is
never lost. Dropped or pasted file URLs are not inserted as ``file:///`` text: the
window's drop filter opens them (:mod:`app.ui.drops`; a picture file is attached). A
pasted picture (a screenshot) is attached.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QMimeData, Qt, Signal
from PySide6.QtGui import QImage, QKeyEvent
from PySide6.QtWidgets import (QFileDialog, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout,
                               QWidget)

from app.ui.chat.attachments import AttachmentStrip, png_of
from models.foundation.errors import QuantDeskError


class MessageBox(QPlainTextEdit):
    """The text box a person types into."""

    send_requested = Signal()
    stop_requested = Signal()
    image_pasted = Signal(QImage)

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
        return source.hasImage() or (not self._is_file(source) and super().canInsertFromMimeData(source))

    def insertFromMimeData(self, source: QMimeData) -> None:  # noqa: N802 - Qt
        if source.hasImage() and not self._is_file(source):
            self.image_pasted.emit(source.imageData())
        elif not self._is_file(source):  # a file is opened by the window, never pasted as a URL
            super().insertFromMimeData(source)


class Composer(QWidget):
    """Message box, Send, Stop and Attach image, the attached pictures, and a line saying
    when a message is being edited."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.box = MessageBox()
        self.attachments = AttachmentStrip()
        self.attach_button = QPushButton("Attach image")
        self.attach_button.setAccessibleName("Attach image")
        self.attach_button.clicked.connect(self.choose_images)
        self.box.image_pasted.connect(lambda image: self.attach(png_of(image)))
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
        buttons.addWidget(self.attach_button)
        buttons.addStretch(1)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.box, 1)
        row.addLayout(buttons)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 4, 12, 10)
        layout.addWidget(self.note)
        layout.addWidget(self.attachments)
        layout.addLayout(row)
        self.set_vision(False, "Load a model that reads images (its mmproj file beside it) to attach pictures.")

    def set_streaming(self, streaming: bool) -> None:
        """Stop is on while a reply streams; the box stays enabled and focused."""
        self.stop_button.setEnabled(streaming)

    def set_vision(self, reads_images: bool, why_not: str = "") -> None:
        """Attach image is on only for a model that reads images; ``why_not`` says why not."""
        self.attach_button.setEnabled(reads_images)
        self.attach_button.setToolTip("Attach a picture (you can also drop or paste one)"
                                      if reads_images else why_not)

    def attach(self, data: bytes) -> None:
        """Attach a picture, or say in the note why it cannot be."""
        if not self.attach_button.isEnabled():
            return self.show_note(self.attach_button.toolTip())
        try:
            self.attachments.add(data)
        except QuantDeskError as exc:
            return self.show_note(exc.user_message)
        self.show_note("")

    def attach_file(self, path: Path) -> None:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            return self.show_note(f"Could not read {Path(path).name}: {exc.strerror}.")
        self.attach(data)

    def choose_images(self) -> None:
        dialog = QFileDialog(self, "Attach pictures")
        dialog.setNameFilters(["Pictures (*.png *.jpg *.jpeg *.gif *.bmp)", "All files (*)"])
        dialog.setFileMode(QFileDialog.FileMode.ExistingFiles)
        dialog.filesSelected.connect(lambda names: [self.attach_file(Path(n)) for n in names])
        dialog.open()

    def show_note(self, text: str) -> None:
        """A line above the box ("Editing your message…", an error); "" hides it."""
        self.note.setText(text)
        self.note.setVisible(bool(text))
