"""The Settings page's worker (start, answer the RPC handshake, stop), the load settings
form's "Remote devices", and a screenshot of both on a real (Xvfb) display."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from models.foundation.errors import QuantDeskError
from models.rpc.devices import rpc_available
from tests.conftest import REPO_ROOT
from tests.models.rpc_hosts import free_port
from tests.ui.test_real_window_xvfb import xvfb_display  # noqa: F401 (fixture)

needs_rpc = pytest.mark.skipif(not rpc_available(),
                               reason="this llama.cpp was built without GGML_RPC")


@needs_rpc
def test_settings_starts_and_stops_a_worker(qtbot, window):
    from models.rpc.probe import PROTOCOL_VERSION, probe_worker

    page = window.show_page("Settings")
    port = free_port()
    page.worker_port.setValue(port)
    with qtbot.waitSignal(page.answered, timeout=60000):
        page.worker_button.click()
    assert page.worker_button.text() == "Stop worker" and not page.worker_port.isEnabled()
    assert f"127.0.0.1:{port}" in page.worker_label.text() and "ssh://" in page.worker_label.text()
    assert probe_worker("127.0.0.1", port, "the page's worker").version == PROTOCOL_VERSION
    page.worker_button.click()
    assert page.worker_button.text() == "Start worker" and not page.local_worker.running
    with pytest.raises(QuantDeskError, match="could not be reached"):
        probe_worker("127.0.0.1", port, "the stopped worker", timeout=2)


@pytest.mark.smollm2
def test_remote_devices_in_the_load_form_count_as_gpu_layers(qtbot, smollm2_gguf):
    from app.ui.widgets.load_settings_form import LoadSettingsForm
    from models.gguf_header import read_gguf_header

    form = LoadSettingsForm()
    qtbot.addWidget(form)
    form.set_machine(read_gguf_header(smollm2_gguf), 8 << 30, None)  # no GPU here
    assert not form.gpu_layers.isEnabled() and form.gpu_layers_value.text() == "CPU only"
    form.remote.setText("ssh://me@box, 10.0.0.7:50052")
    assert form.gpu_layers.isEnabled()
    form.gpu_layers.setValue(20)
    settings = form.settings()
    assert settings.remote_devices == ("ssh://me@box", "10.0.0.7:50052") and settings.gpu_layers == 20
    text = form.verdict.text()
    assert "this computer's CPU: 11 layers" in text and "ssh://me@box: 10 layers" in text
    form.set_settings(settings)
    assert form.remote.text() == "ssh://me@box, 10.0.0.7:50052"


@pytest.mark.xvfb
@pytest.mark.smollm2
@needs_rpc
def test_worker_and_remote_devices_screenshot(xvfb_display, smollm2_gguf):  # noqa: F811
    from PySide6.QtGui import QImage

    out = Path(os.environ.get("QUANTDESK_ARTIFACTS", REPO_ROOT / "tests" / "artifacts")) / "pages"
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env.update(DISPLAY=xvfb_display, QT_QPA_PLATFORM="xcb", PYTHONPATH=str(REPO_ROOT))
    run = subprocess.run([sys.executable, "-m", "tests.ui.pages.worker_screenshot", str(out),
                          str(smollm2_gguf), str(free_port())],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    for name in ("settings-worker", "load-form-remote"):
        image = QImage(str(out / f"{name}.png"))
        assert image.width() > 300 and image.height() > 200, name
        colours = {image.pixel(x, y) for x in range(0, image.width(), 7)
                   for y in range(0, image.height(), 7)}
        assert len(colours) > 20, f"{name} is blank"
