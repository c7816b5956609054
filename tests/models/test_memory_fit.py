"""The memory-fit prediction against what llama.cpp really allocates on SmolLM2.

A child process loads the model with llama-cpp-python at several context lengths and
KV-cache types and captures llama.cpp's log through ``llama_log_set``; the model, KV and
compute buffer sizes it reports must be within 10 % of :func:`predict_memory`.
Run ``python -m tests.models.test_memory_fit`` to print the comparison table.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from models.gguf_header import read_gguf_header
from models.memory_fit import FitSettings, judge_fit, predict_memory

SETTINGS = [
    FitSettings(n_ctx=512, kv_type="f16"),
    FitSettings(n_ctx=1000, kv_type="f16"),   # padded to 1024 by llama.cpp
    FitSettings(n_ctx=8192, kv_type="f16"),   # attention scores outgrow the logits
    FitSettings(n_ctx=300, kv_type="q8_0"),   # micro-batch clamped to n_ctx
    FitSettings(n_ctx=4096, kv_type="q4_0"),
]

# Loads the model once per setting and prints the buffer sizes llama.cpp logged, in MiB.
PROBE = r"""
import ctypes, json, re, sys
import llama_cpp
lines = []
@ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
def on_log(level, text, user):
    lines.append(text.decode(errors="replace"))
llama_cpp.llama_log_set(on_log, ctypes.c_void_p(0))
types = {"f16": 1, "q8_0": 8, "q4_0": 2}
results = []
for n_ctx, kv, flash in json.loads(sys.argv[2]):
    lines.clear()
    llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=n_ctx, n_threads=2, verbose=True,
                          type_k=types[kv], type_v=types[kv], flash_attn=flash)
    text = "".join(lines)
    sizes = {}
    for kind in ("model", "KV", "compute", "output"):
        found = re.findall(kind + r" buffer size =\s+([0-9.]+) MiB", text)
        sizes[kind] = sum(float(x) for x in found)
    sizes["n_ctx"] = int(re.search(r"n_ctx\s+=\s+(\d+)", text).group(1))
    results.append(sizes)
    llm.close()
print(json.dumps(results))
"""


def measure(model: Path, settings: list[FitSettings]) -> list[dict]:
    """llama.cpp's logged buffer sizes (MiB) for each setting, from a child process."""
    args = [[s.n_ctx, s.kv_type, s.kv_type != "f16"] for s in settings]
    done = subprocess.run([sys.executable, "-c", PROBE, str(model), json.dumps(args)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def comparison(model: Path) -> list[tuple[FitSettings, dict, dict]]:
    header = read_gguf_header(model)
    rows = []
    for s, real in zip(SETTINGS, measure(model, SETTINGS)):
        p = predict_memory(header, s)
        predicted = {"model": p.weights_cpu / 2**20, "KV": p.kv_cpu / 2**20,
                     "compute": p.compute_cpu / 2**20, "output": p.output / 2**20, "n_ctx": p.n_ctx}
        rows.append((s, predicted, real))
    return rows


def format_table(rows) -> str:
    out = [f"{'n_ctx':>6} {'kv':<5} | {'model MiB':>17} | {'KV MiB':>17} | {'compute MiB':>17} | "
           f"{'total MiB':>17} | worst err"]
    for s, pred, real in rows:
        cells, worst = [], 0.0
        for key in ("model", "KV", "compute"):
            cells.append(f"{pred[key]:7.2f} / {real[key]:7.2f}")
            worst = max(worst, abs(pred[key] - real[key]) / real[key])
        total_p = sum(pred[k] for k in ("model", "KV", "compute", "output"))
        total_r = sum(real[k] for k in ("model", "KV", "compute", "output"))
        out.append(f"{s.n_ctx:>6} {s.kv_type:<5} | " + " | ".join(cells)
                   + f" | {total_p:7.2f} / {total_r:7.2f} | {worst * 100:5.2f}%")
    return "predicted / llama.cpp\n" + "\n".join(out)


@pytest.mark.smollm2
def test_prediction_is_within_10_percent_of_llama_cpp(smollm2_gguf):
    rows = comparison(smollm2_gguf)
    print("\n" + format_table(rows))
    for s, pred, real in rows:
        assert pred["n_ctx"] == real["n_ctx"], s
        for key in ("model", "KV", "compute", "output"):
            assert abs(pred[key] - real[key]) <= 0.10 * real[key], (s, key, pred[key], real[key])


@pytest.mark.smollm2
def test_gpu_layers_move_the_output_layer_then_the_last_blocks_and_their_kv_to_vram(smollm2_gguf):
    header = read_gguf_header(smollm2_gguf)
    embed = next(t.n_bytes for t in header.tensors if t.name == "token_embd.weight")
    blocks = sum(t.n_bytes for t in header.tensors if t.name.startswith("blk."))
    cpu = predict_memory(header, FitSettings(n_ctx=2048))
    one = predict_memory(header, FitSettings(n_ctx=2048, n_gpu_layers=1))
    half = predict_memory(header, FitSettings(n_ctx=2048, n_gpu_layers=16))
    full = predict_memory(header, FitSettings(n_ctx=2048, n_gpu_layers=-1))
    assert cpu.vram == 0
    # one layer is the output layer: SmolLM2 has no output.weight, so its token embedding
    # is copied to the GPU as the output matrix, and no block's KV moves
    assert one.kv_gpu == 0 and one.weights_gpu == embed + 4 * 576
    assert half.kv_gpu == half.kv_cpu == cpu.kv_cpu // 2  # output + 15 of 30 blocks
    assert full.kv_cpu == 0 and full.kv_gpu == cpu.kv_cpu
    assert full.weights_gpu == blocks + embed + 4 * 576  # blocks, the output norm, the copy
    assert full.weights_cpu == embed  # the token embedding always stays on the CPU


def test_verdicts():
    from models.memory_fit import MemoryPrediction

    p = MemoryPrediction(600, 0, 200, 0, 200, 0, 0, 512)  # 1000 bytes of RAM
    assert judge_fit(p, 2000, None).verdict == "fits"
    assert judge_fit(p, 1100, None).verdict == "tight"
    assert judge_fit(p, 900, None).verdict == "won't fit"
    gpu = MemoryPrediction(100, 500, 0, 100, 50, 200, 0, 512)
    assert judge_fit(gpu, 10_000, None).verdict == "won't fit"  # GPU layers, no GPU
    assert judge_fit(gpu, 10_000, 900).verdict == "tight"  # 800 of 900
    assert "VRAM" in judge_fit(gpu, 10_000, 700).reason and judge_fit(gpu, 10_000, 700).verdict == "won't fit"


if __name__ == "__main__":
    from tests.conftest import cached_models_dir, fetch_smollm2

    print(format_table(comparison(fetch_smollm2(cached_models_dir()))))
