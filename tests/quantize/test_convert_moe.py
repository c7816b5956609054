"""Mixture-of-experts checkpoints (Qwen2-MoE, Qwen3-MoE, Mixtral, OLMoE) convert faithfully.

Oracles: transformers (the tiny checkpoints are the Hub's format, loaded by the real
model classes), llama.cpp in a child process, and the ``safetensors`` library reading
the same files. A converted model must compute transformers' logits in F32 (to the
float32 summation noise the dense families reach: 1e-4), choose the same next tokens,
tokenize as transformers does, and carry each expert's matrix as one slice of
llama.cpp's 3-D ``ffn_{gate,up,down}_exps`` tensors.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader

from models.foundation.errors import QuantDeskError
from quantize.convert import convert, open_hf_folder
from quantize.convert.hf_source import permute_qk_rows
from tests.factory.checkpoints import MOE_ARCHITECTURES, QWEN3_30B_A3B_CONFIG, write_tiny_checkpoint
from tests.quantize.convert_oracles import hf_logits, hf_tokenizer, llama_cpp_logits, run_llama_cpp

pytest.importorskip("torch")
pytest.importorskip("transformers")

PROMPT = "Hello world! def f(x):\n    return x * 2  # 123 4567 你好 Grüße 😀"
#: Text both tokenizers split alike in every flavour (SentencePiece's runs of spaces differ
#: between transformers and SentencePiece itself: see test_convert_tokenizer).
PLAIN = "Hello world! The quick brown fox, 123 4567 你好 Grüße 😀 <html>{\"k\": [1, 2]}</html>"
GGUF_ARCH = {"qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe", "mixtral": "llama", "olmoe": "olmoe"}


def _metadata(path) -> dict:
    return {f.name: f.contents() for f in GGUFReader(path).fields.values()}


@pytest.mark.parametrize("arch", MOE_ARCHITECTURES)
def test_f32_logits_and_tokens_match_transformers(tmp_path, arch):
    ck = write_tiny_checkpoint(tmp_path / arch, arch=arch)
    ids = hf_tokenizer(ck.path)(PROMPT, add_special_tokens=True)["input_ids"]
    gguf = convert(ck.path, tmp_path / "out-f32.gguf", "f32")
    tokens = run_llama_cpp({"kind": "tokenize", "model": str(gguf), "texts": [PLAIN], "add_bos": True})
    assert tokens["ids"][0] == hf_tokenizer(ck.path)(PLAIN, add_special_tokens=True)["input_ids"]
    ours = llama_cpp_logits(gguf, ids)
    reference = hf_logits(ck.path, ids)
    assert ours.shape == reference.shape == (len(ids), ck.config["vocab_size"])
    diff = float(np.abs(ours - reference).max())
    print(f"{arch} F32: max |llama.cpp - transformers| = {diff:.3g} "
          f"(logits up to {float(np.abs(reference).max()):.3g})")
    assert diff <= 1e-4
    assert (ours.argmax(-1) == reference.argmax(-1)).all()


def test_routing_matters_in_these_checkpoints(tmp_path):
    """The experts differ, so a converter that mixed them up could not pass the test above."""
    ck = write_tiny_checkpoint(tmp_path / "a", arch="qwen3_moe")
    ids = hf_tokenizer(ck.path)(PROMPT)["input_ids"]
    top1 = write_tiny_checkpoint(tmp_path / "b", arch="qwen3_moe", config_overrides={"num_experts_per_tok": 1})
    assert np.abs(hf_logits(ck.path, ids) - hf_logits(top1.path, ids)).max() > 1e-2


@pytest.mark.parametrize("arch", ["qwen2_moe", "mixtral"])
def test_experts_are_stacked_slices_and_the_keys_are_llama_cpps(tmp_path, arch):
    import safetensors.torch

    ck = write_tiny_checkpoint(tmp_path / arch, arch=arch, dtype="bfloat16", shards=3)
    out = convert(ck.path, tmp_path / "o.gguf", "f16")
    tensors = {t.name: t for t in GGUFReader(out).tensors}
    hf = {}
    for f in ck.weight_files:
        hf.update({k: v.float().numpy() for k, v in safetensors.torch.load_file(str(f)).items()})
    cfg = ck.config
    n_expert = cfg.get("num_experts") or cfg["num_local_experts"]
    width = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
    if arch == "mixtral":
        module, leaves = "block_sparse_moe.experts", {"w1": "gate", "w3": "up", "w2": "down"}
        router = "block_sparse_moe.gate"
    else:
        module, leaves = "mlp.experts", {"gate_proj": "gate", "up_proj": "up", "down_proj": "down"}
        router = "mlp.gate"
    for layer in range(cfg["num_hidden_layers"]):
        for leaf, short in leaves.items():
            t = tensors[f"blk.{layer}.ffn_{short}_exps.weight"]
            assert T(t.tensor_type) == T.F16
            rows, cols = (cfg["hidden_size"], width) if short == "down" else (width, cfg["hidden_size"])
            assert [int(d) for d in t.shape] == [cols, rows, n_expert]  # ggml order: ne0 first
            stacked = np.asarray(t.data).reshape(n_expert, rows, cols).astype(np.float32)
            for e in range(n_expert):  # bf16 values are exact in f16 at these magnitudes
                expected = hf[f"model.layers.{layer}.{module}.{e}.{leaf}.weight"].astype(np.float16)
                np.testing.assert_array_equal(stacked[e], expected.astype(np.float32))
        gate_inp = tensors[f"blk.{layer}.ffn_gate_inp.weight"]
        assert T(gate_inp.tensor_type) == T.F32  # routers stay F32, as convert_hf_to_gguf writes them
        np.testing.assert_array_equal(np.asarray(gate_inp.data).reshape(n_expert, -1),
                                      hf[f"model.layers.{layer}.{router}.weight"])
    meta = _metadata(out)
    prefix = GGUF_ARCH[arch]
    assert meta["general.architecture"] == prefix
    assert meta[f"{prefix}.expert_count"] == n_expert
    assert meta[f"{prefix}.expert_used_count"] == cfg["num_experts_per_tok"]
    if arch == "qwen2_moe":
        assert meta[f"{prefix}.expert_feed_forward_length"] == cfg["moe_intermediate_size"]
        assert meta[f"{prefix}.expert_shared_feed_forward_length"] == cfg["shared_expert_intermediate_size"]
        assert T(tensors["blk.0.ffn_gate_inp_shexp.weight"].tensor_type) == T.F32
        assert T(tensors["blk.0.ffn_up_shexp.weight"].tensor_type) == T.F16
    else:
        assert f"{prefix}.expert_feed_forward_length" not in meta
        q = np.asarray(tensors["blk.0.attn_q.weight"].data).astype(np.float32).reshape(-1, cfg["hidden_size"])
        expected = permute_qk_rows(hf["model.layers.0.self_attn.q_proj.weight"], cfg["num_attention_heads"])
        np.testing.assert_array_equal(q, expected.astype(np.float16).astype(np.float32))
    assert not any(".experts." in name for name in tensors)


def test_source_lists_one_tensor_per_projection_and_layer(tmp_path):
    ck = write_tiny_checkpoint(tmp_path / "m", arch="qwen3_moe")
    with open_hf_folder(ck.path) as source:
        names = [t.name for t in source.tensors()]
        shapes = {t.name: t.shape for t in source.tensors()}
    assert len(names) == len(set(names))
    assert sum(".ffn_gate_exps." in n for n in names) == ck.config["num_hidden_layers"]
    assert shapes["blk.1.ffn_down_exps.weight"] == (4, 64, 32)
    assert shapes["blk.1.ffn_gate_inp.weight"] == (4, 64)


def _edit_config(folder, **changes) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


@pytest.mark.parametrize("arch, changes, needle", [
    ("qwen3_moe", {"norm_topk_prob": False}, "norm_topk_prob"),
    ("qwen2_moe", {"norm_topk_prob": True}, "norm_topk_prob"),
    ("olmoe", {"norm_topk_prob": True}, "norm_topk_prob"),
    ("qwen3_moe", {"decoder_sparse_step": 2}, "dense layers"),
    ("qwen2_moe", {"mlp_only_layers": [1]}, "dense layers"),
    ("olmoe", {"clip_qkv": 8.0}, "clip_qkv"),
    ("qwen3_moe", {"num_experts_per_tok": 9}, "experts"),
])
def test_routing_llama_cpp_would_compute_differently_is_refused(tmp_path, arch, changes, needle):
    ck = write_tiny_checkpoint(tmp_path / "m", arch=arch)
    _edit_config(ck.path, **changes)
    with pytest.raises(QuantDeskError, match=needle):
        convert(ck.path, tmp_path / "o.gguf", "f16")
    assert not (tmp_path / "o.gguf").exists()


def test_a_missing_expert_or_a_wrong_expert_width_is_a_sentence(tmp_path):
    ck = write_tiny_checkpoint(tmp_path / "m", arch="qwen3_moe")
    _edit_config(ck.path, num_experts=5)  # the router has 4 rows: the config does not fit
    with pytest.raises(QuantDeskError, match="mlp.gate.weight"):
        convert(ck.path, tmp_path / "o.gguf", "f16")
    ck = write_tiny_checkpoint(tmp_path / "w", arch="qwen3_moe")
    _edit_config(ck.path, moe_intermediate_size=48)
    with pytest.raises(QuantDeskError, match="experts.0.gate_proj"):
        convert(ck.path, tmp_path / "o.gguf", "f16")


@pytest.mark.parametrize("arch", MOE_ARCHITECTURES)
def test_the_factory_writes_what_transformers_saves(tmp_path, arch):
    """The tiny checkpoints are the real format: transformers' own save_pretrained of a
    randomly initialised model of the same config has the same tensor names and shapes."""
    import transformers
    from safetensors import safe_open

    ck = write_tiny_checkpoint(tmp_path / "ck", arch=arch)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(ck.path))
    model.save_pretrained(tmp_path / "saved")
    saved = {}
    for f in (tmp_path / "saved").glob("*.safetensors"):
        with safe_open(str(f), "pt") as handle:
            saved.update({k: tuple(handle.get_slice(k).get_shape()) for k in handle.keys()})
    assert saved == ck.tensor_shapes


@pytest.mark.parametrize("arch", MOE_ARCHITECTURES)
def test_parameter_counts_from_the_config_equal_the_checkpoints(tmp_path, arch):
    from models.gguf_header import read_gguf_header
    from quantize.convert.archs.moe import moe_parameter_counts

    ck = write_tiny_checkpoint(tmp_path / arch, arch=arch)
    total, active = moe_parameter_counts(ck.config)
    assert total == sum(int(np.prod(s)) for s in ck.tensor_shapes.values())
    header = read_gguf_header(convert(ck.path, tmp_path / "o.gguf", "f32"))
    assert (total, active) == (header.parameter_count, header.active_parameter_count)


def test_parameter_counts_of_qwen3_30b_a3b_from_its_config():
    from quantize.convert.archs.moe import moe_parameter_counts

    config = QWEN3_30B_A3B_CONFIG
    assert moe_parameter_counts(config) == (30_532_122_624, 3_353_032_704)  # the Hub's safetensors total
    assert moe_parameter_counts({**config, "model_type": "qwen3", "num_experts": None}) is None


def test_an_expert_missing_from_every_layer_is_named(tmp_path):
    from safetensors.numpy import load_file

    from tests.factory.safetensors_writer import write_safetensors

    ck = write_tiny_checkpoint(tmp_path / "m", arch="qwen3_moe")
    weights = load_file(str(ck.weight_files[0]))
    kept = {k: v for k, v in weights.items() if ".experts.3.up_proj." not in k}
    write_safetensors(ck.weight_files[0], kept, "float32")
    with pytest.raises(QuantDeskError, match="expert 3 is missing"):
        convert(ck.path, tmp_path / "o.gguf", "f16")
