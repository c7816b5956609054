"""Hub search and a model's details: variants with sizes and fit badges, convertible checkpoints.

Every Hub request runs off the GUI thread on the panel's own thread pool (a slow server
must not starve the global pool that quantize jobs use). A new search supersedes the old
one, a newly selected model the old model's details: the old request is cancelled — it
stops at once, also while it waits for the Hub (:mod:`models.hub.session`) — and a late
answer is ignored, so results never arrive out of order. Closing the page cancels what is
still asked. Errors (gated repo, network down) are the core's sentences in the banner; a
gated or private repo's sentence offers to open the token in Settings.
"""

from __future__ import annotations

from typing import Optional

from PySide6.QtCore import Qt, QThreadPool, QTimer, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QLineEdit, QPushButton, QSplitter, QVBoxLayout, QWidget

from app.core.quantize_queue import fit_settings_from, saved_load_settings
from app.ui.models.library_panel import size_text
from app.ui.widgets.banner import MessageBanner
from app.ui.widgets.fit_badge import fit_icon, fit_word
from app.ui.widgets.rows_model import Column, RowsTableModel, make_table
from app.ui.worker import JobWorker, start_job
from models.gguf_header import parameters_text

PAGE_SIZE = 25
PROBE_AFTER_MS = 1500  # a search this slow gets a quick connection check beside it


def _count(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)


RESULT_COLUMNS = [
    Column("Model", lambda m: m.repo_id),
    Column("Author", lambda m: m.author),
    Column("Downloads", lambda m: _count(m.downloads), sort=lambda m: m.downloads, align_right=True),
    Column("Likes", lambda m: _count(m.likes), sort=lambda m: m.likes, align_right=True),
    Column("Updated", lambda m: m.updated.strftime("%Y-%m-%d") if m.updated else "–"),
    Column("License", lambda m: m.license or "–"),
    Column("Gated", lambda m: "private" if m.private else (f"gated ({m.gated})" if m.gated else "no")),
]


class Choice:
    """A row of the details table: a GGUF variant or the convertible checkpoint."""

    def __init__(self, label: str, size: int, files: int, kind: str, fit: Optional[str], reason: str) -> None:
        self.label, self.size, self.files, self.kind = label, size, files, kind
        self.fit, self.reason = fit, reason


VARIANT_COLUMNS = [
    Column("Variant", lambda c: c.label),
    Column("Size", lambda c: size_text(c.size), sort=lambda c: c.size, align_right=True,
           tooltip=lambda c: f"{c.size:,} bytes in {c.files} file(s)"),
    Column("Files", lambda c: "1" if c.files == 1 else f"{c.files} parts", sort=lambda c: c.files),
    Column("Fit", lambda c: "convertible" if c.kind == "safetensors" else fit_word(c.fit),
           tooltip=lambda c: c.reason, decoration=lambda c: None if c.kind == "safetensors" else fit_icon(c.fit)),
]


def details_choices(details, load_settings: Optional[dict] = None, judge=None) -> list[Choice]:
    """The rows to show for ``details`` (runs off the GUI thread: the fit asks the hardware)."""
    from models.foundation.errors import QuantDeskError
    from models.memory_fit import fit_of_file_size

    from models.hub.details import projector_for

    settings = fit_settings_from(load_settings)
    rows = []
    for v in details.variants:
        projector = projector_for(details, v)  # downloaded and loaded with it: it counts
        size = v.size + (projector.size if projector is not None else 0)
        try:
            verdict = fit_of_file_size(size, settings, judge)
            fit, reason = verdict.verdict, verdict.reason
        except QuantDeskError as exc:
            fit, reason = None, exc.user_message
        if projector is not None:
            reason += f"; with its vision encoder {projector.path.rsplit('/', 1)[-1]} ({size_text(projector.size)})"
        label = v.quant if v.complete else f"{v.quant} (incomplete: {len(v.files)} of {v.expected_shards} parts)"
        rows.append(Choice(label + (" + vision" if projector is not None else ""), size,
                           len(v.files) + (projector is not None), "gguf", fit, reason))
    if details.checkpoint is not None:
        arch = ", ".join(details.checkpoint.architectures) or "unknown architecture"
        rows.append(Choice("safetensors", details.checkpoint.size, len(details.checkpoint.files), "safetensors",
                           None, f"A Hugging Face checkpoint ({arch}): download it and quantize it here."))
    return rows


_HUB_POOL: Optional[QThreadPool] = None


def hub_pool() -> QThreadPool:
    """The threads Hub requests run on: separate from the global pool (a slow Hub must not
    hold back quantize jobs) and owned by no widget, because a pool's destructor waits for
    its threads and a request that is not cancellable (a TCP connect, a retry of an HTTP 5xx
    answer) must not freeze a closing window."""
    global _HUB_POOL
    if _HUB_POOL is None:
        _HUB_POOL = QThreadPool()
        _HUB_POOL.setMaxThreadCount(8)  # a request still ending (or not cancellable) must not block the next
    return _HUB_POOL


def open_settings(widget: QWidget) -> None:
    """Show the Settings page (where the token is) of ``widget``'s window."""
    window = widget.window()
    if hasattr(window, "show_page"):
        window.show_page("Settings")


def show_hub_error(banner: MessageBanner, message: str, widget: Optional[QWidget] = None) -> None:
    """A Hub sentence in ``banner``; one about access (gated, private, token) offers the Settings page."""
    if any(word in message.lower() for word in ("token", "gated", "private")):
        banner.show_message(message, level="error", action_text="Open Settings",
                            on_action=lambda: open_settings(widget or banner))
    else:
        banner.show_message(message, level="error")


class HubPanel(QWidget):
    """Search box, results table, details table with Download and "Download and quantize"."""

    #: Emitted when a search's results are shown (or failed), with the number of rows.
    searched = Signal(int)
    #: Emitted when a model's details are shown (or failed).
    details_shown = Signal()

    def __init__(self, banner: MessageBanner, downloads, parent: Optional[QWidget] = None) -> None:
        super().__init__(parent)
        self.banner = banner
        self.downloads = downloads
        self.pool = hub_pool()
        self.details = None
        self.page = 0
        self.has_more = False
        self._search_worker: Optional[JobWorker] = None
        self._probe_worker: Optional[JobWorker] = None
        self._details_worker: Optional[JobWorker] = None
        self._search_generation = 0
        self._details_generation = 0

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        bar = QHBoxLayout()
        self.search_edit = QLineEdit()
        self.search_edit.setAccessibleName("Search the Hub")
        self.search_edit.setPlaceholderText("Search the Hugging Face Hub, e.g. SmolLM2 or qwen2.5")
        self.search_edit.returnPressed.connect(lambda: self.search(0))
        self.format_combo = QComboBox()
        self.format_combo.setAccessibleName("Format")
        for text, key in (("GGUF", "gguf"), ("safetensors", "safetensors"), ("any format", "any")):
            self.format_combo.addItem(text, key)
        self.sort_combo = QComboBox()
        self.sort_combo.setAccessibleName("Sort")
        for text, key in (("most downloaded", "downloads"), ("most liked", "likes"), ("recently updated", "recent")):
            self.sort_combo.addItem(text, key)
        self.search_button = QPushButton("Search")
        self.search_button.setAccessibleName("Search")
        self.search_button.clicked.connect(lambda: self.search(0))
        self.prev_button = QPushButton("◀")
        self.prev_button.setAccessibleName("Previous page")
        self.prev_button.clicked.connect(lambda: self.search(self.page - 1))
        self.next_button = QPushButton("▶")
        self.next_button.setAccessibleName("Next page")
        self.next_button.clicked.connect(lambda: self.search(self.page + 1))
        bar.addWidget(self.search_edit, 1)
        for button in (self.prev_button, self.next_button):
            button.setFixedWidth(36)
        for w in (self.format_combo, self.sort_combo, self.search_button, self.prev_button, self.next_button):
            bar.addWidget(w)
        layout.addLayout(bar)

        splitter = QSplitter(Qt.Orientation.Horizontal)
        self.results_model = RowsTableModel(RESULT_COLUMNS, self)
        self.results_view = make_table(self.results_model, "Search results")
        self.results_view.selectionModel().selectionChanged.connect(lambda *_: self._result_selected())
        splitter.addWidget(self.results_view)

        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        self.details_title = QLabel("Select a model to see its files.")
        self.details_title.setObjectName("hubDetailsTitle")
        self.details_title.setWordWrap(True)
        right_layout.addWidget(self.details_title)
        self.variants_model = RowsTableModel(VARIANT_COLUMNS, self)
        self.variants_view = make_table(self.variants_model, "Model files")
        self.variants_view.selectionModel().selectionChanged.connect(lambda *_: self._update_buttons())
        right_layout.addWidget(self.variants_view, 1)
        buttons = QHBoxLayout()
        # A repository with vision encoders (mmproj files): which one downloads with the
        # variant. By default the one llama.cpp's rule pairs (shown in the variant's row).
        self.projector_label = QLabel("Vision encoder:")
        self.projector_combo = QComboBox()
        self.projector_combo.setAccessibleName("Vision encoder")
        self.projector_combo.setToolTip("The mmproj file downloaded with the variant, so the model reads images")
        self.projector_label.setBuddy(self.projector_combo)
        for widget in (self.projector_label, self.projector_combo):
            widget.hide()
            buttons.addWidget(widget)
        self.download_button = QPushButton("Download")
        self.download_button.setAccessibleName("Download")
        self.download_button.clicked.connect(self.download_selected)
        self.convert_button = QPushButton("Download and quantize")
        self.convert_button.setAccessibleName("Download and quantize")
        self.convert_button.clicked.connect(lambda: self.download_selected(quantize=True))
        buttons.addWidget(self.download_button)
        buttons.addWidget(self.convert_button)
        buttons.addStretch(1)
        right_layout.addLayout(buttons)
        splitter.addWidget(right)
        splitter.setSizes([600, 420])
        layout.addWidget(splitter, 1)
        self.status = QLabel("")
        self.status.setObjectName("hubStatus")
        layout.addWidget(self.status)
        self._update_buttons()

    def _run(self, work, done, failed) -> JobWorker:
        return start_job(work, done, failed, pool=self.pool, owner=self)

    # ----------------------------------------------------------------- search
    def search(self, page: int = 0) -> None:
        """Ask the Hub for ``page`` of the current query; an older search is superseded."""
        from models.hub.search import search_models

        if page < 0:
            return
        self._cancel_search()
        self._search_generation += 1
        generation = self._search_generation
        text, fmt, sort = self.search_edit.text().strip(), self.format_combo.currentData(), self.sort_combo.currentData()
        self.status.setText(f"Searching the Hub for '{text}' …" if text else "Searching the Hub …")

        def work(report, cancel):
            result = search_models(text, fmt=fmt, sort=sort, page=page, page_size=PAGE_SIZE, cancel=cancel)
            cancel.raise_if_cancelled()  # superseded meanwhile: do not report stale results
            return result

        self._search_worker = self._run(work, lambda result: self._show_results(generation, result),
                                        lambda message: self._search_failed(generation, message))
        QTimer.singleShot(PROBE_AFTER_MS, lambda: self._probe(generation))

    def _cancel_search(self) -> None:
        """Stop the search in progress and its connection check (their answers are dropped)."""
        for worker in (self._search_worker, self._probe_worker):
            if worker is not None:
                worker.cancel()
        self._search_worker = self._probe_worker = None

    def _probe(self, generation: int) -> None:
        """The search is still waiting: check the connection once, so "offline" is said quickly
        (and the search, which would say it later, is cancelled)."""
        from models.hub.client import probe_hub

        if generation != self._search_generation or self._search_worker is None:
            return

        def failed(message: str) -> None:
            if generation == self._search_generation and self._search_worker is not None:
                self._search_failed(generation, message)  # also cancels the search
                self._search_generation += 1  # its late answer is not shown

        self._probe_worker = self._run(lambda report, cancel: probe_hub(cancel=cancel), lambda _ok: None, failed)

    def _show_results(self, generation: int, result) -> None:
        if generation != self._search_generation:
            return
        self._cancel_search()  # it has ended; a connection check still running is not needed
        self.banner.clear()
        self.page, self.has_more = result.page, result.has_more
        self.results_model.set_rows(result.results)
        count = len(result.results)
        self.status.setText(f"Page {result.page + 1}: {count} model(s)" + (", more on the next page" if result.has_more else "")
                            if count else "No models found.")
        self._update_buttons()
        self.searched.emit(count)

    def _search_failed(self, generation: int, message: str) -> None:
        if generation != self._search_generation:
            return
        self._cancel_search()  # it has ended; a connection check still running is not needed
        self.status.setText("")
        self._show_error(message)
        self.searched.emit(-1)

    def _show_error(self, message: str) -> None:
        show_hub_error(self.banner, message)

    def _open_settings(self) -> None:
        open_settings(self)

    # ----------------------------------------------------------------- details
    def _result_selected(self) -> None:
        rows = self.results_view.selectionModel().selectedRows()
        if rows:
            self.show_details(self.results_model.row_at(rows[0]).repo_id)

    def show_details(self, repo_id: str) -> None:
        """Ask the Hub for ``repo_id``'s files and show its variants with fit badges."""
        from models.hub.details import model_details

        if self._details_worker is not None:
            self._details_worker.cancel()  # an earlier selection's request stops
        self._details_generation += 1
        generation = self._details_generation
        self.details = None
        self.variants_model.set_rows([])
        self.details_title.setText(f"{repo_id}: asking the Hub …")
        load_settings = saved_load_settings()

        def work(report, cancel):
            details = model_details(repo_id, cancel=cancel)
            return details, details_choices(details, load_settings)

        self._details_worker = self._run(work, lambda result: self._show_details(generation, *result),
                                         lambda message: self._details_failed(generation, repo_id, message))

    def _show_details(self, generation: int, details, choices) -> None:
        if generation != self._details_generation:
            return
        self._details_worker = None
        self.banner.clear()
        self.details = details
        self.variants_model.set_rows(choices)
        gated = f" · gated ({details.gated})" if details.gated else ""
        params = parameters_text(details.parameters, details.active_parameters)
        params = f" · {params} parameters" if details.parameters else ""  # "30.5B total, 3.3B active"
        self.details_title.setText(f"<b>{details.repo_id}</b>{gated}{params}<br>commit {details.commit[:10]} · "
                                   f"{len(details.variants)} GGUF variant(s)"
                                   + (" · convertible safetensors checkpoint" if details.checkpoint else ""))
        self._offer_projectors(details)
        if choices:
            self.variants_view.selectRow(0)
        if details.gated:
            from models.hub.auth import describe_token

            self.banner.show_message(
                f"{details.repo_id} is gated: its files download only after you accept its terms on its Hub "
                f"page, with a token of that account (QuantDesk now uses {describe_token()}).",
                level="warning", action_text="Open Settings", on_action=self._open_settings)
        self._update_buttons()
        self.details_shown.emit()

    def _offer_projectors(self, details) -> None:
        """The repository's vision encoders in the combo (hidden when it has none)."""
        from models.hub.details import projectors_of
        from models.hub.downloads import NO_PROJECTOR

        combo = self.projector_combo
        combo.clear()
        found = projectors_of(details) if details is not None else []
        if found:
            combo.addItem("paired by llama.cpp's rule", None)
            for f in found:
                combo.addItem(f"{f.path} ({size_text(f.size)})", f.path)
            combo.addItem("none (text only)", NO_PROJECTOR)
        for widget in (self.projector_label, combo):
            widget.setVisible(bool(found))

    def _details_failed(self, generation: int, repo_id: str, message: str) -> None:
        if generation != self._details_generation:
            return
        self._details_worker = None
        self.details_title.setText(f"{repo_id}: no details.")
        self._offer_projectors(None)
        self._show_error(message)
        self._update_buttons()
        self.details_shown.emit()

    def shutdown(self) -> None:
        """The window closes: cancel every Hub request still asked (each stops at once)."""
        self._cancel_search()
        if self._details_worker is not None:
            self._details_worker.cancel()
            self._details_worker = None
        self._search_generation += 1
        self._details_generation += 1

    def selected_choice(self) -> Optional[Choice]:
        rows = self.variants_view.selectionModel().selectedRows()
        return self.variants_model.row_at(rows[0]) if rows else None

    def select_choice(self, label: str) -> bool:
        for i, c in enumerate(self.variants_model.rows):
            if c.label == label:
                self.variants_view.selectRow(i)
                return True
        return False

    def _update_buttons(self) -> None:
        choice = self.selected_choice()
        self.download_button.setEnabled(choice is not None and self.details is not None)
        self.convert_button.setEnabled(choice is not None and choice.kind == "safetensors")
        self.prev_button.setEnabled(self.page > 0)
        self.next_button.setEnabled(self.has_more)

    def download_selected(self, quantize: bool = False):
        """Queue the selected variant (all shards) or checkpoint; a checkpoint with ``quantize``
        opens on the Quantize page when it has arrived."""
        from models.foundation.errors import QuantDeskError
        from models.hub.downloads import plan_details

        choice, details = self.selected_choice(), self.details
        if choice is None or details is None:
            return None
        projector = self.projector_combo.currentData() if self.projector_combo.count() else None
        try:
            plan = plan_details(details, choice.label.split(" ")[0], projector)
        except QuantDeskError as exc:
            self.banner.show_message(exc.user_message, level="error")
            return None
        on_done = self._send_to_quantize if quantize else None
        if projector and choice.kind == "gguf":  # a chosen encoder may not lie beside the model
            on_done = self._remember_projector
        task = self.downloads.enqueue(plan, on_done)
        self.banner.show_message(f"Downloading {plan.repo_id} {plan.label} ({size_text(plan.size)}).", level="info")
        return task

    def _remember_projector(self, task) -> None:
        """The variant arrived with the vision encoder the person chose: the model loads
        with it (wherever the repository keeps it)."""
        from models.foundation.errors import QuantDeskError
        from app.core.model_settings import choose_projector

        try:
            choose_projector(task.paths[0], task.paths[-1])
        except QuantDeskError as exc:
            self.banner.show_message(exc.user_message, level="error")

    def _send_to_quantize(self, task) -> None:
        folder = self.downloads.target_folder(task)
        window = self.window()
        if folder is not None and hasattr(window, "show_page"):
            window.show_page("Quantize").open_path(folder)

