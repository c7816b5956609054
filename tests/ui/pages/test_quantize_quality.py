"""The Quantize page's importance matrix stage and quality report, with the real quality process.

SmolLM2 (widened to F16) is the source; chunks of 32 tokens keep each pass to seconds.
What is asserted is what the GUI received (signals, table, chart, labels) and what is on
disk, never a thread's state seen from another.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

pytestmark = [pytest.mark.smollm2, pytest.mark.slow]


@pytest.fixture(scope="module")
def smollm2_f16(smollm2_gguf, tmp_path_factory) -> Path:
    """SmolLM2's weights as an F16 GGUF: a source to quantize and to measure against."""
    from tests.quantize.model_files import write_dequantized_f16

    return write_dequantized_f16(smollm2_gguf, tmp_path_factory.mktemp("f16") / "smol-F16.gguf")


@pytest.fixture
def passes(monkeypatch) -> list[str]:
    """The quality process's passes, in the order they ran (the real ones, only counted)."""
    from models.quality import runner

    modes: list[str] = []
    real = runner.run_worker

    def counting(request, *args):
        modes.append(request["mode"])
        return real(request, *args)

    monkeypatch.setattr(runner, "run_worker", counting)
    return modes


def _open(qtbot, window, path: Path, out: Path, chunks: int = 4):
    page = window.show_page("Quantize")  # an F16 GGUF opens here when this page is on screen
    with qtbot.waitSignal(page.planned, timeout=60000):
        window.open_path(path)
    page.folder_edit.setText(str(out))
    page.chunk_size_spin.setValue(32)
    page.chunks_spin.setValue(chunks)
    return page


def _set_imatrix_mode(qtbot, page, mode: str) -> None:
    with qtbot.waitSignal(page.planned, timeout=60000):
        page.imatrix_mode_combo.setCurrentIndex(page.imatrix_mode_combo.findData(mode))


def _record_progress(monkeypatch, target) -> list:
    """Every progress report the GUI thread handed to ``target._progress``."""
    seen: list = []
    real = target._progress

    def recording(progress):
        seen.append(progress)
        real(progress)

    monkeypatch.setattr(target, "_progress", recording)
    return seen


def _table(panel) -> list[dict[str, str]]:
    model = panel.model
    headers = [model.headerData(c, Qt.Orientation.Horizontal) for c in range(model.columnCount())]
    return [{h: model.index(r, c).data() for c, h in enumerate(headers)} for r in range(model.rowCount())]


def test_imatrix_stage_quantize_with_it_check_quality_and_see_it_everywhere(
        qtbot, window, smollm2_f16, tmp_path, passes, monkeypatch):
    from gguf import GGUFReader

    from models.foundation.paths import app_paths
    from models.library import Library

    page = _open(qtbot, window, smollm2_f16, tmp_path)
    _set_imatrix_mode(qtbot, page, "make")
    assert "first stage" in page.imatrix_note.text() and "the built-in text" in page.imatrix_note.text()
    assert not page.check_button.isEnabled()
    page.types_model.set_checked("Q4_K_M")
    page.types_model.set_checked("Q8_0")
    stages = _record_progress(monkeypatch, page)
    with qtbot.waitSignal(page.job_finished, timeout=600000) as done:
        page.start_button.click()
    outputs = done.args[0]
    assert sorted(p.name for p in outputs) == ["smol-Q4_K_M.gguf", "smol-Q8_0.gguf"]
    assert passes == ["imatrix"]
    names = [p.stage for p in stages]
    assert names[0] == "Importance matrix" and "Quantizing" in names
    assert names.index("Quantizing") > max(i for i, n in enumerate(names) if n == "Importance matrix")
    assert any(p.stage == "Importance matrix" and p.total == 4 and p.done == 4 for p in stages)
    made = list((app_paths().cache / "imatrix").iterdir())
    assert len(made) == 1 and made[0].name.endswith(".imatrix.gguf")
    fields = GGUFReader(tmp_path / "smol-Q4_K_M.gguf").fields
    assert fields["quantize.imatrix.file"].contents() == str(made[0])
    assert fields["quantize.imatrix.chunks_count"].contents() == 4
    assert fields["quantize.imatrix.dataset"].contents() == "quantdesk-builtin-v1"

    # Check quality: the source's pass once, then each quant's
    panel = page.quality_panel
    assert page.check_button.isEnabled()
    checks = _record_progress(monkeypatch, panel)
    with qtbot.waitSignal(panel.check_ended, timeout=600000) as ended:
        page.check_button.click()
        assert not page.check_button.isEnabled() and panel.cancel_button.isEnabled()
    assert ended.args[0] == "done", ended.args[1]
    assert passes == ["imatrix", "base", "compare", "compare"]
    assert {p.stage for p in checks} >= {"Base model", "Quant"}
    assert not panel.cancel_button.isEnabled() and page.check_button.isEnabled()
    rows = {r["Type"]: r for r in _table(panel)}
    assert list(rows) == ["Q4_K_M", "Q8_0"]  # smallest file first
    library = Library()
    for name, row in rows.items():
        stats = library.quality(tmp_path / f"smol-{name}.gguf").stats
        assert row["Mean KLD"] == f"{stats['mean_kld']:.5f}"
        assert row["Same top %"] == f"{stats['same_top_percent']:.2f}"
        assert row["PPL"] == f"{stats['ppl']:.3f}"
        assert row["ΔPPL %"] == f"{100 * (stats['ppl'] / stats['base_ppl'] - 1):+.2f}"
        assert row["Imatrix"] == "yes"
    kld = {r.type_name: r.mean_kld for r in panel.rows}
    assert 0 < kld["Q8_0"] < kld["Q4_K_M"] < 1
    assert panel.chart.plot is not None
    assert [(t, k) for t, _size, k in panel.chart.points()] == [("Q4_K_M", kld["Q4_K_M"]), ("Q8_0", kld["Q8_0"])]
    assert "4 chunks of 32 tokens of the built-in text" in panel.summary.text()

    # the type list shows what the checked types cost
    texts = {page.types_model.rows[i].name: page.types_model.index(i).data()
             for i in range(page.types_model.rowCount())}
    assert texts["Q4_K_M"].endswith(f" · KLD {kld['Q4_K_M']:.4f} with imatrix")
    assert "KLD" not in texts["Q6_K"]

    # a second job reuses the matrix (its plan used it too), and nothing measures twice
    _set_imatrix_mode(qtbot, page, "none")
    _set_imatrix_mode(qtbot, page, "make")
    assert page.imatrix_note.text().startswith("Reused") and made[0].name in page.imatrix_note.text()
    page.types_model.set_checked("Q4_K_M", False)
    page.types_model.set_checked("Q8_0", False)
    page.types_model.set_checked("Q4_0")
    stages.clear()
    with qtbot.waitSignal(page.job_finished, timeout=600000):
        page.start_button.click()
    assert any(p.stage == "Importance matrix" and "reusing" in p.detail for p in stages)
    assert passes == ["imatrix", "base", "compare", "compare"]
    assert list((app_paths().cache / "imatrix").iterdir()) == made
    assert GGUFReader(tmp_path / "smol-Q4_0.gguf").fields["quantize.imatrix.file"].contents() == str(made[0])

    # the Library's Quality column
    models = window.show_page("Models")
    library_panel = models.show_library()
    library_panel.import_path(tmp_path / "smol-Q4_K_M.gguf")
    qtbot.waitUntil(lambda: library_panel.select_path(str(tmp_path / "smol-Q4_K_M.gguf")), timeout=20000)
    column = [library_panel.model.headerData(c, Qt.Orientation.Horizontal)
              for c in range(library_panel.model.columnCount())].index("Quality")
    row = library_panel.view.selectionModel().selectedRows()[0].row()
    cell = library_panel.proxy.index(row, column)
    assert cell.data() == f"KLD {kld['Q4_K_M']:.4f}"
    assert "Same top token" in cell.data(Qt.ItemDataRole.ToolTipRole)

    # opening the source again shows its stored reports at once (no pass runs)
    window.show_page("Quantize")
    with qtbot.waitSignal(page.quality_panel.rows_changed, timeout=30000) as shown:
        window.open_path(smollm2_f16)
    assert [r.type_name for r in shown.args[0]] == ["Q4_K_M", "Q8_0"]
    assert passes == ["imatrix", "base", "compare", "compare"]


def test_cancelling_a_quality_check_reaches_the_gui_and_stores_nothing(
        qtbot, window, smollm2_f16, tmp_path, monkeypatch):
    from models.foundation.paths import app_paths
    from models.library import Library

    page = _open(qtbot, window, smollm2_f16, tmp_path, chunks=0)  # the whole text: many decodes
    page.types_model.set_checked("Q8_0")
    with qtbot.waitSignal(page.job_finished, timeout=600000) as done:
        page.start_button.click()
    (output,) = done.args[0]

    panel = page.quality_panel
    received = []

    def cancel_on_first_chunk(progress):
        received.append(progress)
        if progress.fraction is not None and progress.done >= 1 and not panel.progress_label.text().startswith("Canc"):
            panel.cancel_button.click()

    real = panel._progress
    monkeypatch.setattr(panel, "_progress", lambda p: (real(p), cancel_on_first_chunk(p)))
    with qtbot.waitSignal(panel.check_ended, timeout=600000) as ended:
        page.check_quality()
    assert ended.args[0] == "cancelled"
    assert "cancelled" in panel.progress_label.text()
    chunk_reports = [p for p in received if p.fraction is not None and p.done >= 1]
    assert chunk_reports and all(p.fraction < 1 for p in chunk_reports)  # cancelled mid-pass
    assert Library().quality(output) is None and panel.model.rowCount() == 0
    base_cache = app_paths().cache / "quality-base"
    assert not base_cache.exists() or list(base_cache.iterdir()) == []
    qtbot.waitUntil(lambda: not [p for p in multiprocessing.active_children() if p.name == "quantdesk-quality"],
                    timeout=15000)
    assert page.check_button.isEnabled() and not panel.cancel_button.isEnabled()


def test_cancelling_the_imatrix_stage_leaves_no_matrix_and_no_output(
        qtbot, window, smollm2_f16, tmp_path, monkeypatch):
    from models.foundation.paths import app_paths

    page = _open(qtbot, window, smollm2_f16, tmp_path, chunks=0)
    _set_imatrix_mode(qtbot, page, "make")
    page.types_model.set_checked("Q4_0")
    stages = []
    real = page._progress

    def cancel_on_first_chunk(progress):
        stages.append(progress)
        real(progress)
        if progress.stage == "Importance matrix" and progress.fraction and page.cancel_button.isEnabled() \
                and page.progress_label.text() != "Cancelling …":
            page.cancel_button.click()

    monkeypatch.setattr(page, "_progress", cancel_on_first_chunk)
    with qtbot.waitSignal(page.job_finished, timeout=600000) as done:
        page.start_button.click()
    assert done.args[0] == []
    assert page.queue.jobs[-1].state == "cancelled"
    assert {p.stage for p in stages} == {"Importance matrix"}
    assert "no file was written" in page.progress_label.text()
    imatrix_folder = app_paths().cache / "imatrix"
    assert not imatrix_folder.exists() or list(imatrix_folder.iterdir()) == []
    assert list(tmp_path.iterdir()) == []


def test_a_folder_cannot_make_an_imatrix_and_says_why(qtbot, window, tiny_hf):
    page = window.pages["Quantize"]
    with qtbot.waitSignal(page.planned, timeout=30000):
        window.open_path(tiny_hf)
    _set_imatrix_mode(qtbot, page, "make")
    assert "needs a GGUF file" in page.imatrix_note.text()
    page.types_model.set_checked("Q4_0")
    assert page.start() is None
    assert "needs a GGUF file" in page.banner.text() and page.banner.level() == "error"
    assert page.queue.jobs == []
