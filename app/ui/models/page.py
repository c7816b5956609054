"""The Models page: the Library and Hub search in tabs, the download queue below them.

A finished download appears in the Library (a rescan off the GUI thread); partial
downloads from a previous run are listed paused when the page is first shown; closing
the window pauses running downloads so they come back paused next time. Errors show in
the page's banner; the Library keeps working when the Hub cannot be reached.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from PySide6.QtCore import Qt, QThreadPool
from PySide6.QtWidgets import QSplitter, QTabWidget, QWidget

from app.ui.models.downloads_panel import DownloadsPanel
from app.ui.models.hub_panel import HubPanel
from app.ui.models.library_panel import LibraryPanel
from app.ui.pages import Page
from app.ui.widgets.banner import MessageBanner
from app.ui.widgets.page_frame import page_layout
from app.ui.worker import JobWorker


class ModelsPage(Page):
    """Library, Hub search and details, and the download queue."""

    title = "Models"
    summary = "Search the Hugging Face Hub, download models, and see what is on this computer."

    def __init__(self, parent: Optional[QWidget] = None) -> None:
        super().__init__(parent)
        self.pool = QThreadPool(self)  # disk work here never waits behind a quantize job
        self.pool.setMaxThreadCount(2)
        layout = page_layout(self, self.title, self.summary)
        self.banner = MessageBanner(self)
        layout.addWidget(self.banner)
        self.library = LibraryPanel(self.banner, self.pool)
        self.downloads = DownloadsPanel(self.banner)
        self.hub = HubPanel(self.banner, self.downloads)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.library, "Library")
        self.tabs.addTab(self.hub, "Hugging Face Hub")
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.tabs)
        splitter.addWidget(self.downloads)
        splitter.setSizes([480, 170])
        layout.addWidget(splitter, 1)
        self.downloads.task_done.connect(lambda _task: self.library.load(rescan=True))
        self._started = False
        self._restore_worker: Optional[JobWorker] = None

    def on_shown(self) -> None:
        """On screen: the first time, load the Library and list unfinished downloads, paused;
        later, show the index again (a quantize job may have added files meanwhile)."""
        if self._started:
            self.library.load(rescan=False)
        self.start()

    def showEvent(self, event) -> None:  # noqa: N802 (Qt's name)
        super().showEvent(event)
        self.start()

    def start(self) -> None:
        """Load the Library and restore paused downloads once (idempotent)."""
        if self._started:
            return
        self._started = True
        self.library.load(rescan=True)
        worker = JobWorker(lambda report, cancel: self.downloads.restore())
        worker.signals.finished.connect(self.downloads.show_restored)
        worker.signals.failed.connect(lambda text: self.banner.show_message(text, level="error"))
        self._restore_worker = worker
        worker.start(self.pool)

    def models_folder_changed(self) -> None:
        """Settings moved the models folder: list the new one; new downloads go there."""
        self.library.reset_library()
        self.downloads.reset_manager()

    def show_hub(self) -> HubPanel:
        self.tabs.setCurrentWidget(self.hub)
        return self.hub

    def show_library(self) -> LibraryPanel:
        self.tabs.setCurrentWidget(self.library)
        return self.library

    def open_path(self, path: Path) -> None:
        """A model dropped here is imported into the Library (it stays where it is)."""
        self.show_library().import_path(Path(path))

    def shutdown(self) -> None:
        """Pause running downloads (kept on disk, listed paused next start) and let disk work end.

        Hub requests are cancelled, not waited for: they only read, and stop at once.
        """
        self.hub.shutdown()
        self.downloads.shutdown()
        self.pool.waitForDone(5000)  # a Library scan or removal in progress finishes

