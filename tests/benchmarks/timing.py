"""Timing helper shared by the benchmark scripts."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, Optional, Sequence


def fresh_disk(*outputs: Path) -> Callable[[], None]:
    """A ``setup`` for :func:`best_time` when ``fn`` writes files: remove ``outputs`` and
    write dirty pages back, so no run pays for freeing the last run's file or for the
    writeback of earlier runs (which otherwise lands on whichever run crosses the
    kernel's threshold)."""
    def setup() -> None:
        for path in outputs:
            Path(path).unlink(missing_ok=True)
        os.sync()
    return setup


def best_time(fn: Callable[[], object], repeats: int,
              clock: Callable[[], float] = time.perf_counter,
              setup: Optional[Callable[[], None]] = None) -> float:
    """Least time of ``repeats`` calls of ``fn``: the run least disturbed by other processes.

    Args:
        clock: ``time.perf_counter`` (wall time, right for multi-threaded work) or
            ``time.process_time`` (CPU time, which leaves out the waits a busy machine adds
            to single-threaded work).
        setup: Run before each call, outside the clock (e.g. :func:`fresh_disk`).
    """
    return best_times([fn], repeats, clock, [setup])[0]


def best_times(fns: Sequence[Callable[[], object]], repeats: int,
               clock: Callable[[], float] = time.perf_counter,
               setups: Optional[Sequence[Optional[Callable[[], None]]]] = None) -> list[float]:
    """Least time of each of ``fns`` over ``repeats`` rounds, the functions taking turns
    within each round (A B, A B, ...), so that a slow spell of the machine (another
    process, the host reclaiming memory) falls on both sides of a comparison rather than
    on whichever side happened to run then. ``setups[k]`` runs before each call of
    ``fns[k]``, outside the clock; ``clock`` as in :func:`best_time`."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for k, fn in enumerate(fns):
            setup = setups[k] if setups is not None else None
            if setup is not None:
                setup()
            start = clock()
            fn()
            best[k] = min(best[k], clock() - start)
    return best
