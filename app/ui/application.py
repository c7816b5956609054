"""Creating the QApplication and running the main window."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from app import __version__
from app.core.preferences import Preferences
from app.ui.garbage import collect_on_gui_thread
from app.ui.theme import apply_theme
from assets import icon_path
from models.foundation import APP_NAME


def create_application(argv: list[str] | None = None) -> QApplication:
    """The process's QApplication, created once, with name, version and icon set."""
    # Qt's raster engine hands every fill of 96 or more scan lines (a scroll bar, a
    # repainted viewport) to a pool of helper threads and waits for them. Here that
    # costs more than it saves: a Fusion scroll bar repaint took 1.5-3.2 ms of CPU
    # with the pool, 0.5 ms without, and each hand-off wakes threads that take a core
    # from the engine's decoding threads. Read by Qt once, at the first paint.
    os.environ.setdefault("QT_NO_GUI_THREADPOOL", "1")
    app = QApplication.instance() or QApplication(argv if argv is not None else sys.argv[:1])
    app.setApplicationName(APP_NAME)
    app.setApplicationDisplayName(APP_NAME)
    app.setApplicationVersion(__version__)
    app.setOrganizationName(APP_NAME)
    app.setWindowIcon(QIcon(str(icon_path())))
    apply_theme(_theme_preference(), app)
    collect_on_gui_thread(app)  # Qt objects must never be freed by a worker thread's GC
    return app  # type: ignore[return-value]


def _theme_preference() -> str:
    from models.foundation.errors import QuantDeskError

    try:
        return str(Preferences().get("theme", "system"))
    except QuantDeskError:
        return "system"


def run_gui(initial_path: Optional[str | Path] = None) -> int:
    """Show the main window (opening ``initial_path`` in it) and run the event loop."""
    from app.ui.main_window import MainWindow

    app = create_application()
    window = MainWindow(initial_path=Path(initial_path) if initial_path else None)
    window.show()
    window.raise_()
    window.activateWindow()
    return app.exec()
