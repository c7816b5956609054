"""Screenshots of the Quantize page with a finished quality report, light and dark.

Run on a real display (Xvfb, ``QT_QPA_PLATFORM=xcb``) by ``test_quality_screenshots.py``:
``python -m tests.ui.pages.quality_screenshots OUT_DIR [HOME]`` (a ``HOME`` kept from an
earlier run, or made by ``tests/benchmarks/bench_quality_types.py``, skips the measuring
and shows every report stored there). With SmolLM2 widened to F16 as
the source it makes an importance matrix on the built-in text, quantizes four types with
it and two without, checks their quality against the source (chunks of 64 tokens, eight
of them: a small, quick measure), and then, for each theme, opens the source on the
Quantize page as a person would: the stored reports fill the table, the chart and the
type list. Saved: ``quantize-quality-types`` (the top of the page, the measured types) and
``quantize-quality`` (the report and chart).

``python -m tests.ui.pages.quality_screenshots --smollm2-table OUT_DIR`` shows instead the
53 reports of ``tests/benchmarks/README.md``'s quality table
(:mod:`tests.ui.pages.smollm2_quality_table`: every type with and without an imatrix, most
between 78 and 90 MiB) in the page's report, the crowded chart, without measuring
anything: saved as ``quantize-quality-table``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Optional

from PySide6.QtWidgets import QApplication, QScrollArea

from tests.ui.pages.screenshots import settle, shoot_top_and_bottom, themed_windows, wait_until

WITH_IMATRIX = ["Q8_0", "Q6_K", "Q4_K_M", "Q3_K_M"]
WITHOUT_IMATRIX = ["Q4_K_M", "Q3_K_M"]


def measure(home: Path) -> Path:
    """Make the source, its quants and their stored reports; return the source."""
    from app.core.quality_checks import MeasureSettings, check_quality
    from app.core.quantize_queue import QuantizeRequest, run_quantize
    from tests.conftest import cached_models_dir, fetch_smollm2
    from tests.quantize.model_files import write_dequantized_f16

    models = home / "models"
    models.mkdir(parents=True, exist_ok=True)
    source = write_dequantized_f16(fetch_smollm2(cached_models_dir()), models / "SmolLM2-135M-F16.gguf")
    settings = MeasureSettings(None, 64, 8)
    made = run_quantize(QuantizeRequest(source, WITH_IMATRIX, folder=models, imatrix_from=settings))
    plain = run_quantize(QuantizeRequest(source, WITHOUT_IMATRIX, folder=models, pattern="{name}-{type}-plain.gguf"))
    check_quality([*made.outputs, *plain.outputs], source, settings)
    return source


def main(out: Path, home: Optional[Path] = None) -> list[Path]:
    """Measure (unless ``home`` already holds the measured files) and take the screenshots."""
    keep = home is not None
    home = home or Path(tempfile.mkdtemp(prefix="quantdesk-quality-shots-"))
    os.environ["QUANTDESK_HOME"] = str(home)
    out.mkdir(parents=True, exist_ok=True)

    from app.core.quality_checks import quality_rows
    from app.ui.application import create_application

    app = create_application()
    source = home / "models" / "SmolLM2-135M-F16.gguf"
    measured = not keep or not source.exists()
    if measured:
        source = measure(home)
    expected = len(WITH_IMATRIX) + len(WITHOUT_IMATRIX) if measured else len(quality_rows(source))
    shots: list[Path] = []
    for theme, window in themed_windows(app):
        page = window.show_page("Quantize")
        page.open_path(source)
        if measured:  # the page set as the measuring was: it finds the imatrix made then
            page.chunk_size_spin.setValue(64)
            page.chunks_spin.setValue(8)
            page.imatrix_mode_combo.setCurrentIndex(page.imatrix_mode_combo.findData("make"))
            wait_until(lambda: page.input is not None and page.imatrix_note.text().startswith("Reused"), 60)
        wait_until(lambda: page.input is not None and page.quality_panel.model.rowCount() == expected, 60)
        for name in ("Q4_K_M", "Q3_K_M"):
            page.types_model.set_checked(name)
        shots += shoot_top_and_bottom(window, page, out, theme, "quantize-quality-types", "quantize-quality")
    if not keep:
        shutil.rmtree(home, ignore_errors=True)
    return shots


def show_table(out: Path) -> list[Path]:
    """The report of every SmolLM2 type as measured for the benchmarks README, each theme."""
    home = Path(tempfile.mkdtemp(prefix="quantdesk-quality-table-shots-"))
    os.environ["QUANTDESK_HOME"] = str(home)
    out.mkdir(parents=True, exist_ok=True)

    from app.ui.application import create_application
    from tests.ui.pages.smollm2_quality_table import smollm2_rows

    app = create_application()
    shots: list[Path] = []
    for theme, window in themed_windows(app):
        page = window.show_page("Quantize")
        panel = page.quality_panel
        panel.source = Path("SmolLM2-135M-F16.gguf")
        panel._set_rows(smollm2_rows())
        settle(0.8)  # the report's rows laid out: the page is its full height
        bar = page.findChild(QScrollArea).verticalScrollBar()
        bar.setValue(bar.maximum())
        settle(0.8)
        path = out / f"quantize-quality-table-{theme}.png"
        window.grab().save(str(path))
        shots.append(path)
    shutil.rmtree(home, ignore_errors=True)
    return shots


if __name__ == "__main__":
    arguments = sys.argv[1:]
    if "--smollm2-table" in arguments:
        arguments.remove("--smollm2-table")
        shots = show_table(Path(arguments[0]))
    else:
        shots = main(Path(arguments[0]), Path(arguments[1]) if len(arguments) > 1 else None)
    for shot in shots:
        print(shot)
    QApplication.instance().quit()
