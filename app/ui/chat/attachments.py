"""Pictures waiting to go with the next message: thumbnails above the message box.

A picture joins from the Attach button, a drop on the window, or a paste; each shows as a
small thumbnail that removes it when clicked. The files are checked as they join
(:func:`models.images.check_image`), so a picture the model cannot read is refused with a
sentence at once, not when the message is sent.
"""

from __future__ import annotations

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, QSize, Qt, Signal
from PySide6.QtGui import QIcon, QImage, QPixmap
from PySide6.QtWidgets import QHBoxLayout, QToolButton, QWidget

from models.images import check_image

THUMBNAIL = 56  # pixels a side


def png_of(image: QImage) -> bytes:
    """A pasted picture (a QImage, no file behind it) as PNG file bytes."""
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    buffer.close()
    return bytes(data.data())


def thumbnail(data: bytes, size: int = THUMBNAIL) -> QPixmap:
    """A picture scaled to fit ``size`` × ``size`` (empty if Qt cannot read it)."""
    pixmap = QPixmap()
    pixmap.loadFromData(data)
    if pixmap.isNull():
        return pixmap
    return pixmap.scaled(size, size, Qt.AspectRatioMode.KeepAspectRatio, Qt.TransformationMode.SmoothTransformation)


class AttachmentStrip(QWidget):
    """The pictures attached to the message being written. Hidden while there are none."""

    changed = Signal()

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("attachments")
        self.setAccessibleName("Attached pictures")
        self.images: list[bytes] = []
        self._row = QHBoxLayout(self)
        self._row.setContentsMargins(0, 0, 0, 4)
        self._row.addStretch(1)
        self.hide()

    def add(self, data: bytes) -> None:
        """Attach a picture (raises :class:`~models.foundation.errors.QuantDeskError` if unusable)."""
        check_image(data)
        self.images.append(bytes(data))
        self._rebuild()

    def remove(self, index: int) -> None:
        del self.images[index]
        self._rebuild()

    def replace(self, images: list[bytes]) -> None:
        """Show these pictures instead (a message being edited brings its own; they were
        checked when it was sent)."""
        self.images = [bytes(data) for data in images]
        self._rebuild()

    def take(self) -> list[bytes]:
        """The attached pictures, leaving none (the message took them)."""
        images, self.images = self.images, []
        self._rebuild()
        return images

    def _rebuild(self) -> None:
        while self._row.count() > 1:
            self._row.takeAt(0).widget().deleteLater()
        for index, data in enumerate(self.images):
            button = QToolButton()
            button.setIcon(QIcon(thumbnail(data)))
            button.setIconSize(QSize(THUMBNAIL, THUMBNAIL))
            button.setAccessibleName(f"Remove picture {index + 1}")
            button.setToolTip("Click to remove this picture")
            button.clicked.connect(lambda _=False, i=index: self.remove(i))
            self._row.insertWidget(index, button)
        self.setVisible(bool(self.images))
        self.changed.emit()
