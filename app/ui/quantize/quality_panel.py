"""The Quantize page's quality report: what each quant of the source costs, in a table and a chart.

"Check quality" runs :func:`app.core.quality_checks.check_quality` through
:class:`~app.ui.worker.JobWorker` (the quality passes run in their own child process, so
the GUI thread only receives progress), with a bar, an ETA and Cancel. The reports are
stored with the Library, so opening the same source later shows them at once
(:meth:`QualityPanel.show_source`, read off the GUI thread too). The table lists each
measured file (type, size, bits per weight, PPL, ΔPPL %, mean KLD, same top %, imatrix);
the chart (:mod:`app.ui.quantize.quality_chart`) puts size against mean KLD.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QGroupBox, QHBoxLayout, QHeaderView, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget,
)

from app.core.quality_checks import MeasureSettings, QualityRow, check_quality, quality_rows
from app.core.quantize_queue import eta_text
from app.ui.quantize.quality_chart import QualityChart
from app.ui.widgets.rows_model import Column, RowsTableModel, make_table
from app.ui.worker import JobWorker, start_job
from models.foundation.jobs import StageClock


def _size(n: int) -> str:
    from quantize.plan import format_size  # imported with the first row, not at launch

    return format_size(n)


def _imatrix_text(row: QualityRow) -> str:
    return "yes" if row.imatrix else "no"


QUALITY_COLUMNS = [
    Column("Type", lambda r: r.type_name, tooltip=lambda r: str(r.path)),
    Column("Size", lambda r: _size(r.size), sort=lambda r: r.size, align_right=True),
    Column("Bits/weight", lambda r: f"{r.bits_per_weight:.2f}", sort=lambda r: r.bits_per_weight, align_right=True),
    Column("PPL", lambda r: f"{r.ppl:.3f}", sort=lambda r: r.ppl, align_right=True,
           tooltip=lambda r: f"{r.ppl:.4f} ± {r.stats['ppl_uncertainty']:.4f}; "
                             f"the source's {r.stats['base_ppl']:.4f} ± {r.stats['base_ppl_uncertainty']:.4f}"),
    Column("ΔPPL %", lambda r: f"{r.delta_ppl_percent:+.2f}", sort=lambda r: r.delta_ppl_percent, align_right=True),
    Column("Mean KLD", lambda r: f"{r.mean_kld:.5f}", sort=lambda r: r.mean_kld, align_right=True,
           tooltip=lambda r: f"{r.mean_kld:.6f} ± {r.stats['mean_kld_uncertainty']:.6f}; 99th percentile "
                             f"{r.stats['kld_percentiles']['99.0%']:.4f}"),
    Column("Same top %", lambda r: f"{r.same_top_percent:.2f}", sort=lambda r: r.same_top_percent,
           align_right=True, tooltip=lambda r: f"{r.same_top_percent:.3f} ± {r.stats['same_top_percent_uncertainty']:.3f} %"),
    Column("Imatrix", _imatrix_text, tooltip=lambda r: (f"Made with {r.imatrix}" if r.imatrix
                                                         else "Made without an importance matrix")),
]


def settings_text(settings: dict) -> str:
    """``"4 chunks of 32 tokens of quantdesk-builtin-v1"``: how a report was measured."""
    from models.quality.text import BUILTIN_NAME

    chunks = settings.get("chunks")
    text = settings.get("text", "?")
    text = "the built-in text" if text == BUILTIN_NAME else Path(str(text)).name
    return (f"{chunks} chunks" if chunks else "the whole text") + f" of {settings.get('n_ctx')} tokens of {text}"


NOT_MEASURED = ("Quantize, then check the quality of what was written: each file is measured against its "
                "source (perplexity, KL divergence, same top token), as llama-perplexity does.")


class QualityPanel(QGroupBox):
    """The quality table and chart of one source, and the "Check quality" job."""

    #: A check ended: ``"done"``, ``"failed"`` or ``"cancelled"``, with the sentence shown.
    check_ended = Signal(str, str)
    #: The rows shown changed (after opening a source or a check).
    rows_changed = Signal(list)

    def __init__(self, parent: Optional[QWidget] = None) -> None:
        super().__init__("Quality report", parent)
        self.source: Optional[Path] = None
        self.rows: list[QualityRow] = []
        self._worker: Optional[JobWorker] = None
        self._load_generation = 0
        self._stages = StageClock()
        layout = QVBoxLayout(self)
        self.summary = QLabel(NOT_MEASURED)
        self.summary.setObjectName("qualitySummary")
        self.summary.setWordWrap(True)
        layout.addWidget(self.summary)
        row = QHBoxLayout()
        self.progress_bar = QProgressBar()
        self.progress_bar.setAccessibleName("Quality check progress")
        self.progress_bar.setRange(0, 1000)
        self.progress_bar.setValue(0)
        self.cancel_button = QPushButton("Cancel check")
        self.cancel_button.setAccessibleName("Cancel the quality check")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        row.addWidget(self.progress_bar, 1)
        row.addWidget(self.cancel_button)
        self.progress_bar.hide()  # shown while a check runs
        self.cancel_button.hide()
        layout.addLayout(row)
        self.progress_label = QLabel("")
        self.progress_label.setObjectName("qualityProgress")
        self.progress_label.setWordWrap(True)
        layout.addWidget(self.progress_label)
        results = QHBoxLayout()
        self.model = RowsTableModel(QUALITY_COLUMNS, self)
        self.view = make_table(self.model, "Quality report")
        self.view.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.view.horizontalHeader().setStretchLastSection(True)
        self.view.setMinimumHeight(200)
        results.addWidget(self.view, 3)
        self.chart = QualityChart(self)
        results.addWidget(self.chart, 2)
        layout.addLayout(results, 1)

    @property
    def busy(self) -> bool:
        """Whether a check is running."""
        return self._worker is not None

    # ----------------------------------------------------------------- rows
    def show_source(self, source: Optional[Path]) -> None:
        """Show the stored reports of ``source``'s quants (read off the GUI thread)."""
        self.source = Path(source) if source is not None else None
        self._load_generation += 1
        generation = self._load_generation
        if self.source is None or self.source.is_dir():
            self._set_rows([])
            return
        path = self.source
        start_job(lambda report, cancel: quality_rows(path), lambda rows: self._loaded(generation, rows),
                  lambda text: self.progress_label.setText(text), owner=self)

    def _loaded(self, generation: int, rows: list) -> None:
        if generation == self._load_generation:
            self._set_rows(rows)

    def _set_rows(self, rows: Sequence[QualityRow]) -> None:
        self.rows = list(rows)
        self.model.set_rows(self.rows)
        self.chart.set_rows(self.rows)
        if self.rows:
            measured = {settings_text(r.settings) for r in self.rows}
            self.summary.setText(f"{len(self.rows)} file(s) measured against {self.source.name if self.source else '?'}"
                                 f", on {'; '.join(sorted(measured))}. Lower KLD is closer to the source; pick "
                                 "the smallest file whose KLD you can accept.")
        else:
            self.summary.setText(NOT_MEASURED)
        self.rows_changed.emit(self.rows)

    # ----------------------------------------------------------------- the check
    def check(self, quants: Sequence[Path], source: Path, settings: MeasureSettings) -> Optional[JobWorker]:
        """Measure ``quants`` against ``source`` off the GUI thread; ``None`` while a check runs."""
        if self._worker is not None or not quants:
            return None
        self.source = Path(source)
        self._load_generation += 1  # a load still running would show older rows
        quants = [Path(q) for q in quants]
        self._stages = StageClock()
        self.progress_bar.setRange(0, 0)
        self.progress_label.setText(f"Checking {len(quants)} file(s) against {self.source.name} …")
        self._worker = start_job(
            lambda report, cancel: check_quality(quants, source, settings, report, cancel),
            self._done, lambda text: self._ended("failed", text),
            lambda: self._ended("cancelled", "Quality check cancelled; the reports finished before it are kept."),
            self._progress, owner=self)
        self.cancel_button.setEnabled(True)
        self.progress_bar.show()
        self.cancel_button.show()
        return self._worker

    def cancel(self) -> None:
        """Stop the running check (its child process stops within a decode)."""
        if self._worker is not None:
            self._worker.cancel()
            self.progress_label.setText("Cancelling the quality check …")

    def _progress(self, progress) -> None:
        stage_start = self._stages.stage_start(progress.stage)
        if progress.fraction is None:
            self.progress_bar.setRange(0, 0)
            self.progress_label.setText(f"{progress.stage} · {progress.detail}")
            return
        self.progress_bar.setRange(0, 1000)
        self.progress_bar.setValue(int(progress.fraction * 1000))
        self.progress_label.setText(f"{progress.stage} {progress.fraction * 100:.0f}% · "
                                    f"{eta_text(stage_start, progress.fraction)} · {progress.detail}")

    def _done(self, rows: list) -> None:
        self._finish()
        self.progress_bar.setValue(1000)
        self._set_rows(rows)
        text = f"Quality checked: {len(rows)} file(s) of {self.source.name} measured."
        self.progress_label.setText(text)
        self.check_ended.emit("done", text)

    def _ended(self, state: str, text: str) -> None:
        self._finish()
        self.progress_bar.setValue(0)
        self.progress_label.setText(text)
        if state == "cancelled" and self.source is not None:
            self.show_source(self.source)  # the files measured before the cancel
        self.check_ended.emit(state, text)

    def _finish(self) -> None:
        self._worker = None
        self.progress_bar.setRange(0, 1000)
        self.cancel_button.setEnabled(False)
        self.progress_bar.hide()
        self.cancel_button.hide()
