"""libggml's own block quantizer through ctypes: the byte oracle for our numpy encoders.

llama-cpp-python ships ``libggml-base``, which exports

    size_t ggml_quantize_chunk(enum ggml_type type, const float * src, void * dst,
                               int64_t start, int64_t nrows, int64_t n_per_row,
                               const float * imatrix);
    bool   ggml_quantize_requires_imatrix(enum ggml_type type);
    void   ggml_quantize_init(enum ggml_type type);

``ggml_quantize_chunk`` calls ``ggml_quantize_init`` itself (it builds the IQ grids once
under a critical section); we call it up front anyway so that a benchmark does not time
the one-off table construction. Tests compare our bytes with :func:`ggml_quantize`, and
``tests/benchmarks/bench_blocks.py`` times it as the reference.

Build fact (checked with ``objdump -d libggml-base.so``: no ``vfmadd*`` and no ``ymm``
register in the whole library): ggml's CMake adds ISA flags (``-march=native``, AVX2,
FMA ...) to ``ggml-cpu`` only, never to ``ggml-base`` where ``ggml-quants.c`` lives. On
x86-64 that file is therefore compiled for the SSE2 baseline, whatever ``GGML_NATIVE``
says: scalar float32, no fused multiply-add, so no contraction of ``a*b + c``. Every
operation is one correctly rounded IEEE step, which is what lets numpy reproduce it bit
for bit. Caveat: on arm64 the baseline has FMA and clang contracts ``a*b + c`` inside an
expression by default, so a macOS/arm64 llama.cpp may differ from x86 llama.cpp (and
from us) in rare last-bit ties; our encoders reproduce the x86 build.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from quantize.ggml_types import GGML_QUANT_SIZES, GGMLQuantizationType

from models.llama_lib import ggml_api


def ggml_requires_imatrix(qtype: GGMLQuantizationType) -> bool:
    """Whether libggml refuses to quantize ``qtype`` without importance weights."""
    return bool(ggml_api().ggml_quantize_requires_imatrix(int(qtype)))


def ggml_quantize(values: np.ndarray, qtype: GGMLQuantizationType,
                  imatrix: Optional[np.ndarray] = None) -> np.ndarray:
    """Quantize ``values`` (``(rows, n_per_row)`` float32) with libggml itself.

    Args:
        values: The rows to quantize; ``n_per_row`` must be a multiple of the block size.
        qtype: The GGML type to produce.
        imatrix: Optional importance weights, float32 of length ``n_per_row``.

    Returns:
        ``(rows, row_bytes)`` uint8: the bytes llama.cpp writes for these rows.

    Raises:
        ValueError: the row width is not a multiple of the block, the imatrix has the
            wrong length, or ``qtype`` needs an imatrix and none was given (libggml would
            abort the process instead).
    """
    values = np.ascontiguousarray(values, dtype=np.float32)
    if values.ndim == 1:
        values = values.reshape(1, -1)
    rows, n_per_row = values.shape
    block, size = GGML_QUANT_SIZES[qtype]
    if n_per_row % block:
        raise ValueError(f"{n_per_row} values per row is not a multiple of {qtype.name}'s block of {block}")
    lib = ggml_api()
    imatrix_ptr = None
    if imatrix is not None:
        imatrix = np.ascontiguousarray(imatrix, dtype=np.float32)
        if imatrix.shape != (n_per_row,):
            raise ValueError(f"imatrix has shape {imatrix.shape}, expected ({n_per_row},)")
        imatrix_ptr = imatrix.ctypes.data
    elif ggml_requires_imatrix(qtype):
        raise ValueError(f"libggml needs an imatrix to quantize {qtype.name}")
    lib.ggml_quantize_init(int(qtype))
    out = np.empty((rows, n_per_row // block * size), dtype=np.uint8)
    written = lib.ggml_quantize_chunk(int(qtype), values.ctypes.data, out.ctypes.data,
                                      0, rows, n_per_row, imatrix_ptr)
    if written != out.nbytes:
        raise RuntimeError(f"ggml_quantize_chunk wrote {written} bytes, expected {out.nbytes}")
    return out
