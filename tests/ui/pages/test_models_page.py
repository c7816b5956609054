"""The Models page against the fake Hub (the real huggingface_hub client): search, details with
fit badges, downloads with pause/resume, retries, restore after quitting, gated repos, no network,
and the Library table."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox


def _hub(qtbot, window):
    page = window.show_page("Models")
    return page, page.show_hub()


def _search(qtbot, hub_panel, text: str) -> int:
    hub_panel.search_edit.setText(text)
    with qtbot.waitSignal(hub_panel.searched, timeout=20000) as blocker:
        qtbot.keyClick(hub_panel.search_edit, Qt.Key.Key_Return)
    return blocker.args[0]


def _details(qtbot, hub_panel, repo_id: str):
    with qtbot.waitSignal(hub_panel.details_shown, timeout=20000):
        row = next(i for i, m in enumerate(hub_panel.results_model.rows) if m.repo_id == repo_id)
        hub_panel.results_view.selectRow(row)
    return {c.label: c for c in hub_panel.variants_model.rows}


def _start_download(qtbot, window, quant: str = "Q8_0"):
    """Search, open acme/tiny-GGUF's details, queue ``quant``: the page and the task."""
    page, hub_panel = _hub(qtbot, window)
    _search(qtbot, hub_panel, "tiny")
    _details(qtbot, hub_panel, "acme/tiny-GGUF")
    assert hub_panel.select_choice(quant)
    return page, hub_panel.download_selected()


def _task_state(qtbot, page, task, states, timeout=30000):
    qtbot.waitUntil(lambda: task.state in states, timeout=timeout)


def test_search_and_details_with_variants_and_fit_badges(qtbot, window, hub):
    page, hub_panel = _hub(qtbot, window)
    assert hub_panel.search_edit.accessibleName() == "Search the Hub"
    assert hub_panel.results_view.accessibleName() == "Search results"
    assert _search(qtbot, hub_panel, "tiny") == 1  # GGUF by default
    result = hub_panel.results_model.rows[0]
    model = hub_panel.results_model
    assert [model.index(0, c).data() for c in range(model.columnCount())] == [
        "acme/tiny-GGUF", "acme", "500", "7", "2025-03-01", "apache-2.0", "no"]
    choices = _details(qtbot, hub_panel, result.repo_id)
    assert set(choices) == {"Q4_K_M", "Q8_0", "Q6_K"}  # the mmproj file is no variant
    assert choices["Q6_K"].files == 2 and choices["Q6_K"].size == 350_000  # shards as one
    for choice in choices.values():
        assert choice.fit in ("fits", "tight", "won't fit") and "weights only" in choice.reason
    fit_column = hub_panel.variants_model.columns.index(next(c for c in hub_panel.variants_model.columns
                                                              if c.header == "Fit"))
    assert hub_panel.variants_model.index(0, fit_column).data(Qt.ItemDataRole.DecorationRole) is not None
    assert hub_panel.download_button.isEnabled() and not hub_panel.convert_button.isEnabled()

    hub_panel.format_combo.setCurrentIndex(hub_panel.format_combo.findData("safetensors"))
    assert _search(qtbot, hub_panel, "tiny") == 1
    choices = _details(qtbot, hub_panel, "acme/tiny-hf")
    assert list(choices) == ["safetensors"]
    column = [c.header for c in hub_panel.variants_model.columns].index("Fit")
    assert hub_panel.variants_model.index(0, column).data() == "convertible"
    assert hub_panel.convert_button.isEnabled()


def test_download_with_progress_pause_resume_and_library(qtbot, window, hub):
    hub.state.faults.throttle_bytes_per_s = 100_000  # 5 s: time to click Pause on a busy machine
    page, task = _start_download(qtbot, window)
    downloads = page.downloads
    qtbot.waitUntil(lambda: task.progress is not None and 0 < task.progress.done < 500_000, timeout=20000)
    qtbot.waitUntil(lambda: "MiB" in downloads.model.index(0, 2).data(), timeout=5000)
    downloads.view.selectRow(0)
    qtbot.waitUntil(lambda: downloads.buttons["Pause"].isEnabled(), timeout=5000)
    qtbot.mouseClick(downloads.buttons["Pause"], Qt.MouseButton.LeftButton)
    _task_state(qtbot, page, task, {"paused"})
    part = next(Path(page.library.library.models_dir, "hub").rglob(".tiny.Q8_0.gguf.part"))
    assert 0 < part.stat().st_size < 500_000
    # The row reads the task's state, which the download thread sets; the buttons follow
    # when the GUI thread is told. Resume is clicked once it can be, as a person would.
    qtbot.waitUntil(lambda: downloads.buttons["Resume"].isEnabled(), timeout=5000)
    assert downloads.model.index(0, 1).data() == "paused"
    hub.state.faults.throttle_bytes_per_s = None
    with qtbot.waitSignal(page.library.refreshed, timeout=30000,
                          check_params_cb=lambda n: n == 1):
        qtbot.mouseClick(downloads.buttons["Resume"], Qt.MouseButton.LeftButton)
    assert task.state == "done"
    ranges = [r["range"] for r in hub.state.requests if r["path"].startswith("/cdn/") and r["range"]]
    assert ranges, "the resume asked for the rest only"
    assert page.library.model.rows[0].name and page.library.model.rows[0].source == "downloaded"


def test_dropped_connection_is_retried_visibly(qtbot, window, hub):
    hub.state.faults.drop_after["tiny-Q4_K_M.gguf"] = 100_000
    states = []  # the states the GUI was told of, in order
    window.pages["Models"].downloads.task_changed.connect(lambda t: states.append(t.state))
    page, task = _start_download(qtbot, window, "Q4_K_M")
    # Wait for what the GUI receives, not for task.state: the download thread sets that
    # before its last update has crossed to the GUI thread.
    qtbot.waitUntil(lambda: "done" in states, timeout=30000)
    assert "retrying" in states[:states.index("done")]


def test_quit_mid_download_and_resume_in_a_new_window(qtbot, hub):
    from app.ui.main_window import MainWindow

    hub.state.faults.throttle_bytes_per_s = 100_000  # 5 s: time to close mid-download
    first = MainWindow()
    qtbot.addWidget(first)
    first.show()
    page, task = _start_download(qtbot, first)
    qtbot.waitUntil(lambda: task.progress is not None and task.progress.done > 50_000, timeout=20000)
    first.close()  # pauses the download; its bytes stay on disk
    assert task.state == "paused"
    hub.state.faults.throttle_bytes_per_s = None

    second = MainWindow()
    qtbot.addWidget(second)
    second.show()
    page2 = second.show_page("Models")
    qtbot.waitUntil(lambda: page2.downloads.model.rowCount() == 1, timeout=10000)
    restored = page2.downloads.model.rows[0]
    assert restored.state == "paused" and restored.plan.repo_id == "acme/tiny-GGUF"
    page2.downloads.view.selectRow(0)
    with qtbot.waitSignal(page2.downloads.task_done, timeout=30000):
        page2.downloads.buttons["Resume"].click()
    assert Path(restored.paths[0]).stat().st_size == 500_000
    second.close()


def test_cancel_asks_and_removes_partial_data(qtbot, window, hub, monkeypatch):
    hub.state.faults.throttle_bytes_per_s = 100_000
    page, task = _start_download(qtbot, window)
    qtbot.waitUntil(lambda: task.progress is not None and task.progress.done > 0, timeout=20000)
    monkeypatch.setattr(QMessageBox, "exec", lambda self: QMessageBox.StandardButton.Cancel)
    assert page.downloads.cancel(task) is False and task.state == "downloading"
    monkeypatch.setattr(QMessageBox, "exec", lambda self: QMessageBox.StandardButton.Yes)
    assert page.downloads.cancel(task) is True
    _task_state(qtbot, page, task, {"cancelled"})
    hub_dir = Path(page.library.library.models_dir, "hub")
    assert not [p for p in hub_dir.rglob("*") if p.is_file()]


def test_gated_repo_points_to_the_token_in_settings(qtbot, window, hub):
    page, hub_panel = _hub(qtbot, window)
    _search(qtbot, hub_panel, "gated")
    with qtbot.waitSignal(hub_panel.details_shown, timeout=20000):
        hub_panel.results_view.selectRow(0)
    assert "is gated" in page.banner.text() and "no Hugging Face token" in page.banner.text()
    assert page.banner.action_button.text() == "Open Settings"
    hub_panel.select_choice("Q4_0")
    task = hub_panel.download_selected()
    qtbot.waitUntil(lambda: task.state == "failed", timeout=20000)
    qtbot.waitUntil(lambda: "gated or private" in page.banner.text(), timeout=5000)
    assert page.banner.action_button.text() == "Open Settings"
    page.banner.action_button.click()
    assert window.current_page().title == "Settings"


def test_a_slow_hub_leaves_the_window_responsive_and_a_new_search_wins(qtbot, window, hub):
    from app.ui.models.hub_panel import hub_pool

    page, hub_panel = _hub(qtbot, window)
    hub.state.faults.api_delay = 4.0
    hub_panel.search_edit.setText("gated")
    hub_panel.search()
    started = time.monotonic()
    ticks = []
    for _ in range(5):  # the event loop keeps running while the Hub is slow
        qtbot.wait(50)
        ticks.append(time.monotonic())
    # A generous bound: an event loop blocked by the search would wait out the Hub's 4 s.
    assert ticks[-1] - started < 3.0
    hub.state.faults.api_delay = 0.0
    assert _search(qtbot, hub_panel, "tiny") == 1
    assert hub_pool().waitForDone(20000)  # the slow, older search has ended meanwhile ...
    qtbot.wait(100)  # ... and whatever it sent the GUI has arrived: it must not replace the new one
    assert [m.repo_id for m in hub_panel.results_model.rows] == ["acme/tiny-GGUF"]


def _held_search(qtbot, hub, hub_panel, text: str):
    """Start a search the Hub does not answer (until it stops); its worker and a list that
    gets "cancelled" when the worker ends that way."""
    hub.state.faults.api_delay = 600.0
    hub_panel.search_edit.setText(text)
    hub_panel.search()
    worker, ends = hub_panel._search_worker, []
    worker.signals.cancelled.connect(lambda: ends.append("cancelled"))
    qtbot.waitUntil(lambda: any(r["path"] == "/api/models" and r["query"].get("search") == [text]
                                for r in hub.state.requests), timeout=10000)
    return worker, ends


def test_a_superseded_search_stops_while_the_hub_is_silent(qtbot, window, hub):
    from app.ui.models.hub_panel import hub_pool

    page, hub_panel = _hub(qtbot, window)
    _worker, ends = _held_search(qtbot, hub, hub_panel, "gated")
    hub.state.faults.api_delay = 0.0
    assert _search(qtbot, hub_panel, "tiny") == 1  # the new search supersedes the held one
    qtbot.waitUntil(lambda: ends == ["cancelled"], timeout=20000)  # the Hub still holds the old answer
    assert hub_pool().waitForDone(20000)  # no Hub thread is left waiting
    assert [m.repo_id for m in hub_panel.results_model.rows] == ["acme/tiny-GGUF"]


def test_closing_the_window_cancels_a_search_in_progress(qtbot, hub):
    from app.ui.main_window import MainWindow
    from app.ui.models.hub_panel import hub_pool

    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    _page, hub_panel = _hub(qtbot, window)
    _worker, ends = _held_search(qtbot, hub, hub_panel, "tiny")
    window.close()
    assert hub_pool().waitForDone(20000)  # the Hub holds the answer for 600 s: the cancel ended it
    qtbot.waitUntil(lambda: ends == ["cancelled"], timeout=10000)


def test_convertible_checkpoint_downloads_and_opens_on_quantize(qtbot, window, hub):
    page, hub_panel = _hub(qtbot, window)
    hub_panel.format_combo.setCurrentIndex(hub_panel.format_combo.findData("safetensors"))
    _search(qtbot, hub_panel, "tiny")
    _details(qtbot, hub_panel, "acme/tiny-hf")
    quantize = window.pages["Quantize"]
    with qtbot.waitSignal(quantize.planned, timeout=30000):
        hub_panel.convert_button.click()
    assert window.current_page() is quantize
    # The fake repo's weights are random bytes, so the converter's sentence is shown inline.
    assert quantize.banner.text() and quantize._input_path.name == "tiny-hf"


def test_paging_through_results(qtbot, window, hub, monkeypatch):
    import app.ui.models.hub_panel as hub_panel_module

    monkeypatch.setattr(hub_panel_module, "PAGE_SIZE", 2)
    page, hub_panel = _hub(qtbot, window)
    hub_panel.format_combo.setCurrentIndex(hub_panel.format_combo.findData("any"))
    assert _search(qtbot, hub_panel, "") == 2
    first = [m.repo_id for m in hub_panel.results_model.rows]
    assert hub_panel.next_button.isEnabled() and not hub_panel.prev_button.isEnabled()
    with qtbot.waitSignal(hub_panel.searched, timeout=20000):
        hub_panel.next_button.click()
    second = [m.repo_id for m in hub_panel.results_model.rows]
    assert len(second) == 2 and not set(first) & set(second)
    assert hub_panel.prev_button.isEnabled() and not hub_panel.next_button.isEnabled()
    assert first == ["acme/tiny-hf", "acme/tiny-GGUF"]  # most downloaded first


def test_network_down_is_a_sentence_and_the_library_still_works(qtbot, window, monkeypatch, tmp_path, hub):
    # A refused connection fails the search at once (no ~23 s of huggingface_hub retries)
    # and closes nothing that other requests use: the next search works.
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    page, hub_panel = _hub(qtbot, window)
    assert _search(qtbot, hub_panel, "tiny") == -1
    assert "could not reach the Hub" in page.banner.text()
    from app.ui.models.hub_panel import hub_pool

    assert hub_pool().waitForDone(20000)  # the failed search left no thread retrying
    library = page.show_library()
    with qtbot.waitSignal(library.refreshed, timeout=10000):
        library.load()
    assert library.view.accessibleName() == "Library" and library.view.isEnabled()
    monkeypatch.setenv("HF_ENDPOINT", hub.url)  # the connection is back
    page.show_hub()
    assert _search(qtbot, hub_panel, "tiny") == 1 and not page.banner.text()


def test_a_mixture_of_experts_shows_total_and_active_parameters(qtbot, window, hub):
    import json

    from tests.models.hub_server import HubFile, HubRepo

    from tests.factory.checkpoints import QWEN3_30B_A3B_CONFIG as config
    hub.state.add_repo(HubRepo("qwen/moe-30b", {"config.json": HubFile(json.dumps(config).encode()),
                                                "model.safetensors": HubFile(b"x" * 2000)},
                               tags=["safetensors", "transformers"],
                               config={"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe"}))
    page, hub_panel = _hub(qtbot, window)
    hub_panel.format_combo.setCurrentIndex(hub_panel.format_combo.findData("safetensors"))
    assert _search(qtbot, hub_panel, "moe-30b") == 1
    _details(qtbot, hub_panel, "qwen/moe-30b")
    assert "30.5B total, 3.3B active parameters" in hub_panel.details_title.text()


def test_a_variant_row_counts_its_vision_encoder():
    """The Models page's row of a variant that downloads with an mmproj: its size and fit
    count the encoder, and the reason names it."""
    from app.ui.models.hub_panel import details_choices
    from models.hub.details import HubFileInfo, ModelDetails, group_variants
    from models.memory_fit import FitVerdict

    files = [HubFileInfo(p, size, None, "0") for p, size in (
        ("eyes-Q4_K_M.gguf", 3_000_000), ("mmproj-eyes-F16.gguf", 800_000), ("plain-Q8_0.gguf", 5_000_000))]
    variants, extras = group_variants(files)
    details = ModelDetails("optic/eyes-GGUF", "abc", False, files, variants, None, extras)
    seen = []

    def judge(prediction):
        seen.append(prediction.ram + prediction.vram)
        return FitVerdict("fits", prediction, 1 << 34, None, "fits in RAM")

    rows = {c.label: c for c in details_choices(details, judge=judge)}
    assert rows["Q4_K_M + vision"].size == 3_800_000 and rows["Q4_K_M + vision"].files == 2
    assert "mmproj-eyes-F16.gguf" in rows["Q4_K_M + vision"].reason
    assert 3_800_000 in seen


def test_choose_the_vision_encoder_a_variant_downloads_with(qtbot, window, hub, tmp_path):
    """A repository's mmproj files are offered beside the one llama.cpp's rule pairs (none
    here: it sits in a folder of its own) and "none"; the chosen one downloads with the
    variant and the model then loads with it, wherever it lies."""
    from app.core.model_settings import load_settings_for
    from tests.factory.vision import model_with_and_without_projector
    from tests.models.hub_server import HubFile, HubRepo

    text, _ = model_with_and_without_projector(tmp_path / "made")
    hub.state.add_repo(HubRepo("acme/eyes-GGUF", {
        "eyes-F16.gguf": HubFile(text.read_bytes()),
        "encoders/mmproj-eyes-F16.gguf": HubFile((text.parent / "mmproj-gemma3.gguf").read_bytes()),
    }, tags=["gguf"]))
    page, hub_panel = _hub(qtbot, window)
    _search(qtbot, hub_panel, "eyes")
    assert list(_details(qtbot, hub_panel, "acme/eyes-GGUF")) == ["F16"]  # nothing paired
    combo = hub_panel.projector_combo
    assert combo.accessibleName() == "Vision encoder" and combo.isVisible()
    assert [combo.itemData(i) for i in range(combo.count())] == [None, "encoders/mmproj-eyes-F16.gguf", ""]
    combo.setCurrentIndex(1)
    assert hub_panel.select_choice("F16")
    task = hub_panel.download_selected()
    assert [f.path for f in task.plan.files] == ["eyes-F16.gguf", "encoders/mmproj-eyes-F16.gguf"]
    _task_state(qtbot, page, task, {"done"})
    qtbot.waitUntil(lambda: load_settings_for(task.paths[0]).mmproj == str(task.paths[1].resolve()),
                    timeout=10000)

    combo.setCurrentIndex(combo.count() - 1)  # none: the variant alone
    assert [f.path for f in hub_panel.download_selected().plan.files] == ["eyes-F16.gguf"]
    _search(qtbot, hub_panel, "tiny")
    _details(qtbot, hub_panel, "acme/tiny-GGUF")
    assert combo.count() == 3  # its own encoder, listed again
    hub_panel.format_combo.setCurrentIndex(hub_panel.format_combo.findData("safetensors"))
    _search(qtbot, hub_panel, "tiny")
    _details(qtbot, hub_panel, "acme/tiny-hf")
    assert combo.count() == 0 and not combo.isVisible()
