"""Our numpy block quantizers write exactly libggml's bytes.

The oracle is ``ggml_quantize_chunk`` from llama-cpp-python's own ``libggml-base``
(:mod:`quantize.reference_ggml`). Every type is checked without and with an imatrix on
data chosen to hit the exactness traps: ties in max-abs selection, all-zero and constant
blocks, signed zeros, subnormal-range and overflowing magnitudes (``x*x`` becomes inf),
heavy tails, and rows of several widths (the imatrix repeats per row, and the legacy
types weight by the whole row's variance). A failure reports how many blocks differ.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as QT

from models.foundation.errors import QuantDeskError
from quantize.blocks import IMATRIX_ONLY
from quantize.encode import bf16_bits_to_f32, encode_rows, f32_to_bf16_bits
from quantize.reference_ggml import ggml_quantize

LEGACY = [QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1]
KQUANTS = [QT.Q2_K, QT.Q3_K, QT.Q4_K, QT.Q5_K, QT.Q6_K]
#: Types llama-quantize writes through their quantize_* function with or without an imatrix.
NEWER = [QT.IQ4_NL, QT.IQ4_XS, QT.TQ1_0, QT.TQ2_0, QT.MXFP4,
         QT.IQ3_XXS, QT.IQ3_S, QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S, QT.IQ1_S, QT.IQ1_M]
#: The grid types: libggml aborts on values whose squares overflow float32 ("huge").
GRID = {QT.IQ3_XXS, QT.IQ3_S, QT.IQ2_XXS, QT.IQ2_XS, QT.IQ2_S, QT.IQ1_S, QT.IQ1_M}
BLOCK32 = LEGACY + [QT.IQ4_NL, QT.MXFP4]
SEEDS = (0, 1, 2)


def _case(kind: str, rows: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """One test matrix of ``kind`` (see the module docstring)."""
    normal = rng.standard_normal((rows, width))
    if kind == "normal":
        x = normal * 0.02
    elif kind == "heavy":  # Student-t with 2 degrees of freedom, and a few Cauchy rows
        x = rng.standard_t(2, (rows, width))
        x[::3] = rng.standard_cauchy((len(x[::3]), width))
    elif kind == "zeros":
        x = normal.copy()
        x[:, : width // 4] = 0.0
        x[0] = 0.0
        x[-1, 1::2] = -0.0  # signed zeros next to values
        x[-1, ::7] = 0.0
    elif kind == "constant":
        x = np.empty((rows, width))
        x[:] = rng.choice([0.7, -3.0, 1e-3, 5.0, -0.25], size=(rows, 1))
        x[-1, width // 2:] = 2.0
    elif kind == "tiny":
        x = normal * 10.0 ** rng.uniform(-30, -8, (rows, 1))
    elif kind == "huge":
        x = normal * 10.0 ** rng.uniform(4, 30, (rows, 1))
    elif kind == "mixed":  # log-normal magnitudes spanning many decades, exact ties
        x = normal * np.exp(rng.standard_normal((rows, width)) * 3)
        x[:, 5::32] = -x[:, 4::32]  # +a and -a in the same block: first max wins
        x[1::2, ::11] = np.round(x[1::2, ::11])
    elif kind == "denormal":  # float32 subnormals: their squares are 0
        x = normal * 1e-40
        x[::2] *= 1e-3
    elif kind == "bf16":  # weights that were bfloat16: short mantissas, many equal magnitudes
        x = bf16_bits_to_f32(f32_to_bf16_bits(normal.astype(np.float32) * 0.05))
    elif kind == "integers":  # values on the quantization grid: many rounding ties
        x = rng.integers(-8, 8, (rows, width)).astype(np.float64)
    elif kind == "halves":  # with 127 in each block Q8_0 scales by exactly 1: roundf's ties
        x = rng.integers(-127, 127, (rows, width)) + 0.5
        x[:, ::32] = 127.0
        x[:, 1::32] = np.float32(0.49999997)  # roundf -> 0, yet 0.49999997 + 0.5 rounds to 1
        x[:, 2::32] = -np.float32(0.49999997)
    else:
        raise ValueError(kind)
    return np.ascontiguousarray(x, dtype=np.float32)


def _imatrix(width: int, rng: np.random.Generator) -> np.ndarray:
    im = rng.gamma(0.5, 2.0, width)
    im[rng.random(width) < 0.05] = 0.0  # columns never activated
    return im.astype(np.float32)


def _assert_same_bytes(values: np.ndarray, qtype: QT, imatrix) -> None:
    with np.errstate(all="ignore"):
        expected = ggml_quantize(values, qtype, imatrix)
        ours = encode_rows(values, qtype, imatrix)
    assert ours.shape == expected.shape and ours.dtype == np.uint8
    block_bytes = GGML_QUANT_SIZES[qtype][1]
    differing = (ours.reshape(-1, block_bytes) != expected.reshape(-1, block_bytes)).any(axis=1)
    assert not differing.any(), (
        f"{qtype.name} imatrix={imatrix is not None}: {differing.sum()} of {differing.size} blocks differ "
        f"(first at block {np.flatnonzero(differing)[0]})")


KINDS = ["normal", "heavy", "zeros", "constant", "tiny", "huge", "mixed", "integers", "halves", "denormal", "bf16"]


@pytest.mark.parametrize("with_imatrix", [False, True], ids=["ref", "imatrix"])
@pytest.mark.parametrize("qtype", LEGACY + KQUANTS + NEWER, ids=lambda t: t.name)
def test_every_kind_of_data_matches_libggml(qtype: QT, with_imatrix: bool) -> None:
    if qtype in IMATRIX_ONLY and not with_imatrix:
        with pytest.raises(QuantDeskError, match="quantdesk imatrix"):
            encode_rows(_case("normal", 2, 512, np.random.default_rng(0)), qtype, None)
        return
    for seed in SEEDS:
        rng = np.random.default_rng([seed, int(qtype)])
        for kind in KINDS:
            if kind == "huge" and qtype in GRID:
                continue
            values = _case(kind, 6, 512, rng)
            _assert_same_bytes(values, qtype, _imatrix(512, rng) if with_imatrix else None)


@pytest.mark.parametrize("qtype", [QT.Q8_0, QT.MXFP4], ids=lambda t: t.name)
def test_straight_from_f16_matches_libggml(qtype) -> None:
    """The kernels that read F16 bits (the quantize job's path for F16 models) write
    libggml's bytes for the values widened to float32, as llama_model_quantize widens them:
    every kind of data as float16, with subnormals, the largest half, infinities, signed
    zeros and blocks whose largest magnitude ties."""
    from quantize.blocks import encode_f16_into

    block_bytes = GGML_QUANT_SIZES[qtype][1]
    for seed in SEEDS:
        rng = np.random.default_rng([seed, 8])
        for kind in KINDS:
            with np.errstate(over="ignore"):
                halves = _case(kind, 6, 512, rng).astype(np.float16)
            halves[0, :3] = [6e-8, -65504.0, 65504.0]
            halves[1, 32:64] = rng.standard_normal(32).astype(np.float16) * np.float16(1e-6)  # subnormals
            halves[2, 64:96] = -0.0
            with np.errstate(all="ignore"):
                expected = ggml_quantize(halves.astype(np.float32), qtype, None)
            ours = np.empty_like(expected)
            assert encode_f16_into(qtype, halves, ours)
            differing = (ours.reshape(-1, block_bytes) != expected.reshape(-1, block_bytes)).any(axis=1)
            assert not differing.any(), f"{kind}: {differing.sum()} blocks differ"
    assert not encode_f16_into(QT.Q4_K, halves, np.empty((6, 512 // 256 * 144), np.uint8))  # no such kernel


@pytest.mark.parametrize("with_imatrix", [False, True], ids=["ref", "imatrix"])
@pytest.mark.parametrize("qtype", LEGACY + KQUANTS + NEWER, ids=lambda t: t.name)
def test_row_widths_match_libggml(qtype: QT, with_imatrix: bool) -> None:
    if qtype in IMATRIX_ONLY and not with_imatrix:
        return  # refused, as test_every_kind_of_data_matches_libggml checks
    widths = [256, 4096, 11008] + ([32, 64, 96] if qtype in BLOCK32 else [])
    rng = np.random.default_rng([7, int(qtype)])
    for width in widths:
        rows = max(1, 8192 // width)
        values = _case("mixed", rows, width, rng)
        _assert_same_bytes(values, qtype, _imatrix(width, rng) if with_imatrix else None)
    # A single block: numpy would sum one column pairwise, not left to right.
    width = 32 if qtype in BLOCK32 else 256
    _assert_same_bytes(_case("normal", 1, width, rng), qtype, _imatrix(width, rng) if with_imatrix else None)


@pytest.mark.parametrize("qtype", sorted(GRID), ids=lambda t: t.name)
def test_grid_types_survive_values_whose_squares_overflow(qtype: QT) -> None:
    """Where libggml aborts the process (no neighbour is nearer than infinity), ours
    writes blocks: the nearest listed neighbour is taken."""
    rng = np.random.default_rng([5, int(qtype)])
    values = _case("huge", 4, 512, rng)
    with np.errstate(all="ignore"):
        out = encode_rows(values, qtype, _imatrix(512, rng))
    assert out.shape == (4, 2 * GGML_QUANT_SIZES[qtype][1])


def test_mxfp4_exponents_just_below_every_power_of_two_match_libggml() -> None:
    """MXFP4's exponent is floorf(log2f(max)): a largest magnitude one to five steps
    below 2^k (k = -149 .. 127, denormals included) is where log2f rounds up to k."""
    rng = np.random.default_rng(9)
    rows = []
    for k in range(-149, 128):
        top = np.float32(np.ldexp(1.0, k))
        for steps in range(6):
            largest = top
            for _ in range(steps):
                largest = np.nextafter(largest, np.float32(0))
            row = np.clip(rng.standard_normal(32) * float(largest) / 4, -largest, largest).astype(np.float32)
            row[rng.integers(32)] = largest if rng.random() < 0.5 else -largest
            rows.append(row)
    _assert_same_bytes(np.array(rows, np.float32), QT.MXFP4, None)


@pytest.mark.parametrize("qtype", [QT.Q4_K, QT.Q8_0], ids=lambda t: t.name)
def test_encoding_rows_on_threads_gives_the_same_bytes(qtype: QT) -> None:
    rng = np.random.default_rng(11)
    values = _case("normal", 64, 1024, rng)
    imatrix = _imatrix(1024, rng)
    expected = encode_rows(values, qtype, imatrix)
    results: dict[int, np.ndarray] = {}

    def work(part: int) -> None:
        results[part] = encode_rows(values[part * 16:(part + 1) * 16], qtype, imatrix)

    threads = [threading.Thread(target=work, args=(part,)) for part in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert np.array_equal(np.concatenate([results[p] for p in range(4)]), expected)


def test_encode_rows_finds_the_block_quantizers_without_an_explicit_import() -> None:
    # A fresh interpreter: only quantize.encode is imported, as the quantize job does.
    code = ("import numpy as np; from gguf import GGMLQuantizationType as T; "
            "from quantize.encode import ENCODERS, encode_rows; assert not ENCODERS; "
            "out = encode_rows(np.ones((2, 256), np.float32), T.Q4_K); "
            "from quantize.ftypes import WRITABLE_TYPES, is_quantized_type; "
            "assert out.shape == (2, 144), out.shape; "
            "assert set(ENCODERS) == {t for t in WRITABLE_TYPES if is_quantized_type(t)}, sorted(ENCODERS)")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


@pytest.mark.smollm2
def test_real_model_weights_match_libggml(smollm2_gguf: Path) -> None:
    """Real weight distributions: SmolLM2's Q4_1 tensors, dequantized, re-quantized to every type."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(smollm2_gguf)
    wanted = ("blk.0.attn_q.weight", "blk.5.ffn_down.weight", "blk.29.ffn_gate.weight")
    rng = np.random.default_rng(3)
    for tensor in reader.tensors:
        if tensor.name not in wanted:
            continue
        values = dequantize(tensor.data[:24], tensor.tensor_type).reshape(-1, int(tensor.shape[0]))
        values = np.ascontiguousarray(values, dtype=np.float32)
        imatrix = _imatrix(values.shape[1], rng)
        for qtype in LEGACY + KQUANTS + NEWER:
            if values.shape[1] % GGML_QUANT_SIZES[qtype][0]:
                continue  # 576-wide rows: llama.cpp picks a legacy type for these
            if qtype not in IMATRIX_ONLY:
                _assert_same_bytes(values, qtype, None)
            _assert_same_bytes(values, qtype, imatrix)
