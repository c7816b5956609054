"""Screenshots of the Quantize page fitting a model to a size, with its quality beside the stock types'.

Run by hand on a real display (Xvfb, ``QT_QPA_PLATFORM=xcb``; minutes of CPU, so not in the suite):
``python -m tests.ui.pages.fit_screenshots OUT_DIR [HOME]`` (a ``HOME`` kept from an earlier
run skips the measuring). With SmolLM2 widened to F16 as the source it writes Q3_K_M,
Q4_K_M and Q5_K_M and a file fitted to Q4_K_M's size (through the page's own job), checks
their quality against the source (eight chunks of 64 tokens: a small, quick measure), then,
for each theme, opens the source on the Quantize page with "Fit to size" on and the slider
at Q4_K_M's size. Saved: ``quantize-fit`` (the slider, its size and the memory verdict)
and ``quantize-fit-quality`` (the report and chart, the fitted file among the stock types).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Optional

from PySide6.QtWidgets import QApplication

from tests.ui.pages.screenshots import shoot_top_and_bottom, themed_windows, wait_until

STOCK = ["Q5_K_M", "Q4_K_M", "Q3_K_M"]
FIT_TO = "Q4_K_M"


def measure(home: Path) -> Path:
    """Make the source, its stock quants, the fitted file and their stored reports."""
    from app.core.quality_checks import MeasureSettings, check_quality
    from app.core.quantize_queue import QuantizeRequest, run_quantize
    from tests.conftest import cached_models_dir, fetch_smollm2
    from tests.quantize.model_files import write_dequantized_f16

    models = home / "models"
    models.mkdir(parents=True, exist_ok=True)
    source = write_dequantized_f16(fetch_smollm2(cached_models_dir()), models / "SmolLM2-135M-F16.gguf")
    stock = run_quantize(QuantizeRequest(source, STOCK, folder=models))
    size = next(p for p in stock.outputs if p.name.endswith(f"-{FIT_TO}.gguf")).stat().st_size
    fitted = run_quantize(QuantizeRequest(source, [], folder=models, fit_size=size))
    check_quality([*stock.outputs, *fitted.outputs], source, MeasureSettings(None, 64, 8))
    return source


def main(out: Path, home: Optional[Path] = None) -> list[Path]:
    """Measure (unless ``home`` already holds the measured files) and take the screenshots."""
    keep = home is not None
    home = home or Path(tempfile.mkdtemp(prefix="quantdesk-fit-shots-"))
    os.environ["QUANTDESK_HOME"] = str(home)
    out.mkdir(parents=True, exist_ok=True)

    from app.ui.application import create_application

    app = create_application()
    source = home / "models" / "SmolLM2-135M-F16.gguf"
    if not keep or not source.exists():
        source = measure(home)
    target = (home / "models" / f"SmolLM2-135M-{FIT_TO}.gguf").stat().st_size
    shots: list[Path] = []
    for theme, window in themed_windows(app):
        page = window.show_page("Quantize")
        page.open_path(source)
        page.chunk_size_spin.setValue(64)
        page.chunks_spin.setValue(8)
        wait_until(lambda: page.input is not None, 60)
        wait_until(lambda: page.quality_panel.model.rowCount() == len(STOCK) + 1, 60)
        page.fit_check.setChecked(True)
        page.fit_slider.setValue(target // 1024)
        shots += shoot_top_and_bottom(window, page, out, theme, "quantize-fit", "quantize-fit-quality")
    if not keep:
        shutil.rmtree(home, ignore_errors=True)
    return shots


if __name__ == "__main__":
    for shot in main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None):
        print(shot)
    QApplication.instance().quit()
