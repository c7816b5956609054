"""The per-tensor type plan equals llama.cpp's, for every file type, layout and override.

Oracle: libllama's own ``llama_tensor_get_type`` reached through its exported test hooks
(:func:`tests.quantize.llama_quant_oracle.llama_plan_types`) on synthetic layouts — dense
GQA, tied and untied heads, a 70B Llama, an 8-expert MoE, Falcon's fused QKV, rows that
are not multiples of 256 or 32 — and ``llama_model_quantize``'s real output for the
planned file size.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T, GGUFValueType

from models.foundation.errors import QuantDeskError
from models.llama_lib import open_lib
from quantize.ftypes import FILE_TYPES, WRITABLE_TYPES, parse_file_type, parse_tensor_type
from quantize.plan import PlanOptions, format_size, llama_tensor_order, plan_quantization
from quantize.source import MetadataEntry, SourceTensor
from quantize.type_rules import TypeOverrides
from tests.quantize.llama_quant_oracle import llama_plan_types, llama_quantize
from tests.quantize.model_files import TinyLlama, write_tiny_llama


class ShapeSource:
    """A TensorSource of names and shapes only: plans must never load weights."""

    description = "synthetic model"

    def __init__(self, arch: str, hparams: dict, tensors: list[tuple[str, tuple[int, ...], T]]):
        self.arch, self.hparams, self._tensors = arch, hparams, tensors

    def metadata(self) -> list[MetadataEntry]:
        keys = {"n_layer": "block_count", "n_head": "attention.head_count",
                "n_head_kv": "attention.head_count_kv", "n_expert": "expert_count"}
        return [MetadataEntry(f"{self.arch}.{keys[k]}", v, GGUFValueType.UINT32)
                for k, v in self.hparams.items() if k in keys]

    def tensors(self) -> list[SourceTensor]:
        def never():
            raise AssertionError("a plan loaded a tensor")
        return [SourceTensor(n, s, t, never) for n, s, t in self._tensors]


def layout(arch="llama", n_layer=10, n_embd=512, n_ff=1024, n_head=8, n_head_kv=2, n_vocab=1000,
           tied=False, n_expert=0, fused_qkv=False, biases=False, extras=(), n_ff_shexp=0, qk_norm=False):
    """Tensor names and shapes (numpy order) of a llama.cpp-style model, in file order."""
    F16, F32 = T.F16, T.F32
    head = n_embd // n_head
    ts = [("token_embd.weight", (n_vocab, n_embd), F16), ("output_norm.weight", (n_embd,), F32)]
    if not tied:
        ts.append(("output.weight", (n_vocab, n_embd), F16))
    for i in range(n_layer):
        p = f"blk.{i}."
        ts.append((p + "attn_norm.weight", (n_embd,), F32))
        if fused_qkv:
            ts.append((p + "attn_qkv.weight", (n_embd + 2 * n_head_kv * head, n_embd), F16))
        else:
            ts += [(p + "attn_q.weight", (n_embd, n_embd), F16),
                   (p + "attn_k.weight", (n_head_kv * head, n_embd), F16),
                   (p + "attn_v.weight", (n_head_kv * head, n_embd), F16)]
            if biases:
                ts += [(p + "attn_q.bias", (n_embd,), F32), (p + "attn_v.bias", (n_head_kv * head,), F32)]
        if qk_norm:
            ts += [(p + "attn_q_norm.weight", (head,), F32), (p + "attn_k_norm.weight", (head,), F32)]
        ts += [(p + "attn_output.weight", (n_embd, n_embd), F16), (p + "ffn_norm.weight", (n_embd,), F32)]
        if n_ff_shexp:  # Qwen2-MoE's shared expert and its (1, n_embd) sigmoid gate
            ts += [(p + "ffn_gate_inp_shexp.weight", (1, n_embd), F32),
                   (p + "ffn_gate_shexp.weight", (n_ff_shexp, n_embd), F16),
                   (p + "ffn_up_shexp.weight", (n_ff_shexp, n_embd), F16),
                   (p + "ffn_down_shexp.weight", (n_embd, n_ff_shexp), F16)]
        if n_expert:
            ts += [(p + "ffn_gate_inp.weight", (n_expert, n_embd), F32),
                   (p + "ffn_gate_exps.weight", (n_expert, n_ff, n_embd), F16),
                   (p + "ffn_up_exps.weight", (n_expert, n_ff, n_embd), F16),
                   (p + "ffn_down_exps.weight", (n_expert, n_embd, n_ff), F16)]
        else:
            ts += [(p + "ffn_gate.weight", (n_ff, n_embd), F16), (p + "ffn_up.weight", (n_ff, n_embd), F16),
                   (p + "ffn_down.weight", (n_embd, n_ff), F16)]
    ts += list(extras)
    hp = dict(n_layer=n_layer, n_embd=n_embd, n_ff=n_ff, n_head=n_head, n_head_kv=n_head_kv, n_expert=n_expert)
    return ShapeSource(arch, hp, ts)


LAYOUTS = {
    "dense-gqa4-untied": lambda: layout(),
    "dense-tied-576wide": lambda: layout(n_layer=30, n_embd=576, n_ff=1536, n_head=9, n_head_kv=3, tied=True),
    "dense-mha-odd-widths": lambda: layout(n_layer=16, n_embd=288, n_ff=336, n_head=4, n_head_kv=4, biases=True),
    "llama-70b": lambda: layout(n_layer=80, n_embd=8192, n_ff=28672, n_head=64, n_head_kv=8, n_vocab=128256),
    "moe-8-experts": lambda: layout(n_layer=8, n_embd=512, n_ff=768, n_head=8, n_head_kv=2, n_expert=8),
    # The converter's MoE families, shaped like their real models (fewer layers).
    "qwen3moe-128-experts": lambda: layout(arch="qwen3moe", n_layer=12, n_embd=512, n_ff=768, n_head=8,
                                           n_head_kv=2, n_expert=128, qk_norm=True),
    "qwen2moe-60-experts-shared": lambda: layout(arch="qwen2moe", n_layer=6, n_embd=512, n_ff=1408, n_head=8,
                                                 n_head_kv=8, n_expert=60, biases=True, n_ff_shexp=2816),
    "qwen2moe-8-experts-shared": lambda: layout(arch="qwen2moe", n_layer=4, n_embd=256, n_ff=320, n_head=4,
                                                n_head_kv=4, n_expert=8, biases=True, n_ff_shexp=512),
    "olmoe-64-experts": lambda: layout(arch="olmoe", n_layer=16, n_embd=512, n_ff=1024, n_head=8, n_head_kv=8,
                                       n_expert=64),
    "mixtral-8-experts-32-layers": lambda: layout(n_layer=32, n_embd=512, n_ff=1792, n_head=8, n_head_kv=2,
                                                  n_expert=8),
    "falcon-fused-qkv": lambda: layout(arch="falcon", n_layer=12, n_head=8, n_head_kv=1, fused_qkv=True),
    "special-tensors": lambda: layout(n_layer=4, extras=[
        ("position_embd.weight", (64, 512), T.F16), ("token_types.weight", (2, 512), T.F16),
        ("blk.0.ssm_conv1d.weight", (16, 512), T.F16), ("blk.1.scale_row.weight", (1, 512), T.F16),
        ("blk.2.attn_rel_b.weight", (8, 512), T.F16), ("blk.3.ffn_gate_inp.weight", (4, 512), T.F32),
        ("v.patch_embd.weight", (64, 512), T.F16), ("blk.0.odd.weight", (8, 100), T.F16)]),
}
OVERRIDES = {
    "default": TypeOverrides(),
    "pure": TypeOverrides(pure=True),
    "output-q8-embd-q5_1": TypeOverrides(output_tensor_type=T.Q8_0, token_embedding_type=T.Q5_1),
    "output-f16": TypeOverrides(output_tensor_type=T.F16),
}


def _llama_types(source: ShapeSource, ordered, ftype: int, ov: TypeOverrides) -> list[T]:
    hp = source.hparams
    return llama_plan_types(source.arch, hp["n_embd"], hp["n_ff"], hp["n_layer"], hp["n_head"],
                            hp["n_head_kv"], hp["n_expert"], [(t.name, t.shape, t.stored_type) for t in ordered],
                            ftype, ov.pure, ov.output_tensor_type, ov.token_embedding_type)


@pytest.mark.parametrize("override", OVERRIDES)
@pytest.mark.parametrize("name", LAYOUTS)
def test_plan_types_equal_llama_tensor_get_type(name, override):
    source = LAYOUTS[name]()
    ordered = llama_tensor_order(source.tensors())
    mismatches = []
    for ft in FILE_TYPES.values():
        ov = OVERRIDES[override]
        plan = plan_quantization(source, ft, PlanOptions(overrides=ov))
        assert [p.tensor.name for p in plan.tensors] == [t.name for t in ordered]
        expected = _llama_types(source, ordered, ft.ftype, ov)
        mismatches += [f"{ft.name} {p.tensor.name}: ours {p.qtype.name}, llama.cpp {e.name}"
                       for p, e in zip(plan.tensors, expected) if p.qtype != e]
        unwritable = {p.qtype.name for p in plan.tensors} - {t.name for t in WRITABLE_TYPES}
        assert not unwritable, f"{ft.name} is offered but plans {unwritable}"
    assert not mismatches, "\n".join(mismatches[:20])


def test_the_layouts_exercise_the_rules_they_are_meant_to():
    plans = {n: plan_quantization(LAYOUTS[n](), FILE_TYPES["Q4_K_M"]) for n in LAYOUTS}
    types = {n: {p.tensor.name: p.qtype for p in plan.tensors} for n, plan in plans.items()}
    assert types["llama-70b"]["blk.11.attn_v.weight"] == T.Q5_K         # the 70B attn_v bump
    assert types["moe-8-experts"]["blk.3.attn_v.weight"] == T.Q8_0      # 8 experts
    assert types["moe-8-experts"]["blk.0.ffn_down_exps.weight"] == T.Q6_K
    assert types["qwen2moe-60-experts-shared"]["blk.0.ffn_gate_inp_shexp.weight"] == T.F32  # 1-D to ggml
    assert types["qwen2moe-60-experts-shared"]["blk.5.ffn_down_shexp.weight"] == T.Q6_K  # last eighth
    assert types["qwen3moe-128-experts"]["blk.0.ffn_gate_inp.weight"] == T.F32            # routers stay
    assert types["qwen3moe-128-experts"]["blk.3.ffn_up_exps.weight"] == T.Q4_K
    assert types["qwen2moe-8-experts-shared"]["blk.1.attn_output.weight"] == T.Q5_K     # 8 experts
    assert types["dense-tied-576wide"]["token_embd.weight"] == T.Q8_0   # tied, 576 % 256 != 0
    assert types["dense-gqa4-untied"]["output.weight"] == T.Q6_K
    assert types["dense-mha-odd-widths"]["blk.0.ffn_down.weight"] == T.F16  # 336 % 32 != 0
    assert types["special-tensors"]["blk.1.scale_row.weight"] == T.F16     # (1, n) is 1-D to ggml
    assert types["special-tensors"]["position_embd.weight"] == T.F16
    assert plans["dense-mha-odd-widths"].fallbacks and not plans["llama-70b"].fallbacks


def test_file_type_numbers_and_default_types_are_llama_cpps():
    import llama_cpp.llama_cpp as L

    default_type = getattr(open_lib("libllama"), "_Z28llama_ftype_get_default_type11llama_ftype")
    default_type.restype, default_type.argtypes = ctypes.c_int, [ctypes.c_int]
    for ft in FILE_TYPES.values():
        prefix = "LLAMA_FTYPE_ALL_" if ft.name == "F32" else "LLAMA_FTYPE_MOSTLY_"
        assert getattr(L, f"{prefix}{ft.name}") == ft.ftype
        assert default_type(ft.ftype) == ft.default_type
    assert len(FILE_TYPES) == 33


def test_type_names_parse_like_llama_quantize():
    assert parse_file_type("q4_k_m").name == "Q4_K_M"
    assert parse_file_type("Q4_K").name == "Q4_K_M" and parse_file_type("q5_k").name == "Q5_K_M"
    assert parse_file_type("15").name == "Q4_K_M"
    assert parse_tensor_type("q8_0") == T.Q8_0
    with pytest.raises(QuantDeskError, match="Q4_K_M"):
        parse_file_type("Q4_K_XL")
    with pytest.raises(QuantDeskError, match="Q6_K"):
        parse_tensor_type("IQ4_K")


@pytest.mark.parametrize("name", ["Q4_K_M", "Q6_K", "F16", "Q5_0"])
def test_planned_file_size_is_llama_quantize_output_size(tmp_path, name):
    from quantize.gguf_source import GGUFSource

    src = write_tiny_llama(tmp_path / "tiny.gguf", TinyLlama(n_layer=3, n_vocab=300, tied=False))
    ft = FILE_TYPES[name]
    assert llama_quantize(src, tmp_path / "ref.gguf", ft.ftype) == 0
    plan = plan_quantization(GGUFSource(src), ft)
    assert plan.file_size == (tmp_path / "ref.gguf").stat().st_size
    assert plan.tensor_bytes < plan.file_size
    meta = {e.key: e.value for e in plan.metadata}
    assert meta["general.file_type"] == ft.ftype and meta["general.quantization_version"] == 2


def test_q2_k_s_marks_the_tensors_that_need_an_importance_matrix():
    plan = plan_quantization(LAYOUTS["dense-gqa4-untied"](), FILE_TYPES["Q2_K_S"])
    q2k = {p.tensor.name for p in plan.tensors if p.qtype == T.Q2_K}
    assert "token_embd.weight" in q2k  # Q2_K, but llama.cpp exempts the embedding (and output)
    assert set(plan.needs_imatrix) == q2k - {"token_embd.weight"} and plan.needs_imatrix
    assert not plan_quantization(LAYOUTS["dense-gqa4-untied"](), FILE_TYPES["Q2_K"]).needs_imatrix


@pytest.mark.parametrize("name", ["dense-gqa4-untied", "dense-tied-576wide", "moe-8-experts"])
def test_file_types_that_need_an_importance_matrix_are_the_ones_whose_plans_do(name):
    """``FileType.needs_imatrix`` (what the page and the CLI say before planning) agrees
    with the plans: a grid i-quant (or Q2_K_S's Q2_K) on some layer weight. Rows that
    are not multiples of 256 fall back to types that need none, so there it may need less."""
    for ft in FILE_TYPES.values():
        plan = plan_quantization(LAYOUTS[name](), ft)
        if name == "dense-tied-576wide":
            assert not plan.needs_imatrix or ft.needs_imatrix, ft.name
        else:
            assert bool(plan.needs_imatrix) == ft.needs_imatrix, ft.name
        assert "token_embd.weight" not in plan.needs_imatrix and "output.weight" not in plan.needs_imatrix


def test_plan_reports_sizes_for_people():
    plan = plan_quantization(LAYOUTS["dense-gqa4-untied"](), FILE_TYPES["Q4_K_M"])
    assert plan.summary().startswith("Q4_K_M: ") and "bits per weight" in plan.summary()
    assert 4.5 < plan.bits_per_weight < 6.5
    assert sum(plan.type_counts().values()) == len(plan.tensors)
    assert format_size(1536) == "1.50 KiB" and format_size(3 * 2**30) == "3.00 GiB"


def test_missing_block_count_is_a_clear_error():
    source = ShapeSource("llama", {}, [("token_embd.weight", (10, 64), T.F16)])
    with pytest.raises(QuantDeskError, match="block_count"):
        plan_quantization(source, FILE_TYPES["Q8_0"])


def test_plan_reads_no_weights_even_for_a_huge_model():
    # 80 layers of 8192-wide weights: ~70B parameters planned from names and shapes alone
    plan = plan_quantization(LAYOUTS["llama-70b"](), FILE_TYPES["Q4_K_M"])
    assert plan.n_parameters > 60e9
    assert 38 * 2**30 < plan.file_size < 45 * 2**30
    assert np.isclose(plan.file_size, plan.tensor_bytes, rtol=1e-3)
