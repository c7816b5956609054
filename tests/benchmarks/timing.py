"""Timing helper shared by the benchmark scripts."""

from __future__ import annotations

import time
from typing import Callable


def best_time(fn: Callable[[], object], repeats: int,
              clock: Callable[[], float] = time.perf_counter) -> float:
    """Least time of ``repeats`` calls of ``fn``: the run least disturbed by other processes.

    Args:
        clock: ``time.perf_counter`` (wall time, right for multi-threaded work) or
            ``time.process_time`` (CPU time, which leaves out the waits a busy machine adds
            to single-threaded work).
    """
    best = float("inf")
    for _ in range(repeats):
        start = clock()
        fn()
        best = min(best, clock() - start)
    return best
