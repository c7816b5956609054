"""Screenshots of the Models, Quantize and Settings pages in the states a person meets.

Run on a real display (Xvfb, ``QT_QPA_PLATFORM=xcb``) by ``test_page_screenshots.py``:
``python -m tests.ui.pages.screenshots OUT_DIR``. It starts the fake Hub, writes a tiny
checkpoint, and for the light and the dark theme saves: Hub results with details and fit
badges, the download queue mid-download, the Quantize page after a drop with sizes, a
quantize job in progress, the Library, and Settings. Each state is reached through the
same calls a person's clicks make, and waited for, not slept for.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QEventLoop
from PySide6.QtWidgets import QApplication


def wait_until(predicate, timeout: float = 30.0) -> None:
    """Process events until ``predicate()`` is true (or fail after ``timeout`` seconds)."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise TimeoutError(f"timed out waiting for {predicate}")
        QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
        time.sleep(0.01)


def settle(seconds: float = 0.3) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        QCoreApplication.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
        time.sleep(0.01)


def themed_windows(app):
    """For the light theme, then the dark: the main window at 1280 × 800 on screen in it,
    as ``(theme, window)``; closed when the loop moves on."""
    from app.core.preferences import Preferences
    from app.ui.main_window import MainWindow
    from app.ui.theme import apply_theme

    for theme in ("light", "dark"):
        Preferences().set("theme", theme)  # what the Settings page's selector stores
        apply_theme(theme, app)
        window = MainWindow()
        window.resize(1280, 800)
        window.show()
        settle(0.5)
        yield theme, window
        window.close()
        settle(0.3)


def shoot_top_and_bottom(window, page, out: Path, theme: str, top: str, bottom: str) -> list[Path]:
    """The window grabbed with ``page``'s scroll area at its top (``top-THEME.png``) and at
    its bottom (``bottom-THEME.png``) in ``out``; the paths."""
    from PySide6.QtWidgets import QScrollArea

    bar = page.findChild(QScrollArea).verticalScrollBar()
    shots = []
    for name, value in ((top, 0), (bottom, bar.maximum())):
        bar.setValue(value)
        settle(0.5)
        path = out / f"{name}-{theme}.png"
        window.grab().save(str(path))
        shots.append(path)
    return shots


def main(out: Path) -> list[Path]:
    home = Path(tempfile.mkdtemp(prefix="quantdesk-shots-"))
    os.environ["QUANTDESK_HOME"] = str(home)
    os.environ["HF_HUB_DISABLE_XET"] = "1"
    os.environ["HF_HOME"] = str(home / "hf-home")
    os.environ.pop("HF_TOKEN", None)
    out.mkdir(parents=True, exist_ok=True)

    from app.cli import main as cli
    from app.ui.application import create_application
    import quantize.job as job
    from tests.factory.checkpoints import write_tiny_checkpoint
    from tests.models.hub.conftest import make_state
    from tests.models.hub_server import HubServer

    checkpoint = write_tiny_checkpoint(home / "SmolTiny-135M").path
    models = home / "models"
    models.mkdir(parents=True, exist_ok=True)
    cli(["quantize", str(checkpoint), "--type", "Q4_K_M,Q8_0", "-o", str(models)])
    cli(["convert", str(checkpoint), "--outtype", "f16", "-o", str(models / "SmolTiny-135M-F16.gguf")])
    encode = job._TensorEncoder.__call__

    def slow(self, index, values):  # so the job in progress can be photographed
        time.sleep(0.4)
        return encode(self, index, values)

    job._TensorEncoder.__call__ = slow
    app = create_application()
    shots: list[Path] = []
    with HubServer(make_state()) as hub:
        os.environ["HF_ENDPOINT"] = hub.url
        for theme, window in themed_windows(app):

            def shoot(name: str) -> None:
                settle(0.4)
                path = out / f"{name}-{theme}.png"
                window.grab().save(str(path))
                shots.append(path)

            page = window.show_page("Models")
            library = page.show_library()
            wait_until(lambda: library.model.rowCount() >= 3)
            library.view.selectRow(0)
            shoot("library")

            hub_panel = page.show_hub()
            hub_panel.format_combo.setCurrentIndex(hub_panel.format_combo.findData("any"))
            hub_panel.search_edit.setText("")
            hub_panel.search(0)
            wait_until(lambda: hub_panel.results_model.rowCount() > 0)
            row = next(i for i, m in enumerate(hub_panel.results_model.rows) if m.repo_id == "acme/tiny-GGUF")
            hub_panel.results_view.selectRow(row)
            wait_until(lambda: hub_panel.variants_model.rowCount() == 3)
            shoot("hub-details")

            hub.state.faults.throttle_bytes_per_s = 120_000
            hub_panel.select_choice("Q8_0")
            task = hub_panel.download_selected()
            wait_until(lambda: task.progress is not None and task.progress.done > 150_000
                       and page.downloads.model.index(0, 3).data())
            page.downloads.view.selectRow(0)
            page.downloads._flush()
            shoot("downloads")
            page.downloads.cancel(task, confirm=False)
            wait_until(lambda: task.state == "cancelled")
            hub.state.faults.throttle_bytes_per_s = None

            quantize = window.open_path(checkpoint)
            wait_until(lambda: quantize.types_model.rowCount() > 0)
            quantize.types_model.set_checked("Q4_K_M")
            quantize.types_model.set_checked("Q6_K")
            shoot("quantize-sizes")
            quantize.start()
            wait_until(lambda: quantize.progress_bar.value() > 100)
            shoot("quantize-progress")
            quantize.cancel()
            wait_until(lambda: quantize.start_button.isEnabled())

            settings = window.show_page("Settings")
            shoot("settings")
            from PySide6.QtWidgets import QScrollArea

            bar = settings.findChild(QScrollArea).verticalScrollBar()
            bar.setValue(bar.maximum())  # the load defaults and the saved KV sessions
            shoot("settings-bottom")
    shutil.rmtree(home, ignore_errors=True)
    return shots


if __name__ == "__main__":
    for shot in main(Path(sys.argv[1])):
        print(shot)
    QApplication.instance().quit()
