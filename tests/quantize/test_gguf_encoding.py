"""Our GGUF header serializer writes exactly what gguf-py's GGUFWriter writes."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType as V
from gguf import GGUFWriter

from quantize.gguf_encoding import header_bytes, value_bytes
from quantize.source import MetadataEntry

VALUES = [
    (7, V.UINT8, None), (-7, V.INT8, None), (65535, V.UINT16, None), (-3, V.INT16, None),
    (4_000_000_000, V.UINT32, None), (-2, V.INT32, None), (0.1, V.FLOAT32, None),
    (2**63 + 5, V.UINT64, None), (-(2**62), V.INT64, None), (1e-300, V.FLOAT64, None),
    (True, V.BOOL, None), (False, V.BOOL, None),
    ("llama", V.STRING, None), ("naïve ✓ 日本", V.STRING, None), (b"\xff\xfe raw", V.STRING, None),
    ([1.5, -0.1, 3e38], V.ARRAY, V.FLOAT32), ([1, 2, 3], V.ARRAY, V.INT32),
    ([True, False, True], V.ARRAY, V.BOOL), ([2**40, 3], V.ARRAY, V.UINT64),
    (["<s>", "▁the", "", "日本", b"\x80bad utf-8"], V.ARRAY, V.STRING),
]


@pytest.mark.parametrize("value, vtype, sub_type", VALUES)
def test_values_pack_like_gguf_writer(value, vtype, sub_type, tmp_path):
    writer = GGUFWriter(tmp_path / "x.gguf", "llama")
    assert value_bytes(value, vtype, sub_type) == writer._pack_val(value, vtype, add_vtype=True,
                                                                   sub_type=sub_type)


def test_a_whole_header_matches_gguf_writer(tmp_path):
    rng = np.random.default_rng(3)
    vocab = ["".join(chr(c) for c in rng.integers(32, 0x3000, size=int(n))) for n in rng.integers(0, 9, 500)]
    metadata = [MetadataEntry("general.name", "tiny", V.STRING),
                MetadataEntry("llama.block_count", 2, V.UINT32),
                MetadataEntry("tokenizer.ggml.tokens", vocab, V.ARRAY, V.STRING),
                MetadataEntry("tokenizer.ggml.scores", [0.5] * 500, V.ARRAY, V.FLOAT32),
                MetadataEntry("general.name", "renamed", V.STRING),  # first place, last value
                MetadataEntry("general.alignment", 64, V.UINT32)]
    tensors = [("token_embd.weight", (500, 256), T.Q4_K, 500 * 144),
               ("blk.0.attn_norm.weight", (256,), T.F32, 256 * 4),
               ("output.weight", (500, 256), T.Q6_K, 500 * 210)]
    writer = GGUFWriter(tmp_path / "ref.gguf", "llama")
    writer.data_alignment = 64
    for e in metadata:
        writer.add_key_value(e.key, e.value, e.type, e.sub_type)
    for name, shape, qtype, nbytes in tensors:
        byte_shape = (*shape[:-1], nbytes // max(1, int(np.prod(shape[:-1]))))
        writer.add_tensor_info(name, byte_shape, np.dtype(np.uint8), nbytes, qtype)
    writer.write_header_to_file(tmp_path / "ref.gguf")
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.write_padding(writer.fout[0], writer.fout[0].tell())
    writer.close()
    assert header_bytes("llama", metadata, tensors, 64) == (tmp_path / "ref.gguf").read_bytes()


def test_refuses_what_gguf_cannot_hold():
    with pytest.raises(ValueError, match="Empty array"):
        value_bytes([], V.ARRAY, V.INT32)
    with pytest.raises(ValueError, match="not supported"):
        value_bytes([[1]], V.ARRAY, V.ARRAY)


def test_string_arrays_read_lazily_equal_the_written_list_and_write_back_unchanged(tmp_path):
    from quantize.gguf_layout import EncodedStrings, read_gguf_layout

    tokens = ["<s>", "▁the", "", "日本", b"\x80not utf-8", "x" * 300]
    writer = GGUFWriter(tmp_path / "v.gguf", "llama")
    writer.add_key_value("tokenizer.ggml.tokens", tokens, V.ARRAY, V.STRING)
    writer.add_key_value("general.name", "v", V.STRING)
    writer.write_header_to_file(tmp_path / "v.gguf")
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    entry = next(e for e in read_gguf_layout(tmp_path / "v.gguf").metadata if e.key == "tokenizer.ggml.tokens")
    assert isinstance(entry.value, EncodedStrings) and len(entry.value) == 6
    # Equal to the list as gguf-py writes it (GGUFReader cannot decode the non-UTF-8 item;
    # test_fast_header_reader_agrees_with_gguf_reader compares with it on SmolLM2).
    assert entry.value == tokens and list(entry.value) == tokens
    assert entry.value[4] == b"\x80not utf-8"
    assert value_bytes(entry.value, V.ARRAY, V.STRING) == value_bytes(tokens, V.ARRAY, V.STRING)
