"""Oracle run: a million blocks or more per new type, ours against libggml's ``ggml_quantize_chunk``.

Run: ``.venv/bin/python tests/benchmarks/oracle_iquants.py [--blocks 1000000] [--types IQ4_XS,IQ1_M]``

For every type of the i-quant family (IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS,
IQ2_S, IQ1_S, IQ1_M, TQ1_0, TQ2_0, MXFP4), without and with an importance matrix (only
with one for IQ2_XXS, IQ2_XS and IQ1_S, which libggml refuses to quantize without),
``--blocks`` blocks of data are quantized by both encoders, in chunks that cycle through
the kinds of data the issue names: normal, heavy-tailed (Student-t, Cauchy rows), blocks
partly or wholly zero, constant rows, float32 denormals, values rounded to bfloat16, and
integers (rounding ties). Printed per type and mode: blocks compared, differing blocks and
bytes, and each side's CPU seconds on one thread (ours / ggml). The test suite checks a
few thousand blocks per type; this is the long run.

Data whose squares overflow float32 are left out for the grid types: there libggml's
neighbour search finds no point and aborts the process (``GGML_ASSERT(grid_index >= 0)``).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from quantize.blocks import IMATRIX_ONLY  # noqa: E402
from quantize.encode import encode_rows, f32_to_bf16_bits, bf16_bits_to_f32  # noqa: E402
from quantize.ggml_types import GGML_QUANT_SIZES, GGMLQuantizationType as QT  # noqa: E402
from quantize.reference_ggml import ggml_quantize  # noqa: E402

TYPES = ["IQ4_NL", "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4", "IQ3_XXS", "IQ3_S", "IQ2_XXS", "IQ2_XS", "IQ2_S",
         "IQ1_S", "IQ1_M"]
KINDS = ["normal", "heavy", "zeros", "constant", "denormal", "bf16", "integers"]
WIDTH = 4096


def chunk(kind: str, rows: int, rng: np.random.Generator) -> np.ndarray:
    """``rows`` rows of ``WIDTH`` float32 values of one kind."""
    if kind == "normal":
        x = rng.standard_normal((rows, WIDTH)) * np.exp(rng.standard_normal((rows, 1)))
    elif kind == "heavy":
        x = rng.standard_t(2, (rows, WIDTH))
        x[::3] = rng.standard_cauchy((len(x[::3]), WIDTH))
    elif kind == "zeros":
        x = rng.standard_normal((rows, WIDTH)) * 0.02
        x[:, rng.random(WIDTH) < 0.3] = 0.0
        x[::4, : WIDTH // 2] = 0.0
        x[1::4] = 0.0
    elif kind == "constant":
        x = np.repeat(rng.choice([0.7, -3.0, 1e-3, 5.0, -0.25], size=(rows, 1)), WIDTH, axis=1)
    elif kind == "denormal":
        x = rng.standard_normal((rows, WIDTH)) * 1e-40
        x[::2] *= 1e-3
    elif kind == "bf16":
        x = bf16_bits_to_f32(f32_to_bf16_bits(rng.standard_normal((rows, WIDTH)).astype(np.float32) * 0.05))
    elif kind == "integers":
        x = rng.integers(-8, 8, (rows, WIDTH)).astype(np.float64)
    else:
        raise ValueError(kind)
    return np.ascontiguousarray(x, dtype=np.float32)


def imatrix(rng: np.random.Generator) -> np.ndarray:
    im = rng.gamma(0.5, 2.0, WIDTH)
    im[rng.random(WIDTH) < 0.05] = 0.0
    return im.astype(np.float32)


def run(name: str, with_imatrix: bool, n_blocks: int, seed: int) -> None:
    qtype = QT[name]
    block, block_bytes = GGML_QUANT_SIZES[qtype]
    rows_per_chunk = max(1, 256 * 1024 // WIDTH)
    per_chunk = rows_per_chunk * WIDTH // block
    rng = np.random.default_rng([seed, int(qtype), int(with_imatrix)])
    encode_rows(chunk("normal", 1, rng), qtype, imatrix(rng))  # compile, build the grids
    ggml_quantize(chunk("normal", 1, rng), qtype, imatrix(rng))
    compared = differing_blocks = differing_bytes = 0
    ours_s = ggml_s = 0.0
    i = 0
    while compared < n_blocks:
        kind = KINDS[i % len(KINDS)]
        i += 1
        values = chunk(kind, rows_per_chunk, rng)
        weights = imatrix(rng) if with_imatrix else None
        with np.errstate(all="ignore"):
            start = time.process_time()
            expected = ggml_quantize(values, qtype, weights)
            ggml_s += time.process_time() - start
            start = time.process_time()
            ours = encode_rows(values, qtype, weights)
            ours_s += time.process_time() - start
        a, b = ours.reshape(-1, block_bytes), expected.reshape(-1, block_bytes)
        differing_blocks += int((a != b).any(axis=1).sum())
        differing_bytes += int((a != b).sum())
        compared += per_chunk
    print(f"| {name} | {'imatrix' if with_imatrix else 'none'} | {compared:,} | {differing_blocks} | "
          f"{differing_bytes} | {ours_s:.1f} / {ggml_s:.1f} = {ours_s / ggml_s:.2f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=1_000_000, help="blocks per type and mode")
    parser.add_argument("--types", default=",".join(TYPES))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print("| type | imatrix | blocks | differing blocks | differing bytes | CPU s, ours / ggml |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in args.types.split(","):
        for with_imatrix in (False, True):
            if not with_imatrix and QT[name] in IMATRIX_ONLY:
                continue
            run(name, with_imatrix, args.blocks, args.seed)


if __name__ == "__main__":
    main()
