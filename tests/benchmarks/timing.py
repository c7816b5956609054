"""Timing helper shared by the benchmark scripts."""

from __future__ import annotations

import os
import statistics
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


def paired_ratio(ours: Sequence[float], theirs: Sequence[float]) -> tuple[float, float, float]:
    """Median and quartiles of ``ours[k] / theirs[k]`` over runs where the two sides ran
    back to back.

    On a small VM the speed of both sides drifts together by ±20 % over seconds to minutes
    (the host, not the programs), so the ratio of two medians taken over a whole benchmark
    still carries that drift; the ratio within each pair cancels it, and the median of
    those ratios is the comparison. The quartiles say how far single pairs spread."""
    ratios = sorted(a / b for a, b in zip(ours, theirs) if b > 0)
    if not ratios:
        return float("nan"), float("nan"), float("nan")
    if len(ratios) == 1:
        return ratios[0], ratios[0], ratios[0]
    # Fewer than 4 pairs: the default (exclusive) method would extrapolate past the data.
    method = "exclusive" if len(ratios) >= 4 else "inclusive"
    quartiles = statistics.quantiles(ratios, n=4, method=method)
    return statistics.median(ratios), quartiles[0], quartiles[2]


def paired_ratio_text(ours: Sequence[float], theirs: Sequence[float]) -> str:
    """``paired_ratio`` as printed by the benchmarks: "0.992 (quartiles 0.95–1.03, 16 pairs)"."""
    median, low, high = paired_ratio(ours, theirs)
    return f"{median:.3f} (quartiles {low:.3f}–{high:.3f}, {min(len(ours), len(theirs))} pairs)"
