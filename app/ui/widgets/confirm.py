"""The one modal question QuantDesk asks: "really delete this?" (remove a model, cancel a
download, clear saved sessions). Errors never use a box; they go to the page's banner."""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox, QWidget


def confirm(parent: QWidget, title: str, text: str, object_name: str = "") -> bool:
    """Ask ``text`` with Yes / Cancel; True for Yes. The box is deleted after its answer."""
    box = QMessageBox(QMessageBox.Icon.Question, title, text,
                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel, parent)
    box.setDefaultButton(QMessageBox.StandardButton.Cancel)
    if object_name:
        box.setObjectName(object_name)
    answer = box.exec()
    box.deleteLater()
    return answer == QMessageBox.StandardButton.Yes
