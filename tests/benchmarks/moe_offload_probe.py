"""Experts on the CPU, the rest on a GPU: llama.cpp's buffers beside memory_fit's prediction.

``python -m tests.benchmarks.moe_offload_probe make DIR`` writes the probe's model (a
tiny Qwen3-MoE checkpoint from the factory, converted and quantized to Q4_K_M by
QuantDesk: the same bytes every time). ``python -m tests.benchmarks.moe_offload_probe
run MODEL.gguf`` (on a machine whose llama-cpp-python has a GPU backend) loads it with
every layer on the GPU and the experts of 0, half or all of the layers kept on the CPU
by :func:`models.engine.expert_offload.keep_experts_on_cpu`, and prints per setting the
buffers llama.cpp logged (MiB, by device) and :func:`models.memory_fit.predict_memory`'s,
plus the tensors llama.cpp reports overridden and the decode speed.

The figures of a run on an H100 are kept in tests/models/test_weight_buffers.py, which
checks the prediction against them.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import sys
import time
from pathlib import Path

#: The probe model: big enough that the experts dominate the weights.
PROBE_CONFIG = {"hidden_size": 256, "head_dim": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
                "num_hidden_layers": 6, "num_experts": 8, "num_experts_per_tok": 2,
                "moe_intermediate_size": 512}
#: (n_ctx, flash attention, expert layers kept on the CPU) of each load. No flash attention:
#: packaging/cuda_moe_check.sh builds CUDA without its flash-attention kernels (a 4-minute
#: build), where the op would run on the CPU.
PROBE_LOADS = [(2048, False, 0), (2048, False, 3), (2048, False, -1), (512, False, -1), (4096, False, -1)]


def make_model(folder: Path) -> Path:
    """The probe's Q4_K_M GGUF, written into ``folder``."""
    from quantize.convert import convert
    from quantize.ftypes import FILE_TYPES
    from quantize.job import QuantizeTarget, quantize_model
    from tests.factory.checkpoints import write_tiny_checkpoint

    ck = write_tiny_checkpoint(folder / "probe-qwen3-moe", arch="qwen3_moe", config_overrides=PROBE_CONFIG)
    f16 = convert(ck.path, folder / "probe-qwen3-moe-F16.gguf", "f16")
    target = QuantizeTarget(FILE_TYPES["Q4_K_M"], folder / "probe-qwen3-moe-Q4_K_M.gguf")
    quantize_model(f16, [target])
    return target.path


def buffers_by_side(text: str) -> dict[str, float]:
    """``{"gpu model": MiB, "cpu KV": MiB, ...}`` from llama.cpp's load log. Buffers on a
    ``CUDA0``-like device are the GPU's; ``CPU``, ``CPU_Mapped``, ``CPU_REPACK`` and the
    pinned ``CUDA_Host`` are RAM."""
    out: dict[str, float] = {}
    for device, kind, mib in re.findall(r"(\S+)\s+(model|KV|compute|output) buffer size =\s+([0-9.]+) MiB", text):
        side = "cpu" if device.startswith("CPU") or device.endswith("_Host") else "gpu"
        out[f"{side} {kind}"] = out.get(f"{side} {kind}", 0.0) + float(mib)
    return out


def run(model: Path) -> list[dict]:
    import llama_cpp
    import llama_cpp.llama_cpp as low

    from models.engine.expert_offload import keep_experts_on_cpu
    from models.gguf_header import read_gguf_header
    from models.memory_fit import FitSettings, predict_memory

    lines: list[str] = []

    @ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)
    def on_log(level, text, user):
        lines.append(text.decode(errors="replace"))

    llama_cpp.llama_log_set(on_log, ctypes.c_void_p(0))
    header = read_gguf_header(model)
    results = []
    for n_ctx, flash, cpu_moe in PROBE_LOADS:
        lines.clear()
        original = low.llama_model_default_params

        def with_experts(original=original, cpu_moe=cpu_moe):
            params = original()
            keep_experts_on_cpu(params, header.arch_value("block_count") if cpu_moe < 0 else cpu_moe)
            return params

        low.llama_model_default_params = with_experts
        try:
            llm = llama_cpp.Llama(model_path=str(model), n_gpu_layers=-1, n_ctx=n_ctx, n_batch=512,
                                  n_ubatch=512, flash_attn=flash, n_threads=4, verbose=True)
        finally:
            low.llama_model_default_params = original
        text = "".join(lines)
        if os.environ.get("MOE_PROBE_LOGS"):
            Path(os.environ["MOE_PROBE_LOGS"], f"load-{n_ctx}-{int(flash)}-{cpu_moe}.log").write_text(text)
        start = time.perf_counter()
        out = llm.create_completion("Once upon a time", max_tokens=64, temperature=0.0, seed=1)
        seconds = time.perf_counter() - start
        llm.close()
        p = predict_memory(header, FitSettings(n_ctx=n_ctx, n_gpu_layers=-1, flash_attn=flash,
                                               cpu_moe_layers=cpu_moe))
        predicted = {"gpu model": p.weights_gpu, "cpu model": p.weights_cpu, "gpu KV": p.kv_gpu,
                     "cpu KV": p.kv_cpu, "gpu compute": p.compute_gpu, "cpu compute": p.compute_cpu}
        results.append({
            "n_ctx": n_ctx, "flash": flash, "cpu_moe_layers": cpu_moe,
            "llama": buffers_by_side(text),
            "predicted": {k: round(v / 2**20, 2) for k, v in predicted.items()},
            "overridden": len(re.findall(r"buffer type overridden to", text)),
            "tokens_per_second": round(out["usage"]["completion_tokens"] / seconds, 1),
        })
    return results


def main(argv: list[str]) -> int:
    if argv[:1] == ["make"]:
        print(make_model(Path(argv[1])))
        return 0
    for row in run(Path(argv[1])):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
