"""Measuring a model's speed on this computer, and the speed its memory allows.

Decoding one token reads every weight once (for a dense model), so on a CPU the decode
speed is bounded by memory bandwidth: ``limit = bandwidth / weight bytes per token``.
:func:`measure_memory_bandwidth` measures the bandwidth here with a numpy copy of an array
far larger than the CPU caches (a copy reads and writes every byte: 2 × size moved);
:func:`run_benchmark` times prompt processing and decoding through the engine. Their
ratio tells a user whether a model runs as fast as this computer can run it (a fraction
near 1) or something else is slowing it (threads, contention, swapping).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from app.core.jobs import CancelToken, ProgressCallback, ProgressReporter, check

FILLER = ("The history of the printing press begins with movable type, which changed how "
          "books were made, sold and read across Europe and beyond. ")


@dataclass(frozen=True)
class BenchResult:
    """Speeds measured for one model. Rates are tokens per second, bandwidth bytes per second."""

    prompt_tokens: int
    generated_tokens: int
    prefill_tokens_per_second: float
    decode_tokens_per_second: float
    time_to_first_token: float
    memory_bandwidth: float
    weight_bytes_per_token: int

    @property
    def decode_limit(self) -> float:
        """Tokens per second the memory bandwidth allows: bandwidth ÷ bytes per token."""
        return self.memory_bandwidth / max(self.weight_bytes_per_token, 1)

    @property
    def fraction_of_limit(self) -> float:
        """Measured decode speed as a fraction of :attr:`decode_limit`."""
        return self.decode_tokens_per_second / self.decode_limit if self.decode_limit else 0.0


def measure_memory_bandwidth(size_bytes: int = 256 << 20, repeats: int = 5,
                             cancel: Optional[CancelToken] = None) -> float:
    """Bytes per second one core's ``numpy`` copy moves (best of ``repeats``)."""
    source = np.ones(size_bytes // 8, dtype=np.float64)  # touched: pages are really mapped
    target = np.empty_like(source)
    np.copyto(target, source)  # warm up: fault in the target's pages
    best = float("inf")
    for _ in range(repeats):
        check(cancel)
        started = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - started)
    return 2 * source.nbytes / best


def bench_messages(run: int, approx_prompt_tokens: int) -> list[dict]:
    """A conversation of about ``approx_prompt_tokens`` tokens, different for every run
    (from its first words, so the engine cannot reuse the previous run's KV cache)."""
    repeats = max(1, approx_prompt_tokens // 24)
    return [{"role": "system", "content": f"Session {run}. You are a careful writer."},
            {"role": "user", "content": FILLER * repeats + "\nContinue this text."}]


def run_benchmark(
    client,
    weight_bytes_per_token: int,
    prompt_tokens: int = 256,
    generate_tokens: int = 128,
    runs: int = 3,
    bandwidth: Optional[float] = None,
    report: Optional[ProgressCallback] = None,
    cancel: Optional[CancelToken] = None,
) -> BenchResult:
    """Time ``runs`` replies through a loaded :class:`~models.engine.EngineClient`.

    Prefill and decode speeds are the medians over the runs, as measured inside the engine.
    """
    from models.engine.options import ChatOptions

    progress = ProgressReporter(report, runs + 1, "Benchmark")
    if bandwidth is None:
        bandwidth = measure_memory_bandwidth(cancel=cancel)
    progress.advance(1, "memory bandwidth")
    options = ChatOptions(temperature=0.0, max_tokens=generate_tokens, ignore_eos=True)
    prefill, decode, ttft, evaluated, generated = [], [], [], 0, 0
    for run in range(runs):
        check(cancel)
        reply = client.chat(bench_messages(run, prompt_tokens), options).wait()
        stats = reply.stats
        prefill.append(stats.prefill_tokens_per_second)
        decode.append(stats.decode_tokens_per_second)
        ttft.append(stats.time_to_first_token)
        evaluated, generated = stats.prompt_tokens_evaluated, stats.completion_tokens
        progress.advance(1, f"run {run + 1} of {runs}")
    return BenchResult(
        prompt_tokens=evaluated, generated_tokens=generated,
        prefill_tokens_per_second=statistics.median(prefill),
        decode_tokens_per_second=statistics.median(decode),
        time_to_first_token=statistics.median(ttft),
        memory_bandwidth=bandwidth, weight_bytes_per_token=weight_bytes_per_token,
    )


def format_result(name: str, result: BenchResult) -> str:
    """The report ``quantdesk bench`` prints."""
    gb = 1e9
    return "\n".join([
        f"Model:              {name}",
        f"Prompt processing:  {result.prefill_tokens_per_second:8.1f} tok/s "
        f"({result.prompt_tokens} tokens, first token after {result.time_to_first_token:.2f} s)",
        f"Generation:         {result.decode_tokens_per_second:8.1f} tok/s "
        f"({result.generated_tokens} tokens)",
        f"Memory bandwidth:   {result.memory_bandwidth / gb:8.1f} GB/s (numpy copy on this computer)",
        f"Weights per token:  {result.weight_bytes_per_token / 1e6:8.1f} MB",
        f"Bandwidth limit:    {result.decode_limit:8.1f} tok/s (bandwidth ÷ weights per token)",
        f"Generation reaches {result.fraction_of_limit:.0%} of the bandwidth limit.",
    ])
