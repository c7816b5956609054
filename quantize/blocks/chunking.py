"""Running a compiled block kernel over a whole ``(rows, n_per_row)`` array.

Kernels (:mod:`.legacy`, :mod:`.kquants`) are called as ``kernel(blocks, imatrix_row,
blocks_per_row, out)``: the values as ``(blocks, block)`` float32, one row's importance
weights (empty without an imatrix), and the ``(blocks, block_bytes)`` uint8 to fill; they
batch the blocks themselves. A type has one kernel for ggml's ``quantize_row_*_ref`` and
one for ``quantize_row_*_impl`` (the k-quants: one kernel that branches on the imatrix).
Kernels release the GIL and share nothing, so encoders may run on several threads at
once (the quantize job splits a tensor by rows).
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

Kernel = Callable[[np.ndarray, np.ndarray, int, np.ndarray], None]
_NO_IMATRIX = np.empty(0, np.float32)


def encode_blocks(values: np.ndarray, imatrix: Optional[np.ndarray], block: int, block_bytes: int,
                  ref: Kernel, impl: Optional[Kernel]) -> np.ndarray:
    """Encode all blocks of ``values``; return ``(rows, row_bytes)`` uint8.

    Args:
        values: ``(rows, n_per_row)`` float32, ``n_per_row`` a multiple of ``block``.
        imatrix: ``None`` or float32 importance weights of length ``n_per_row`` (the
            same for every row, as in ``ggml_quantize_chunk``).
        block: Values per block.
        block_bytes: Bytes per encoded block.
        ref: The kernel without importance weights.
        impl: The kernel with them (``None``: the type ignores an imatrix, like Q8_0).
    """
    values = np.ascontiguousarray(values, dtype=np.float32)
    rows, n_per_row = values.shape
    blocks_per_row = n_per_row // block
    flat = values.reshape(rows * blocks_per_row, block)
    out = np.empty((rows * blocks_per_row, block_bytes), dtype=np.uint8)
    if imatrix is None or impl is None:
        ref(flat, _NO_IMATRIX, blocks_per_row, out)
    else:
        imatrix = np.ascontiguousarray(imatrix, dtype=np.float32).reshape(-1)
        if imatrix.shape[0] != n_per_row:
            raise ValueError(f"imatrix has {imatrix.shape[0]} values, rows have {n_per_row}")
        impl(flat, imatrix, blocks_per_row, out)
    return out.reshape(rows, blocks_per_row * block_bytes)
