"""Importance matrices: both llama.cpp formats parse to the vectors llama-quantize uses,
and quantizing with one gives llama_model_quantize's bytes.

The C API takes the importance matrix as ``llama_model_imatrix_data[]`` (name, float
pointer, size), which ctypes fills directly, so the comparison is with the real
``llama_model_quantize`` on the whole file — not a per-tensor ``ggml_quantize_chunk``
stand-in. What ``llama-quantize`` (the tool) adds on top, the ``quantize.imatrix.*`` keys,
is passed as the same key overrides the tool passes.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T, GGUFReader, GGUFWriter

from models.foundation.errors import QuantDeskError
from quantize.ftypes import FILE_TYPES
from quantize.imatrix import load_imatrix
from quantize.job import QuantizeOptions, QuantizeTarget, quantize_model
from tests.quantize.llama_quant_oracle import llama_quantize
from tests.quantize.model_files import TinyLlama, describe_differences, write_tiny_llama


def write_gguf_imatrix(path: Path, entries: dict[str, tuple[np.ndarray, np.ndarray]],
                       datasets=("calibration.txt",), chunk_count=7, chunk_size=512, metadata=True) -> Path:
    """``entries``: name → (in_sum2 of shape (n_mat, n_per_row), counts of shape (n_mat,))."""
    w = GGUFWriter(path, "")  # llama-imatrix writes no general.architecture
    w.add_type("imatrix")
    if metadata:
        w.add_array("imatrix.datasets", list(datasets))
        w.add_uint32("imatrix.chunk_count", chunk_count)
        w.add_uint32("imatrix.chunk_size", chunk_size)
    for name, (sums, counts) in entries.items():
        if sums is not None:
            w.add_tensor(f"{name}.in_sum2", np.asarray(sums, dtype=np.float32))
        if counts is not None:
            w.add_tensor(f"{name}.counts", np.asarray(counts, dtype=np.float32).reshape(-1, 1))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_legacy_imatrix(path: Path, entries: dict[str, tuple[int, np.ndarray]],
                         chunk_count=None, dataset=None) -> Path:
    """``entries``: name → (ncall, stored sums), in llama-imatrix's ``.dat`` layout."""
    out = struct.pack("<i", len(entries))
    for name, (ncall, sums) in entries.items():
        raw = name.encode()
        out += struct.pack("<i", len(raw)) + raw + struct.pack("<ii", ncall, len(sums))
        out += np.asarray(sums, dtype="<f4").tobytes()
    if chunk_count is not None:
        out += struct.pack("<i", chunk_count)
        if dataset is not None:
            out += struct.pack("<i", len(dataset.encode())) + dataset.encode()
    path.write_bytes(out)
    return path


def test_gguf_imatrix_is_averaged_by_per_expert_counts(tmp_path):
    rng = np.random.default_rng(1)
    dense = rng.uniform(0, 5, (1, 8)).astype(np.float32)
    experts = rng.uniform(0, 5, (4, 8)).astype(np.float32)
    path = write_gguf_imatrix(tmp_path / "m.gguf", {
        "blk.0.attn_q.weight": (dense, [4]),
        "blk.0.ffn_down_exps.weight": (experts, [2, 0, 2.6, 2.5]),
    })
    m = load_imatrix(path)
    assert not m.is_legacy and m.datasets == ["calibration.txt"] and m.chunk_count == 7
    assert np.array_equal(m.entries["blk.0.attn_q.weight"], dense[0] / np.float32(4))
    # a count of 0 means "no data": weight 1; counts are rounded half away from zero
    want = np.concatenate([experts[0] / np.float32(2), np.ones(8, np.float32),
                           experts[2] / np.float32(3), experts[3] / np.float32(3)])
    assert np.array_equal(m.entries["blk.0.ffn_down_exps.weight"], want)
    per_expert = m.for_tensor("blk.0.ffn_down_exps.weight", (4, 16, 8))
    assert per_expert.shape == (4, 8) and np.array_equal(per_expert[2], experts[2] / np.float32(3))


def test_legacy_imatrix_divides_by_ncall_and_reads_the_optional_trailer(tmp_path):
    a, b = np.arange(1, 9, dtype=np.float32) * 3, np.arange(4, dtype=np.float32) + 0.5
    path = write_legacy_imatrix(tmp_path / "m.dat", {"blk.0.attn_k.weight": (3, a), "output.weight": (0, b)},
                                chunk_count=5, dataset="wiki.train.raw")
    m = load_imatrix(path)
    assert m.is_legacy and m.chunk_count == 5 and m.datasets == ["wiki.train.raw"]
    assert np.array_equal(m.entries["blk.0.attn_k.weight"], a / np.float32(3))
    assert np.array_equal(m.entries["output.weight"], b)  # ncall 0: stored values as they are
    bare = load_imatrix(write_legacy_imatrix(tmp_path / "bare.dat", {"x.weight": (2, a)}))
    assert bare.chunk_count == 0 and bare.datasets == []


def test_imatrix_keys_recorded_like_llama_quantize(tmp_path):
    m = load_imatrix(write_legacy_imatrix(tmp_path / "m.dat", {"a.weight": (1, np.ones(4))}, 9, "d" * 300))
    keys = {e.key: e.value for e in m.metadata("x" * 200)}
    assert keys == {"quantize.imatrix.file": "x" * 127, "quantize.imatrix.dataset": "d" * 127,
                    "quantize.imatrix.entries_count": 1, "quantize.imatrix.chunks_count": 9}


def test_vector_that_does_not_fit_a_tensor_is_refused_except_for_the_embedding(tmp_path):
    path = write_gguf_imatrix(tmp_path / "m.gguf", {"blk.0.attn_q.weight": (np.ones((1, 8)), [1]),
                                                    "token_embd.weight": (np.ones((1, 8)), [1])})
    m = load_imatrix(path)
    with pytest.raises(QuantDeskError, match="m.gguf.*blk.0.attn_q.weight"):
        m.for_tensor("blk.0.attn_q.weight", (8, 16))
    assert m.for_tensor("token_embd.weight", (8, 16)) is None
    assert m.for_tensor("blk.9.attn_q.weight", (8, 8)) is None


@pytest.mark.parametrize("case", ["truncated", "no-entries", "no-metadata", "sums-without-counts",
                                  "nan", "missing-file", "negative-length"])
def test_malformed_imatrix_files_are_clear_errors(tmp_path, case):
    ones = np.ones((1, 8), np.float32)
    if case == "truncated":
        full = write_legacy_imatrix(tmp_path / "m.dat", {"a.weight": (1, np.ones(64))}).read_bytes()
        path = tmp_path / "m.dat"
        path.write_bytes(full[:60])
    elif case == "no-entries":
        path = tmp_path / "m.dat"
        path.write_bytes(struct.pack("<i", 0))
    elif case == "no-metadata":
        path = write_gguf_imatrix(tmp_path / "m.gguf", {"a.weight": (ones, [1])}, metadata=False)
    elif case == "sums-without-counts":
        path = write_gguf_imatrix(tmp_path / "m.gguf", {"a.weight": (ones, None)})
    elif case == "nan":
        path = write_gguf_imatrix(tmp_path / "m.gguf", {"a.weight": (ones * np.nan, [1])})
    elif case == "negative-length":
        path = tmp_path / "m.dat"
        path.write_bytes(struct.pack("<ii", 1, -5) + b"junk")
    else:
        path = tmp_path / "absent.dat"
    with pytest.raises(QuantDeskError, match=path.name):
        load_imatrix(path)


# -- quantizing with an importance matrix ---------------------------------------------

def write_model_imatrix(model: Path, path: Path, seed: int, skip=()) -> Path:
    """A GGUF imatrix for every quantizable weight of ``model`` (per expert for 3-D ones)."""
    rng = np.random.default_rng(seed)
    entries = {}
    for t in GGUFReader(model).tensors:
        if len(t.shape) < 2 or t.name == "token_embd.weight" or t.name in skip or "gate_inp" in t.name:
            continue
        n_mat = int(t.shape[2]) if len(t.shape) > 2 else 1
        counts = rng.integers(1, 50, n_mat).astype(np.float32)
        mean = rng.gamma(0.7, 1.0, (n_mat, int(t.shape[0]))).astype(np.float32) + 1e-3
        entries[t.name] = (mean * counts[:, None], counts)
    return write_gguf_imatrix(path, entries)


TINY_MODELS = {
    "dense": TinyLlama(),
    "moe": TinyLlama(n_layer=4, n_embd=256, n_head=4, n_head_kv=1, n_ff=256, n_vocab=300, tied=False,
                     n_expert=8, seed=2),
}


@pytest.mark.slow
@pytest.mark.parametrize("model", TINY_MODELS)
def test_quantizing_with_an_imatrix_gives_llama_model_quantize_bytes(tmp_path, model):
    src = write_tiny_llama(tmp_path / f"{model}.gguf", TINY_MODELS[model])
    imatrix_path = write_model_imatrix(src, tmp_path / "imatrix.gguf", seed=3)
    matrix = load_imatrix(imatrix_path)
    types = list(FILE_TYPES.values())
    targets = [QuantizeTarget(ft, tmp_path / f"ours-{ft.name}.gguf") for ft in types]
    quantize_model(src, targets, QuantizeOptions(imatrix=imatrix_path, threads=2))
    overrides = [(e.key, e.value, e.type) for e in matrix.metadata(str(imatrix_path))]
    failures = []
    for ft in types:
        ref = tmp_path / f"ref-{ft.name}.gguf"
        assert llama_quantize(src, ref, ft.ftype, imatrix=matrix.entries, kv_overrides=overrides) == 0
        problem = describe_differences(tmp_path / f"ours-{ft.name}.gguf", ref)
        if problem:
            failures.append(f"{ft.name}: {problem}")
    assert not failures, "\n".join(failures)
    # the imatrix changed the plan where llama.cpp says it should (Q4_0: first ffn_down -> Q4_1)
    q4_0 = {t.name: T(t.tensor_type) for t in GGUFReader(tmp_path / "ours-Q4_0.gguf").tensors}
    if model == "dense":
        assert q4_0["blk.0.ffn_down.weight"] == T.Q4_1 and q4_0["blk.1.ffn_down.weight"] == T.Q4_0


def test_q2_k_s_refuses_an_imatrix_without_data_for_a_q2_k_tensor(tmp_path):
    src = write_tiny_llama(tmp_path / "tiny.gguf", TinyLlama(n_layer=2, n_vocab=300))
    imatrix_path = write_model_imatrix(src, tmp_path / "m.gguf", seed=4, skip={"blk.1.attn_q.weight"})
    target = QuantizeTarget(FILE_TYPES["Q2_K_S"], tmp_path / "out.gguf")
    with pytest.raises(QuantDeskError, match="blk.1.attn_q.weight"):
        quantize_model(src, [target], QuantizeOptions(imatrix=imatrix_path))
    with pytest.raises(QuantDeskError, match="needs an importance matrix"):
        quantize_model(src, [target], QuantizeOptions())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf", "tiny.gguf"]


def test_cli_records_the_imatrix_as_given(tmp_path, monkeypatch):
    from app.cli import main

    src = write_tiny_llama(tmp_path / "tiny.gguf", TinyLlama(n_layer=2, n_vocab=300))
    write_model_imatrix(src, tmp_path / "calib.gguf", seed=5)
    monkeypatch.chdir(tmp_path)
    assert main(["quantize", "tiny.gguf", "--type", "Q4_0", "--pure", "--imatrix", "./calib.gguf",
                 "-o", "out.gguf"]) == 0
    fields = GGUFReader(tmp_path / "out.gguf").fields
    assert fields["quantize.imatrix.file"].contents() == "./calib.gguf"
    assert fields["quantize.imatrix.entries_count"].contents() == 14  # 2 layers x 7 matrices; tied: no output.weight
    assert fields["general.file_type"].contents() == FILE_TYPES["Q4_0"].ftype
