"""The Library table (sort, filter, actions, import by drop, remove with confirmation) and the
Settings page (token stored 0600 and tested with whoami, endpoint, theme, load defaults, sessions)."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from tests.ui.pages.conftest import GATED_TOKEN, drag_and_drop


@pytest.fixture(scope="module")
def tiny_ggufs(tmp_path_factory) -> dict[str, Path]:
    """An F16 GGUF and a Q8_0 GGUF of the tiny checkpoint, written by the CLI."""
    from app.cli import main
    from tests.factory.checkpoints import write_tiny_checkpoint

    folder = write_tiny_checkpoint(tmp_path_factory.mktemp("ck") / "tiny").path
    out = tmp_path_factory.mktemp("ggufs")
    f16 = out / "tiny-F16.gguf"
    assert main(["convert", str(folder), "--outtype", "f16", "-o", str(f16)]) == 0
    assert main(["quantize", str(f16), "--type", "Q8_0", "-o", str(out / "tiny-Q8_0.gguf")]) == 0
    return {"F16": f16, "Q8_0": out / "tiny-Q8_0.gguf"}


def test_library_lists_sorts_filters_and_acts(qtbot, window, tiny_ggufs, tmp_path, monkeypatch):
    from models.library import Library

    models_dir = Library().models_dir
    inside = shutil.copy(tiny_ggufs["Q8_0"], models_dir / "inside-Q8_0.gguf")
    elsewhere = Path(shutil.copy(tiny_ggufs["F16"], tmp_path / "elsewhere-F16.gguf"))
    page = window.show_page("Models")
    library = page.show_library()
    qtbot.waitUntil(lambda: library.model.rowCount() == 1, timeout=10000)
    # A GGUF dropped while on the Models page: an F16 one goes to Chat by the window's rule,
    # so import it through the Library's own entry instead.
    library.import_path(elsewhere)
    qtbot.waitUntil(lambda: library.model.rowCount() == 2, timeout=10000)
    assert library.view.accessibleName() == "Library"
    header = [library.model.headerData(c, Qt.Orientation.Horizontal) for c in range(library.model.columnCount())]
    assert header[:9] == ["Name", "Architecture", "Parameters", "Quant", "Context", "Size", "Quality", "Source",
                          "Chat template"]
    library.view.sortByColumn(header.index("Size"), Qt.SortOrder.DescendingOrder)
    first = library.model.row_at(library.proxy.index(0, 0))
    assert first.quant == "F16" and first.source == "imported"
    library.filter_edit.setText("q8_0")
    assert library.proxy.rowCount() == 1
    library.filter_edit.clear()

    assert library.select_path(str(elsewhere))
    assert library.buttons["Quantize"].isEnabled()  # an F16 GGUF can be quantized
    with qtbot.waitSignal(window.pages["Quantize"].planned, timeout=30000):
        library.buttons["Quantize"].click()
    assert window.current_page().title == "Quantize"
    assert window.pages["Quantize"].input.path == elsewhere
    window.show_page("Models")

    assert library.select_path(str(Path(inside).resolve()))
    assert not library.buttons["Quantize"].isEnabled()  # already quantized
    revealed = []
    monkeypatch.setattr("models.foundation.system_programs.open_in_file_manager", revealed.append)
    library.buttons["Show in folder"].click()
    assert revealed == [Path(inside).resolve()]
    opened = []
    monkeypatch.setattr(type(window), "open_path", lambda self, path: opened.append(path))
    library.buttons["Chat"].click()
    assert opened == [Path(inside).resolve()]

    monkeypatch.setattr(QMessageBox, "exec", lambda self: QMessageBox.StandardButton.Cancel)
    library.remove_selected()
    qtbot.wait(100)
    assert Path(inside).exists()
    monkeypatch.setattr(QMessageBox, "exec", lambda self: QMessageBox.StandardButton.Yes)
    with qtbot.waitSignal(library.refreshed, timeout=10000):
        library.remove_selected()
    assert not Path(inside).exists()  # inside the models folder: deleted
    assert library.select_path(str(elsewhere))
    with qtbot.waitSignal(library.refreshed, timeout=10000):
        library.remove_selected()
    assert elsewhere.exists() and library.model.rowCount() == 0  # outside: only forgotten


def test_f16_gguf_dropped_on_quantize_stays_there(qtbot, window, tiny_ggufs):
    page = window.show_page("Quantize")
    with qtbot.waitSignal(page.planned, timeout=30000):
        assert drag_and_drop(page.types_view, tiny_ggufs["F16"]) == (True, True)
    assert window.current_page() is page and page.fact_labels["Current type"].text() == "F16"
    assert page.types_model.rowCount() > 0 and page.banner.isHidden()


def test_settings_token_is_private_and_tested_with_whoami(qtbot, window, hub):
    from models.hub.auth import stored_token_path

    hub.state.users[GATED_TOKEN] = "alice"
    page = window.show_page("Settings")
    with qtbot.waitSignal(page.answered, timeout=10000):
        page.test_token_button.click()
    assert "No Hugging Face token is set" in page.banner.text()
    page.token_edit.setText(GATED_TOKEN)
    page.save_token_button.click()
    path = stored_token_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text() == GATED_TOKEN
    assert page.token_edit.text() == "" and GATED_TOKEN not in page.token_status.text()
    with qtbot.waitSignal(page.answered, timeout=10000):
        page.test_token_button.click()
    assert "belongs to alice" in page.token_status.text() and GATED_TOKEN not in page.token_status.text()
    page.forget_token_button.click()
    assert not path.exists() and "no Hugging Face token" in page.token_status.text()


def test_settings_endpoint_theme_defaults_folders_and_sessions(qtbot, window, monkeypatch, tmp_path):
    from app.core.preferences import Preferences
    from models.foundation.paths import app_paths

    monkeypatch.setenv("HF_ENDPOINT", "http://example.invalid")  # restored after the test
    page = window.show_page("Settings")
    page.endpoint_edit.setText("http://127.0.0.1:9/")
    page.save_endpoint()
    assert os.environ["HF_ENDPOINT"] == "http://127.0.0.1:9"
    assert Preferences().get("hf_endpoint") == "http://127.0.0.1:9"
    page.theme_combo.setCurrentText("dark")
    assert Preferences().get("theme") == "dark"
    page.theme_combo.setCurrentText("light")
    page.load_form.context.setValue(8192 // 256)
    page.load_form.kv_k.setCurrentText("q8_0")
    page.load_form.kv_v.setCurrentText("q8_0")  # ticks flash attention, which it needs
    page.load_form.apply_button.click()
    saved = Preferences().get("default_load_settings")
    assert saved["context_length"] == 8192 and saved["kv_cache_type_k"] == "q8_0" and saved["flash_attention"]
    assert set(page.folder_labels) == set(app_paths().all())

    moved = tmp_path / "big-disk"
    page.set_models_folder(moved)
    assert page.folder_labels["models"].text() == str(moved) and app_paths().models == moved
    library = window.pages["Models"].library
    qtbot.waitUntil(lambda: library.library.models_dir == moved.resolve(), timeout=5000)
    page.set_models_folder(None)
    assert app_paths().models != moved

    sessions = app_paths().sessions
    sessions.mkdir(parents=True, exist_ok=True)
    (sessions / "1.kvstate").write_bytes(b"x" * 3_000_000)
    # Wait for the text, not the next signal: the measurement the page started when it
    # was built may answer (0 saved) after the file above was written.
    page.measure_sessions()
    qtbot.waitUntil(lambda: "1 saved" in page.sessions_label.text(), timeout=10000)
    assert "2.9 MiB" in page.sessions_label.text()
    page.clear_sessions(confirm=False)
    qtbot.waitUntil(lambda: "0 saved" in page.sessions_label.text(), timeout=10000)
    assert not list(sessions.iterdir())


def test_a_library_of_500_files_is_usable_at_once(qtbot, isolated_home):
    """The benchmark's measurement, bounded loosely for a busy CI machine (the figure itself
    comes from tests/benchmarks/bench_pages_gui.py)."""
    from tests.benchmarks.bench_pages_gui import make_library, time_to_usable

    make_library(isolated_home, 500)
    shown, clicks = time_to_usable(500)
    assert shown < 1.5 and clicks < 1.5, (shown, clicks)


def test_unsupported_inputs_get_the_core_sentences_on_the_page(qtbot, window, tiny_ggufs, tmp_path):
    import json

    from tests.factory.checkpoints import write_tiny_checkpoint

    page = window.show_page("Quantize")
    with qtbot.waitSignal(page.planned, timeout=30000):
        page.open_path(tiny_ggufs["Q8_0"])  # the file dialog's way in; a drop would go to Chat
    assert "Q8_0" in page.banner.text() and page.types_model.rowCount() == 0
    folder = write_tiny_checkpoint(tmp_path / "gpt2ish").path
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    (folder / "config.json").write_text(json.dumps(config))
    with qtbot.waitSignal(page.planned, timeout=30000):
        window.open_path(folder)
    assert "GPT2LMHeadModel" in page.banner.text() and "cannot convert" in page.banner.text()
    assert "Traceback" not in page.banner.text() and not page.start_button.isEnabled()


def test_models_page_shows_new_outputs_when_shown_again(qtbot, window, tiny_ggufs):
    from models.library import Library

    for path in tiny_ggufs.values():
        Library().import_path(path)
    library = window.show_page("Models").library
    qtbot.waitUntil(lambda: library.model.rowCount() == 2, timeout=10000)
    window.show_page("Settings")
    Library().remove(tiny_ggufs["Q8_0"])  # what another page (or the CLI) changed meanwhile
    window.show_page("Models")
    assert library.model.rowCount() == 1


@pytest.mark.smollm2
def test_the_library_marks_an_embedding_model(qtbot, window, smollm2_gguf, smollm2_embedding_gguf):
    from models.library import Library

    for path in (smollm2_gguf, smollm2_embedding_gguf):
        Library().import_path(path)
    library = window.show_page("Models").library
    qtbot.waitUntil(lambda: library.model.rowCount() == 2, timeout=10000)
    model = library.model
    column = next(c for c in range(model.columnCount())
                  if model.headerData(c, Qt.Orientation.Horizontal) == "Architecture")
    shown = sorted(model.index(row, column).data() for row in range(2))
    assert shown == ["llama", "llama · embedding"]
    marked = next(row for row in range(2) if "embedding" in model.index(row, column).data())
    assert "vectors" in model.index(marked, column).data(Qt.ItemDataRole.ToolTipRole)
