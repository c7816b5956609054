"""The quality chart and table on their own (what they draw, a theme change while shown), and a
measured file in the Chat page's model picker."""

from __future__ import annotations

import itertools
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette

from app.core.quality_checks import QualityRow
from app.ui.chat.side_panel import PATH_ROLE

TIP = Qt.ItemDataRole.ToolTipRole


def _row(name: str, size_mib: float, kld: float, imatrix: str = "") -> QualityRow:
    stats = {"mean_kld": kld, "mean_kld_uncertainty": kld / 20, "same_top_percent": 100 - 300 * kld,
             "same_top_percent_uncertainty": 0.5, "ppl": 14.0 * (1 + kld), "ppl_uncertainty": 0.2,
             "base_ppl": 14.0, "base_ppl_uncertainty": 0.2, "kld_percentiles": {"99.0%": 10 * kld}}
    return QualityRow(Path(f"/models/smol-{name}.gguf"), name, int(size_mib * 2**20), 8 * size_mib / 135,
                      imatrix, stats, {"text": "quantdesk-builtin-v1", "n_ctx": 512, "chunks": 100})


ROWS = [_row("Q3_K_M", 89.2, 0.12), _row("Q3_K_M", 89.2, 0.075, "smol.imatrix.gguf"),
        _row("Q4_K_M", 100.6, 0.032, "smol.imatrix.gguf"), _row("Q8_0", 138.1, 0.0)]


def test_chart_draws_each_file_and_follows_a_theme_change(qtbot):
    from app.ui.quantize.quality_panel import QualityPanel
    from app.ui.theme import apply_theme, current_scheme

    before = current_scheme()
    panel = QualityPanel()
    qtbot.addWidget(panel)
    panel.resize(1000, 400)
    panel.show()
    assert panel.chart.plot is None  # pyqtgraph waits for the first rows
    panel._set_rows(ROWS)
    points = panel.chart.points()
    assert [(t, round(mib, 1), k) for t, mib, k in points] == [
        ("Q3_K_M", 89.2, 0.12), ("Q3_K_M", 89.2, 0.075), ("Q4_K_M", 100.6, 0.032), ("Q8_0", 138.1, 0.0)]
    texts = [item.toPlainText() for item in panel.chart.plot.plotItem.items if hasattr(item, "toPlainText")]
    assert sorted(texts) == ["Q3_K_M", "Q3_K_M", "Q4_K_M", "Q8_0"]
    assert [panel.model.index(r, 7).data() for r in range(4)] == ["no", "yes", "yes", "no"]
    try:
        for scheme in ("dark", "light"):
            apply_theme(scheme)  # re-polishes every widget with the chart on screen
            base = panel.palette().color(QPalette.ColorRole.Base)
            qtbot.waitUntil(lambda: panel.chart.plot.backgroundBrush().color() == base, timeout=5000)
            assert len([i for i in panel.chart.plot.plotItem.items if hasattr(i, "toPlainText")]) == 4
    finally:
        apply_theme(before)


def test_the_chat_model_picker_says_a_measured_files_kld(qtbot, tmp_path):
    from app.ui.chat.side_panel import ModelListModel
    from models.library import Library
    from tests.models.library_gguf import write_gguf

    library = Library()
    source = write_gguf(tmp_path / "m-F16.gguf", file_type=1)
    measured = library.add(write_gguf(tmp_path / "m-Q4_K_M.gguf", file_type=15), "quantized")
    other = library.add(write_gguf(tmp_path / "m-Q8_0.gguf", file_type=7), "quantized")
    library.record_quality(Path(measured.path), source, {"text": "quantdesk-builtin-v1", "tokens": 900},
                           ROWS[2].stats)
    picker = ModelListModel()
    picker.set_library(library.models(), library.quality_reports())
    labels = {picker.index(r).data(PATH_ROLE): (picker.index(r).data(), picker.index(r).data(TIP))
              for r in range(picker.rowCount())}
    label, tip = labels[measured.path]
    assert label.endswith(" · KLD 0.0320") and "Measured against m-F16.gguf" in tip and "900 tokens" in tip
    assert "KLD" not in labels[other.path][0] and labels[other.path][1] == other.path


def _labels_readable(chart) -> list[str]:
    """The labels shown: each inside the plot, none over another or over a point."""
    area = chart.plot_rect()
    shown = [(text, rect) for text, rect in chart.labels() if rect is not None]
    for text, rect in shown:
        assert area.contains(rect), text
    for (a, ra), (b, rb) in itertools.combinations(shown, 2):
        assert not ra.intersects(rb), (a, b)
    markers = chart.marker_rects()
    for text, rect in shown:
        assert not any(rect.intersects(m) for m in markers), text
    return [text for text, _ in shown]


def test_a_crowded_chart_labels_what_fits_without_overlap_and_again_after_a_resize(qtbot):
    from app.ui.quantize.quality_chart import QualityChart
    from tests.ui.pages.smollm2_quality_table import smollm2_rows

    chart = QualityChart()
    qtbot.addWidget(chart)
    chart.resize(420, 480)  # its size beside the table in a 1280 x 800 window
    chart.show()
    rows = smollm2_rows()  # 53 files, most between 78 and 90 MiB
    chart.set_rows(rows)
    qtbot.waitUntil(lambda: not chart.labels_pending and any(rect for _text, rect in chart.labels()), timeout=5000)
    narrow = _labels_readable(chart)
    assert "Q4_K_M" in narrow and "Q8_0, MXFP4_MOE" in narrow  # the stock picks, and one label for one file
    assert 10 < len(narrow) < len(chart.labels())  # the crowd is left to the tooltips and the table
    # a point left unlabelled still names itself when hovered
    tips = [tip for item in chart.plot.plotItem.items if hasattr(item, "points") for tip in
            (p.data() for p in item.points())]
    assert len(tips) == len(rows) and any(t.startswith("IQ3_XXS (with an importance matrix)\n82.9 MiB") for t in tips)

    before = dict(chart.labels())
    chart.resize(760, 560)
    qtbot.waitUntil(lambda: not chart.labels_pending and dict(chart.labels()) != before, timeout=5000)
    wide = _labels_readable(chart)
    assert "Q4_K_M" in wide and len(wide) >= len(narrow)
