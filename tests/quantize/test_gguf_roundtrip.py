"""The streaming GGUF writer and the F32/F16/BF16 GGUF source agree with gguf-py."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T, GGUFReader, GGUFWriter

from models.foundation.errors import Cancelled, QuantDeskError
from models.foundation.jobs import CancelToken
from quantize.encode import encode_rows, tensor_bytes
from quantize.gguf_output import PlannedTensor, write_gguf
from quantize.gguf_source import GGUFSource


def _write_input(path, bf16=False):
    rng = np.random.default_rng(0)
    w = GGUFWriter(path, "llama")
    w.add_uint32("llama.block_count", 2)
    w.add_float32("llama.rope.freq_base", 10000.0)
    w.add_array("tokenizer.ggml.tokens", ["<s>", "a", "b"])
    w.add_array("tokenizer.ggml.scores", [0.0, -1.5, -2.5])
    w.add_string("tokenizer.chat_template", "{{ messages }}")
    values = {"blk.0.attn_q.weight": rng.standard_normal((8, 64)).astype(np.float32),
              "blk.0.attn_norm.weight": rng.standard_normal(64).astype(np.float32),
              "token_embd.weight": rng.standard_normal((3, 64)).astype(np.float16)}
    for name, v in values.items():
        w.add_tensor(name, v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return values


def test_source_reads_metadata_and_tensors_lazily(tmp_path):
    values = _write_input(tmp_path / "in.gguf")
    src = GGUFSource(tmp_path / "in.gguf")
    assert src.arch == "llama"
    meta = {m.key: m.value for m in src.metadata()}
    assert meta["llama.block_count"] == 2 and meta["tokenizer.ggml.tokens"] == ["<s>", "a", "b"]
    assert meta["tokenizer.ggml.scores"] == pytest.approx([0.0, -1.5, -2.5])
    tensors = {t.name: t for t in src.tensors()}
    assert tensors["blk.0.attn_q.weight"].shape == (8, 64)
    assert tensors["token_embd.weight"].stored_type == T.F16
    for name, v in values.items():
        assert np.array_equal(tensors[name].load(), v.astype(np.float32))


def test_source_hands_out_stored_bytes_and_closes_even_with_a_view_held(tmp_path):
    values = _write_input(tmp_path / "in.gguf")
    with GGUFSource(tmp_path / "in.gguf") as src:
        tensors = {t.name: t for t in src.tensors()}
        stored = tensors["token_embd.weight"].stored_bytes
        buffer = memoryview(bytearray(100))  # smaller than the tensor: read in pieces
        pieces = []
        while sum(len(p) for p in pieces) < stored.nbytes:
            count = stored.read_into(buffer, sum(len(p) for p in pieces))
            pieces.append(bytes(buffer[:count]))
        assert b"".join(pieces) == values["token_embd.weight"].tobytes()
        view = tensors["blk.0.attn_q.weight"].load_stored()
    # closed with a view of the map still held: no error, and the view stays readable
    assert np.array_equal(view, values["blk.0.attn_q.weight"])


def test_write_then_read_back_preserves_metadata_types_and_values(tmp_path):
    _write_input(tmp_path / "in.gguf")
    src = GGUFSource(tmp_path / "in.gguf")
    plan = [PlannedTensor(t, T.BF16 if t.shape[0] == 8 else T.F32) for t in src.tensors()]
    seen = []
    out = write_gguf(tmp_path / "out.gguf", src.arch, src.metadata(), plan,
                     lambda p, v: encode_rows(v.reshape(-1, v.shape[-1]), p.qtype), report=seen.append)
    reader = GGUFReader(out)
    assert [(t.name, t.tensor_type) for t in reader.tensors] == [(p.tensor.name, p.qtype) for p in plan]
    assert reader.get_field("tokenizer.chat_template").contents() == "{{ messages }}"
    assert seen[-1].done == seen[-1].total == sum(p.nbytes for p in plan)
    back = {t.name: t for t in GGUFSource(out).tensors()}
    for p in plan:
        original = p.tensor.load()
        got = back[p.tensor.name].load()
        tol = 2 ** -8 * np.abs(original).max() if p.qtype == T.BF16 else 0
        assert np.abs(got - original).max() <= tol
    assert tensor_bytes((8, 64), T.BF16) == 8 * 64 * 2


def test_cancel_leaves_no_file(tmp_path):
    _write_input(tmp_path / "in.gguf")
    src = GGUFSource(tmp_path / "in.gguf")
    token = CancelToken()

    def encode(p, v):
        token.cancel()  # the user presses Cancel while the first tensor is encoded
        return encode_rows(v.reshape(-1, v.shape[-1]), p.qtype)

    with pytest.raises(Cancelled):
        write_gguf(tmp_path / "out.gguf", src.arch, src.metadata(),
                   [PlannedTensor(t, T.F32) for t in src.tensors()], encode, cancel=token)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.gguf"]


def test_bf16_encoding_matches_torch_rounding():
    torch = pytest.importorskip("torch")
    v = np.random.default_rng(2).standard_normal((4, 256)).astype(np.float32) * 1e3
    ours = encode_rows(v, T.BF16).view(np.uint16)
    ref = torch.from_numpy(v).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(ours, ref)


def test_not_a_gguf_file_gives_a_sentence(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 10)
    with pytest.raises(QuantDeskError) as info:
        GGUFSource(bad)
    assert "broken.gguf" in info.value.user_message


def test_a_full_disk_is_found_before_writing_and_leaves_no_file(tmp_path, monkeypatch):
    import ctypes
    import errno

    import quantize.gguf_output as gguf_output

    _write_input(tmp_path / "in.gguf")
    src = GGUFSource(tmp_path / "in.gguf")
    asked = []

    def full_disk(fd, mode, offset, size):
        asked.append(size)
        ctypes.set_errno(errno.ENOSPC)
        return -1

    monkeypatch.setattr(gguf_output, "_fallocate", lambda: full_disk)
    encoded = []
    with pytest.raises(QuantDeskError) as info:
        write_gguf(tmp_path / "out.gguf", src.arch, src.metadata(), [PlannedTensor(t, T.F32) for t in src.tensors()],
                   lambda p, v: encoded.append(p) or encode_rows(v.reshape(-1, v.shape[-1]), p.qtype))
    assert "not enough disk space for out.gguf" in info.value.user_message
    assert not encoded and asked and sorted(p.name for p in tmp_path.iterdir()) == ["in.gguf"]


def test_outputs_are_allocated_at_their_planned_size_where_the_system_can(tmp_path, monkeypatch):
    import quantize.gguf_output as gguf_output

    real = gguf_output._fallocate()
    asked = []
    if real is not None:
        monkeypatch.setattr(gguf_output, "_fallocate", lambda: lambda *a: asked.append(a[3]) or real(*a))
    _write_input(tmp_path / "in.gguf")
    src = GGUFSource(tmp_path / "in.gguf")
    out = write_gguf(tmp_path / "out.gguf", src.arch, src.metadata(), [PlannedTensor(t, T.F16) for t in src.tensors()],
                     lambda p, v: encode_rows(v.reshape(-1, v.shape[-1]), p.qtype))
    assert asked == ([out.stat().st_size] if real is not None else [])
    assert [t.name for t in GGUFReader(out).tensors] == [t.name for t in src.tensors()]
