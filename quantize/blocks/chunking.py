"""Running a compiled block kernel over a whole ``(rows, n_per_row)`` array.

Every type has two kernels (:mod:`.legacy`, :mod:`.kquants`): ``ref(blocks, out)`` for
ggml's ``quantize_row_*_ref`` and ``impl(blocks, imatrix_row, blocks_per_row, out)`` for
``quantize_row_*_impl`` with importance weights. Both take the values as ``(blocks,
block)`` float32 and fill ``(blocks, block_bytes)`` uint8; the kernels batch the blocks
themselves. Kernels release the GIL and share nothing, so encoders may run on several
threads at once (the quantize job splits a tensor by rows).
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

RefKernel = Callable[[np.ndarray, np.ndarray], None]
ImplKernel = Callable[[np.ndarray, np.ndarray, int, np.ndarray], None]


def encode_blocks(values: np.ndarray, imatrix: Optional[np.ndarray], block: int, block_bytes: int,
                  ref: RefKernel, impl: Optional[ImplKernel]) -> np.ndarray:
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
        ref(flat, out)
    else:
        imatrix = np.ascontiguousarray(imatrix, dtype=np.float32).reshape(-1)
        if imatrix.shape[0] != n_per_row:
            raise ValueError(f"imatrix has {imatrix.shape[0]} values, rows have {n_per_row}")
        impl(flat, imatrix, blocks_per_row, out)
    return out.reshape(rows, blocks_per_row * block_bytes)
