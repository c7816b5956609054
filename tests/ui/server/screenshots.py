"""Screenshots of the Server page: off (no key, the network switch refused), and on with
Ollama's API turned on, SmolLM2 loaded by a request and a few requests in the log — light
and dark.

Run on a real display (Xvfb, ``QT_QPA_PLATFORM=xcb``) by ``test_server_screenshots.py``:
``python -m tests.ui.server.screenshots MODEL.gguf OUT_DIR``. Each state is reached with the
clicks a person makes and real requests to the real server, and waited for, not slept for.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from PySide6.QtWidgets import QApplication

from tests.ui.pages.screenshots import settle, wait_until


def main(model: Path, out: Path) -> list[Path]:
    home = Path(tempfile.mkdtemp(prefix="quantdesk-server-shots-"))
    os.environ["QUANTDESK_HOME"] = str(home)
    out.mkdir(parents=True, exist_ok=True)

    from app.core.preferences import Preferences
    from app.ui.application import create_application
    from app.ui.main_window import MainWindow
    from app.ui.theme import apply_theme
    from models.server.api_key import load_api_key
    from tests.models.conftest import FAST_SETTINGS
    from tests.ui.server.test_server_page import fetch, free_port, library_model

    Preferences().set("default_load_settings", dict(FAST_SETTINGS))
    library_model(model)
    app = create_application()
    shots: list[Path] = []
    window = MainWindow()
    window.resize(1280, 800)
    window.show()
    settle(0.5)

    def shoot(name: str) -> None:
        """The window now, in each theme (one server, one model load for both)."""
        for theme in ("light", "dark"):
            Preferences().set("theme", theme)  # what the Settings page's selector stores
            apply_theme(theme, app)
            settle(0.4)
            path = out / f"server-{name}-{theme}.png"
            window.grab().save(str(path))
            shots.append(path)

    page = window.show_page("Server")
    page.port_spin.setValue(free_port())
    page.network_switch.click()  # refused: no key yet
    shoot("off")

    page.generate_key_button.click()
    page.ollama_switch.click()
    page.ollama_port_spin.setValue(free_port())
    page.switch.click()
    wait_until(lambda: page.state_label.text().startswith("Serving"), 60)
    base, key = page.address(), load_api_key()
    question = {"model": model.stem, "max_tokens": 24, "temperature": 0,
                "messages": [{"role": "user", "content": "Name three colours."}]}
    fetch(f"{base}/models", key)
    fetch(f"{base}/chat/completions", key, question)
    fetch(f"{base}/chat/completions", key, question)  # its prompt is cached now
    fetch(f"{base}/models")  # no key: 401
    fetch(f"{base}/chat/completions", key, {"model": "no-such-model", "messages": []})
    wait_until(lambda: page.log_model.rowCount() == 5)
    wait_until(lambda: page.models_model.rowCount() == 1
               and page.models_model.index(0, 1).data() == "loaded")
    shoot("on")
    page.switch.click()
    wait_until(lambda: page.state_label.text() == "Off.", 60)
    window.close()
    settle(0.3)
    shutil.rmtree(home, ignore_errors=True)
    return shots


if __name__ == "__main__":
    for shot in main(Path(sys.argv[1]), Path(sys.argv[2])):
        print(shot)
    QApplication.instance().quit()
