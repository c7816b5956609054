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
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Optional

from PySide6.QtWidgets import QApplication

from tests.ui.pages.screenshots import settle, shoot_top_and_bottom, wait_until

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

    from app.core.preferences import Preferences
    from app.core.quality_checks import quality_rows
    from app.ui.application import create_application
    from app.ui.main_window import MainWindow
    from app.ui.theme import apply_theme

    app = create_application()
    source = home / "models" / "SmolLM2-135M-F16.gguf"
    measured = not keep or not source.exists()
    if measured:
        source = measure(home)
    expected = len(WITH_IMATRIX) + len(WITHOUT_IMATRIX) if measured else len(quality_rows(source))
    shots: list[Path] = []
    for theme in ("light", "dark"):
        Preferences().set("theme", theme)
        apply_theme(theme, app)
        window = MainWindow()
        window.resize(1280, 800)
        window.show()
        settle(0.5)
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
        window.close()
        settle(0.3)
    if not keep:
        shutil.rmtree(home, ignore_errors=True)
    return shots


if __name__ == "__main__":
    for shot in main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None):
        print(shot)
    QApplication.instance().quit()
