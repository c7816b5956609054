"""Where llama.cpp puts CPU weights, and how big each buffer is: prediction against its log.

The engine (the real child process, llama.cpp inside) loads SmolLM2 (Q4_1: nothing to
repack on x86), a tiny Qwen3-MoE that QuantDesk converted and quantized to Q4_K_M (its
Q4_K matrices and experts are repacked where the CPU backend has CPU_REPACK and AVX2),
with the experts kept on the CPU, and a tiny llama whose output matrix is its token
embedding, quantized to Q4_0 throughout (``--pure``: the table is looked up in the
mapped file and repacked a second time as the output matrix), with and without mmap and
extra buffer types.
Each model buffer llama.cpp logs (``CPU_Mapped``, ``CPU_REPACK``, ``CPU``) must be within
2 % of :func:`models.memory_fit.predict_memory`'s, and the KV and compute buffers within
5 %. The rules themselves are checked on made-up tensors without llama.cpp.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from models.gguf_header import TensorInfo, read_gguf_header
from models.memory_fit import FitSettings, predict_memory
from models.weight_buffers import (AMX, MAPPED, REPACK, CpuBackend, cpu_weight_buffers, operation_of,
                                   this_cpu_backend)
from quantize.ggml_types import GGMLQuantizationType as T

MIB = 2**20
X86 = CpuBackend((REPACK,), frozenset({"AVX2", "AVX512"}))
CUDA_MACHINE = CpuBackend((REPACK,), frozenset({"AVX2", "AVX512"}), gpu_host_buffer=True)


def tensor(name, shape, ggml_type, n_bytes, offset=0):
    return TensorInfo(name, shape, int(ggml_type), n_bytes, offset)


def test_the_operation_of_each_weight():
    assert operation_of(tensor("token_embd.weight", (100, 64), T.Q4_K, 0)) == "GET_ROWS"
    assert operation_of(tensor("blk.0.attn_q.weight", (64, 64), T.Q4_K, 0)) == "MUL_MAT"
    assert operation_of(tensor("blk.0.ffn_up_exps.weight", (8, 128, 64), T.Q4_K, 0)) == "MUL_MAT_ID"
    assert operation_of(tensor("blk.0.attn_norm.weight", (64,), T.F32, 0)) == "OTHER"
    assert operation_of(tensor("blk.0.attn_q.bias", (64,), T.F32, 0)) == "OTHER"


def test_repacking_follows_the_cpu_and_the_rows():
    q4k = tensor("blk.0.attn_q.weight", (64, 256), T.Q4_K, 9216, 0)
    odd = tensor("blk.0.attn_k.weight", (12, 256), T.Q4_K, 1728, 9216)
    q6k = tensor("blk.0.attn_v.weight", (64, 256), T.Q6_K, 13440, 10944)
    sizes = cpu_weight_buffers([q4k, odd, q6k], X86)
    # Q4_K with rows in eights is repacked; 12 rows and Q6_K stay in the file, whose mapped
    # range runs from the first kept tensor's start to the last one's end
    assert sizes == {REPACK: 9216, MAPPED: 10944 + 13440 - 9216}
    assert cpu_weight_buffers([q4k], CpuBackend((REPACK,), frozenset({"SSE3"}))) == {MAPPED: 9216}
    assert cpu_weight_buffers([q4k, odd], X86, use_extra_bufts=False) == {MAPPED: 9216 + 1728}
    assert cpu_weight_buffers([q4k, odd], X86, use_mmap=False) == {REPACK: 9216, "CPU": 1728}  # padded to 32
    q2k = tensor("blk.0.ffn_down_exps.weight", (8, 64, 256), T.Q2_K, 8 * 64 * 84)
    assert cpu_weight_buffers([q2k], X86) == {REPACK: 8 * 64 * 84}  # AVX-512 only
    assert cpu_weight_buffers([q2k], CpuBackend((REPACK,), frozenset({"AVX2"}))) == {MAPPED: 8 * 64 * 84}


def test_a_gpu_host_buffer_keeps_weights_mapped_and_a_tied_output_is_a_second_copy():
    embd = tensor("token_embd.weight", (64, 256), T.Q4_K, 9216)
    # with a GPU present, CPU matrices go to its host buffer, which mmap swaps for the file
    assert cpu_weight_buffers([embd], CUDA_MACHINE, tied_output=True) == {MAPPED: 9216}
    assert cpu_weight_buffers([embd], CUDA_MACHINE, use_mmap=False, tied_output=True) == {
        "CPU": 9216, "GPU host": 9216}
    # CPU only: the output matrix (token_embd used again) is repacked beside the mapped table
    assert cpu_weight_buffers([embd], X86, tied_output=True) == {MAPPED: 9216, REPACK: 9216}


def test_amx_relayout_sizes():
    amx = CpuBackend((AMX, REPACK), frozenset({"AVX2", "AMX_INT8"}))
    q8 = tensor("blk.0.attn_q.weight", (64, 256), T.Q8_0, 64 * 8 * 34)
    assert cpu_weight_buffers([q8], amx) == {AMX: 64 * 8 * (34 + 4)}  # int32 compensation per block
    q4k = tensor("blk.0.attn_q.weight", (64, 256), T.Q4_K, 64 * 144)
    assert cpu_weight_buffers([q4k], amx) == {AMX: 64 * 148}
    narrow = tensor("blk.0.attn_k.weight", (16, 256), T.Q4_K, 16 * 144)  # 16 rows: no AMX tile, repacked
    assert cpu_weight_buffers([narrow], amx) == {REPACK: 16 * 144}


@pytest.fixture(scope="module")
def moe_q4_k_m(tmp_path_factory):
    from tests.benchmarks.moe_offload_probe import make_model

    return make_model(tmp_path_factory.mktemp("moe-q4km"))


def test_the_h100_probe_figures(moe_q4_k_m):
    """The figures llama.cpp logged on an H100 (CUDA) for this model, all layers on the
    GPU, n_ctx 2048, no flash attention: CPU model buffer 5.84 MiB with the experts of 3
    layers kept on the CPU, 11.62 MiB with all 6, and a 5.51 MiB CPU compute buffer."""
    header = read_gguf_header(moe_q4_k_m)
    for cpu_moe, logged in ((3, 5.84), (-1, 11.62)):
        p = predict_memory(header, FitSettings(n_ctx=2048, n_gpu_layers=-1, flash_attn=False,
                                               cpu_moe_layers=cpu_moe), CUDA_MACHINE)
        assert p.weights_cpu / MIB == pytest.approx(logged, abs=0.01)
        assert p.compute_cpu / MIB == pytest.approx(5.51, abs=0.02)


def load_and_compare(model, settings) -> dict:
    """Load ``model`` in the engine and compare llama.cpp's logged buffers with the prediction."""
    from models.engine import EngineClient

    with EngineClient() as client:
        report = client.load(model, settings)
    logged = report.offload.buffers
    prediction = predict_memory(model, FitSettings(
        n_ctx=settings.context_length, n_gpu_layers=report.offload.layers_on_gpu,
        cpu_moe_layers=report.settings.cpu_moe_layers, use_mmap=settings.use_mmap,
        use_extra_bufts=report.use_extra_bufts, flash_attn=settings.flash_attention))
    predicted = {name: size / MIB for name, size in prediction.cpu_weight_buffers}
    model_logged = {name: mib for (kind, name), mib in logged.items() if kind == "model"}
    print(f"{model.name} mmap={settings.use_mmap} extra={report.use_extra_bufts}: "
          f"predicted {predicted}, llama.cpp {model_logged}")
    assert set(predicted) == set(model_logged)
    for name, mib in model_logged.items():
        assert abs(predicted[name] - mib) <= max(0.02 * mib, 0.01), name
    for kind, value in (("KV", prediction.kv_cpu), ("compute", prediction.compute_cpu)):
        real = sum(mib for (k, _), mib in logged.items() if k == kind)
        assert abs(value / MIB - real) <= 0.05 * real, kind
    return model_logged


@pytest.mark.slow
def test_a_quantized_moe_models_buffers_with_experts_on_the_cpu(moe_q4_k_m):
    from models.engine.settings import ALL_LAYERS, LoadSettings

    base = LoadSettings(threads=2, batch_threads=2, context_length=512, cpu_moe_layers=ALL_LAYERS)
    mapped = load_and_compare(moe_q4_k_m, base)
    if {"AVX2"} <= this_cpu_backend().features and REPACK in this_cpu_backend().extra_buffers:
        assert mapped.get(REPACK, 0) > 9  # the experts and the Q4_K matrices were repacked
    load_and_compare(moe_q4_k_m, replace(base, use_mmap=False))
    plain = load_and_compare(moe_q4_k_m, replace(base, use_extra_bufts=False))
    assert set(plain) == {MAPPED}


@pytest.fixture(scope="module")
def tied_q4_0(tmp_path_factory):
    from quantize.convert import convert
    from quantize.ftypes import FILE_TYPES
    from quantize.job import QuantizeOptions, QuantizeTarget, quantize_model
    from tests.factory.checkpoints import write_tiny_checkpoint

    folder = tmp_path_factory.mktemp("tied")
    ck = write_tiny_checkpoint(folder / "tiny-llama", arch="llama", tie_word_embeddings=True, config_overrides={
        "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2})
    target = QuantizeTarget(FILE_TYPES["Q4_0"], folder / "tiny-llama-Q4_0.gguf")
    quantize_model(convert(ck.path, folder / "tiny-llama-F16.gguf", "f16"), [target], QuantizeOptions(pure=True))
    return target.path


@pytest.mark.slow
def test_a_tied_output_matrix_is_repacked_beside_the_mapped_table(tied_q4_0):
    from models.engine.settings import LoadSettings

    base = LoadSettings(threads=2, batch_threads=2, context_length=256)
    mapped = load_and_compare(tied_q4_0, base)
    load_and_compare(tied_q4_0, replace(base, use_mmap=False))
    if {"AVX2"} <= this_cpu_backend().features and REPACK in this_cpu_backend().extra_buffers:
        tensors = read_gguf_header(tied_q4_0).tensors
        matrices = sum(t.n_bytes for t in tensors if t.name.startswith("blk.") and len(t.shape) == 2)
        embd = next(t.n_bytes for t in tensors if t.name == "token_embd.weight")
        # the blocks' matrices and the table again, as the output matrix (0.05 MiB)
        assert mapped[REPACK] == pytest.approx((matrices + embd) / MIB, abs=0.01)


@pytest.mark.slow
@pytest.mark.smollm2
def test_smollm2s_buffers(smollm2_gguf):
    from models.engine.settings import LoadSettings

    base = LoadSettings(threads=2, batch_threads=2, context_length=2048)
    load_and_compare(smollm2_gguf, base)
    load_and_compare(smollm2_gguf, replace(base, use_mmap=False))
