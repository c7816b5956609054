"""Benchmark: quantizing a whole GGUF file — our job against llama_model_quantize.

Run: ``.venv/bin/python tests/benchmarks/bench_quantize_file.py [--types Q4_K_M,Q8_0]
[--threads 2] [--repeats 3] [--layers 2,8] [--skip-speed] [--skip-memory]``

1. Speed (real weights): SmolLM2-135M-Instruct (its Q4_1 release dequantized to an F16
   GGUF, 271 MB) quantized to each type by ``quantize_model`` and by libllama's
   ``llama_model_quantize`` with the same thread count (best of ``--repeats`` rounds, the two
   taking turns in each); prints seconds and the ratio
   ours / llama.cpp (lower is better), checks the two files are byte-identical, then
   times all types in one multi-target job against the sum of the single-type jobs.
2. Memory (model size grows): synthetic llama F16 GGUFs (hidden 2048, ffn 5632, vocab
   32000) with ``--layers`` blocks, each quantized to Q4_K_M in a child process that
   samples its own ``RssAnon`` (private memory) and ``VmRSS`` every 10 ms. The input is
   memory-mapped, so ``VmRSS`` also counts file pages the kernel may drop at any time;
   ``RssAnon`` is the memory the job really holds. Flat means: the peak stays near
   "largest tensor as float32 × a small factor", whatever the number of layers.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

ALL_TYPES = ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_S", "Q3_K_M",
             "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K"]
HIDDEN, FFN, HEADS, KV_HEADS, VOCAB = 2048, 5632, 32, 4, 32000

MEMORY_CHILD = r"""
import json, sys, threading, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from quantize.ftypes import FILE_TYPES
from quantize.job import QuantizeOptions, QuantizeTarget, quantize_model
import quantize.blocks  # import everything first: the baseline includes the code

def status():
    out = {}
    for line in open("/proc/self/status"):
        key, _, value = line.partition(":")
        if key in ("RssAnon", "VmRSS"):
            out[key] = int(value.split()[0]) * 1024
    return out

base = status()
peak = dict(base)
done = threading.Event()
def sample():
    while not done.is_set():
        for k, v in status().items():
            peak[k] = max(peak[k], v)
        time.sleep(0.01)
t = threading.Thread(target=sample, daemon=True); t.start()
start = time.perf_counter()
quantize_model(Path(sys.argv[2]), [QuantizeTarget(FILE_TYPES["Q4_K_M"], Path(sys.argv[3]))],
               QuantizeOptions(threads=int(sys.argv[4])))
seconds = time.perf_counter() - start
done.set(); t.join()
print(json.dumps({"base": base, "peak": peak, "seconds": seconds}))
"""


def write_synthetic_f16(path: Path, layers: int, experts: int = 0) -> tuple[Path, int]:
    """A llama-shaped F16 GGUF with random weights; returns it and its largest tensor's values.

    With ``experts``, each block's feed-forward is split into that many experts of
    ``FFN // experts`` (3-D ``ffn_*_exps`` tensors and a router, two experts used): the same
    number of weights, laid out as a mixture-of-experts model (what MXFP4_MOE is for).
    """
    from gguf import GGUFWriter

    rng = np.random.default_rng(0)
    w = GGUFWriter(path, "llama")
    for key, value in (("block_count", layers), ("context_length", 2048), ("embedding_length", HIDDEN),
                       ("feed_forward_length", FFN), ("attention.head_count", HEADS),
                       ("attention.head_count_kv", KV_HEADS)):
        w.add_uint32(f"llama.{key}", value)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)  # llama_model_quantize reads it
    if experts:
        w.add_uint32("llama.expert_count", experts)
        w.add_uint32("llama.expert_used_count", 2)
    w.add_file_type(1)
    hd = HIDDEN // HEADS
    shapes = {"token_embd.weight": (VOCAB, HIDDEN), "output_norm.weight": (HIDDEN,), "output.weight": (VOCAB, HIDDEN)}
    for i in range(layers):
        p = f"blk.{i}."
        shapes.update({p + "attn_norm.weight": (HIDDEN,), p + "attn_q.weight": (HIDDEN, HIDDEN),
                       p + "attn_k.weight": (KV_HEADS * hd, HIDDEN), p + "attn_v.weight": (KV_HEADS * hd, HIDDEN),
                       p + "attn_output.weight": (HIDDEN, HIDDEN), p + "ffn_norm.weight": (HIDDEN,)})
        if experts:
            shapes.update({p + "ffn_gate_inp.weight": (experts, HIDDEN),
                           p + "ffn_gate_exps.weight": (experts, FFN // experts, HIDDEN),
                           p + "ffn_up_exps.weight": (experts, FFN // experts, HIDDEN),
                           p + "ffn_down_exps.weight": (experts, HIDDEN, FFN // experts)})
        else:
            shapes.update({p + "ffn_gate.weight": (FFN, HIDDEN), p + "ffn_up.weight": (FFN, HIDDEN),
                           p + "ffn_down.weight": (HIDDEN, FFN)})
    # norms and the expert router stay F32, as the converter writes them
    dtypes = {name: np.dtype(np.float16 if len(shape) > 1 and "gate_inp" not in name else np.float32)
              for name, shape in shapes.items()}
    for name, shape in shapes.items():
        w.add_tensor_info(name, shape, dtypes[name], int(np.prod(shape)) * dtypes[name].itemsize)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, shape in shapes.items():
        w.write_tensor_data((rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(dtypes[name]))
    w.close()
    return path, max(int(np.prod(s)) for s in shapes.values())


def bench_speed(workdir: Path, types: list[str], threads: int, repeats: int) -> None:
    from quantize.ftypes import FILE_TYPES
    from quantize.job import QuantizeOptions, QuantizeTarget, quantize_model
    from tests.conftest import cached_models_dir, fetch_smollm2
    from tests.quantize.llama_quant_oracle import llama_quantize
    from tests.quantize.model_files import describe_differences, write_dequantized_f16
    from tests.benchmarks.timing import best_time, best_times, fresh_disk

    from quantize.blocks import compile_kernels

    src = workdir / "SmolLM2-F16.gguf"
    if not src.exists():
        write_dequantized_f16(fetch_smollm2(cached_models_dir()), src)
    # Outside the timings: the first use after an install compiles the kernels (see bench_blocks).
    print(f"kernels ready in {compile_kernels():.1f} s (compiled, or loaded from the app's cache)")
    print(f"\n== Speed: SmolLM2-135M F16 ({src.stat().st_size / 1e6:.0f} MB), {threads} threads, "
          f"ratio = our seconds / llama.cpp seconds (lower is better)")
    print(f"{'type':8s} {'ours s':>8s} {'llama s':>8s} {'ratio':>6s}  identical")
    ours_total = 0.0
    for name in types:
        ft = FILE_TYPES[name]
        ours, ref = workdir / f"ours-{name}.gguf", workdir / f"llama-{name}.gguf"
        llama_s, ours_s = best_times(
            [lambda ft=ft, ref=ref: llama_quantize(src, ref, ft.ftype, nthread=threads),
             lambda ft=ft, ours=ours: quantize_model(src, [QuantizeTarget(ft, ours)], QuantizeOptions(threads=threads))],
            repeats, setups=[fresh_disk(ref), fresh_disk(ours)])
        ours_total += ours_s
        same = describe_differences(ours, ref) is None
        print(f"{name:8s} {ours_s:8.2f} {llama_s:8.2f} {ours_s / llama_s:6.2f}  {'yes' if same else 'NO'}",
              flush=True)
        ref.unlink()
        ours.unlink()
    targets = [QuantizeTarget(FILE_TYPES[n], workdir / f"multi-{n}.gguf") for n in types]
    # Best of the same number of runs as each separate job's time, so the two are alike.
    multi = best_time(lambda: quantize_model(src, targets, QuantizeOptions(threads=threads)), repeats,
                      setup=fresh_disk(*(t.path for t in targets)))
    for t in targets:
        t.path.unlink()
    print(f"all {len(types)} types in one job: {multi:.1f} s vs {ours_total:.1f} s as separate jobs "
          f"(ratio {multi / ours_total:.2f})")


def bench_memory(workdir: Path, layer_counts: list[int], threads: int) -> None:
    print("\n== Memory: Q4_K_M of synthetic llama F16 GGUFs, peak private memory (RssAnon) above the "
          "imported baseline, in MB and in units of the largest tensor as float32")
    print(f"{'layers':>6s} {'input MB':>9s} {'largest f32 MB':>14s} {'peak anon MB':>12s} {'ratio':>6s} "
          f"{'peak RSS MB':>11s} {'seconds':>8s}")
    for layers in layer_counts:
        path, largest = write_synthetic_f16(workdir / f"synthetic-{layers}.gguf", layers)
        out = workdir / f"synthetic-{layers}-Q4_K_M.gguf"
        result = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(REPO), str(path), str(out), str(threads)],
                                capture_output=True, text=True, check=True)
        r = json.loads(result.stdout.strip().splitlines()[-1])
        anon = (r["peak"]["RssAnon"] - r["base"]["RssAnon"]) / 1e6
        largest_mb = largest * 4 / 1e6
        print(f"{layers:6d} {path.stat().st_size / 1e6:9.0f} {largest_mb:14.0f} {anon:12.0f} "
              f"{anon / largest_mb:6.2f} {(r['peak']['VmRSS'] - r['base']['VmRSS']) / 1e6:11.0f} {r['seconds']:8.1f}",
              flush=True)
        path.unlink()
        out.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", default=",".join(ALL_TYPES))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3,
                        help="best of N timings per type and side, the sides taking turns")
    parser.add_argument("--layers", default="2,8")
    parser.add_argument("--skip-speed", action="store_true")
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="quantdesk-bench-quantize-"))
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        if not args.skip_speed:
            bench_speed(workdir, [t.strip().upper() for t in args.types.split(",")], args.threads, args.repeats)
        if not args.skip_memory:
            bench_memory(workdir, [int(n) for n in args.layers.split(",")], args.threads)
    finally:
        if args.workdir is None:  # our own temporary folder: its 271 MB F16 model goes too
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
