"""Run a screenshot script on a real (Xvfb) display and check each picture was drawn.

The page, server and quality screenshot tests share this: the script runs in its own
process with ``QT_QPA_PLATFORM=xcb`` on the given display and writes its PNGs to
``tests/artifacts/pages/`` (or ``$QUANTDESK_ARTIFACTS/pages``), where a person looks at
them; each must have the window's size and more than a blank screen's colours.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from tests.conftest import REPO_ROOT


def artifacts_pages() -> Path:
    """Where the page screenshots go."""
    return Path(os.environ.get("QUANTDESK_ARTIFACTS", REPO_ROOT / "tests" / "artifacts")) / "pages"


def take_screenshots(display: str, module: str, args: Sequence[str], names: Sequence[str],
                     timeout: float) -> Path:
    """Run ``python -m module *args OUT`` on ``display``; check ``OUT/{name}-{theme}.png``
    for every name, light and dark. Returns ``OUT``."""
    from PySide6.QtGui import QImage

    out = artifacts_pages()
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env.update(DISPLAY=display, QT_QPA_PLATFORM="xcb", PYTHONPATH=str(REPO_ROOT))
    run = subprocess.run([sys.executable, "-m", module, *args, str(out)], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
    for theme in ("light", "dark"):
        for name in names:
            image = QImage(str(out / f"{name}-{theme}.png"))
            assert (image.width(), image.height()) == (1280, 800), name
            colours = {image.pixel(x, y) for x in range(0, 1280, 9) for y in range(0, 800, 9)}
            assert len(colours) > 20, f"{name}-{theme} is blank"
    return out
