"""What the Quantize page's imatrix stage and quality report rely on, without a display or a model run.

The real passes (imatrix, base, compare) run in tests/ui/pages/test_quantize_quality.py
and tests/models/test_quality_models.py; here: which matrix is reused when, the sentences,
and the rows built from stored reports.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from models.foundation.errors import QuantDeskError
from app.core.quality_checks import (
    MeasureSettings, find_imatrix, imatrix_cache_path, imatrix_for_plan, measuring_source, quality_rows,
)
from models.library import Library
from tests.models.library_gguf import write_gguf

STATS = {"mean_kld": 0.03, "mean_kld_uncertainty": 0.001, "same_top_percent": 88.0, "ppl": 15.0,
         "base_ppl": 14.0}


def test_a_folder_cannot_be_measured_and_the_sentence_says_what_to_do(tmp_path):
    with pytest.raises(QuantDeskError) as err:
        measuring_source(tmp_path)
    assert "needs a GGUF file" in err.value.what and "F16" in err.value.fix
    gguf = write_gguf(tmp_path / "m-F16.gguf", file_type=1)
    assert measuring_source(gguf) == gguf


def test_the_matrix_is_kept_per_source_text_and_chunking(tmp_path):
    source = write_gguf(tmp_path / "m-F16.gguf", file_type=1)
    text = tmp_path / "text.txt"
    text.write_text("some calibration text\n")
    settings = MeasureSettings(str(text), 32, 4)
    path = imatrix_cache_path(source, settings.text().data, settings, tmp_path / "cache")
    assert path.parent == tmp_path / "cache" / "imatrix" and path.name.endswith(".imatrix.gguf")
    assert path == imatrix_cache_path(source, b"some calibration text", settings, tmp_path / "cache")
    others = {imatrix_cache_path(source, b"another text", settings, tmp_path / "cache"),
              imatrix_cache_path(source, settings.text().data, MeasureSettings(str(text), 64, 4), tmp_path / "cache"),
              imatrix_cache_path(source, settings.text().data, MeasureSettings(str(text), 32, None), tmp_path / "cache")}
    assert path not in others and len(others) == 3

    found, note = imatrix_for_plan(source, settings, tmp_path / "cache")
    assert found is None and note.startswith("Made from text.txt (4 chunks of 32 tokens) as the job's first stage")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"made earlier")
    assert find_imatrix(source, settings, tmp_path / "cache") == path
    found, note = imatrix_for_plan(source, settings, tmp_path / "cache")
    assert found == path and note.startswith("Reused") and path.name in note
    # the source file changed: the old matrix is not reused
    st = source.stat()
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert find_imatrix(source, settings, tmp_path / "cache") is None


def test_the_plan_note_explains_a_folder_and_a_missing_text(tmp_path):
    found, note = imatrix_for_plan(tmp_path, MeasureSettings())
    assert found is None and "needs a GGUF file" in note
    source = write_gguf(tmp_path / "m-F16.gguf", file_type=1)
    found, note = imatrix_for_plan(source, MeasureSettings(str(tmp_path / "gone.txt")))
    assert found is None and "Cannot read the text file" in note and "gone.txt" in note
    found, note = imatrix_for_plan(source, MeasureSettings(None, 512, None))
    assert note.startswith("Made from the built-in text (the whole text of 512 tokens)")


def test_rows_come_from_the_stored_reports_of_one_source_while_their_files_are_unchanged(tmp_path):
    library = Library(tmp_path / "models")
    source = write_gguf(tmp_path / "m-F16.gguf", file_type=1)
    other_source = write_gguf(tmp_path / "n-F16.gguf", file_type=1)
    q4 = write_gguf(tmp_path / "m-Q4_K_M.gguf", file_type=15, rows=64)
    q8 = write_gguf(tmp_path / "m-Q8_0.gguf", file_type=7, rows=128)
    elsewhere = write_gguf(tmp_path / "n-Q8_0.gguf", file_type=7)
    settings = {"text": "quantdesk-builtin-v1", "n_ctx": 32, "chunks": 4, "tokens": 60}
    library.record_quality(q8, source, settings, {**STATS, "mean_kld": 0.004})
    library.record_quality(q4, source, settings, STATS)
    library.record_quality(elsewhere, other_source, settings, STATS)

    assert set(library.quality_reports()) == {str(p.resolve()) for p in (q4, q8, elsewhere)}
    rows = quality_rows(source, library)
    assert [(r.type_name, r.path) for r in rows] == [("Q4_K_M", q4), ("Q8_0", q8)]  # smaller file first
    q4_row = rows[0]
    assert q4_row.size == q4.stat().st_size and q4_row.imatrix == ""
    assert q4_row.bits_per_weight == pytest.approx(32.0)  # the test files hold F32 tensors
    assert q4_row.delta_ppl_percent == pytest.approx(100 * (15 / 14 - 1))
    assert q4_row.settings == settings

    write_gguf(q4, file_type=15, rows=65)  # rewritten: its report no longer holds
    assert [r.type_name for r in quality_rows(source, library)] == ["Q8_0"]
    assert library.quality(q4) is None
