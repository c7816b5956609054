"""Mixture-of-experts models in the engine: experts kept on the CPU, memory, parameters.

A tiny Qwen3-MoE checkpoint (8 experts, 2 per token, experts 1024 wide so that the
feed-forward phase sets the compute buffer) is converted by us to F16 and

* loaded by llama.cpp in a child process with the experts of some layers kept on the
  CPU by :func:`models.engine.expert_offload.keep_experts_on_cpu`: llama.cpp's own log
  must say that exactly those layers' ``ffn_*_exps`` were overridden to the CPU buffer
  type (on a CPU-only machine every tensor is on the CPU anyway, but the override is
  applied and logged all the same), and the buffer sizes it logs must be within a few per
  cent of :func:`models.memory_fit.predict_memory`;
* loaded and chatted with through the real engine with the setting on;
* counted: total and active parameters, the bytes one token reads, the memory split.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from models.engine.expert_offload import expert_layer_patterns, is_expert_tensor_of
from models.engine.gguf_info import read_model_info
from models.engine.settings import ALL_LAYERS, LoadSettings, validate_settings
from models.foundation.errors import QuantDeskError
from models.gguf_header import is_expert_tensor, read_gguf_header
from models.memory_fit import FitSettings, parameters_text, predict_memory

pytest.importorskip("transformers")

# Loads the model in a child, optionally with the expert override, and prints what
# llama.cpp logged: buffer sizes (MiB) and the tensors whose buffer type was overridden.
PROBE = r"""
import ctypes, json, re, sys
import llama_cpp
import llama_cpp.llama_cpp as low
from models.engine.expert_offload import keep_experts_on_cpu
lines = []
@ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
def on_log(level, text, user):
    lines.append(text.decode(errors="replace"))
llama_cpp.llama_log_set(on_log, ctypes.c_void_p(0))
job = json.loads(sys.argv[1])
original = low.llama_model_default_params
def with_experts():
    params = original()
    keep_experts_on_cpu(params, job["cpu_moe_layers"])
    return params
low.llama_model_default_params = with_experts
llm = llama_cpp.Llama(model_path=job["model"], n_ctx=job["n_ctx"], n_batch=512, n_ubatch=512,
                      n_threads=2, verbose=True, flash_attn=job["flash"], n_gpu_layers=-1)
text = "".join(lines)
sizes = {kind: sum(float(x) for x in re.findall(kind + r" buffer size =\s+([0-9.]+) MiB", text))
         for kind in ("model", "KV", "compute", "output")}
overridden = re.findall(r"tensor (\S+) \(.*\) buffer type overridden to (\S+)", text)
out = llm.create_completion("Once upon a time", max_tokens=4, temperature=0.0)
print("RESULT " + json.dumps({"sizes": sizes, "overridden": overridden,
                              "tokens": out["usage"]["completion_tokens"]}))
"""


def probe(model, cpu_moe_layers: int, n_ctx: int = 512, flash: bool = True) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(
        {"model": str(model), "cpu_moe_layers": cpu_moe_layers, "n_ctx": n_ctx, "flash": flash})],
        capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


@pytest.fixture(scope="module")
def moe_gguf(tmp_path_factory):
    from quantize.convert import convert
    from tests.factory.checkpoints import write_tiny_checkpoint

    folder = tmp_path_factory.mktemp("moe")
    ck = write_tiny_checkpoint(folder / "tiny-qwen3-moe", arch="qwen3_moe", config_overrides={
        "hidden_size": 256, "head_dim": 64, "num_hidden_layers": 4, "num_experts": 8,
        "num_experts_per_tok": 2, "moe_intermediate_size": 1024})
    return convert(ck.path, folder / "tiny-qwen3-moe-F16.gguf", "f16")


def test_the_override_patterns_are_llama_cpps():
    assert expert_layer_patterns(0) == []
    assert expert_layer_patterns(2) == [r"blk\.0\.ffn_(up|down|gate|gate_up)_(ch|)exps",
                                        r"blk\.1\.ffn_(up|down|gate|gate_up)_(ch|)exps"]
    assert is_expert_tensor_of("blk.1.ffn_down_exps.weight", 2)
    assert not is_expert_tensor_of("blk.12.ffn_down_exps.weight", 2)  # "blk.1" is not "blk.12"
    assert not is_expert_tensor_of("blk.0.ffn_down_shexp.weight", 2)  # shared experts go with the layer
    assert not is_expert_tensor_of("blk.0.ffn_gate_inp.weight", 2)    # the router too
    assert is_expert_tensor("blk.7.ffn_gate_up_exps.weight") and not is_expert_tensor("blk.7.ffn_up.weight")


@pytest.mark.slow
def test_llama_cpp_keeps_exactly_the_chosen_layers_experts_on_the_cpu(moe_gguf):
    result = probe(moe_gguf, 3)
    overridden = sorted(name for name, _ in result["overridden"])
    assert overridden == sorted(f"blk.{i}.ffn_{p}_exps.weight" for i in range(3) for p in ("gate", "up", "down"))
    assert {buft for _, buft in result["overridden"]} <= {"CPU", "CPU_REPACK"}
    assert result["tokens"] == 4  # and it generates
    assert probe(moe_gguf, 0)["overridden"] == []


@pytest.mark.slow
def test_memory_prediction_is_within_a_few_percent_of_llama_cpp(moe_gguf):
    header = read_gguf_header(moe_gguf)
    # the experts' product sets the buffer, then (4096, no flash) the attention scores
    for n_ctx, flash in ((512, True), (1024, False), (4096, True), (4096, False)):
        real = probe(moe_gguf, ALL_LAYERS, n_ctx, flash)["sizes"]
        p = predict_memory(header, FitSettings(n_ctx=n_ctx, flash_attn=flash, cpu_moe_layers=-1))
        predicted = {"model": p.weights_cpu, "KV": p.kv_cpu, "compute": p.compute_cpu, "output": p.output}
        for key, value in predicted.items():
            print(f"n_ctx {n_ctx} flash {flash} {key}: predicted {value / 2**20:.2f} MiB, "
                  f"llama.cpp {real[key]:.2f} MiB")
            # (the log prints MiB with two decimals: the 1.5 KiB output buffer reads 0.00)
            assert abs(value / 2**20 - real[key]) <= max(0.05 * real[key], 0.01), (n_ctx, flash, key)


def test_experts_on_the_cpu_move_only_expert_bytes_out_of_vram(moe_gguf):
    header = read_gguf_header(moe_gguf)
    expert_bytes = {i: sum(t.n_bytes for t in header.tensors
                           if t.name.startswith(f"blk.{i}.") and is_expert_tensor(t.name)) for i in range(4)}
    all_gpu = predict_memory(header, FitSettings(n_gpu_layers=-1))
    two = predict_memory(header, FitSettings(n_gpu_layers=-1, cpu_moe_layers=2))
    every = predict_memory(header, FitSettings(n_gpu_layers=-1, cpu_moe_layers=-1))
    assert all_gpu.weights_gpu - two.weights_gpu == expert_bytes[0] + expert_bytes[1]
    # (RAM: the mapped file from the token embedding to layer 1's last expert, or repacked
    # copies; tests/models/test_weight_buffers.py checks those against llama.cpp)
    assert two.weights_cpu - all_gpu.weights_cpu >= expert_bytes[0] + expert_bytes[1]
    assert all_gpu.weights_gpu - every.weights_gpu == sum(expert_bytes.values())
    assert every.kv_gpu == all_gpu.kv_gpu  # attention and its cache stay on the GPU
    # on a CPU-only load the setting changes nothing
    assert predict_memory(header, FitSettings(cpu_moe_layers=-1)) == predict_memory(header, FitSettings())


def test_total_and_active_parameters(moe_gguf):
    header = read_gguf_header(moe_gguf)
    experts = sum(t.n_elements for t in header.tensors if is_expert_tensor(t.name))
    assert experts == 4 * 3 * 8 * 1024 * 256
    assert header.expert_count == 8 and header.expert_used_count == 2
    assert header.active_parameter_count == header.parameter_count - experts + experts // 4
    p = predict_memory(header)
    assert (p.parameters, p.active_parameters) == (header.parameter_count, header.active_parameter_count)
    assert p.parameters_text == parameters_text(header.parameter_count, header.active_parameter_count)
    assert parameters_text(30_532_122_624, 3_353_032_704) == "30.5B total, 3.3B active"  # Qwen3-30B-A3B
    assert parameters_text(1_711_376_384, 1_711_376_384) == "1.7B" and parameters_text(None) == "–"
    info = read_model_info(moe_gguf)
    expert_bytes = sum(t.n_bytes for t in header.tensors if is_expert_tensor(t.name))
    everything = sum(t.n_bytes for t in header.tensors) - next(
        t.n_bytes for t in header.tensors if t.name == "token_embd.weight")
    assert info.weight_bytes_per_token == everything - expert_bytes + expert_bytes // 4
    assert info.is_moe and (info.expert_count, info.expert_used_count) == (8, 2)


def test_settings_resolve_all_and_refuse_too_many(moe_gguf):
    info = read_model_info(moe_gguf)
    assert validate_settings(LoadSettings(context_length=0, cpu_moe_layers=ALL_LAYERS), info, 0).cpu_moe_layers == 4
    assert validate_settings(LoadSettings(context_length=0, cpu_moe_layers=2), info, 0).cpu_moe_layers == 2
    with pytest.raises(QuantDeskError, match="expert layers kept on the CPU"):
        validate_settings(LoadSettings(context_length=0, cpu_moe_layers=5), info, 0)
    assert LoadSettings.from_dict(LoadSettings(cpu_moe_layers=3).to_dict()).cpu_moe_layers == 3


@pytest.mark.smollm2
def test_a_dense_model_ignores_the_setting(smollm2_gguf):
    info = read_model_info(smollm2_gguf)
    assert not info.is_moe
    assert validate_settings(LoadSettings(cpu_moe_layers=ALL_LAYERS), info, 0).cpu_moe_layers == 0


@pytest.mark.slow
def test_a_converted_moe_model_chats_in_the_engine_with_experts_on_the_cpu(moe_gguf):
    from models.engine import EngineClient
    from models.engine.options import ChatOptions

    with EngineClient() as client:
        report = client.load(moe_gguf, LoadSettings(threads=2, batch_threads=2, context_length=512,
                                                    cpu_moe_layers=ALL_LAYERS))
        assert report.settings.cpu_moe_layers == 4
        reply = client.chat([{"role": "user", "content": "Hello!"}],
                            ChatOptions(temperature=0.0, max_tokens=8, ignore_eos=True)).wait()
    assert reply.stats.completion_tokens == 8 and reply.text


@pytest.mark.slow
def test_bench_bounds_a_moe_model_by_its_routed_experts(moe_gguf):
    from tests.conftest import REPO_ROOT

    done = subprocess.run([sys.executable, "-m", "app.cli", "bench", str(moe_gguf), "--threads", "2",
                           "--batch-threads", "2", "--ctx", "512", "--n-cpu-moe", "-1", "--runs", "1",
                           "--prompt-tokens", "32", "--gen-tokens", "8"],
                          capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = dict(line.split(":", 1) for line in done.stdout.splitlines() if ":" in line)
    info = read_model_info(moe_gguf)
    assert float(lines["Weights per token"].split()[0]) == pytest.approx(info.weight_bytes_per_token / 1e6, abs=0.06)
    assert "the 2 of 8 experts each token is routed to" in lines["Weights per token"]
    bandwidth = float(lines["Memory bandwidth"].split()[0])
    limit = float(lines["Bandwidth limit"].split()[0])
    assert limit == pytest.approx(bandwidth * 1e9 / info.weight_bytes_per_token, rel=0.01)


@pytest.mark.smollm2
def test_the_library_shows_total_and_active_parameters(moe_gguf, smollm2_gguf):
    from models.library import Library

    lib = Library()
    model = lib.import_path(moe_gguf)
    header = read_gguf_header(moe_gguf)
    assert (model.parameters, model.active_parameters) == (header.parameter_count, header.active_parameter_count)
    assert model.active_parameters < model.parameters
    assert parameters_text(model.parameters, model.active_parameters).endswith(" active")
    dense = lib.import_path(smollm2_gguf)
    assert dense.active_parameters == dense.parameters
