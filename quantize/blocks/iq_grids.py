"""The lookup tables of the grid i-quants, built as ggml's ``iq2xs_init_impl`` / ``iq3xs_init_impl`` build them.

A grid i-quant stores each group of 8 (IQ2, IQ1) or 4 (IQ3) values as the index of one
point of a fixed grid (:mod:`.iq_grid_tables`). Quantizing a group first rounds every
value to a level, which names a point of the full lattice; the *map* says which grid
point that is, or, when it is not on the grid, where its *neighbours* are listed::

    map[u]  >= 0   u is grid point map[u]
    map[u]  <  0   u is off the grid: neighbours[-map[u] - 1] = n, followed by the n
                   grid indices nearest u, nearest first (ties by index)

``u`` packs the levels (2 bits each for IQ2/IQ1, 3 bits for IQ3, first value lowest).
"Nearest" is the squared distance between coordinates ``2*l + 1``; a list holds every
grid point at the smallest ``nwant`` distinct distances (2 for IQ2_XXS, IQ2_XS and
IQ3_XXS; 1 for IQ2_S; 3 for IQ1 and IQ3_S), in the order C's ``qsort`` leaves them when
it compares (distance, index) pairs — a total order, so no tie is left to chance. The
lists are laid out in increasing ``u``, as ggml lays them out after its parallel pass.

Built once per process on first use (:func:`grid`), in compiled code: see
``tests/benchmarks/README.md`` for how long each takes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from quantize.blocks import iq_grid_tables as tables
from quantize.blocks.jit import helper, kernel

#: name -> (packed grid, values per point, bits per level, map size, nwant)
_SPECS = {
    "IQ2_XXS": (tables.IQ2_XXS_GRID, 8, 2, 43692, 2),
    "IQ2_XS": (tables.IQ2_XS_GRID, 8, 2, 43692, 2),
    "IQ2_S": (tables.IQ2_S_GRID, 8, 2, 43692, 1),
    "IQ1_S": (tables.IQ1_S_GRID, 8, 2, 43692, 3),
    "IQ3_XXS": (tables.IQ3_XXS_GRID, 4, 3, 4096, 2),
    "IQ3_S": (tables.IQ3_S_GRID, 4, 3, 4096, 3),
}


@dataclass(frozen=True)
class IQGrid:
    """One grid's tables, as the kernels read them.

    Attributes:
        points: ``(grid size, values per point)`` int8 coordinates ``2*l + 1``.
        map: int32 of the map size (see the module docstring).
        neighbours: uint16 neighbour lists.
        seconds: How long building the tables took.
    """

    points: np.ndarray
    map: np.ndarray
    neighbours: np.ndarray
    seconds: float


@helper
def _distances(points, n_values, bits, u, out, counts):
    """Squared distance of lattice point ``u`` to every grid point, and how many grid
    points lie at each distance."""
    mask = (1 << bits) - 1
    counts[:] = 0
    for j in range(points.shape[0]):
        d2 = 0
        for k in range(n_values):
            diff = np.int32(points[j, k]) - (2 * ((u >> (bits * k)) & mask) + 1)
            d2 += diff * diff
        out[j] = d2
        counts[d2] += 1


@kernel
def _build_neighbours(points, bits, kmap, nwant):
    """Fill ``kmap``'s off-grid entries and return the neighbour lists (two passes, as ggml)."""
    n_grid, n_values = points.shape
    d2 = np.empty(n_grid, np.int32)
    counts = np.zeros(1024, np.int32)
    sizes = np.zeros(kmap.shape[0], np.int32)
    total = 0
    for u in range(kmap.shape[0]):
        if kmap[u] >= 0:
            continue
        _distances(points, n_values, bits, u, d2, counts)
        have = 0
        n = 0
        for v in range(1024):
            if counts[v]:
                n += counts[v]
                have += 1
                if have == nwant:
                    break
        sizes[u] = n
        total += 1 + n
    neighbours = np.empty(total, np.uint16)
    at = 0
    for u in range(kmap.shape[0]):
        if kmap[u] >= 0:
            continue
        _distances(points, n_values, bits, u, d2, counts)
        kmap[u] = -(at + 1)
        neighbours[at] = sizes[u]
        at += 1
        have = 0
        for v in range(1024):
            if counts[v] == 0:
                continue
            for j in range(n_grid):
                if d2[j] == v:
                    neighbours[at] = j
                    at += 1
            have += 1
            if have == nwant:
                break
    return neighbours


def _build(name: str) -> IQGrid:
    start = time.perf_counter()
    packed, n_values, bits, map_size, nwant = _SPECS[name]
    packed = np.asarray(packed, np.int64)
    levels = (packed[:, None] >> (bits * np.arange(n_values))) & ((1 << bits) - 1)
    points = (2 * levels + 1).astype(np.int8)
    kmap = np.full(map_size, -1, np.int32)
    index = (levels << (bits * np.arange(n_values))).sum(axis=1)
    kmap[index] = np.arange(len(packed), dtype=np.int32)
    neighbours = _build_neighbours(points, bits, kmap, nwant)
    return IQGrid(points, kmap, neighbours, time.perf_counter() - start)


_GRIDS: dict[str, IQGrid] = {}
_LOCK = threading.Lock()


def grid(name: str) -> IQGrid:
    """The tables of grid ``name`` (``"IQ2_XXS"``, ``"IQ3_S"`` ...; IQ1_M uses ``"IQ1_S"``),
    built on first use and kept for the process."""
    found = _GRIDS.get(name)
    if found is None:
        with _LOCK:
            found = _GRIDS.get(name)
            if found is None:
                found = _GRIDS[name] = _build(name)
    return found
