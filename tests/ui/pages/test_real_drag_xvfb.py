"""A real drag from another program onto QuantDesk's window, on an Xvfb display (XDND).

A second process (``xdnd_apps.py source``) starts a drag of a tiny HF folder, offering its
URL and plain text as file managers do; ``xdotool`` moves the real pointer across the
Chat page, whose text box must not take the URL as text, and releases it. QuantDesk (its
real window in a third process) must open the folder on the Quantize page with every type
planned. Without Xvfb/xdotool the test skips (``QUANTDESK_REQUIRE_XVFB=1`` makes that a failure).
"""

import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.core.quantize_queue import offered_types
from tests.conftest import REPO_ROOT
from tests.ui.test_real_window_xvfb import GRAB, _require, xvfb_display  # noqa: F401 (fixture)


def _read_line(proc: subprocess.Popen, prefix: str, timeout: float) -> str:
    """The first line of ``proc``'s output that starts with ``prefix``."""
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if selector.select(timeout=0.2):
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith(prefix):
                return line.strip()
    raise AssertionError(f"no '{prefix}' line within {timeout} s")


@pytest.mark.xvfb
def test_a_real_drag_from_another_program_opens_quantize(xvfb_display, tiny_hf, isolated_home):  # noqa: F811
    xdotool = _require("xdotool")
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env.update(DISPLAY=xvfb_display, QT_QPA_PLATFORM="xcb", PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
    script = str(REPO_ROOT / "tests" / "ui" / "pages" / "xdnd_apps.py")
    procs = []
    try:
        target = subprocess.Popen([sys.executable, script, "target"], env=env, cwd=REPO_ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(target)
        _read_line(target, "READY", 60)
        source = subprocess.Popen([sys.executable, script, "source", str(tiny_hf)], env=env, cwd=REPO_ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(source)
        _read_line(source, "READY", 60)

        def xdo(*args: str, timeout: float = 10) -> None:
            subprocess.run([xdotool, *args], env=env, check=True, timeout=timeout, capture_output=True)

        for title in ("^QuantDesk$", "^drag-source$"):  # both windows mapped: waited for, not slept for
            xdo("search", "--sync", "--onlyvisible", "--name", title, timeout=60)

        xdo("mousemove", "1230", "55")
        xdo("mousedown", "1")
        # Across the window, over the Chat page's text box, to its middle; small steps as a hand makes.
        for step in range(1, 31):
            xdo("mousemove", str(1230 - step * 22), str(55 + step * 14))
            time.sleep(0.03)
        time.sleep(0.3)
        xdo("mouseup", "1")
        planned = _read_line(target, "PLANNED", 60)
        assert planned.split()[1] == str(tiny_hf)
        assert int(planned.split()[2]) == len(offered_types())  # every type, planned for this input
        assert _read_line(source, "DRAG", 10) in ("DRAG CopyAction", "DRAG MoveAction", "DRAG LinkAction")
        time.sleep(1.0)  # the page repaints with the planned sizes
        shot = Path(os.environ.get("QUANTDESK_ARTIFACTS", REPO_ROOT / "tests" / "artifacts")) / "pages"
        shot.mkdir(parents=True, exist_ok=True)
        grab = subprocess.run([sys.executable, "-c", GRAB, str(shot / "quantize-after-real-drop.png")],
                              env=env, capture_output=True, text=True, timeout=60)
        assert grab.returncode == 0, grab.stderr
    finally:
        for proc in procs:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
