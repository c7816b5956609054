"""Running a block kernel over a whole ``(rows, n_per_row)`` array in cache-sized chunks.

Every encoder in this package is a *kernel* that turns ``(blocks, block_size)`` float32
values into ``(blocks, block_bytes)`` uint8, vectorized across blocks. The driver here
cuts the input into chunks of whole blocks (so temporaries stay in the CPU cache), hands
each chunk the importance weights of its blocks (the imatrix repeats every row), and
writes the results into one output array. Nothing is shared between calls, so encoders
may run on several threads at once; numpy releases the GIL inside each operation.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np

from quantize.blocks.float_ops import F32, row_sums_sequential

#: ``kernel(x[blocks, block], qw[blocks, block] or None, row_sigma2[blocks] or None)``
Kernel = Callable[[np.ndarray, Optional[np.ndarray], Optional[np.ndarray]], np.ndarray]


def encode_blocks(values: np.ndarray, imatrix: Optional[np.ndarray], block: int,
                  block_bytes: int, kernel: Kernel, chunk_blocks: int,
                  needs_row_sigma2: bool = False) -> np.ndarray:
    """Apply ``kernel`` to all blocks of ``values``; return ``(rows, row_bytes)`` uint8.

    Args:
        values: ``(rows, n_per_row)`` float32, ``n_per_row`` a multiple of ``block``.
        imatrix: ``None`` or float32 importance weights of length ``n_per_row``.
        block: Values per block.
        block_bytes: Bytes per encoded block.
        kernel: The vectorized block encoder.
        chunk_blocks: Blocks per kernel call.
        needs_row_sigma2: Pass each block its row's ``sum(x*x)/n_per_row`` (the legacy
            types' imatrix paths weight by the variance of the whole row).
    """
    values = np.ascontiguousarray(values, dtype=F32)
    rows, n_per_row = values.shape
    blocks_per_row = n_per_row // block
    total = rows * blocks_per_row
    flat = values.reshape(total, block)
    out = np.empty((total, block_bytes), dtype=np.uint8)
    weights = None
    if imatrix is not None:
        imatrix = np.asarray(imatrix, dtype=F32).reshape(-1)
        if imatrix.shape[0] != n_per_row:
            raise ValueError(f"imatrix has {imatrix.shape[0]} values, rows have {n_per_row}")
        weights = imatrix.reshape(blocks_per_row, block)
    sigma2 = None
    if needs_row_sigma2 and imatrix is not None:
        rows_at_once = max(1, (1 << 16) // n_per_row)  # keeps the squares' temporaries small
        sums = np.concatenate([row_sums_sequential(part * part)
                               for part in np.array_split(values, range(rows_at_once, rows, rows_at_once))])
        sigma2 = np.repeat(sums / F32(n_per_row), blocks_per_row)
    for start in range(0, total, chunk_blocks):
        stop = min(total, start + chunk_blocks)
        qw = None
        if weights is not None:
            qw = weights[np.arange(start, stop) % blocks_per_row]
        out[start:stop] = kernel(flat[start:stop], qw, None if sigma2 is None else sigma2[start:stop])
    return out.reshape(rows, blocks_per_row * block_bytes)
