"""A million random blocks per type, without and with an imatrix: not one byte differs from libggml.

``test_blocks_bitexact.py`` checks every trap on a few thousand blocks; this file checks
volume: for each type, one million blocks (half without and half with an importance
matrix), drawn in 8 MiB chunks from the same adversarial distributions (``_case``:
normal, heavy tails, zeros and signed zeros, constants, tiny, huge, mixed magnitudes
with exact ties, integers, halves) at several row widths, each imatrix chunk with a
fresh random imatrix. libggml is the slower side (3-5x ours on the k-quants), so two
chunks are quantized by ``ggml_quantize_chunk`` on worker threads while ours runs on
this one: the test costs about half their summed CPU time on two cores.
``QUANTDESK_RANDOM_BLOCKS`` raises the count (e.g. for a nightly run).
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as QT

from quantize.encode import encode_rows
from quantize.reference_ggml import ggml_quantize
from tests.quantize.test_blocks_bitexact import KINDS, KQUANTS, LEGACY, _case, _imatrix

BLOCKS = int(os.environ.get("QUANTDESK_RANDOM_BLOCKS", 1_000_000))  # per type, both modes together
CHUNK_VALUES = 1 << 21  # values per chunk: 8 MiB of float32
WIDTHS = {32: (256, 1024, 4096, 11008), 256: (256, 2048, 4096, 11008)}


def _chunks(qtype: QT):
    """Yield ``(values, imatrix or None)`` chunks, alternating the mode, :data:`BLOCKS` in all."""
    block = GGML_QUANT_SIZES[qtype][0]
    rng = np.random.default_rng([int(qtype), 2026])
    done = 0
    with_imatrix = False
    while done < BLOCKS:
        width = int(rng.choice(WIDTHS[block]))
        kind = KINDS[int(rng.integers(len(KINDS)))]
        rows = max(1, min(CHUNK_VALUES, (BLOCKS - done) * block) // width)
        values = _case(kind, rows, width, rng)
        yield values, (_imatrix(width, rng) if with_imatrix else None)
        done += rows * width // block
        with_imatrix = not with_imatrix


@pytest.mark.slow
@pytest.mark.parametrize("qtype", LEGACY + KQUANTS, ids=lambda t: t.name)
def test_a_million_random_blocks_match_libggml(qtype: QT) -> None:
    block_bytes = GGML_QUANT_SIZES[qtype][1]
    checked = {False: 0, True: 0}
    differing = {False: 0, True: 0}
    pending: deque = deque()

    def compare(values: np.ndarray, imatrix, expected) -> None:
        ours = encode_rows(values, qtype, imatrix)
        diff = (ours.reshape(-1, block_bytes) != expected.result().reshape(-1, block_bytes)).any(axis=1)
        checked[imatrix is not None] += diff.size
        differing[imatrix is not None] += int(diff.sum())

    with ThreadPoolExecutor(2) as pool, np.errstate(all="ignore"):
        for values, imatrix in _chunks(qtype):
            pending.append((values, imatrix, pool.submit(ggml_quantize, values, qtype, imatrix)))
            if len(pending) == 2:  # libggml works two chunks ahead of us
                compare(*pending.popleft())
        while pending:
            compare(*pending.popleft())
    assert sum(checked.values()) >= BLOCKS and min(checked.values()) >= BLOCKS // 2 - CHUNK_VALUES // 32
    assert differing == {False: 0, True: 0}, (
        f"{qtype.name}: {differing[False]} of {checked[False]} blocks differ without an imatrix, "
        f"{differing[True]} of {checked[True]} with one")
