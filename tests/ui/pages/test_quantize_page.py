"""The Quantize page through the real window: drops, exact sizes, a real job, cancel, bad input."""

from __future__ import annotations

import time
from pathlib import Path

from PySide6.QtCore import Qt

from tests.ui.pages.conftest import drag_and_drop


def _type_rows(page) -> dict[str, str]:
    model = page.types_view.model()
    return {model.index(i).data(Qt.ItemDataRole.UserRole + 1): model.index(i).data()
            for i in range(model.rowCount())}


def _drop_and_plan(qtbot, window, path: Path, target=None):
    page = window.pages["Quantize"]
    with qtbot.waitSignal(page.planned, timeout=30000):
        accepted = drag_and_drop(target or window.pages["Chat"], path)
    assert accepted == (True, True)
    return page


def test_dropped_hf_folder_opens_quantize_with_exact_sizes(qtbot, window, tiny_hf):
    from quantize.ftypes import parse_file_type
    from quantize.job import QuantizeOptions, QuantizeTarget, open_source, plan_targets
    from quantize.plan import format_size

    # Dropped on a text box of another page: the URL opens, the text box does not take it.
    from PySide6.QtWidgets import QLineEdit

    search = window.pages["Models"].findChild(QLineEdit, None)
    page = _drop_and_plan(qtbot, window, tiny_hf / "model.safetensors", target=search)
    assert window.current_page() is page
    assert search.text() == ""
    assert page.banner.isHidden()
    assert page.fact_labels["Architecture"].text() == "llama"
    assert page.fact_labels["Tokenizer"].text() == "gpt2"
    rows = _type_rows(page)
    names = list(rows)
    from app.core.quantize_queue import offered_types

    assert names == offered_types()  # largest first, the i-quants beside the k-quants of their size
    assert names[names.index("Q4_1") + 1:names.index("Q3_K_L")] == ["IQ4_NL", "Q4_0", "IQ4_XS", "MXFP4_MOE"]
    source = open_source(tiny_hf)
    plans = plan_targets(source, [QuantizeTarget(parse_file_type(n), Path(n)) for n in names], QuantizeOptions())
    source.close()
    model = page.types_view.model()
    for i, (name, plan) in enumerate(zip(names, plans)):
        text = rows[name]
        assert text.startswith(f"{name} {plan.bits_per_weight:.2f} bpw {format_size(plan.file_size)}")
        assert f"exactly {plan.file_size:,} bytes" in model.index(i).data(Qt.ItemDataRole.ToolTipRole)
        assert model.flags(model.index(i)) & Qt.ItemFlag.ItemIsUserCheckable
        assert model.index(i).data(Qt.ItemDataRole.CheckStateRole) == Qt.CheckState.Unchecked
        assert any(word in text for word in ("fits", "tight", "won't fit"))
    assert page.types_view.accessibleName() == "Quantize types"
    assert not page.start_button.isEnabled()


def test_q2_k_s_says_whether_its_importance_matrix_will_be_there(qtbot, window, tiny_hf, tmp_path):
    from app.core.quantize_queue import TypeRow

    page = _drop_and_plan(qtbot, window, tiny_hf / "model.safetensors")
    # This model's matrices are too small for Q2_K; a real model's Q2_K_S row, as planned:
    page.types_model.set_rows([TypeRow("Q4_K_M", 4_000_000, 4.89, False, "fits"),
                               TypeRow("Q2_K_S", 2_000_000, 2.97, True, "fits")])
    asking, using = "(needs an importance matrix)", "(uses the importance matrix)"
    assert asking in _type_rows(page)["Q2_K_S"] and asking not in _type_rows(page)["Q4_K_M"]
    for mode, edit_text, expected in (("make", "", using), ("file", "", asking),
                                      ("file", str(tmp_path / "m.imatrix.gguf"), using),
                                      ("none", "", asking)):
        page.imatrix_edit.setText(edit_text)
        page.imatrix_mode_combo.setCurrentIndex(page.imatrix_mode_combo.findData(mode))
        page.imatrix_edit.editingFinished.emit()
        assert expected in _type_rows(page)["Q2_K_S"], (mode, edit_text)
        assert "importance matrix" not in _type_rows(page)["Q4_K_M"]


def test_checking_a_type_that_needs_an_importance_matrix_makes_one_first(qtbot, window, tiny_hf, tmp_path):
    from app.core.quantize_queue import TypeRow

    page = _drop_and_plan(qtbot, window, tiny_hf / "model.safetensors")
    page.imatrix_mode_combo.setCurrentIndex(page.imatrix_mode_combo.findData("none"))
    page.types_model.set_rows([TypeRow("IQ4_XS", 3_000_000, 4.25, False, "fits"),
                               TypeRow("IQ2_XXS", 1_500_000, 2.06, True, "fits")])
    page.types_model.set_checked("IQ4_XS")
    assert page.imatrix_mode_combo.currentData() == "none"  # IQ4_XS does without one
    page.types_model.set_checked("IQ2_XXS")
    assert page.imatrix_mode_combo.currentData() == "make"
    assert "IQ2_XXS needs an importance matrix" in page.imatrix_note.text()
    assert "(uses the importance matrix)" in _type_rows(page)["IQ2_XXS"]
    # A file chosen instead stays chosen.
    page.imatrix_mode_combo.setCurrentIndex(page.imatrix_mode_combo.findData("file"))
    page.types_model.set_checked("IQ2_XXS", False)
    page.types_model.set_checked("IQ2_XXS")
    assert page.imatrix_mode_combo.currentData() == "file"


def test_q4_k_m_and_q8_0_from_the_page_equal_the_cli(qtbot, window, tiny_hf, tmp_path):
    from app.cli import main
    from models.library import Library

    page = _drop_and_plan(qtbot, window, tiny_hf)
    page.types_model.set_checked("Q4_K_M")
    page.types_model.set_checked("Q8_0")
    assert page.start_button.isEnabled() and page.start_button.accessibleName() == "Start quantizing"
    with qtbot.waitSignal(page.job_finished, timeout=120000) as done:
        qtbot.mouseClick(page.start_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: not page.start_button.isEnabled(), timeout=5000)
        assert page.cancel_button.isEnabled()
    outputs = done.args[0]
    assert [p.name for p in outputs] == ["tiny-hf-Q8_0.gguf", "tiny-hf-Q4_K_M.gguf"]
    qtbot.waitUntil(page.start_button.isEnabled)
    assert not page.cancel_button.isEnabled()

    cli_dir = tmp_path / "cli"
    cli_dir.mkdir()
    assert main(["quantize", str(tiny_hf), "--type", "Q4_K_M,Q8_0", "-o", str(cli_dir)]) == 0
    for path in outputs:
        assert path.read_bytes() == (cli_dir / path.name).read_bytes()
        assert path.stat().st_size == page.types_model.row_named(path.name[8:-5]).file_size
    rows = {m.path: m for m in Library().models()}
    assert rows[str(outputs[0])].source == "quantized" and rows[str(outputs[1])].quant == "Q4_K_M"

    library = window.show_page("Models").library
    qtbot.waitUntil(lambda: library.select_path(str(outputs[1])), timeout=10000)
    window.show_page("Quantize")
    assert page.chat_button.isEnabled() and page.banner.action_button.text() == "Chat with it"


def test_cancel_mid_job_leaves_no_partial_file(qtbot, window, tiny_hf, monkeypatch):
    import quantize.job as job

    original = job._TensorEncoder.__call__

    def slow(self, index, values):  # the real encoder, slowed so the cancel lands mid-job
        time.sleep(0.15)
        return original(self, index, values)

    monkeypatch.setattr(job._TensorEncoder, "__call__", slow)
    page = _drop_and_plan(qtbot, window, tiny_hf)
    page.types_model.set_checked("Q4_K_M")
    before = set(tiny_hf.iterdir())
    with qtbot.waitSignal(page.job_finished, timeout=60000) as done:
        page.start_button.click()
        qtbot.waitUntil(lambda: page.progress_bar.value() > 0, timeout=30000)
        assert "ETA" in page.progress_label.text() and "Quantizing" in page.progress_label.text()
        page.cancel_button.click()
    assert done.args[0] == []
    assert set(tiny_hf.iterdir()) == before  # no output, no temporary file
    assert page.queue.jobs[-1].state == "cancelled"
    assert page.start_button.isEnabled()


def test_pickle_only_folder_gets_the_core_sentence(qtbot, window, tmp_path):
    folder = tmp_path / "pickled"
    folder.mkdir()
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}')
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04\x95")
    page = _drop_and_plan(qtbot, window, folder)
    assert window.current_page() is page
    assert "pickle" in page.banner.text() and page.banner.level() == "error"
    assert "Traceback" not in page.banner.text()
    assert page.types_model.rowCount() == 0 and not page.start_button.isEnabled()


def test_options_replan_and_a_bad_pattern_is_said_inline(qtbot, window, tiny_hf):
    page = _drop_and_plan(qtbot, window, tiny_hf)
    before = page.types_model.row_named("Q4_K_M").file_size
    page.types_model.set_checked("Q4_K_M")
    with qtbot.waitSignal(page.planned, timeout=30000):
        page.output_type_combo.setCurrentText("F32")
    assert page.types_model.row_named("Q4_K_M").file_size > before
    assert page.types_model.checked() == ["Q4_K_M"]  # a re-plan keeps the checks
    page.pattern_edit.setText("{name}.gguf")
    assert page.start() is None
    assert "{type}" in page.banner.text()


def test_jobs_queue_one_after_another(qtbot, window, tiny_hf, tmp_path, monkeypatch):
    import shutil

    import quantize.job as job

    original = job._TensorEncoder.__call__

    def slow(self, index, values):
        time.sleep(0.05)
        return original(self, index, values)

    monkeypatch.setattr(job._TensorEncoder, "__call__", slow)
    other = Path(shutil.copytree(tiny_hf, tmp_path / "other-hf"))
    page = _drop_and_plan(qtbot, window, tiny_hf)
    page.types_model.set_checked("Q8_0")
    first = page.start()
    assert first.state == "running" and not page.start_button.isEnabled()  # same input: busy
    with qtbot.waitSignal(page.planned, timeout=30000):
        window.open_path(other)
    page.types_model.set_checked("Q4_0")
    assert page.start_button.isEnabled()  # another input may queue
    second = page.start()
    assert second.state == "queued"
    qtbot.waitUntil(lambda: "1 more job(s) queued" in page.progress_label.text() or first.state == "done",
                    timeout=30000)
    qtbot.waitUntil(lambda: second.state == "done", timeout=60000)
    assert first.state == "done"
    assert (tiny_hf / "tiny-hf-Q8_0.gguf").exists() and (other / "other-hf-Q4_0.gguf").exists()


def test_quantdesk_path_on_the_command_line_opens_quantize(qtbot, tiny_hf):
    from app.ui.main_window import MainWindow

    window = MainWindow(initial_path=tiny_hf)  # what `quantdesk PATH` does
    qtbot.addWidget(window)
    page = window.pages["Quantize"]
    with qtbot.waitSignal(page.planned, timeout=30000):
        window.show()
    assert window.current_page() is page and page.input.path == tiny_hf
    window.close()


def test_fit_to_size_writes_a_file_within_the_chosen_size(qtbot, window, tiny_hf):
    from quantize.fit import fit_bounds, fit_problem
    from quantize.job import open_source

    page = _drop_and_plan(qtbot, window, tiny_hf)
    source = open_source(tiny_hf)
    try:
        smallest, largest = fit_bounds(fit_problem(source))
    finally:
        source.close()
    assert page.input.fit_range == (smallest, largest)
    assert not page.fit_slider.isEnabled() and not page.start_button.isEnabled()
    page.fit_check.setChecked(True)  # the slider's ends are the smallest and largest possible files
    assert page.fit_slider.isEnabled() and page.start_button.isEnabled()
    assert page.fit_slider.minimum() * 1024 >= smallest and page.fit_slider.maximum() * 1024 <= largest
    page.fit_slider.setValue(page.fit_slider.minimum() + (page.fit_slider.maximum() - page.fit_slider.minimum()) // 3)
    target = page.fit_size()
    assert page.fit_size_label.text() and page.fit_verdict_label.text()
    with qtbot.waitSignal(page.job_finished, timeout=120000) as done:
        qtbot.mouseClick(page.start_button, Qt.MouseButton.LeftButton)
    [output] = done.args[0]
    assert output.name.startswith("tiny-hf-fit-") and output.stat().st_size <= target
    assert output.with_name(output.stem + ".recipe.json").exists()
