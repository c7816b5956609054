"""Screenshots of the Quantize page with a finished quality report and chart, light and dark.

Saved in ``tests/artifacts/pages/`` (or ``$QUANTDESK_ARTIFACTS/pages``) beside the other
pages' screenshots, for a person to look at; the test checks each one was drawn.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.ui.test_real_window_xvfb import xvfb_display  # noqa: F401 (fixture)

STATES = ["quantize-quality-types", "quantize-quality"]


@pytest.mark.xvfb
@pytest.mark.smollm2
@pytest.mark.slow
def test_quality_report_screenshots_light_and_dark(xvfb_display, smollm2_gguf):  # noqa: F811
    from PySide6.QtGui import QImage

    out = Path(os.environ.get("QUANTDESK_ARTIFACTS", REPO_ROOT / "tests" / "artifacts")) / "pages"
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env.update(DISPLAY=xvfb_display, QT_QPA_PLATFORM="xcb", PYTHONPATH=str(REPO_ROOT))
    run = subprocess.run([sys.executable, "-m", "tests.ui.pages.quality_screenshots", str(out)], cwd=REPO_ROOT,
                         env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    for theme in ("light", "dark"):
        for state in STATES:
            image = QImage(str(out / f"{state}-{theme}.png"))
            assert (image.width(), image.height()) == (1280, 800), state
            colours = {image.pixel(x, y) for x in range(0, 1280, 9) for y in range(0, 800, 9)}
            assert len(colours) > 20, f"{state}-{theme} is blank"
