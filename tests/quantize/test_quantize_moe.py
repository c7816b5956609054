"""Quantized MoE files are llama_model_quantize's, byte for byte, with and without an imatrix.

Inputs: tiny Qwen2-MoE, Qwen3-MoE, Mixtral and OLMoE checkpoints written by the factory,
256 wide so that k-quants apply (the 96-wide shared expert of Qwen2-MoE falls back to
32-block types), converted by us to F16. Ours: :func:`quantize_model` reading the HF
folder directly (experts stacked on the fly). Oracle: ``llama_model_quantize`` on the F16
file, with the importance matrix (one count per expert for the 3-D expert tensors)
handed over through the C API as llama-quantize hands it. The per-tensor plans of every
file type are checked against libllama for the same families in test_plan.py.
"""

from __future__ import annotations

import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader

from quantize.convert import convert
from quantize.ftypes import FILE_TYPES
from quantize.imatrix import load_imatrix
from quantize.job import QuantizeOptions, QuantizeTarget, quantize_model
from tests.factory.checkpoints import MOE_ARCHITECTURES, write_tiny_checkpoint
from tests.quantize.llama_quant_oracle import llama_quantize
from tests.quantize.model_files import describe_differences, tensor_types
from tests.quantize.test_imatrix import write_model_imatrix

WIDE = {"hidden_size": 256, "head_dim": 64, "num_attention_heads": 4, "moe_intermediate_size": 256}
#: The mixture rules that differ for MoE files (8 experts: attn_v/attn_k Q8_0, attn_output
#: Q5_K; ffn_down_exps by layer), a legacy type and Q8_0.
TYPES = ["Q4_K_M", "Q3_K_S", "Q5_0", "Q8_0"]


def _tiny_moe(folder, arch: str, n_expert: int = 4):
    overrides = dict(WIDE)
    overrides["num_local_experts" if arch == "mixtral" else "num_experts"] = n_expert
    overrides["num_key_value_heads"] = 4 if arch == "olmoe" else 2
    if arch in ("mixtral", "olmoe"):
        overrides["intermediate_size"] = 256
    return write_tiny_checkpoint(folder, arch=arch, config_overrides=overrides)


def _compare(src_folder, f16, out_dir, imatrix=None) -> list[str]:
    targets = [QuantizeTarget(FILE_TYPES[n], out_dir / f"ours-{n}.gguf") for n in TYPES]
    quantize_model(src_folder, targets, QuantizeOptions(threads=2, imatrix=imatrix))
    kwargs = {}
    if imatrix is not None:
        matrix = load_imatrix(imatrix)
        kwargs = dict(imatrix=matrix.entries,
                      kv_overrides=[(e.key, e.value, e.type) for e in matrix.metadata(str(imatrix))])
    failures = []
    for name in TYPES:
        ref = out_dir / f"ref-{name}.gguf"
        assert llama_quantize(f16, ref, FILE_TYPES[name].ftype, **kwargs) == 0, name
        problem = describe_differences(out_dir / f"ours-{name}.gguf", ref)
        if problem:
            failures.append(f"{name}: {problem}")
    return failures


@pytest.mark.slow
@pytest.mark.parametrize("arch", MOE_ARCHITECTURES)
def test_quantizing_a_moe_checkpoint_gives_llama_model_quantize_bytes(tmp_path, arch):
    ck = _tiny_moe(tmp_path / arch, arch, n_expert=8 if arch == "mixtral" else 4)
    f16 = convert(ck.path, tmp_path / "f16.gguf", "f16")
    failures = _compare(ck.path, f16, tmp_path)
    assert not failures, "\n".join(failures)
    types = tensor_types(tmp_path / "ours-Q4_K_M.gguf")
    assert types["blk.0.ffn_up_exps.weight"] == T.Q4_K
    assert types["blk.0.ffn_gate_inp.weight"] == T.F32
    if arch == "mixtral":  # 8 experts: llama.cpp's extra bits for attention
        assert types["blk.1.attn_v.weight"] == T.Q8_0 and types["blk.1.attn_output.weight"] == T.Q5_K


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["qwen2_moe", "qwen3_moe"])
def test_quantizing_a_moe_checkpoint_with_an_imatrix_gives_llama_model_quantize_bytes(tmp_path, arch):
    ck = _tiny_moe(tmp_path / arch, arch)
    f16 = convert(ck.path, tmp_path / "f16.gguf", "f16")
    imatrix = write_model_imatrix(f16, tmp_path / "imatrix.gguf", seed=4)  # per-expert counts
    failures = _compare(ck.path, f16, tmp_path, imatrix)
    assert not failures, "\n".join(failures)
    # The matrix was used for the experts (each expert its own slice), not ignored by both sides.
    plain = quantize_model(ck.path, [QuantizeTarget(FILE_TYPES["Q4_K_M"], tmp_path / "plain.gguf")],
                           QuantizeOptions(threads=2)).outputs[0]
    experts = {p: {t.name: bytes(t.data) for t in GGUFReader(p).tensors if "_exps" in t.name}
               for p in (plain, tmp_path / "ours-Q4_K_M.gguf")}
    assert all(experts[plain][n] != experts[tmp_path / "ours-Q4_K_M.gguf"][n] for n in experts[plain])
