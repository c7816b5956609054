"""Open the real `quantdesk` window on an Xvfb display and save a screenshot.

The screenshot (``tests/artifacts/main-window-xvfb.png``, or under
``QUANTDESK_ARTIFACTS``) is what a person would see. Without Xvfb/xdotool the test skips,
unless ``QUANTDESK_REQUIRE_XVFB=1`` (set by CI) turns the skip into a failure.
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

GRAB = r"""
import sys
from PySide6.QtGui import QGuiApplication
app = QGuiApplication(sys.argv[:1])
image = app.primaryScreen().grabWindow(0).toImage()
image.save(sys.argv[1])
colors = {image.pixel(x, y) for x in range(0, image.width(), 7) for y in range(0, image.height(), 7)}
print(image.width(), image.height(), len(colors))
"""


def _require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        message = f"{tool} is not installed (Debian: apt-get install xvfb xdotool)"
        if os.environ.get("QUANTDESK_REQUIRE_XVFB") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture
def xvfb_display():
    xvfb = _require("Xvfb")
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        [xvfb, "-displayfd", str(write_fd), "-screen", "0", "1280x800x24", "-nolisten", "tcp"],
        pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        number = f.readline().strip()
    assert number, "Xvfb did not report a display number"
    yield f":{number}"
    proc.terminate()
    proc.wait(timeout=10)


@pytest.mark.xvfb
def test_real_window_opens_and_is_screenshotted(xvfb_display, isolated_home):
    xdotool = _require("xdotool")
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env.update(DISPLAY=xvfb_display, QT_QPA_PLATFORM="xcb")
    app = subprocess.Popen([sys.executable, "-m", "app.cli"], cwd=REPO_ROOT, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        found = subprocess.run([xdotool, "search", "--sync", "--onlyvisible", "--name", "^QuantDesk$"],
                               env=env, capture_output=True, text=True, timeout=60)
        assert found.returncode == 0 and found.stdout.strip(), "the QuantDesk window never appeared"
        window_id = found.stdout.split()[0]
        geometry = subprocess.run([xdotool, "getwindowgeometry", window_id], env=env,
                                  capture_output=True, text=True, timeout=10).stdout
        assert "Geometry: 1180x760" in geometry, geometry
        time.sleep(1.5)  # let the first paint land before grabbing the screen

        artifacts = Path(os.environ.get("QUANTDESK_ARTIFACTS", REPO_ROOT / "tests" / "artifacts"))
        artifacts.mkdir(parents=True, exist_ok=True)
        shot = artifacts / "main-window-xvfb.png"
        grab = subprocess.run([sys.executable, "-c", GRAB, str(shot)], env=env,
                              capture_output=True, text=True, timeout=60)
        assert grab.returncode == 0, grab.stderr
        width, height, colors = map(int, grab.stdout.split())
        assert (width, height) == (1280, 800)
        assert colors > 20, "the screen is blank: nothing was drawn"
        assert shot.stat().st_size > 5000
        assert app.poll() is None, app.stdout.read()
    finally:
        app.terminate()
        try:
            app.wait(timeout=10)
        except subprocess.TimeoutExpired:
            app.kill()
