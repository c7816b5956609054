"""The main window: a sidebar with the four places of the app and a stack of pages."""

from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtGui import QAction, QIcon
from PySide6.QtWidgets import (
    QHBoxLayout, QListWidget, QListWidgetItem, QMainWindow, QMessageBox, QStackedWidget, QWidget,
)

from app import APP_NAME
from app.ui.about import about_text
from app.ui.pages import PAGES, Page
from assets import icon_path


class MainWindow(QMainWindow):
    """QuantDesk's window. ``show_page(title)`` switches places by name."""

    def __init__(self) -> None:
        super().__init__()
        self.setWindowTitle(APP_NAME)
        self.setWindowIcon(QIcon(str(icon_path())))
        self.resize(1100, 720)

        self.nav = QListWidget()
        self.nav.setObjectName("navigation")
        self.nav.setFixedWidth(180)
        self.nav.setIconSize(QSize(20, 20))
        self.stack = QStackedWidget()
        self.pages: dict[str, Page] = {}
        for page_class in PAGES:
            page = page_class()
            self.pages[page.title] = page
            self.stack.addWidget(page)
            QListWidgetItem(page.title, self.nav)
        self.nav.currentRowChanged.connect(self.stack.setCurrentIndex)
        self.nav.setCurrentRow(0)

        central = QWidget()
        layout = QHBoxLayout(central)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(self.nav)
        layout.addWidget(self.stack, 1)
        self.setCentralWidget(central)
        self._build_menus()

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        quit_action = QAction("&Quit", self)
        quit_action.setShortcut("Ctrl+Q")
        quit_action.triggered.connect(self.close)
        file_menu.addAction(quit_action)
        help_menu = self.menuBar().addMenu("&Help")
        self.about_action = QAction(f"&About {APP_NAME}", self)
        self.about_action.triggered.connect(self.show_about)
        help_menu.addAction(self.about_action)

    def show_page(self, title: str) -> Page:
        """Switch to the page called ``title`` (``"Chat"``, ``"Models"``, ...)."""
        index = list(self.pages).index(title)
        self.nav.setCurrentRow(index)
        return self.pages[title]

    def current_page(self) -> Page:
        """The page on screen."""
        return self.stack.currentWidget()  # type: ignore[return-value]

    def show_about(self) -> QMessageBox:
        """Open the About box (non-modal, so tests and users can keep working)."""
        box = QMessageBox(self)
        box.setWindowTitle(f"About {APP_NAME}")
        box.setIconPixmap(self.windowIcon().pixmap(64, 64))
        box.setText(about_text())
        box.setObjectName("aboutBox")
        box.open()
        return box
