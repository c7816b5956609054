"""The HF folder as a TensorSource: exact values, per-tensor output types, metadata.

Oracles: the ``safetensors`` library (an independent reader of the same files) and
``gguf.GGUFReader`` on what we wrote.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader

from quantize.convert import convert, open_hf_folder
from quantize.convert.hf_source import permute_qk_rows
from tests.factory.checkpoints import write_tiny_checkpoint

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")


def _hf_tensors(ck) -> dict[str, np.ndarray]:
    out = {}
    for f in ck.weight_files:
        for name, value in safetensors_torch.load_file(str(f)).items():
            out[name] = value.float().numpy()
    return out


def _gguf_tensors(path) -> dict:
    return {t.name: t for t in GGUFReader(path).tensors}


@pytest.mark.parametrize("arch", ["qwen2", "llama", "gemma3"])
def test_f32_values_are_the_checkpoint_values_after_the_family_rewrites(tmp_path, arch):
    ck = write_tiny_checkpoint(tmp_path / "m", arch=arch, dtype="bfloat16", shards=3)
    out = convert(ck.path, tmp_path / "o.gguf", "f32")
    ours = _gguf_tensors(out)
    theirs = _hf_tensors(ck)
    cfg = ck.config
    for name, gguf_name in [("model.layers.1.self_attn.q_proj.weight", "blk.1.attn_q.weight"),
                            ("model.layers.1.self_attn.k_proj.weight", "blk.1.attn_k.weight"),
                            ("model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight"),
                            ("model.norm.weight", "output_norm.weight"),
                            ("model.embed_tokens.weight", "token_embd.weight")]:
        expected = theirs[name]
        if arch == "llama" and "q_proj" in name:
            expected = permute_qk_rows(expected, cfg["num_attention_heads"])
        if arch == "llama" and "k_proj" in name:
            expected = permute_qk_rows(expected, cfg["num_key_value_heads"])
        if arch == "gemma3" and name.endswith("norm.weight"):
            expected = expected + 1
        got = np.asarray(ours[gguf_name].data).reshape(expected.shape)
        assert ours[gguf_name].tensor_type == T.F32
        np.testing.assert_array_equal(got, expected.astype(np.float32), err_msg=name)
    if arch == "qwen2":
        bias = np.asarray(ours["blk.0.attn_k.bias"].data)
        np.testing.assert_array_equal(bias, theirs["model.layers.0.self_attn.k_proj.bias"])


def test_bf16_checkpoint_to_bf16_gguf_keeps_every_bit(tmp_path):
    ck = write_tiny_checkpoint(tmp_path / "m", arch="qwen3", dtype="bfloat16")
    out = convert(ck.path, tmp_path / "o.gguf", "bf16")
    ours = _gguf_tensors(out)
    with open_hf_folder(ck.path) as source:
        family = source.family
    for f in ck.weight_files:
        for name, value in safetensors_torch.load_file(str(f)).items():
            if value.ndim < 2:
                continue
            gguf_name = family.gguf_name(name)
            bits = value.view(torch.int16).numpy().view(np.uint16)
            assert ours[gguf_name].tensor_type == T.BF16
            np.testing.assert_array_equal(np.asarray(ours[gguf_name].data).view(np.uint16).reshape(bits.shape),
                                          bits, err_msg=name)


_PLANTED = {"bfloat16": np.array([0x7F81, 0xFF90, 0x7FC1, 0x7F80, 0xFFFF], np.uint16),
            "float16": np.array([0x7C01, 0xFE10, 0x7E01, 0x7C00, 0xFFFF], np.uint16),
            "float32": np.array([0x7F800001, 0xFFC00010, 0x7FC00001, 0x7F800000, 0xFFFFFFFF], np.uint32)}


@pytest.mark.parametrize("dtype, outtype", [("bfloat16", "bf16"), ("float16", "f16"), ("bfloat16", "f16"),
                                            ("float32", "f16"), ("float16", "bf16"), ("float32", "bf16")])
def test_16_bit_outputs_are_the_float32_round_trip_bits_with_nans_and_all(tmp_path, dtype, outtype):
    """Weights are written from what the checkpoint stores (taken as is when already in
    the output's type, else rounded in one compiled pass); the bits must be those of
    llama.cpp's converter, which widens to float32 and rounds with numpy (F16) or
    gguf-py's bfloat16 rounding: a BF16 NaN made quiet, an F16 NaN keeping its payload.
    NaNs with payloads are planted in a Q projection (rows reordered by the converter)
    and an MLP matrix."""
    from quantize.convert.safetensors_reader import SafetensorsFile
    from quantize.encode import f32_to_bf16_bits

    ck = write_tiny_checkpoint(tmp_path / "m", arch="llama", dtype=dtype)
    nans = _PLANTED[dtype]
    planted = ("model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.up_proj.weight")
    for f in ck.weight_files:
        records = SafetensorsFile(f).tensors
        with open(f, "r+b") as fh:
            for name in planted:
                if name in records:
                    for k, bits in enumerate(nans):  # row k, value 3k
                        fh.seek(records[name].begin + nans.itemsize * (k * records[name].shape[1] + 3 * k))
                        fh.write(bits.tobytes())
    out = convert(ck.path, tmp_path / "o.gguf", outtype)
    with open_hf_folder(ck.path) as source:
        expected = {}
        for t in source.tensors():
            if len(t.shape) < 2:
                continue
            values = t.load()  # float32, rearranged: the round trip's input
            with np.errstate(over="ignore", invalid="ignore"):
                expected[t.name] = (f32_to_bf16_bits(values) if outtype == "bf16"
                                    else values.astype(np.float16).view(np.uint16))
            if t.name in ("blk.0.attn_q.weight", "blk.1.ffn_up.weight"):
                assert np.isnan(values).sum() == 4  # four NaNs planted, one infinity
    ours = _gguf_tensors(out)
    for name, bits in expected.items():
        got = np.asarray(ours[name].data).view(np.uint16).reshape(bits.shape)
        np.testing.assert_array_equal(got, bits, err_msg=name)
    up = np.asarray(ours["blk.1.ffn_up.weight"].data).view(np.uint16)  # not reordered: row k, value 3k
    planted_out = [int(up.reshape(-1, up.shape[-1])[k, 3 * k]) for k in range(len(nans))]
    if (dtype, outtype) == ("bfloat16", "bf16"):  # signalling NaNs come out quiet, the rest as they were
        assert planted_out == [0x7FC1, 0xFFD0, 0x7FC1, 0x7F80, 0xFFFF]
    elif (dtype, outtype) == ("float16", "f16"):  # numpy's float16 -> float32 -> float16 keeps every bit
        assert planted_out == [int(b) for b in nans]


def test_output_types_follow_the_reference_rules(tmp_path):
    ck = write_tiny_checkpoint(tmp_path / "m", arch="qwen2")
    types = {t.name: t.tensor_type for t in GGUFReader(convert(ck.path, tmp_path / "o.gguf", "f16")).tensors}
    assert types["token_embd.weight"] == T.F16 and types["output.weight"] == T.F16
    assert types["blk.0.attn_q.weight"] == T.F16 and types["blk.1.ffn_down.weight"] == T.F16
    assert types["blk.0.attn_norm.weight"] == T.F32 and types["output_norm.weight"] == T.F32
    assert types["blk.0.attn_q.bias"] == T.F32  # biases stay F32 like every 1-D tensor
    reader = GGUFReader(tmp_path / "o.gguf")
    assert reader.get_field("general.file_type").contents() == 1  # MOSTLY_F16


def test_tied_embeddings_write_no_output_tensor_and_still_run(tmp_path):
    from tests.quantize.convert_oracles import hf_logits, llama_cpp_logits

    ck = write_tiny_checkpoint(tmp_path / "m", arch="qwen3", tie_word_embeddings=True)
    out = convert(ck.path, tmp_path / "o.gguf", "f32")
    assert "output.weight" not in _gguf_tensors(out)
    ids = [5, 17, 200, 33, 1, 90, 91, 300]
    assert np.abs(llama_cpp_logits(out, ids) - hf_logits(ck.path, ids)).max() < 1e-4


def test_general_metadata(tmp_path):
    ck = write_tiny_checkpoint(tmp_path / "Tiny-Model-7B", arch="llama")
    (ck.path / "README.md").write_text("---\nlicense: apache-2.0\nlanguage: en\n---\n# Tiny\n")
    reader = GGUFReader(convert(ck.path, tmp_path / "o.gguf", "f32"))
    field = lambda key: reader.get_field(key).contents()  # noqa: E731
    assert field("general.architecture") == "llama"
    assert field("general.name") == "Tiny-Model-7B"
    assert field("general.license") == "apache-2.0"
    n_params = sum(int(np.prod(s)) for s in ck.tensor_shapes.values())
    assert field("general.size_label") == f"{n_params / 1e3:.3g}K"
    assert field("tokenizer.ggml.eos_token_id") == ck.config["eos_token_id"]
    assert field("llama.context_length") == ck.config["max_position_embeddings"]


def test_source_lists_tensors_without_loading_them(tmp_path):
    ck = write_tiny_checkpoint(tmp_path / "m", arch="gemma2")
    with open_hf_folder(ck.path) as source:
        tensors = source.tensors()
        names = [t.name for t in tensors]
        assert source.arch == "gemma2"
        assert "output.weight" not in names  # Gemma 2's lm_head is never read by llama.cpp
        assert "blk.0.post_attention_norm.weight" in names and "blk.0.post_ffw_norm.weight" in names
        norm = next(t for t in tensors if t.name == "output_norm.weight")
        stored = _hf_tensors(ck)["model.norm.weight"]
        np.testing.assert_array_equal(norm.load(), stored + 1)  # Gemma's 1 + w
        keys = {m.key for m in source.metadata()}
    assert {"gemma2.attn_logit_softcapping", "gemma2.final_logit_softcapping",
            "gemma2.attention.sliding_window", "tokenizer.ggml.scores"} <= keys


def test_gemma3_image_text_checkpoint_converts_as_its_text_model(tmp_path):
    """Gemma3ForConditionalGeneration: nested names, text_config, vision tensors left out.

    The same weights in the image-text layout (transformers ≥ 4.52 names, config keys
    transformers defaults left out) must give a byte-identical text GGUF.
    """
    from tests.factory.vision import write_tiny_vision_checkpoint

    ck = write_tiny_checkpoint(tmp_path / "text", arch="gemma3vl")
    wrapped = write_tiny_vision_checkpoint(tmp_path / "wrapped", layout="transformers").path
    config = json.loads((wrapped / "config.json").read_text())
    del config["text_config"]["rms_norm_eps"]
    (wrapped / "config.json").write_text(json.dumps(config))
    a = convert(ck.path, tmp_path / "a.gguf", "f16")
    b = convert(wrapped, tmp_path / "b.gguf", "f16")
    assert _same_gguf(a, b)  # everything but general.name (the folder's name)
    assert not any(t.name.startswith(("v.", "mm.")) or "vision" in t.name for t in GGUFReader(b).tensors)


def _same_gguf(a, b, ignored=("general.name",)) -> bool:
    ra, rb = GGUFReader(a), GGUFReader(b)
    fields = lambda r: {f.name: f.contents() for f in r.fields.values() if f.name not in ignored}  # noqa: E731
    if fields(ra) != fields(rb):
        return False
    ta, tb = {t.name: t for t in ra.tensors}, {t.name: t for t in rb.tensors}
    return ta.keys() == tb.keys() and all(
        ta[n].tensor_type == tb[n].tensor_type and np.array_equal(np.asarray(ta[n].data), np.asarray(tb[n].data))
        for n in ta)
