"""Quantizing a vision encoder (mmproj GGUF) that is already a file, byte for byte as
llama.cpp's ``llama_model_quantize`` does (llama-quantize takes ``clip`` files: it reads
no hyper-parameters for them, quantizes the 2-D weights the ftype asks for and keeps
norms, biases, position embeddings and the patch embedding as they are).

Inputs: the mmproj files our converter writes for the tiny image-text checkpoints (they
equal convert_hf_to_gguf.py --mmproj's, test_convert_mmproj.py), in F32 and F16.
"""

from __future__ import annotations

import pytest
from gguf import GGUFReader

from quantize.convert.convert import convert_with_projector
from quantize.ftypes import FILE_TYPES
from quantize.job import QuantizeOptions, QuantizeTarget, quantize_model
from tests.factory.vision import write_tiny_vision_checkpoint
from tests.quantize.llama_quant_oracle import llama_quantize
from tests.quantize.model_files import describe_differences

FAMILIES = ("gemma3", "smolvlm", "qwen2vl", "qwen2_5_vl", "qwen3vl")
TYPES = ("Q8_0", "F16", "Q4_K_M")


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    """Each family's mmproj file in F32 and in F16."""
    root = tmp_path_factory.mktemp("mmproj-inputs")
    out = {}
    for family in FAMILIES:
        ck = write_tiny_vision_checkpoint(root / "hf" / family, family)
        for outtype in ("f32", "f16"):
            _, out[family, outtype] = convert_with_projector(ck.path, root / f"{family}-{outtype}.gguf", outtype)
    return out


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("stored", ["f32", "f16"])
def test_an_mmproj_quantizes_as_llama_quantize_does(encoders, tmp_path, family, stored):
    src = encoders[family, stored]
    targets = [QuantizeTarget(FILE_TYPES[name], tmp_path / f"ours-{name}.gguf") for name in TYPES]
    quantize_model(src, targets, QuantizeOptions(threads=2))
    failures = []
    for name in TYPES:
        reference = tmp_path / f"llama-{name}.gguf"
        assert llama_quantize(src, reference, FILE_TYPES[name].ftype) == 0, name
        problem = describe_differences(tmp_path / f"ours-{name}.gguf", reference)
        if problem:
            failures.append(f"{name}: {problem}")
    assert not failures, "\n".join(failures)
    q8 = {t.name: t.tensor_type.name for t in GGUFReader(tmp_path / "ours-Q8_0.gguf").tensors}
    assert "Q8_0" in q8.values()  # the encoder's matrices were quantized...
    assert all(q8[n] == "F32" for n in q8 if n.endswith(".bias") or "ln" in n.split(".")[-2])  # ...not these


def test_the_quantize_command_writes_an_mmproj(encoders, tmp_path):
    """``quantdesk quantize mmproj-*.gguf --type Q8_0``, and the file still reads as an encoder."""
    from app.cli import main
    from models.engine.gguf_info import read_projector_info

    out = tmp_path / "mmproj-gemma3-Q8_0.gguf"
    assert main(["quantize", str(encoders["gemma3", "f32"]), "--type", "Q8_0", "-o", str(out)]) == 0
    info = read_projector_info(out)
    assert info.vision and info.projector_type == "gemma3"



def test_the_quantize_command_writes_an_mmproj_in_an_i_quant(encoders, tmp_path):
    """``--type IQ4_XS`` on a vision encoder: its matrices become IQ4_XS (or IQ4_NL where a
    row is not a multiple of 256), and the file still reads as an encoder. No byte oracle
    here: this build's llama_model_quantize aborts on an mmproj with the i-quant file types
    (their rules ask for the attention heads of layer 0, which a clip file does not list:
    ``GGML_ABORT`` in ``llama_hparams::n_head``)."""
    from app.cli import main
    from models.engine.gguf_info import read_projector_info

    out = tmp_path / "mmproj-smolvlm-IQ4_XS.gguf"
    assert main(["quantize", str(encoders["smolvlm", "f16"]), "--type", "IQ4_XS", "-o", str(out)]) == 0
    info = read_projector_info(out)
    assert info.vision and info.projector_type == "idefics3"
    types = {t.tensor_type.name for t in GGUFReader(out).tensors}
    assert types & {"IQ4_XS", "IQ4_NL"}, types
