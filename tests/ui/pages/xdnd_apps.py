"""Two small programs for the real-drag test, each run in its own process on an Xvfb display.

``source PATH``: a 90×90 window at the screen's right edge that starts a drag of PATH the
moment a mouse button goes down on it, offering what a file manager offers (the URL and
the same as plain text).

``target``: QuantDesk's real main window at the screen's top left; it prints
``PLANNED <path> <rows>`` when the Quantize page has planned a dropped input, and
``BANNER <text>`` if the window refuses the drop.
"""

from __future__ import annotations

import sys

from PySide6.QtCore import QMimeData, Qt, QUrl
from PySide6.QtGui import QDrag
from PySide6.QtWidgets import QApplication, QLabel


class DragSource(QLabel):
    def __init__(self, path: str) -> None:
        super().__init__("drag me")
        self.path = path
        self.setWindowTitle("drag-source")
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setGeometry(1185, 10, 90, 90)

    def mousePressEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        mime = QMimeData()
        url = QUrl.fromLocalFile(self.path)
        mime.setUrls([url])
        mime.setText(url.toString())
        drag = QDrag(self)
        drag.setMimeData(mime)
        result = drag.exec(Qt.DropAction.CopyAction | Qt.DropAction.MoveAction | Qt.DropAction.LinkAction)
        print(f"DRAG {result.name}", flush=True)


def run_source(path: str) -> int:
    app = QApplication(sys.argv[:1])
    source = DragSource(path)
    source.show()
    print("READY", flush=True)
    return app.exec()


def run_target() -> int:
    from app.ui.application import create_application
    from app.ui.main_window import MainWindow

    app = create_application()
    window = MainWindow()
    window.move(0, 0)
    window.resize(1180, 760)
    quantize = window.pages["Quantize"]
    quantize.planned.connect(lambda: print(
        f"PLANNED {quantize.input.path if quantize.input else None} {quantize.types_model.rowCount()}",
        flush=True))
    window.banner.dismissed.connect(lambda: None)
    window.show()
    print("READY", flush=True)
    return app.exec()


if __name__ == "__main__":
    sys.exit(run_source(sys.argv[2]) if sys.argv[1] == "source" else run_target())
