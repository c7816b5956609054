"""Benchmark: a Hugging Face folder to Q4_K_M in one pass, against converting to a GGUF first.

Run: ``.venv/bin/python tests/benchmarks/bench_hf_to_q4km.py [--layers 10] [--threads 2]``

Writes a synthetic TinyLlama-shaped BF16 checkpoint (``bench_convert``'s writer; 10
layers ≈ 1 GB of weights), then times, each from a cold start of its output file:

1. ours, one pass: ``quantize_model(folder, Q4_K_M)`` (weights read once, rounded
   through the 16-bit intermediate in memory, quantized, written);
2. ours, two steps: ``convert(folder, BF16)`` then ``quantize_model(bf16, Q4_K_M)``
   (BF16: the 16-bit intermediate the one pass rounds through for a BF16 checkpoint);
3. "llama.cpp's way": the same convert (its bytes are convert_hf_to_gguf.py's), then
   libllama's ``llama_model_quantize`` with the same thread count.

All three Q4_K_M files must be byte-identical. Prints seconds and MB/s of checkpoint.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()

    from quantize.blocks import compile_kernels
    from quantize.convert import convert
    from quantize.ftypes import FILE_TYPES
    from quantize.job import QuantizeOptions, QuantizeTarget, quantize_model
    from tests.benchmarks.bench_convert import write_checkpoint
    from tests.benchmarks.timing import fresh_disk
    from tests.quantize.llama_quant_oracle import llama_quantize
    from tests.quantize.model_files import describe_differences

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="quantdesk-bench-hf-q4km-"))
    folder = workdir / "checkpoint"
    weights, _ = write_checkpoint(folder, args.layers)
    print(f"synthetic BF16 checkpoint: {args.layers} layers, {weights / 1e9:.2f} GB of weights; "
          f"{args.threads} threads")
    print(f"kernels ready in {compile_kernels():.1f} s (compiled, or loaded from the cache)")
    q4km = FILE_TYPES["Q4_K_M"]
    options = QuantizeOptions(threads=args.threads)
    f16 = workdir / "model-BF16.gguf"  # the one pass's intermediate for a BF16 checkpoint
    one, two, llama = (workdir / f"{n}-Q4_K_M.gguf" for n in ("one-pass", "two-step", "llama"))

    def timed(setup, run) -> float:
        setup()
        start = time.perf_counter()
        run()
        return time.perf_counter() - start

    t_one = timed(fresh_disk(one), lambda: quantize_model(folder, [QuantizeTarget(q4km, one)], options))
    t_convert = timed(fresh_disk(f16), lambda: convert(folder, f16, "bf16"))
    t_two = timed(fresh_disk(two), lambda: quantize_model(f16, [QuantizeTarget(q4km, two)], options))
    t_llama = timed(fresh_disk(llama), lambda: llama_quantize(f16, llama, q4km.ftype, nthread=args.threads))
    rows = [("ours, one pass (folder -> Q4_K_M)", t_one),
            ("ours, convert BF16 + quantize", t_convert + t_two),
            ("convert BF16 + llama_model_quantize", t_convert + t_llama)]
    print(f"{'pipeline':38s} {'seconds':>8s} {'MB/s':>7s} {'vs one pass':>11s}")
    for name, seconds in rows:
        print(f"{name:38s} {seconds:8.1f} {weights / 1e6 / seconds:7.0f} {seconds / t_one:10.2f}x")
    print(f"(BF16 convert alone: {t_convert:.1f} s; quantize from BF16: ours {t_two:.1f} s, "
          f"llama.cpp {t_llama:.1f} s)")
    same = [describe_differences(one, other) for other in (two, llama)]
    print("Q4_K_M files identical:", "yes" if same == [None, None] else f"NO: {same}")


if __name__ == "__main__":
    main()
