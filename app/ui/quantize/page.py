"""The Quantize page: drop a model, see every type's exact size, check some, start.

The input comes from :meth:`QuantizePage.open_path` (a drop anywhere on the window,
``quantdesk PATH``, the Library's "Quantize" action) or the page's own file dialogs.
Opening plans every type off the GUI thread (:func:`app.core.quantize_queue.inspect_input`
through :class:`~app.ui.worker.JobWorker`); a newer input or option change cancels the
older plan. "Start quantizing" adds one job (every checked type in one pass) to the
Qt-free :class:`~app.core.quantize_queue.QuantizeQueue`; jobs run one at a time, with
progress per tensor and an ETA, and a cancel leaves no file behind. Finished outputs are
recorded in the Library and listed here with "Chat with it".

The importance matrix can be none, a file, or made here from the calibration text (the
built-in one or a file): then it is the job's first stage, with its own progress, and a
matrix made earlier for the same source, text and chunks is reused (the sizes are planned
with it). "Check quality" (or the option to check after each job) measures the written
files against their source in the quality process and shows the report below
(:class:`~app.ui.quantize.quality_panel.QualityPanel`); the type list shows the measured
KLD of the types already checked.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Optional

from PySide6.QtCore import QStringListModel, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QFileDialog, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QLineEdit,
    QListView, QProgressBar, QPushButton, QSizePolicy, QSlider, QSpinBox, QVBoxLayout, QWidget,
)

from app.core.quality_checks import MeasureSettings, imatrix_for_plan, measuring_source
from models.foundation.errors import QuantDeskError
from models.foundation.jobs import StageClock
from app.core.quantize_queue import (
    DEFAULT_PATTERN, QuantizeInput, QuantizeQueue, QuantizeRequest, QueuedJob, default_output_folder,
    eta_text, inspect_input, run_quantize, saved_load_settings,
)
from app.ui.pages import Page
from app.ui.quantize.quality_panel import QualityPanel
from app.ui.quantize.types_model import TypesModel
from app.ui.widgets.banner import MessageBanner
from app.ui.widgets.page_frame import field_with_button, page_layout
from app.ui.worker import JobWorker, start_job

log = logging.getLogger(__name__)
_SAME_AS_RECIPE = "as the type chooses"
#: The importance matrix choices, as the combo box lists them (its item data).
IMATRIX_MODES = (("none", "None"), ("file", "From a file"), ("make", "Made here from the calibration text"))
NO_MATRIX_NOTE = ("IQ1_*, IQ2_*, IQ3_XXS, IQ3_XS and Q2_K_S need one; the other low-bit types lose less "
                  "with one.")


def _params(n: int) -> str:
    if n >= 1e9:
        return f"{n / 1e9:.2f} B"
    if n >= 1e6:
        return f"{n / 1e6:.1f} M"
    return f"{n:,}"


class QuantizePage(Page):
    """The drop-to-quantize page (see the module docstring)."""

    title = "Quantize"
    summary = ("Drop a Hugging Face safetensors folder or an F32/F16/BF16 GGUF anywhere on the window. "
               "Every type's exact file size is shown before any work.")

    #: Emitted with the written paths when a job finishes (tests and the Library listen).
    job_finished = Signal(list)
    #: Emitted when the type list has been planned for a new input or new options.
    planned = Signal()

    def __init__(self, parent: Optional[QWidget] = None) -> None:
        super().__init__(parent)
        self.queue = QuantizeQueue()
        self.input: Optional[QuantizeInput] = None
        self._input_path: Optional[Path] = None
        self._plan_worker: Optional[JobWorker] = None
        self._plan_generation = 0
        self._job_worker: Optional[JobWorker] = None
        self._running: Optional[QueuedJob] = None
        self._last_done: Optional[QueuedJob] = None  # whose outputs "Check quality" measures
        self._stages = StageClock()  # the running job's: its ETA counts from the current stage's start
        self._replan_timer = QTimer(self, singleShot=True, interval=250)
        self._replan_timer.timeout.connect(self._replan)
        self._build()

    # ----------------------------------------------------------------- layout
    def _build(self) -> None:
        outer = page_layout(self, self.title, self.summary)
        self.banner = MessageBanner(self)
        outer.addWidget(self.banner)

        row = QHBoxLayout()
        self.input_label = QLabel("No model yet: drop a folder or GGUF file on the window, or open one.")
        self.input_label.setObjectName("quantizeInput")
        self.input_label.setWordWrap(True)
        self.input_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.open_folder_button = QPushButton("Open folder…")
        self.open_folder_button.setAccessibleName("Open a model folder")
        self.open_folder_button.clicked.connect(self._choose_folder)
        self.open_file_button = QPushButton("Open GGUF…")
        self.open_file_button.setAccessibleName("Open a GGUF file")
        self.open_file_button.clicked.connect(self._choose_file)
        row.addWidget(self.input_label, 1)
        row.addWidget(self.open_folder_button)
        row.addWidget(self.open_file_button)
        outer.addLayout(row)

        middle = QHBoxLayout()
        left = QVBoxLayout()
        facts_box = QGroupBox("Model")
        facts = QFormLayout(facts_box)
        self.fact_labels: dict[str, QLabel] = {}
        for key in ("Model", "Architecture", "Parameters", "Current type", "Tokenizer"):
            label = QLabel("–")
            label.setObjectName(f"fact-{key.lower().replace(' ', '-')}")
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            label.setWordWrap(True)
            self.fact_labels[key] = label
            facts.addRow(f"{key}:", label)
        left.addWidget(facts_box)

        options_box = QGroupBox("Options")
        form = QFormLayout(options_box)
        self.imatrix_mode_combo = QComboBox()
        self.imatrix_mode_combo.setAccessibleName("Importance matrix")
        for mode, text in IMATRIX_MODES:
            self.imatrix_mode_combo.addItem(text, mode)
        self.imatrix_mode_combo.currentIndexChanged.connect(self._imatrix_mode_changed)
        form.addRow("Importance matrix:", self.imatrix_mode_combo)
        self.imatrix_edit = QLineEdit()
        self.imatrix_edit.editingFinished.connect(self._options_changed)
        self.imatrix_file_row = field_with_button(
            self.imatrix_edit, "Importance matrix file", "Browse…", "Choose an importance matrix file",
            self._choose_imatrix, "an .imatrix.gguf or .dat file")
        form.addRow("Matrix file:", self.imatrix_file_row)
        self.imatrix_note = QLabel(NO_MATRIX_NOTE)
        self.imatrix_note.setObjectName("imatrixNote")
        self.imatrix_note.setWordWrap(True)
        form.addRow("", self.imatrix_note)
        self.pure_check = QCheckBox("Pure: every weight in the type's default (no k-quant mixture)")
        self.pure_check.setAccessibleName("Pure")
        self.pure_check.toggled.connect(self._options_changed)
        form.addRow("", self.pure_check)
        self.output_type_combo = QComboBox()
        self.output_type_combo.setAccessibleName("Output tensor type")
        self.embedding_type_combo = QComboBox()
        self.embedding_type_combo.setAccessibleName("Token embedding type")
        for combo in (self.output_type_combo, self.embedding_type_combo):
            combo.addItem(_SAME_AS_RECIPE)
            combo.currentIndexChanged.connect(self._options_changed)
        self._types_listed = False  # the tensor types are listed when the page is first shown
        form.addRow("Output tensor:", self.output_type_combo)
        form.addRow("Token embedding:", self.embedding_type_combo)
        self.folder_edit = QLineEdit()
        form.addRow("Output folder:", field_with_button(
            self.folder_edit, "Output folder", "Browse…", "Choose the output folder",
            self._choose_output_folder, "beside the input"))
        self.pattern_edit = QLineEdit(DEFAULT_PATTERN)
        self.pattern_edit.setAccessibleName("File name pattern")
        form.addRow("File name:", self.pattern_edit)
        left.addWidget(options_box)
        left.addWidget(self._build_measuring())
        left.addStretch(1)
        middle.addLayout(left, 2)

        right = QVBoxLayout()
        right.addWidget(QLabel("Types (check one or more; sizes are exact):"))
        self.types_model = TypesModel(self)
        self.types_view = QListView()
        self.types_view.setModel(self.types_model)
        self.types_view.setAccessibleName("Quantize types")
        self.types_view.setUniformItemSizes(True)
        self.types_view.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.types_model.checked_changed.connect(self._update_buttons)
        self.types_model.checked_changed.connect(self._make_matrix_when_needed)
        right.addWidget(self.types_view, 1)
        right.addWidget(self._build_fit())
        buttons = QHBoxLayout()
        self.start_button = QPushButton("Start quantizing")
        self.start_button.setAccessibleName("Start quantizing")
        self.start_button.setDefault(True)
        self.start_button.clicked.connect(self.start)
        self.cancel_button = QPushButton("Cancel quantizing")
        self.cancel_button.setAccessibleName("Cancel quantizing")
        self.cancel_button.clicked.connect(self.cancel)
        buttons.addWidget(self.start_button)
        buttons.addWidget(self.cancel_button)
        buttons.addStretch(1)
        right.addLayout(buttons)
        self.progress_bar = QProgressBar()
        self.progress_bar.setAccessibleName("Quantize progress")
        self.progress_bar.setRange(0, 1000)
        self.progress_bar.setValue(0)
        self.progress_label = QLabel("")
        self.progress_label.setObjectName("quantizeProgress")
        self.progress_label.setWordWrap(True)
        right.addWidget(self.progress_bar)
        right.addWidget(self.progress_label)
        right.addWidget(QLabel("Written:"))
        self.outputs_model = QStringListModel(self)
        self.outputs_view = QListView()
        self.outputs_view.setModel(self.outputs_model)
        self.outputs_view.setAccessibleName("Quantized files")
        self.outputs_view.setMaximumHeight(90)
        self.outputs_view.doubleClicked.connect(lambda _index: self.chat_with_output())
        right.addWidget(self.outputs_view)
        self.chat_button = QPushButton("Chat with it")
        self.chat_button.setAccessibleName("Chat with it")
        self.chat_button.setEnabled(False)
        self.chat_button.clicked.connect(self.chat_with_output)
        self.check_button = QPushButton("Check quality")
        self.check_button.setAccessibleName("Check quality")
        self.check_button.setToolTip("Measure the written files against their source: perplexity, "
                                     "KL divergence and same top token, as llama-perplexity does.")
        self.check_button.clicked.connect(lambda _checked=False: self.check_quality())
        after = QHBoxLayout()
        after.addWidget(self.chat_button)
        after.addWidget(self.check_button)
        after.addStretch(1)
        right.addLayout(after)
        middle.addLayout(right, 3)
        outer.addLayout(middle, 1)
        self.quality_panel = QualityPanel(self)
        self.quality_panel.rows_changed.connect(self._quality_rows_changed)
        self.quality_panel.check_ended.connect(lambda *_: self._update_buttons())
        outer.addWidget(self.quality_panel)
        self._imatrix_mode_changed()
        self._update_buttons()

    def _build_fit(self) -> QGroupBox:
        """"Fit to size": one file of at most the chosen size, each tensor's type chosen by
        measurement; the slider's ends are the smallest and largest files that can be made."""
        box = QGroupBox("Fit to size")
        layout = QVBoxLayout(box)
        self.fit_check = QCheckBox("Fit to size instead of the checked types: the least loss that fits")
        self.fit_check.setAccessibleName("Fit to size")
        self.fit_check.toggled.connect(self._fit_changed)
        layout.addWidget(self.fit_check)
        row = QHBoxLayout()
        self.fit_slider = QSlider(Qt.Orientation.Horizontal)
        self.fit_slider.setAccessibleName("Target size")
        self.fit_slider.setEnabled(False)
        self.fit_slider.valueChanged.connect(self._fit_changed)
        self.fit_size_label = QLabel("–")
        self.fit_size_label.setObjectName("fitSize")
        self.fit_size_label.setMinimumWidth(90)
        row.addWidget(self.fit_slider, 1)
        row.addWidget(self.fit_size_label)
        layout.addLayout(row)
        self.fit_verdict_label = QLabel("")
        self.fit_verdict_label.setObjectName("fitVerdict")
        self.fit_verdict_label.setWordWrap(True)
        layout.addWidget(self.fit_verdict_label)
        return box

    def fit_size(self) -> Optional[int]:
        """The chosen target size in bytes, or ``None`` when "Fit to size" is off or unknown."""
        if not self.fit_check.isChecked() or self.input is None or self.input.fit_range is None:
            return None
        smallest, largest = self.input.fit_range
        return min(largest, max(smallest, self.fit_slider.value() * 1024))

    def _fit_changed(self, *_args) -> None:
        from quantize.plan import format_size

        fit_range = self.input.fit_range if self.input is not None else None
        self.fit_slider.setEnabled(self.fit_check.isChecked() and fit_range is not None)
        if fit_range is None:
            self.fit_size_label.setText("–")
            self.fit_verdict_label.setText("")
        else:
            size = min(fit_range[1], max(fit_range[0], self.fit_slider.value() * 1024))
            self.fit_size_label.setText(format_size(size))
            verdict, reason = self.input.memory_verdict(size)
            words = {"fits": "Fits this computer", "tight": "Tight on this computer",
                     "won't fit": "Won't fit this computer"}.get(verdict or "", "")
            self.fit_verdict_label.setText(
                f"{words} — {reason}" if words else
                f"Files from {format_size(fit_range[0])} to {format_size(fit_range[1])} can be made.")
        self._update_buttons()

    def _set_fit_range(self, fit_range: Optional[tuple[int, int]]) -> None:
        """The slider's ends: the smallest and largest possible file (KiB steps); it keeps
        its place in between when the range changes, and starts in the middle."""
        if fit_range is None:
            self._fit_changed()
            return
        low, high = -(-fit_range[0] // 1024), fit_range[1] // 1024
        old_min, old_max, old = self.fit_slider.minimum(), self.fit_slider.maximum(), self.fit_slider.value()
        share = (old - old_min) / (old_max - old_min) if old_max > old_min else 0.5
        self.fit_slider.blockSignals(True)
        self.fit_slider.setRange(low, max(low, high))
        self.fit_slider.setPageStep(max(1, (high - low) // 20))
        self.fit_slider.setValue(int(low + share * (high - low)))
        self.fit_slider.blockSignals(False)
        self._fit_changed()

    def _build_measuring(self) -> QGroupBox:
        """The texts and chunking of importance matrices and quality checks."""
        box = QGroupBox("Measuring")
        form = QFormLayout(box)
        self.calibration_edit = QLineEdit()
        self.calibration_edit.editingFinished.connect(self._options_changed)
        form.addRow("Calibration text:", field_with_button(
            self.calibration_edit, "Calibration text file", "Browse…", "Choose a calibration text file",
            lambda: self._choose_text(self.calibration_edit), "the built-in text"))
        self.evaluation_edit = QLineEdit()
        form.addRow("Evaluation text:", field_with_button(
            self.evaluation_edit, "Evaluation text file", "Browse…", "Choose an evaluation text file",
            lambda: self._choose_text(self.evaluation_edit), "the built-in text"))
        chunking = QHBoxLayout()
        self.chunk_size_spin = QSpinBox()
        self.chunk_size_spin.setAccessibleName("Tokens per chunk")
        self.chunk_size_spin.setRange(16, 16384)
        self.chunk_size_spin.setValue(512)
        self.chunk_size_spin.setSuffix(" tokens")
        self.chunks_spin = QSpinBox()
        self.chunks_spin.setAccessibleName("Chunks")
        self.chunks_spin.setRange(0, 100000)
        self.chunks_spin.setSpecialValueText("the whole text")
        self.chunks_spin.setPrefix("at most ")
        self.chunks_spin.setSuffix(" chunks")
        for spin in (self.chunk_size_spin, self.chunks_spin):
            spin.valueChanged.connect(self._options_changed)
        chunking.addWidget(self.chunk_size_spin)
        chunking.addWidget(self.chunks_spin, 1)
        form.addRow("Chunks:", chunking)
        self.auto_check = QCheckBox("Check quality when a job finishes")
        self.auto_check.setAccessibleName("Check quality when a job finishes")
        form.addRow("", self.auto_check)
        return box

    # ----------------------------------------------------------------- input
    def on_shown(self) -> None:
        """List the tensor types in the override boxes the first time the page shows:
        ``quantize.ftypes`` imports gguf and numpy (~0.27 s), which the window's launch
        should not wait for while the Chat page is the one on screen."""
        if not self._types_listed:
            from quantize.ftypes import TENSOR_TYPES

            for combo in (self.output_type_combo, self.embedding_type_combo):
                combo.addItems(list(TENSOR_TYPES))
            self._types_listed = True

    def open_path(self, path: Path) -> None:
        """Show ``path`` (folder, .safetensors, F32/F16/BF16 GGUF) and plan every type for it."""
        self._input_path = Path(path)
        self.input = None
        self.banner.clear()
        self.types_model.set_rows([])
        self.input_label.setText(f"Reading {self._input_path} …")
        for label in self.fact_labels.values():
            label.setText("–")
        self.folder_edit.setPlaceholderText(str(default_output_folder(self._input_path)))
        self.quality_panel.show_source(self._input_path)
        self._replan()

    def _options(self):
        from quantize.ftypes import parse_tensor_type
        from quantize.job import QuantizeOptions

        def tensor_type(combo: QComboBox):
            text = combo.currentText()
            return None if text == _SAME_AS_RECIPE else parse_tensor_type(text)

        imatrix = (self.imatrix_edit.text().strip() or None) if self._imatrix_mode() == "file" else None
        return QuantizeOptions(pure=self.pure_check.isChecked(),
                               output_tensor_type=tensor_type(self.output_type_combo),
                               token_embedding_type=tensor_type(self.embedding_type_combo),
                               imatrix=imatrix)

    def _quality_rows_changed(self, rows: list) -> None:
        """Show the measured quality in the type list, when the rows are of the input on screen
        (a check of an earlier input can end after another was opened)."""
        source, shown = self.quality_panel.source, self._input_path
        same = source is not None and shown is not None and Path(source).resolve() == Path(shown).resolve()
        self.types_model.set_quality(rows if same else [])

    def _imatrix_mode(self) -> str:
        return self.imatrix_mode_combo.currentData()

    def _measure_settings(self, text_edit: QLineEdit) -> MeasureSettings:
        return MeasureSettings(text_edit.text().strip() or None, self.chunk_size_spin.value(),
                               self.chunks_spin.value() or None)

    def _imatrix_recipe(self) -> Optional[MeasureSettings]:
        """How the job makes its importance matrix, or ``None`` when it does not make one."""
        return self._measure_settings(self.calibration_edit) if self._imatrix_mode() == "make" else None

    def _imatrix_mode_changed(self, *_args) -> None:
        mode = self._imatrix_mode()
        for i in range(self.imatrix_file_row.count()):
            self.imatrix_file_row.itemAt(i).widget().setEnabled(mode == "file")
        if mode == "none":
            self.imatrix_note.setText(NO_MATRIX_NOTE)
        elif mode == "file":
            self.imatrix_note.setText("Made by quantdesk imatrix or llama-imatrix for this model.")
        self._options_changed()

    def _options_changed(self, *_args) -> None:
        mode = self._imatrix_mode()
        self.types_model.set_matrix_given(
            mode == "make" or (mode == "file" and bool(self.imatrix_edit.text().strip())))
        if self._input_path is not None:
            self._replan_timer.start()

    def _replan(self) -> None:
        """Plan every type for the current input and options, off the GUI thread."""
        if self._input_path is None:
            return
        if self._plan_worker is not None:
            self._plan_worker.cancel()
        self._plan_generation += 1
        generation = self._plan_generation
        path, options, recipe = self._input_path, self._options(), self._imatrix_recipe()
        load_settings = saved_load_settings()

        def plan(report, cancel) -> tuple[QuantizeInput, str]:
            note = ""
            planned_options = options
            if recipe is not None:  # plan with the matrix made earlier, if there is one
                found, note = imatrix_for_plan(path, recipe)
                if found is not None:
                    planned_options = dataclasses.replace(options, imatrix=found)
            return inspect_input(path, planned_options, load_settings, cancel=cancel), note

        self._plan_worker = start_job(
            plan, lambda result: self._planned(generation, *result), lambda text: self._plan_failed(generation, text),
            owner=self)

    def _planned(self, generation: int, result: QuantizeInput, imatrix_note: str = "") -> None:
        if generation != self._plan_generation:
            return  # an older input's plan, replaced meanwhile
        if imatrix_note:
            self.imatrix_note.setText(imatrix_note)
        self.input = result
        self.input_label.setText(str(result.path))
        values = {"Model": Path(result.path).name, "Architecture": result.architecture,
                  "Parameters": _params(result.parameters), "Current type": result.current_type,
                  "Tokenizer": result.tokenizer}
        for key, value in values.items():
            self.fact_labels[key].setText(value)
        self.fact_labels["Model"].setToolTip(result.description)
        self.types_model.set_rows(result.rows)
        self._set_fit_range(result.fit_range)
        self._update_buttons()
        self.planned.emit()

    def _plan_failed(self, generation: int, text: str) -> None:
        if generation != self._plan_generation:
            return
        self.input = None
        self.input_label.setText(str(self._input_path))
        self.types_model.set_rows([])
        self.banner.show_message(text, level="error")
        self._update_buttons()
        self.planned.emit()

    def _choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Open a Hugging Face model folder")
        if folder:
            self.open_path(Path(folder))

    def _choose_file(self) -> None:
        name, _ = QFileDialog.getOpenFileName(self, "Open an F32, F16 or BF16 GGUF file", "", "GGUF (*.gguf)")
        if name:
            self.open_path(Path(name))

    def _choose_imatrix(self) -> None:
        name, _ = QFileDialog.getOpenFileName(self, "Choose an importance matrix", "",
                                              "Importance matrix (*.gguf *.dat);;All files (*)")
        if name:
            self.imatrix_edit.setText(name)
            self._options_changed()

    def _choose_text(self, edit: QLineEdit) -> None:
        name, _ = QFileDialog.getOpenFileName(self, "Choose a text file", "", "Text (*.txt);;All files (*)")
        if name:
            edit.setText(name)
            self._options_changed()

    def _choose_output_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose the output folder")
        if folder:
            self.folder_edit.setText(folder)

    # ----------------------------------------------------------------- jobs
    def start(self) -> Optional[QueuedJob]:
        """Queue one job for every checked type (or the fit to size); it starts at once if
        nothing else runs."""
        fit_size = self.fit_size()
        if self.input is None or not (fit_size or self.types_model.checked()):
            return None
        self.banner.clear()
        folder_text = self.folder_edit.text().strip()
        request = QuantizeRequest(self.input.path, [] if fit_size else self.types_model.checked(), self._options(),
                                  Path(folder_text).expanduser() if folder_text else None,
                                  self.pattern_edit.text().strip() or DEFAULT_PATTERN, self._imatrix_recipe(),
                                  fit_size=fit_size)
        try:
            request.fit_path() if fit_size else request.targets()  # a bad pattern is said now, not at the start
            if request.imatrix_from is not None:  # and a folder or a missing text file too
                measuring_source(request.input)
                request.imatrix_from.text()
            job = self.queue.add(request)
        except QuantDeskError as exc:
            self.banner.show_message(exc.user_message, level="error")
            return None
        self._pump()
        self._update_buttons()
        return job

    def _pump(self) -> None:
        job = self.queue.next_to_run()
        if job is None:
            return
        self._running = job
        self._stages = StageClock(job.started)
        request = job.request
        self._set_bar(0.0)
        self.progress_label.setText(f"Starting {request.describe()} for {Path(request.input).name} …")
        self._job_worker = start_job(
            lambda report, cancel: run_quantize(request, report, cancel),
            lambda result: self._job_done(job, result),
            lambda text: self._job_ended(job, "failed", text),
            lambda: self._job_ended(job, "cancelled", "Cancelled; no file was written."),
            self._progress, owner=self)

    def _progress(self, progress) -> None:
        job = self._running
        stage_start = self._stages.stage_start(progress.stage)
        queued = sum(1 for j in self.queue.jobs if j.state == "queued")
        more = f" · {queued} more job(s) queued" if queued else ""
        name = Path(job.request.input).name if job else ""
        if progress.fraction is None:  # a stage of unknown length: loading the quantizer's kernels
            self._set_bar(None)
            self.progress_label.setText(f"{progress.stage} {name}{more} · {progress.detail}")
            return
        self._set_bar(progress.fraction)
        eta = eta_text(stage_start, progress.fraction)
        self.progress_label.setText(f"{progress.stage} {name} {progress.fraction * 100:.0f}% · {eta}{more} · "
                                    f"{progress.detail}")

    def _set_bar(self, fraction: Optional[float]) -> None:
        """The bar at ``fraction`` done, or busy (moving, no percentage) for ``None``."""
        self.progress_bar.setRange(0, 0 if fraction is None else 1000)
        if fraction is not None:
            self.progress_bar.setValue(int(fraction * 1000))

    def _job_done(self, job: QueuedJob, result) -> None:
        self.queue.finish(job, "done", result.summary, result.outputs)
        paths = [str(p) for p in result.outputs]
        self.outputs_model.setStringList(self.outputs_model.stringList() + paths)
        if paths:
            self.outputs_view.setCurrentIndex(self.outputs_model.index(self.outputs_model.rowCount() - 1))
        self._set_bar(1.0)
        self.progress_label.setText(f"Done: {len(paths)} file(s) written and added to the Library.")
        self.banner.show_message(f"Wrote {', '.join(Path(p).name for p in paths)}.", level="info",
                                 action_text="Chat with it", on_action=self.chat_with_output)
        self._last_done = job
        self._after_job(job)
        self.job_finished.emit([Path(p) for p in paths])
        if self.auto_check.isChecked() and paths:
            self.check_quality()

    def _job_ended(self, job: QueuedJob, state: str, text: str) -> None:
        self.queue.finish(job, state, text)
        self._set_bar(0.0)
        self.progress_label.setText(text)
        if state == "failed":
            self.banner.show_message(text, level="error")
        self._after_job(job)
        self.job_finished.emit([])

    def _after_job(self, job: QueuedJob) -> None:
        self._running = None
        self._job_worker = None
        self._update_buttons()
        self._pump()
        self._update_buttons()

    def cancel(self) -> None:
        """Cancel the running job (and drop queued ones); nothing partial stays on disk."""
        for job in self.queue.jobs:
            self.queue.cancel_queued(job)
        if self._job_worker is not None:
            self._job_worker.cancel()
            self.progress_label.setText("Cancelling …")

    def chat_with_output(self) -> None:
        """Open the selected (or latest) output on the Chat page."""
        index = self.outputs_view.currentIndex()
        paths = self.outputs_model.stringList()
        if not paths:
            return
        path = Path(paths[index.row()] if index.isValid() else paths[-1])
        window = self.window()
        if hasattr(window, "open_path"):
            window.open_path(path)

    def check_quality(self):
        """Measure the latest job's outputs against its input (off the GUI thread); the
        report shows below. Returns the worker, or ``None`` when nothing can be checked."""
        job = self._last_done
        if job is None or not job.outputs or self.quality_panel.busy:
            return None
        try:
            source = measuring_source(job.request.input)
            settings = self._measure_settings(self.evaluation_edit)
            settings.text()
        except QuantDeskError as exc:
            self.banner.show_message(exc.user_message, level="error")
            return None
        worker = self.quality_panel.check(job.outputs, source, settings)
        self._update_buttons()
        return worker

    def _make_matrix_when_needed(self, *_args) -> None:
        """A checked type that needs an importance matrix, and none chosen: the job makes one
        first from the calibration text (the user may still pick a file instead)."""
        needing = [name for name in self.types_model.checked()
                   if (row := self.types_model.row_named(name)) is not None and row.needs_imatrix]
        if needing and self._imatrix_mode() == "none":
            self.imatrix_mode_combo.setCurrentIndex([m for m, _ in IMATRIX_MODES].index("make"))
            self.imatrix_note.setText(f"{', '.join(needing)} needs an importance matrix: the job makes one "
                                      "first from the calibration text (or choose a file).")

    def _update_buttons(self) -> None:
        busy = self.input is not None and self.queue.is_busy(self.input.path)
        wanted = bool(self.types_model.checked()) or self.fit_size() is not None
        self.start_button.setEnabled(self.input is not None and wanted and not busy)
        self.cancel_button.setEnabled(self._job_worker is not None)
        self.chat_button.setEnabled(self.outputs_model.rowCount() > 0)
        self.check_button.setEnabled(self._last_done is not None and bool(self._last_done.outputs)
                                     and not self.quality_panel.busy)

    def shutdown(self) -> None:
        """The window is closing: cancel the plan and the running job (no partial files stay)."""
        if self._plan_worker is not None:
            self._plan_worker.cancel()
        self.cancel()
        self.quality_panel.cancel()
