"""The main window: a sidebar with the places of the app, a stack of pages, and the
one "open this path" entry (:meth:`MainWindow.open_path`) that the command line, the File
menu and drops anywhere on the window all go through.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

from PySide6.QtCore import QByteArray, QSize, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QIcon, QKeySequence
from PySide6.QtWidgets import (
    QApplication, QFileDialog, QHBoxLayout, QListWidget, QListWidgetItem, QMainWindow,
    QMessageBox, QStackedWidget, QVBoxLayout, QWidget,
)

from app.core.open_path import route_path
from app.core.preferences import Preferences
from app.ui.about import about_text
from app.ui.drops import FileDropFilter
from app.ui.pages import Page, page_classes
from app.ui.widgets.banner import MessageBanner
from assets import icon_path
from models.foundation import APP_NAME
from models.foundation.errors import QuantDeskError

log = logging.getLogger(__name__)

GEOMETRY_KEY = "window_geometry"


class MainWindow(QMainWindow):
    """QuantDesk's window. ``show_page(title)`` switches places; ``open_path`` opens a path.

    Args:
        initial_path: A path to open once the window is on screen (``quantdesk PATH``).
        preferences: Where the window geometry is kept (default: the app's preferences).
    """

    def __init__(self, initial_path: Optional[Path] = None,
                 preferences: Optional[Preferences] = None) -> None:
        super().__init__()
        self.setWindowTitle(APP_NAME)
        self.setWindowIcon(QIcon(str(icon_path())))
        self.setAcceptDrops(True)
        self.preferences = preferences if preferences is not None else _load_preferences()

        self.nav = QListWidget()
        self.nav.setObjectName("navigation")
        self.nav.setAccessibleName("Places")
        self.nav.setFixedWidth(180)
        self.nav.setIconSize(QSize(20, 20))
        self.stack = QStackedWidget()
        self.pages: dict[str, Page] = {}
        for page_class in page_classes():
            page = page_class()
            self.pages[page.title] = page
            self.stack.addWidget(page)
            QListWidgetItem(page.title, self.nav)
        self.nav.currentRowChanged.connect(self._row_changed)

        #: Window-level notices (a path that cannot be opened, ...); pages have their own.
        self.banner = MessageBanner()
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.setSpacing(0)
        right_layout.addWidget(self.banner)
        right_layout.addWidget(self.stack, 1)

        central = QWidget()
        layout = QHBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.nav)
        layout.addWidget(right, 1)
        self.setCentralWidget(central)
        self._build_menus()
        self._restore_geometry()
        self.nav.setCurrentRow(0)

        self._drop_filter = FileDropFilter(self, self.open_path)
        if initial_path is not None:
            # After the event loop starts, so the window is on screen when the page opens it.
            QTimer.singleShot(0, lambda: self.open_path(Path(initial_path)))

    # ----------------------------------------------------------------- menus
    def _build_menus(self) -> None:
        self.file_menu = self.menuBar().addMenu("&File")
        self.open_action = QAction("&Open…", self)
        self.open_action.setShortcut(QKeySequence.StandardKey.Open)
        self.open_action.triggered.connect(self.choose_file_to_open)
        self.file_menu.addAction(self.open_action)
        self.file_menu.addSeparator()
        quit_action = QAction("&Quit", self)
        quit_action.setShortcut("Ctrl+Q")
        quit_action.triggered.connect(self.close)
        self.file_menu.addAction(quit_action)
        self.quit_action = quit_action
        help_menu = self.menuBar().addMenu("&Help")
        self.about_action = QAction(f"&About {APP_NAME}", self)
        self.about_action.triggered.connect(self.show_about)
        help_menu.addAction(self.about_action)

    def add_file_action(self, action: QAction) -> None:
        """Put a page's action (Export…, Import…) in the File menu, above Quit."""
        self.file_menu.insertAction(self.quit_action, action)

    # ----------------------------------------------------------------- pages
    def show_page(self, title: str) -> Page:
        """Switch to the page called ``title`` (``"Chat"``, ``"Models"``, ...)."""
        index = list(self.pages).index(title)
        self.nav.setCurrentRow(index)
        return self.pages[title]

    def current_page(self) -> Page:
        """The page on screen."""
        return self.stack.currentWidget()  # type: ignore[return-value]

    def _row_changed(self, row: int) -> None:
        self.stack.setCurrentIndex(row)
        page = self.current_page()
        if page is not None:
            page.on_shown()

    # ------------------------------------------------------------- open path
    def open_path(self, path: Path) -> Optional[Page]:
        """Open ``path`` on the page it belongs to (:func:`app.core.open_path.route_path`).

        The one entry for ``quantdesk PATH``, File ▸ Open and drops on the window. A path
        that cannot be opened is explained in the window's banner, never a dialog.
        Returns the page that took the path, or ``None``.
        """
        try:
            route = route_path(path, self.current_page().title)
            page = self.show_page(route.page)
            page.open_path(route.path)
        except QuantDeskError as exc:
            self.banner.show_message(exc.user_message, "error")
            return None
        self.banner.clear()
        return page

    def choose_file_to_open(self) -> None:
        """File ▸ Open: a GGUF file or a model folder's file, through the same entry."""
        dialog = QFileDialog(self, "Open a model")
        dialog.setNameFilters([
            "Models (*.gguf *.safetensors config.json)", "GGUF models (*.gguf)", "All files (*)",
        ])
        dialog.setFileMode(QFileDialog.FileMode.ExistingFile)
        dialog.fileSelected.connect(lambda name: self.open_path(Path(name)))
        dialog.open()

    # -------------------------------------------------------------- lifecycle
    def _restore_geometry(self) -> None:
        saved = self.preferences.get(GEOMETRY_KEY) if self.preferences else None
        if not (saved and self.restoreGeometry(QByteArray.fromBase64(saved.encode("ascii")))):
            self.resize(1180, 760)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 (Qt's name)
        for page in self.pages.values():
            try:
                page.shutdown()
            except Exception:  # one page's failure must not keep the others running
                log.exception("%s page failed to shut down", page.title)
        if self.preferences is not None:
            try:
                self.preferences.set(GEOMETRY_KEY, bytes(self.saveGeometry().toBase64()).decode("ascii"))
            except QuantDeskError as exc:
                log.warning("window geometry not saved: %s", exc.user_message)
        app = QApplication.instance()
        if app is not None:
            app.removeEventFilter(self._drop_filter)
        super().closeEvent(event)

    def show_about(self) -> QMessageBox:
        """Open the About box (non-modal, so tests and users can keep working)."""
        box = QMessageBox(self)
        box.setWindowTitle(f"About {APP_NAME}")
        box.setIconPixmap(self.windowIcon().pixmap(64, 64))
        box.setText(about_text())
        box.setObjectName("aboutBox")
        box.open()
        return box


def _load_preferences() -> Optional[Preferences]:
    """The app's preferences, or ``None`` when the config folder is unusable (logged)."""
    try:
        return Preferences()
    except QuantDeskError as exc:
        log.warning("preferences unavailable: %s", exc.user_message)
        return None
