"""Throughput of our compiled block quantizers against libggml's, single thread.

Run: ``.venv/bin/python tests/benchmarks/bench_blocks.py [--mb 16] [--types Q4_K,Q8_0] [--warm]``

For each type, without and with an imatrix, both encoders quantize the same float32
matrix (rows of 4096 values, normal with log-normal magnitude spread, like weights) on
one thread; the figure is MB/s of float32 input and the ratio ours / ggml. Targets:
k-quants >= 2x ggml, Q4_0..Q8_0 >= 1.5x. Every run also checks the bytes are identical.

First, the kernels' first-use compile time is printed per type (a cold run uses an empty
numba cache, as a fresh install does; ``--warm`` uses the app's cache instead).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gguf import GGMLQuantizationType as QT  # noqa: E402

from quantize.encode import encode_rows  # noqa: E402
from quantize.reference_ggml import ggml_quantize  # noqa: E402
from tests.benchmarks.timing import best_times  # noqa: E402

# Both encoders run on this one thread, so CPU time is their run time without the waits
# a busy machine adds.
CPU_TIME = time.process_time

TYPES = ["Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"]
TARGET = {"Q8_0": 1.5, "Q4_0": 1.5, "Q4_1": 1.5, "Q5_0": 1.5, "Q5_1": 1.5}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=8.0, help="MB of float32 input per run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--types", default=",".join(TYPES))
    parser.add_argument("--warm", action="store_true", help="use the app's kernel cache (no compile)")
    args = parser.parse_args()
    if not args.warm:  # before quantize.blocks is imported: an empty cache, as after an install
        os.environ["NUMBA_CACHE_DIR"] = tempfile.mkdtemp(prefix="quantdesk-numba-")
    from quantize.blocks import IMATRIX_ONLY, compile_kernels

    names = args.types.split(",")
    print("first use (compile or load) per type, ref + imatrix kernels:", flush=True)
    total = 0.0
    for name in names:
        seconds = compile_kernels([QT[name]])
        total += seconds
        print(f"  {name:6} {seconds:6.1f} s", flush=True)
    print(f"  all    {total:6.1f} s")
    width = 4096
    rows = max(1, int(args.mb * 1e6 / 4 / width))
    rng = np.random.default_rng(0)
    values = (rng.standard_normal((rows, width)) * np.exp(rng.standard_normal((rows, 1)))).astype(np.float32)
    imatrix = rng.gamma(0.5, 2.0, width).astype(np.float32)
    megabytes = values.nbytes / 1e6
    print(f"{rows} x {width} float32 = {megabytes:.1f} MB, best of {args.repeats} (the two taking turns), one thread")
    print(f"{'type':6} {'imatrix':8} {'ours MB/s':>10} {'ggml MB/s':>10} {'ratio':>7} {'target':>7}  bytes")
    for name in names:
        qtype = QT[name]
        for weights in (None, imatrix):
            if weights is None and qtype in IMATRIX_ONLY:
                continue  # libggml refuses these without an importance matrix
            ours_bytes = encode_rows(values, qtype, weights)
            same = np.array_equal(ours_bytes, ggml_quantize(values, qtype, weights))
            ours, ggml = best_times([lambda: encode_rows(values, qtype, weights),
                                     lambda: ggml_quantize(values, qtype, weights)], args.repeats, CPU_TIME)
            print(f"{name:6} {'yes' if weights is not None else 'no':8} {megabytes / ours:10.1f} "
                  f"{megabytes / ggml:10.1f} {ggml / ours:6.2f}x {TARGET.get(name, 2.0):6.1f}x  "
                  f"{'identical' if same else 'DIFFERENT'}", flush=True)


if __name__ == "__main__":
    main()
