"""The library index: GGUF metadata without loading weights, incremental rescans, import/remove."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from gguf import GGUFReader, LlamaFileType

from models.foundation.errors import QuantDeskError
from models.foundation.paths import app_paths
from models.foundation.system_programs import reveal_command
from models.gguf_header import read_gguf_header
from models.library import Library, quant_name
from tests.models.library_gguf import write_gguf


def models_dir() -> Path:
    return app_paths().ensure().models


@pytest.mark.smollm2
def test_metadata_matches_ggufs_own_reader_without_loading_weights(smollm2_gguf):
    lib = Library()
    model = lib.import_path(smollm2_gguf)
    reader = GGUFReader(smollm2_gguf)  # the oracle: gguf-py's full reader
    field = lambda key: reader.get_field(key).contents()  # noqa: E731
    assert model.source == "imported" and model.kind == "gguf"
    assert model.architecture == field("general.architecture") == "llama"
    assert model.file_type == field("general.file_type") and model.quant == "Q4_1"
    assert model.context_length == field("llama.context_length")
    assert model.parameters == sum(int(t.n_elements) for t in reader.tensors)
    assert model.chat_template is True
    assert model.size == smollm2_gguf.stat().st_size
    header = read_gguf_header(smollm2_gguf)
    assert [(t.name, t.n_bytes) for t in header.tensors] == [(t.name, int(t.n_bytes)) for t in reader.tensors]
    # Imported models are only forgotten, never deleted.
    assert lib.remove(smollm2_gguf) == [] and smollm2_gguf.exists() and lib.models() == []


def test_scan_is_incremental_over_hundreds_of_files(capsys):
    folder = models_dir() / "bulk"
    for i in range(200):
        write_gguf(folder / f"m{i:03d}-Q8_0.gguf", name=f"model {i:03d}")
    lib = Library()
    t0 = time.perf_counter()
    first = lib.scan()
    t1 = time.perf_counter()
    again = lib.scan()
    t2 = time.perf_counter()
    assert (first.added, again.unchanged, again.added, again.updated) == (200, 200, 0, 0)
    with capsys.disabled():
        print(f"\nlibrary scan of 200 GGUF files: first {t1 - t0:.3f} s, rescan {t2 - t1:.3f} s")
    changed = folder / "m007-Q8_0.gguf"
    write_gguf(changed, name="renamed", n_ctx=999)
    os.utime(changed, ns=(time.time_ns(), time.time_ns() + 10_000_000))
    (folder / "m008-Q8_0.gguf").unlink()
    third = lib.scan()
    assert (third.updated, third.removed, third.unchanged) == (1, 1, 198)
    assert lib.get(changed).context_length == 999 and lib.get(changed).name == "renamed"
    assert len(lib.models()) == 199


def test_kinds_sources_shards_and_partials(tiny_llama):
    root = models_dir()
    write_gguf(root / "hub/acme/x/x-Q8_0.gguf", file_type=LlamaFileType.MOSTLY_Q8_0)
    write_gguf(root / "my-f16.gguf", file_type=LlamaFileType.MOSTLY_F16, template=False)
    write_gguf(root / "big-Q4_K_M-00001-of-00002.gguf", shard=(1, 2), file_type=15)
    write_gguf(root / "big-Q4_K_M-00002-of-00002.gguf", shard=(2, 2), file_type=15, rows=16)
    (root / "hub/acme/x/.y-Q8_0.gguf.part").write_bytes(b"GGUF partial")
    ckpt = root / "converted-src"
    import shutil
    shutil.copytree(tiny_llama.path, ckpt)
    lib = Library()
    lib.scan()
    by_name = {Path(m.path).name: m for m in lib.models()}
    assert set(by_name) == {"x-Q8_0.gguf", "my-f16.gguf", "big-Q4_K_M-00001-of-00002.gguf", "converted-src"}
    assert by_name["x-Q8_0.gguf"].source == "downloaded" and by_name["x-Q8_0.gguf"].quant == "Q8_0"
    assert by_name["my-f16.gguf"].source == "converted" and not by_name["my-f16.gguf"].chat_template
    big = by_name["big-Q4_K_M-00001-of-00002.gguf"]
    assert big.quant == "Q4_K_M" and big.source == "quantized" and len(big.file_list) == 2
    assert big.size == sum(f.stat().st_size for f in big.file_list)
    assert big.parameters == (4 * 8 + 64) + (16 * 8 + 64)
    hf = by_name["converted-src"]
    assert hf.kind == "safetensors" and hf.architecture == "LlamaForCausalLM" and hf.chat_template
    # Removing a model inside the models folder deletes all of its files.
    deleted = lib.remove(Path(big.path))
    assert len(deleted) == 2 and not any(f.exists() for f in big.file_list)
    assert lib.get(Path(big.path)) is None


def test_import_refuses_what_is_not_a_model(tmp_path):
    lib = Library()
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(QuantDeskError, match="not a model"):
        lib.import_path(tmp_path / "notes.txt")
    (tmp_path / "fake.gguf").write_bytes(b"NOPE" + b"\0" * 100)
    with pytest.raises(QuantDeskError, match="not a readable GGUF file"):
        lib.import_path(tmp_path / "fake.gguf")
    whole = write_gguf(tmp_path / "whole-Q8_0.gguf").read_bytes()
    (tmp_path / "cut-Q8_0.gguf").write_bytes(whole[:-100])  # tensor data cut short
    with pytest.raises(QuantDeskError, match="beyond the end of the file"):
        lib.import_path(tmp_path / "cut-Q8_0.gguf")
    write_gguf(tmp_path / "s-Q8_0-00001-of-00003.gguf", shard=(1, 3))
    with pytest.raises(QuantDeskError, match="split in parts"):
        lib.import_path(tmp_path / "s-Q8_0-00001-of-00003.gguf")
    with pytest.raises(QuantDeskError, match="does not exist"):
        lib.import_path(tmp_path / "nothing.gguf")
    assert lib.models() == []


def test_outputs_written_elsewhere_are_kept_and_only_forgotten(tmp_path):
    lib = Library()
    path = write_gguf(tmp_path / "mine-Q8_0.gguf")
    assert lib.record_output(path, "quantized").source == "quantized"
    assert lib.scan().removed == 0 and lib.get(path).source == "quantized"
    assert lib.remove(path) == [] and path.exists() and lib.get(path) is None
    # A failure to index is logged, not raised: the job that wrote the file succeeded.
    assert lib.record_output(tmp_path / "gone.gguf", "quantized") is None


def test_imported_file_that_disappears_leaves_the_library(tmp_path):
    lib = Library()
    path = write_gguf(tmp_path / "outside-Q8_0.gguf")
    assert lib.import_path(path).source == "imported"
    path.unlink()
    assert lib.scan().removed == 1 and lib.models() == []


def test_quant_names_and_reveal_commands(tmp_path):
    assert [quant_name(t) for t in (0, 1, 15, 32, 7)] == ["F32", "F16", "Q4_K_M", "BF16", "Q8_0"]
    from quantize.ftypes import FILE_TYPES

    for ft in FILE_TYPES.values():  # every type the quantizer writes is named as llama-quantize names it
        assert quant_name(ft.ftype) == ft.name
    f = tmp_path / "a.gguf"
    f.write_bytes(b"x")
    assert reveal_command(f, "win32") == ["explorer", f"/select,{f}"]
    assert reveal_command(f, "darwin") == ["open", "-R", str(f)]
    linux = reveal_command(f, "linux")
    assert linux[0] in ("gdbus", "xdg-open") and (f.as_uri() in linux[-2] or linux[-1] == str(tmp_path))
    assert reveal_command(tmp_path, "linux") == ["xdg-open", str(tmp_path)]
    assert reveal_command(tmp_path, "darwin") == ["open", str(tmp_path)]


def test_a_database_from_before_active_parameters_gains_the_column_and_rereads(tmp_path):
    """Append-only migration: an older index opens, keeps its rows, and fills the new column."""
    import sqlite3

    path = write_gguf(models_dir() / "old.gguf")
    folder = models_dir().resolve()
    old = sqlite3.connect(folder / ".library.sqlite3")
    old.execute("""CREATE TABLE models (
        path TEXT PRIMARY KEY, kind TEXT NOT NULL, source TEXT NOT NULL, name TEXT NOT NULL,
        size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, architecture TEXT, parameters INTEGER,
        file_type INTEGER, quant TEXT, context_length INTEGER, chat_template INTEGER,
        files TEXT NOT NULL, error TEXT, added REAL NOT NULL)""")
    stat = path.stat()
    old.execute("INSERT INTO models VALUES (?, 'gguf', 'quantized', 'old', ?, ?, 'llama', 96, 7, 'Q8_0', "
                "256, 1, ?, NULL, 0)", (str(path.resolve()), stat.st_size, stat.st_mtime_ns,
                                        f'["{path.resolve()}"]'))
    old.commit()
    old.close()
    lib = Library()
    assert [m.name for m in lib.models()] == ["old"] and lib.models()[0].active_parameters is None
    lib.scan()
    (model,) = lib.models()
    assert model.parameters == model.active_parameters == 96  # a dense model: all of them active
