"""Compiled (numba) block quantizers that write exactly llama.cpp's bytes.

Importing this package registers an encoder in :data:`quantize.encode.ENCODERS` for
Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (:mod:`.legacy`), Q2_K, Q3_K, Q4_K, Q5_K, Q6_K
(:mod:`.kquants`), IQ4_NL, IQ4_XS (:mod:`.iq4`), TQ1_0, TQ2_0 (:mod:`.ternary`), MXFP4
(:mod:`.mxfp4`) and the grid i-quants IQ3_XXS, IQ3_S (:mod:`.iq3`), IQ2_XXS, IQ2_XS, IQ2_S
(:mod:`.iq2`), IQ1_S, IQ1_M (:mod:`.iq1`), each with and without importance weights
(imatrix; IQ2_XXS, IQ2_XS and IQ1_S only with), and Q8_0 and MXFP4 straight from F16
(:func:`encode_f16_into`). Nothing is
compiled on import: a kernel compiles on its type's first use (or loads from the disk
cache, see :mod:`.jit`); :func:`compile_kernels` does it up front and says how long it took.

Bit-exactness rests on performing ggml-quants.c's float32 operations in C's order
(:mod:`.jit`) in its scale searches (:mod:`.searches`, :mod:`.grid_search`); the oracle is libggml's own
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

from quantize.blocks import iq1, iq2, iq3, iq4, kquants, legacy, mxfp4, ternary
from quantize.blocks.iq_grids import grid
from quantize.blocks.chunking import encode_blocks
from quantize.encode import register_encoder

from models.foundation.errors import QuantDeskError

class _OnGrid:
    """A grid kernel called as the others are, ``(x, qw, blocks_per_row, out)``: its grid's
    tables (built on first use) are passed as its last arguments."""

    def __init__(self, kernel, grid_name: str) -> None:
        self.kernel, self.grid_name = kernel, grid_name

    def __call__(self, x, qw, blocks_per_row, out) -> None:
        tables = grid(self.grid_name)
        self.kernel(x, qw, blocks_per_row, out, tables.points, tables.map, tables.neighbours)

    @property
    def signatures(self):
        """The compiled kernel's signatures (empty until it is compiled or loaded)."""
        return self.kernel.signatures


_IQ2_XXS = _OnGrid(iq2.iq2_xxs, "IQ2_XXS")
_IQ2_XS = _OnGrid(iq2.iq2_xs, "IQ2_XS")
_IQ2_S = _OnGrid(iq2.iq2_s, "IQ2_S")
_IQ1_S = _OnGrid(iq1.iq1_s, "IQ1_S")
_IQ1_M = _OnGrid(iq1.iq1_m, "IQ1_S")  # IQ1_M shares IQ1_S's grid
_IQ3_XXS = _OnGrid(iq3.iq3_xxs, "IQ3_XXS")
_IQ3_S = _OnGrid(iq3.iq3_s, "IQ3_S")

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
    # llama-quantize writes both through quantize_iq4_*: the scale search with or without weights
    QT.IQ4_NL: (iq4.iq4_nl, iq4.iq4_nl),
    QT.IQ4_XS: (iq4.iq4_xs, iq4.iq4_xs),
    QT.TQ1_0: (ternary.tq1_0, None),
    QT.TQ2_0: (ternary.tq2_0, None),
    QT.MXFP4: (mxfp4.mxfp4, None),
    QT.IQ3_XXS: (_IQ3_XXS, _IQ3_XXS),
    QT.IQ3_S: (_IQ3_S, _IQ3_S),
    QT.IQ2_XXS: (_IQ2_XXS, _IQ2_XXS),
    QT.IQ2_XS: (_IQ2_XS, _IQ2_XS),
    QT.IQ2_S: (_IQ2_S, _IQ2_S),
    QT.IQ1_S: (_IQ1_S, _IQ1_S),
    QT.IQ1_M: (_IQ1_M, _IQ1_M),
}


#: type -> kernel that encodes F16 values straight from their bits, ``kernel(bits, out)`` with
#: ``bits`` ``(blocks, block)`` uint16 and ``out`` ``(blocks, block_bytes)`` uint8: for a type
#: that ignores an imatrix, the whole of an F16 model's tensor in one pass (no float32 copy).
F16_KERNELS = {QT.Q8_0: legacy.q8_0_from_f16, QT.MXFP4: mxfp4.mxfp4_from_f16}


def encode_f16_into(qtype: QT, values: np.ndarray, out: np.ndarray) -> bool:
    """Encode float16 ``values`` (``(rows, n_per_row)``, C-contiguous) into ``out`` (its
    ``(rows, row_bytes)`` uint8 rows, C-contiguous) with ``qtype``'s F16 kernel; False,
    with nothing written, when the type has none (widen to float32 and encode instead)."""
    kernel = F16_KERNELS.get(qtype)
    if kernel is None or values.dtype != np.float16:
        return False
    block, block_bytes = GGML_QUANT_SIZES[qtype]
    kernel(values.view(np.uint16).reshape(-1, block), out.reshape(-1, block_bytes))
    return True


#: Types libggml refuses to quantize without importance weights (``ggml_quantize_requires_imatrix``).
IMATRIX_ONLY = frozenset({QT.IQ2_XXS, QT.IQ2_XS, QT.IQ1_S})


def _encode(qtype: QT, values: np.ndarray, imatrix: Optional[np.ndarray]) -> np.ndarray:
    if imatrix is None and qtype in IMATRIX_ONLY:
        raise QuantDeskError(f"{qtype.name} needs an importance matrix: without one its weights come out as noise.",
                             "Make one with `quantdesk imatrix MODEL` and give it with --imatrix.")
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
    The grid i-quants' lookup tables are built here too (once per process).
    """
    start = time.perf_counter()
    for qtype in qtypes:
        block = GGML_QUANT_SIZES[qtype][0]
        values = np.ones((1, block), np.float32)
        if qtype not in IMATRIX_ONLY:
            _encode(qtype, values, None)
        if (imatrix or qtype in IMATRIX_ONLY) and KERNELS[qtype][1] is not None:
            _encode(qtype, values, np.ones(block, np.float32))
        encode_f16_into(qtype, np.ones((1, block), np.float16),
                        np.empty((1, GGML_QUANT_SIZES[qtype][1]), np.uint8))
    return time.perf_counter() - start
