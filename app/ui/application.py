"""Creating the QApplication and running the main window."""

from __future__ import annotations

import sys

from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from app import APP_NAME, __version__
from assets import icon_path, style_sheet


def create_application(argv: list[str] | None = None) -> QApplication:
    """The process's QApplication, created once, with name, version and icon set."""
    app = QApplication.instance() or QApplication(argv if argv is not None else sys.argv[:1])
    app.setApplicationName(APP_NAME)
    app.setApplicationDisplayName(APP_NAME)
    app.setApplicationVersion(__version__)
    app.setOrganizationName(APP_NAME)
    app.setWindowIcon(QIcon(str(icon_path())))
    app.setStyleSheet(style_sheet())
    return app  # type: ignore[return-value]


def run_gui() -> int:
    """Show the main window and run the event loop until it closes."""
    from app.ui.main_window import MainWindow

    app = create_application()
    window = MainWindow()
    window.show()
    return app.exec()
