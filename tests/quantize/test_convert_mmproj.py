"""The vision encoder's mmproj file, bit for bit as llama.cpp's own converter writes it.

Oracle: ``convert_hf_to_gguf.py --mmproj`` from the pinned llama-cpp-python sdist, run on
the same tiny image-text checkpoints (written with the Hub's tensor names): the same keys
and values (but the name and size label), the same tensor types and bytes, for every
output type (Q8_0 included) and several storage types.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from gguf import GGUFReader

from models.foundation.errors import QuantDeskError
from quantize.convert import convert
from quantize.convert.convert import convert_with_projector, mmproj_output_path
from tests.factory.vision import write_tiny_vision_checkpoint
from tests.quantize.reference_converter import gguf_differences, reference_convert

pytest.importorskip("torch")

FAMILIES = ("gemma3", "smolvlm", "qwen2vl", "qwen2_5_vl")
#: Sampling settings a publisher ships in generation_config.json (Gemma 3's own).
GENERATION = {"top_k": 64, "top_p": 0.95, "do_sample": True}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """One tiny checkpoint per family and storage type; the folder names give gguf-py's
    name heuristics nothing to split (no basename or finetune keys)."""
    root = tmp_path_factory.mktemp("vision")
    return {(family, dtype): write_tiny_vision_checkpoint(root / dtype / family, family, dtype=dtype,
                                                          shards=2, generation_config=GENERATION)
            for family in FAMILIES for dtype in ("float32", "float16", "bfloat16")}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("outtype", ["f32", "f16", "bf16", "q8_0"])
def test_mmproj_equals_llama_cpp_converter(checkpoints, tmp_path, family, dtype, outtype):
    ck = checkpoints[family, dtype]
    text, projector = convert_with_projector(ck.path, tmp_path / f"{family}-{outtype.upper()}.gguf", outtype)
    assert projector == tmp_path / f"mmproj-{family}-{outtype.upper()}.gguf" == mmproj_output_path(text)
    reference = reference_convert(ck.path, tmp_path / "reference.gguf", outtype, mmproj=True)
    assert gguf_differences(projector, reference) == []
    fields = {f.name: f.contents() for f in GGUFReader(projector).fields.values()}
    assert fields["general.architecture"] == "clip" and fields["general.type"] == "mmproj"
    assert fields["general.sampling.top_k"] == 64


def test_text_model_keeps_no_vision_tensor_and_carries_sampling_defaults(checkpoints, tmp_path):
    text, projector = convert_with_projector(checkpoints["gemma3", "float32"].path, tmp_path / "m.gguf", "f16")
    reader = GGUFReader(text)
    assert not any(t.name.startswith(("v.", "mm.")) for t in reader.tensors)
    fields = {f.name: f.contents() for f in reader.fields.values()}
    assert fields["general.architecture"] == "gemma3"
    assert fields["general.sampling.top_k"] == 64 and abs(fields["general.sampling.top_p"] - 0.95) < 1e-7


@pytest.mark.parametrize("family", ["gemma3", "qwen2_5_vl"])
def test_transformers_layout_gives_the_same_files(tmp_path, family):
    """The names current transformers saves (``model.vision_tower...``, ``model.visual...``,
    a nested text_config) convert to the same bytes as the original checkpoints' names
    (llama.cpp's converter reads only those)."""
    hub = write_tiny_vision_checkpoint(tmp_path / "hub" / family, family, layout="hub", dtype="bfloat16")
    new = write_tiny_vision_checkpoint(tmp_path / "new" / family, family, layout="transformers",
                                       dtype="bfloat16")
    a_text, a_proj = convert_with_projector(hub.path, tmp_path / "a.gguf", "f16")
    b_text, b_proj = convert_with_projector(new.path, tmp_path / "b.gguf", "f16")
    assert gguf_differences(b_proj, a_proj) == []
    assert gguf_differences(b_text, a_text) == []


def test_smolvlm_text_model_is_its_llama(checkpoints, tmp_path):
    """SmolVLM's ``model.text_model.*`` converts as the Llama it nests (same bytes as the
    same weights in a plain LlamaForCausalLM checkpoint)."""
    from tests.factory.checkpoints import write_tiny_checkpoint

    plain = write_tiny_checkpoint(tmp_path / "plain", arch="smolvlm", dtype="bfloat16")
    a = convert(plain.path, tmp_path / "a.gguf", "bf16")
    b = convert(checkpoints["smolvlm", "bfloat16"].path, tmp_path / "b.gguf", "bf16")
    fields = {f.name: f.contents() for f in GGUFReader(b).fields.values()}
    assert fields["general.architecture"] == "llama"
    assert [d for d in gguf_differences(a, b) if not d.startswith("general.sampling.")] == []


def test_qwen_vl_text_model_is_qwen2vl_with_its_rope_sections(checkpoints, tmp_path):
    text, projector = convert_with_projector(checkpoints["qwen2_5_vl", "bfloat16"].path, tmp_path / "q.gguf", "f16")
    fields = {f.name: f.contents() for f in GGUFReader(text).fields.values()}
    assert fields["general.architecture"] == "qwen2vl"
    assert fields["qwen2vl.rope.dimension_sections"] == [2, 3, 3, 0]
    names = {t.name for t in GGUFReader(projector).tensors}
    assert {"v.patch_embd.weight", "v.patch_embd.weight.1", "v.blk.0.attn_q.bias", "v.blk.3.ffn_gate.weight",
            "mm.0.weight", "mm.2.bias"} <= names


@pytest.mark.parametrize("dtype, outtype", [("float32", "f32"), ("float16", "f16"), ("bfloat16", "q8_0")])
def test_qwen3vl_encoder_equals_llama_cpp_converter(tmp_path, dtype, outtype):
    """Qwen3-VL's mmproj (fused QKV, learned positions, deepstack mergers under their
    blocks' numbers) as convert_hf_to_gguf.py --mmproj writes it."""
    ck = write_tiny_vision_checkpoint(tmp_path / "qwen3vl", "qwen3vl", dtype=dtype, shards=2,
                                      generation_config=GENERATION)
    _, projector = convert_with_projector(ck.path, tmp_path / "qwen3vl.gguf", outtype)
    reference = reference_convert(ck.path, tmp_path / "reference.gguf", outtype, mmproj=True)
    assert gguf_differences(projector, reference) == []
    fields = {f.name: f.contents() for f in GGUFReader(projector).fields.values()}
    assert fields["clip.projector_type"] == "qwen3vl_merger"
    assert fields["clip.vision.is_deepstack_layers"] == [True, False, True]
    names = {t.name for t in GGUFReader(projector).tensors}
    assert {"v.blk.2.attn_qkv.weight", "v.deepstack.2.fc2.bias", "v.patch_embd.weight.1", "v.patch_embd.bias",
            "v.position_embd.weight", "mm.2.weight"} <= names


def test_qwen3vl_text_model_equals_llama_cpp_converter(tmp_path):
    """Qwen3-VL's text model: ``qwen3vl`` with interleaved M-RoPE sections and the number of
    deepstack layers, as convert_hf_to_gguf.py writes it (told the tiny tokenizer's
    pre-tokenizer, whose hash no table knows)."""
    ck = write_tiny_vision_checkpoint(tmp_path / "qwen3vl", "qwen3vl", dtype="bfloat16")
    text, _ = convert_with_projector(ck.path, tmp_path / "qwen3vl.gguf", "f16")
    reference = reference_convert(ck.path, tmp_path / "reference.gguf", "f16", pre_tokenizer="qwen2")
    assert gguf_differences(text, reference) == []
    fields = {f.name: f.contents() for f in GGUFReader(text).fields.values()}
    assert fields["general.architecture"] == "qwen3vl" and fields["qwen3vl.n_deepstack_layers"] == 2
    assert fields["qwen3vl.rope.dimension_sections"] == [2, 3, 3, 0]


def test_qwen3vl_with_as_many_deepstack_slices_as_layers_is_refused(tmp_path):
    """llama.cpp's qwen3vl graph would abort on the last layer's slice: a sentence instead."""
    ck = write_tiny_vision_checkpoint(tmp_path / "qwen3vl", "qwen3vl")
    config = json.loads((ck.path / "config.json").read_text())
    config["text_config"]["num_hidden_layers"] = 2
    (ck.path / "config.json").write_text(json.dumps(config))
    with pytest.raises(QuantDeskError, match="2 deepstack slices to a text model of 2 layers"):
        convert_with_projector(ck.path, tmp_path / "out.gguf", "f16")
    assert not list(tmp_path.glob("*.gguf"))


def test_convert_writes_the_projector_beside_the_default_output(tmp_path):
    ck = write_tiny_vision_checkpoint(tmp_path / "gemma3")
    text = convert(ck.path, outtype="f32")
    assert text == ck.path / "gemma3-F32.gguf"
    assert (ck.path / "mmproj-gemma3-F32.gguf").is_file()


def test_text_only_checkpoint_writes_no_projector(tmp_path):
    from tests.factory.checkpoints import write_tiny_checkpoint

    ck = write_tiny_checkpoint(tmp_path / "m", arch="gemma3")
    text, projector = convert_with_projector(ck.path, tmp_path / "m.gguf", "f16")
    assert projector is None and not list(tmp_path.glob("mmproj-*"))


def test_missing_preprocessor_config_is_a_sentence_and_leaves_no_file(tmp_path):
    ck = write_tiny_vision_checkpoint(tmp_path / "gemma3")
    (ck.path / "preprocessor_config.json").unlink()
    with pytest.raises(QuantDeskError, match="image_mean in preprocessor_config.json"):
        convert_with_projector(ck.path, tmp_path / "out.gguf", "f16")
    assert not list(tmp_path.glob("*.gguf"))


def test_unknown_vision_tensor_is_a_sentence(tmp_path):
    from tests.factory.safetensors_writer import write_safetensors

    ck = write_tiny_vision_checkpoint(tmp_path / "gemma3")
    write_safetensors(ck.path / "model-extra.safetensors",
                      {"vision_tower.vision_model.surprise.weight": np.ones((2, 2), np.float32)}, "float32")
    with pytest.raises(QuantDeskError, match="surprise.weight"):
        convert_with_projector(ck.path, tmp_path / "out.gguf", "f16")


def test_cli_prints_both_files(tmp_path):
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    ck = write_tiny_vision_checkpoint(tmp_path / "gemma3")
    done = subprocess.run([sys.executable, "-m", "app.cli", "convert", str(ck.path), "--outtype", "bf16"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(ck.path / "gemma3-BF16.gguf"), str(ck.path / "mmproj-gemma3-BF16.gguf")]
    assert "Converting the vision encoder" in done.stderr


def test_quantizing_an_image_text_folder_writes_its_encoder_beside(tmp_path):
    from quantize.ftypes import parse_file_type
    from quantize.job import QuantizeTarget, quantize_model

    ck = write_tiny_vision_checkpoint(tmp_path / "gemma3", dtype="bfloat16")
    result = quantize_model(ck.path, [QuantizeTarget(parse_file_type("Q8_0"), tmp_path / "out" / "gemma3-Q8_0.gguf")])
    text, projector = result.outputs
    assert projector == tmp_path / "out" / "mmproj-gemma3-F16.gguf"
    reference = reference_convert(ck.path, tmp_path / "reference.gguf", "f16", mmproj=True)
    assert gguf_differences(projector, reference) == []
