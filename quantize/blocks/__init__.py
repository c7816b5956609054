"""Compiled (numba) block quantizers that write exactly llama.cpp's bytes.

Importing this package registers an encoder in :data:`quantize.encode.ENCODERS` for
Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (:mod:`.legacy`) and Q2_K, Q3_K, Q4_K, Q5_K, Q6_K
(:mod:`.kquants`), each with and without importance weights (imatrix). Nothing is
compiled on import: a kernel compiles on its type's first use (or loads from the disk
cache, see :mod:`.jit`); :func:`compile_kernels` does it up front and says how long it took.

Bit-exactness rests on performing ggml-quants.c's float32 operations in C's order
(:mod:`.jit`) in its scale searches (:mod:`.searches`); the oracle is libggml's own
``ggml_quantize_chunk`` (:mod:`quantize.reference_ggml`), checked by
``tests/quantize/test_blocks_bitexact.py``. Blocks holding NaN are not promised: a NaN
weight means a broken model, and llama.cpp itself refuses such a tensor.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Iterable, Optional

import numpy as np
from quantize.ggml_types import GGML_QUANT_SIZES, GGMLQuantizationType as QT

from quantize.blocks import kquants, legacy
from quantize.blocks.chunking import encode_blocks
from quantize.encode import register_encoder

#: type -> (ref kernel, impl kernel or None when the type ignores an imatrix)
KERNELS = {
    QT.Q8_0: (legacy.q8_0_ref, None),
    QT.Q4_0: (legacy.q4_0_ref, legacy.q4_0_impl),
    QT.Q4_1: (legacy.q4_1_ref, legacy.q4_1_impl),
    QT.Q5_0: (legacy.q5_0_ref, legacy.q5_0_impl),
    QT.Q5_1: (legacy.q5_1_ref, legacy.q5_1_impl),
    QT.Q2_K: (kquants.q2_k, kquants.q2_k),
    QT.Q3_K: (kquants.q3_k, kquants.q3_k),
    QT.Q4_K: (kquants.q4_k, kquants.q4_k),
    QT.Q5_K: (kquants.q5_k, kquants.q5_k),
    QT.Q6_K: (kquants.q6_k, kquants.q6_k),
}


def _encode(qtype: QT, values: np.ndarray, imatrix: Optional[np.ndarray]) -> np.ndarray:
    block, block_bytes = GGML_QUANT_SIZES[qtype]
    ref, impl = KERNELS[qtype]
    return encode_blocks(values, imatrix, block, block_bytes, ref, impl)


for _qtype in KERNELS:
    _encoder = partial(_encode, _qtype)
    _encoder.__doc__ = f"{_qtype.name}: ggml's quantize_row_{_qtype.name.lower()}_ref, or _impl with an imatrix."
    register_encoder(_qtype)(_encoder)


def compile_kernels(qtypes: Iterable[QT] = tuple(KERNELS), imatrix: bool = True) -> float:
    """Compile (or load from the disk cache) the kernels of ``qtypes``; return the seconds taken.

    The first use after an install compiles; later processes load the cached machine code.
    """
    start = time.perf_counter()
    for qtype in qtypes:
        block = GGML_QUANT_SIZES[qtype][0]
        values = np.ones((1, block), np.float32)
        _encode(qtype, values, None)
        if imatrix and KERNELS[qtype][1] is not None:
            _encode(qtype, values, np.ones(block, np.float32))
    return time.perf_counter() - start
