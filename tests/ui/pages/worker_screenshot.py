"""Screenshots of the Settings page with its worker running, and of the load settings form
with remote devices, on a real display: ``python -m tests.ui.pages.worker_screenshot OUT
MODEL PORT`` (run by test_settings_worker.py under Xvfb)."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


def main(out: Path, model: Path, port: int) -> None:
    os.environ["QUANTDESK_HOME"] = tempfile.mkdtemp(prefix="quantdesk-worker-shot-")
    out.mkdir(parents=True, exist_ok=True)
    from PySide6.QtWidgets import QScrollArea

    from app.ui.application import create_application
    from app.ui.main_window import MainWindow
    from app.ui.widgets.load_settings_form import LoadSettingsForm
    from models.gguf_header import read_gguf_header
    from tests.ui.pages.screenshots import settle, wait_until

    app = create_application([])
    window = MainWindow()
    window.resize(1280, 800)
    window.show()
    page = window.show_page("Settings")
    page.worker_port.setValue(port)
    page.worker_button.click()
    wait_until(lambda: page.local_worker.running and page.worker_button.text() == "Stop worker", 60)
    scroll = page.findChild(QScrollArea)
    if scroll is not None:
        scroll.ensureWidgetVisible(page.worker_button)
    settle(0.5)
    window.grab().save(str(out / "settings-worker.png"))
    page.local_worker.stop()

    form = LoadSettingsForm()
    form.set_machine(read_gguf_header(model), 8 << 30, None)
    form.remote.setText("ssh://me@workstation, 192.168.1.20:50052")
    form.gpu_layers.setValue(20)
    form.resize(560, 520)
    form.show()
    settle(0.5)
    form.grab().save(str(out / "load-form-remote.png"))
    window.close()
    app.quit()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]))
