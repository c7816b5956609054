"""The Library: the models on disk in a sortable, filterable table, with their actions.

The table is a :class:`~app.ui.widgets.rows_model.RowsTableModel` over
:class:`models.library.LibraryModel` rows (one object per row, no widget per row) behind
a :class:`QSortFilterProxyModel`. Opening shows the index as stored (SQLite, milliseconds)
and then rescans the disk off the GUI thread, so hundreds of files are usable at once.
A file with a stored quality report (the Quantize page's "Check quality", ``quantdesk
eval``) shows its mean KL divergence from its source in the Quality column, the rest of
the report in its tooltip.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Callable, Optional

from PySide6.QtCore import Qt, QThreadPool, Signal
from PySide6.QtWidgets import (
    QFileDialog, QHBoxLayout, QHeaderView, QLabel, QLineEdit, QPushButton, QVBoxLayout, QWidget,
)

from app.ui.widgets.banner import MessageBanner
from app.ui.widgets.confirm import confirm as ask
from app.ui.widgets.quality_text import quality_text, quality_tooltip
from app.ui.widgets.rows_model import Column, RowsFilterProxy, RowsTableModel, make_table
from app.ui.worker import JobWorker, start_job
from models.foundation.errors import QuantDeskError
from models.gguf_header import parameters_text


def architecture_text(model, reads: tuple = ()) -> str:
    """``gemma3 · vision``: the architecture, and what else the model is or reads — an
    embedding model (vectors, not replies), one that reads images or sound with its
    vision encoder (``reads``: its input modalities beyond text), or the encoder itself."""
    marks = ["embedding"] if model.embedding else []
    if model.is_projector:
        marks.append("vision encoder")
    marks += [{"image": "vision", "audio": "audio"}[r] for r in reads if r in ("image", "audio")]
    return " · ".join([model.architecture or "?", *marks])


def architecture_tooltip(model, reads: tuple = ()) -> str:
    if model.embedding:
        return "An embedding model: it makes vectors for search and retrieval (the server's /v1/embeddings), " \
               "not chat replies."
    if model.is_projector:
        return "A vision encoder (mmproj): it loads with the model it belongs to, which then reads images."
    if "image" in reads:
        return "Reads images with its vision encoder (Vision encoder… shows or changes which)."
    return ""


def size_text(n: Optional[int]) -> str:
    """``4.58 GB``-style sizes for tables (decimal units, as file managers show)."""
    if not n:
        return "–"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


LIBRARY_COLUMNS = [
    Column("Name", lambda m: m.name, tooltip=lambda m: m.path + (f"\nUnreadable: {m.error}" if m.error else "")),
    # The Architecture column is the panel's own (it knows which models read images).
    # "30.5B total, 3.3B active" for a mixture of experts
    Column("Parameters", lambda m: parameters_text(m.parameters, m.active_parameters),
           sort=lambda m: m.parameters or 0, align_right=True),
    Column("Quant", lambda m: m.quant or "–"),
    Column("Context", lambda m: f"{m.context_length:,}" if m.context_length else "–",
           sort=lambda m: m.context_length or 0, align_right=True),
    Column("Size", lambda m: size_text(m.size), sort=lambda m: m.size, align_right=True),
    Column("Source", lambda m: m.source),
    Column("Chat template", lambda m: "yes" if m.chat_template else "no"),
    Column("Added", lambda m: dt.datetime.fromtimestamp(m.added).strftime("%Y-%m-%d"), sort=lambda m: m.added),
]


class LibraryPanel(QWidget):
    """The Library table and its actions (Chat, Quantize, reveal, remove, import)."""

    #: Emitted after every refresh with the number of rows (tests and benchmarks wait on it).
    refreshed = Signal(int)

    def __init__(self, banner: MessageBanner, pool: Optional[QThreadPool] = None,
                 parent: Optional[QWidget] = None) -> None:
        super().__init__(parent)
        self.banner = banner
        self.pool = pool
        self._library = None
        self.quality: dict = {}  # path → models.library.QualityRecord of the files measured
        self.projector_menu = None  # the vision encoders offered for the selected model
        self.reads: dict = {}  # path → what a model reads beyond text (its encoder's header says)
        architecture = Column("Architecture", lambda m: architecture_text(m, self.reads.get(m.path, ())),
                              tooltip=lambda m: architecture_tooltip(m, self.reads.get(m.path, ())))
        quality = Column("Quality", lambda m: quality_text(self.quality.get(m.path)),
                         sort=lambda m: self.quality[m.path].stats["mean_kld"] if m.path in self.quality else None,
                         tooltip=lambda m: quality_tooltip(self.quality.get(m.path)), align_right=True)
        self.model = RowsTableModel([LIBRARY_COLUMNS[0], architecture, *LIBRARY_COLUMNS[1:5], quality,
                                     *LIBRARY_COLUMNS[5:]], self)
        self.proxy = RowsFilterProxy(self)
        self.proxy.setSourceModel(self.model)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        top = QHBoxLayout()
        self.filter_edit = QLineEdit()
        self.filter_edit.setPlaceholderText("Filter by name, architecture, quant, source…")
        self.filter_edit.setAccessibleName("Filter the Library")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.textChanged.connect(self.proxy.set_filter_text)
        top.addWidget(self.filter_edit, 1)
        self.buttons: dict[str, QPushButton] = {}
        for text, slot in (("Chat", self.chat_selected), ("Quantize", self.quantize_selected),
                           ("Vision encoder…", self.choose_projector),
                           ("Show in folder", self.reveal_selected), ("Remove…", self.remove_selected),
                           ("Import…", self.import_dialog)):
            button = QPushButton(text)
            button.setAccessibleName(text.rstrip("…"))
            button.clicked.connect(slot)
            top.addWidget(button)
            self.buttons[text.rstrip("…")] = button
        layout.addLayout(top)
        self.view = make_table(self.proxy, "Library")
        # Content-sized columns would measure every row on each change: fixed widths keep
        # hundreds of rows instant.
        self.view.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.view.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column, width in enumerate((0, 140, 90, 80, 80, 90, 95, 90, 105, 95)):
            if width:
                self.view.setColumnWidth(column, width)
        self.view.setSortingEnabled(True)
        self.view.sortByColumn(0, Qt.SortOrder.AscendingOrder)
        self.view.doubleClicked.connect(lambda _i: self.chat_selected())
        self.view.selectionModel().selectionChanged.connect(lambda *_: self._update_buttons())
        layout.addWidget(self.view, 1)
        self.status = QLabel("")
        self.status.setObjectName("libraryStatus")
        layout.addWidget(self.status)
        self._update_buttons()

    # ----------------------------------------------------------------- data
    @property
    def library(self):
        """The :class:`models.library.Library` (created on first use: it opens SQLite)."""
        if self._library is None:
            from models.library import Library

            self._library = Library()
        return self._library

    def reset_library(self) -> None:
        """Forget the index object (the models folder moved) and show the new folder's."""
        self._library = None
        self.load(rescan=True)

    def load(self, rescan: bool = True) -> None:
        """Show the stored index now, then (``rescan``) bring it up to date off the GUI thread."""
        try:
            self._show(self.library.models())
        except (QuantDeskError, OSError) as exc:
            self.banner.show_message(str(getattr(exc, "user_message", exc)), level="error")
            return
        if rescan:
            self.run(self._scan, self._scanned)

    def _scan(self) -> dict:
        """Off the GUI thread: the disk rescanned, then what each model reads."""
        self.library.scan()
        return {m.path: reads for m in self.library.models() if (reads := self._reads_of(m))}

    @staticmethod
    def _reads_of(model) -> tuple:
        """What ``model`` reads beyond text, as its vision encoder's header says (the one
        chosen for it, else the one beside it); reads files, so off the GUI thread."""
        if model.kind != "gguf" or model.error or model.is_projector or model.embedding:
            return ()
        from app.core.model_settings import load_settings_for
        from models.projector import input_modalities

        return tuple(input_modalities(model.path, load_settings_for(model.path).mmproj)[1:])

    def _scanned(self, reads: dict) -> None:
        self.reads = reads
        self._show(self.library.models())

    def _show(self, rows) -> None:
        selected = self.selected()
        self.quality = self.library.quality_reports()
        self.model.set_rows(rows)
        if selected is not None:
            self.select_path(selected.path)
        total = sum(m.size for m in rows)
        self.status.setText(f"{len(rows)} models, {size_text(total)} — {self.library.models_dir}")
        self._update_buttons()
        self.refreshed.emit(len(rows))

    def run(self, work: Callable[[], object], done: Callable[[object], None]) -> JobWorker:
        """Run ``work`` off the GUI thread; ``done(result)`` on it, errors to the banner."""
        return start_job(lambda report, cancel: work(), done,
                         lambda text: self.banner.show_message(text, level="error"), pool=self.pool, owner=self)

    # ----------------------------------------------------------------- selection
    def selected(self):
        rows = self.view.selectionModel().selectedRows() if self.view.selectionModel() else []
        return self.model.row_at(rows[0]) if rows else None

    def select_path(self, path: str) -> bool:
        for row in range(self.proxy.rowCount()):
            index = self.proxy.index(row, 0)
            if self.model.row_at(index).path == str(path):
                self.view.selectRow(row)
                return True
        return False

    def _update_buttons(self) -> None:
        model = self.selected()
        for name in ("Chat", "Show in folder", "Remove"):
            self.buttons[name].setEnabled(model is not None)
        self.buttons["Quantize"].setEnabled(model is not None and (
            model.kind == "safetensors" or model.file_type in (0, 1, 32)))
        if model is not None and model.kind == "safetensors":
            self.buttons["Chat"].setEnabled(False)  # convert it first
        self.buttons["Vision encoder"].setEnabled(
            model is not None and model.kind == "gguf" and not model.error and not model.is_projector
            and not model.embedding)
        self.buttons["Vision encoder"].setToolTip(
            "Choose the vision encoder (mmproj file) this model reads images with")

    # ----------------------------------------------------------------- actions
    def chat_selected(self) -> None:
        model = self.selected()
        window = self.window()
        if model is not None and model.kind == "gguf" and hasattr(window, "open_path"):
            window.open_path(Path(model.path))

    def quantize_selected(self) -> None:
        model = self.selected()
        window = self.window()
        if model is not None and hasattr(window, "show_page"):
            window.show_page("Quantize").open_path(Path(model.path))

    def reveal_selected(self) -> None:
        model = self.selected()
        if model is None:
            return
        from models.foundation.system_programs import open_in_file_manager

        try:
            open_in_file_manager(Path(model.path))
        except QuantDeskError as exc:
            self.banner.show_message(exc.user_message, level="error")

    def remove_selected(self, confirm: bool = True) -> None:
        """Remove the selected model after a confirmation (files only inside the models folder)."""
        model = self.selected()
        if model is None:
            return
        inside = Path(model.path).is_relative_to(self.library.models_dir)
        what = (f"Delete {model.name} ({size_text(model.size)}) from disk?" if inside else
                f"Forget {model.name}? The file stays where it is:\n{model.path}")
        if confirm and not ask(self, "Remove model", what, "confirmRemove"):
            return
        path = Path(model.path)
        self.run(lambda: self.library.remove(path), lambda _deleted: self.load(rescan=False))

    def choose_projector(self) -> None:
        """Offer the vision encoders that pair with the selected model (those beside it,
        then the Library's others of its width), the one it loads with ticked, and any
        other file; the choice is remembered with the model's load settings."""
        model = self.selected()
        if model is None or not self.buttons["Vision encoder"].isEnabled():
            return
        from app.core.model_settings import load_settings_for
        from models.projector import matching_projectors, projector_to_load

        others = [m.path for m in self.library.models() if m.is_projector]

        def work():
            return (matching_projectors(model.path, others),
                    projector_to_load(model.path, load_settings_for(model.path).mmproj))

        self.run(work, lambda found: self._offer_projectors(model, *found))

    def _offer_projectors(self, model, choices: list, current) -> None:
        from PySide6.QtGui import QCursor
        from PySide6.QtWidgets import QMenu

        menu = self.projector_menu = QMenu(self)
        menu.setAccessibleName("Vision encoders")
        for path in choices:
            action = menu.addAction(f"{path.name}  ({size_text(path.stat().st_size)}, {path.parent.name}/)")
            action.setCheckable(True)
            action.setChecked(current is not None and Path(current).resolve() == path)
            action.triggered.connect(lambda _=False, p=path: self.set_projector(model, p))
        if not choices:
            menu.addAction(f"No vision encoder of {Path(model.path).name}'s width is beside it or in the Library")\
                .setEnabled(False)
        menu.addSeparator()
        menu.addAction("Other file…", lambda: self._projector_dialog(model))
        button = self.buttons["Vision encoder"]
        menu.popup(button.mapToGlobal(button.rect().bottomLeft()) if button.isVisible() else QCursor.pos())

    def _projector_dialog(self, model) -> None:
        name, _ = QFileDialog.getOpenFileName(self, f"Vision encoder for {Path(model.path).name}",
                                              str(Path(model.path).parent), "mmproj GGUF (*.gguf)")
        if name:
            self.set_projector(model, Path(name))

    def set_projector(self, model, projector: Path) -> None:
        """Remember ``projector`` for ``model`` (a file of another width is refused with a
        sentence naming both numbers)."""
        from app.core.model_settings import choose_projector
        from models.projector import input_modalities

        def work():
            chosen = choose_projector(model.path, projector)
            return chosen, tuple(input_modalities(model.path, str(chosen))[1:])

        def done(result) -> None:
            chosen, self.reads[model.path] = result
            self._show(self.library.models())
            self.banner.show_message(f"{Path(model.path).name} reads images with {chosen.name} from its next load.",
                                     level="info")

        self.run(work, done)

    def import_dialog(self) -> None:
        name, _ = QFileDialog.getOpenFileName(self, "Import a GGUF model", "", "GGUF (*.gguf)")
        if name:
            self.import_path(Path(name))

    def import_path(self, path: Path) -> None:
        """Add a model where it is (it is not copied)."""
        def work():
            model = self.library.import_path(path)
            return model, self._reads_of(model)

        def added(result) -> None:
            model, self.reads[model.path] = result
            self.load(rescan=False)
            self.select_path(model.path)
            self.banner.show_message(f"Added {model.name} to the Library.", level="info")

        self.run(work, added)
