"""Measuring a model's speed on this computer, and the speed its memory allows.

Decoding one token reads every weight once (for a dense model; a mixture of experts
reads only the experts the token is routed to, ``expert_used_count`` of ``expert_count``
per layer), so on a CPU the decode speed is bounded by memory bandwidth:
``limit = bandwidth / weight bytes per token``.
:func:`measure_memory_bandwidth` measures the bandwidth here with numpy copies of an array
far larger than the CPU caches, on as many threads as the engine generates with (a copy
reads and writes every byte: 2 × size moved);
:func:`run_benchmark` times prompt processing and decoding through the engine. Their
ratio tells a user whether a model runs as fast as this computer can run it (a fraction
near 1) or something else is slowing it (threads, contention, swapping).

That bound is the CPU's: layers offloaded to a GPU are read from its own memory, which a
numpy copy does not measure. Only the weights left on the CPU count against it (seen on an
H100 with every layer offloaded: 615 tok/s against a "37.6 tok/s limit", "1634 %"); with
every layer on the GPU the report says the CPU's bandwidth does not bound generation.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Optional

import numpy as np

from models.foundation.jobs import CancelToken, ProgressCallback, ProgressReporter, check

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
    layers_on_gpu: int = 0
    layers_total: int = 0
    #: A mixture of experts: experts per layer and those each token uses (0 when dense).
    expert_count: int = 0
    expert_used_count: int = 0

    @property
    def cpu_weight_bytes_per_token(self) -> int:
        """Weight bytes read from the computer's RAM per token: the share of the layers
        left on the CPU (all of them when nothing is offloaded or the split is unknown)."""
        if self.layers_total <= 0 or self.layers_on_gpu <= 0:
            return self.weight_bytes_per_token
        on_cpu = max(self.layers_total - self.layers_on_gpu, 0)
        return round(self.weight_bytes_per_token * on_cpu / self.layers_total)

    @property
    def decode_limit(self) -> Optional[float]:
        """Tokens per second the RAM bandwidth allows: bandwidth ÷ bytes read from RAM per
        token; ``None`` when every layer is on a GPU (RAM does not bound generation)."""
        cpu_bytes = self.cpu_weight_bytes_per_token
        return self.memory_bandwidth / cpu_bytes if cpu_bytes > 0 else None

    @property
    def fraction_of_limit(self) -> Optional[float]:
        """Measured decode speed as a fraction of :attr:`decode_limit` (``None`` without one)."""
        limit = self.decode_limit
        return self.decode_tokens_per_second / limit if limit else None


def measure_memory_bandwidth(size_bytes: int = 256 << 20, repeats: int = 5,
                             cancel: Optional[CancelToken] = None, threads: int = 1) -> float:
    """Bytes per second ``threads`` concurrent ``numpy`` copies move together (best of
    ``repeats``), each thread copying its own slice (numpy releases the GIL while it copies).

    Give the engine's thread count: one core cannot draw a server's bandwidth (seen on a
    16-core host: one core's copy 20 GB/s, and 8-thread CPU generation ran at "144 %" of
    the limit that implied).
    """
    threads = max(1, threads or 1)
    source = np.ones(size_bytes // 8, dtype=np.float64)  # touched: pages are really mapped
    target = np.empty_like(source)
    np.copyto(target, source)  # warm up: fault in the target's pages
    bounds = np.linspace(0, source.size, threads + 1).astype(int)
    slices = [slice(bounds[k], bounds[k + 1]) for k in range(threads)]

    def copy(part: slice) -> None:
        np.copyto(target[part], source[part])

    best = float("inf")
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for _ in range(repeats):
            check(cancel)
            started = time.perf_counter()
            list(pool.map(copy, slices))
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
    offload=None,
    threads: int = 1,
    experts: tuple[int, int] = (0, 0),
) -> BenchResult:
    """Time ``runs`` replies through a loaded :class:`~models.engine.EngineClient`.

    Prefill and decode speeds are the medians over the runs, as measured inside the engine.
    ``offload`` is the load's :class:`~models.engine.llama_log.OffloadReport`: the layers
    on a GPU do not count against this computer's RAM bandwidth. ``threads``: the engine's
    generation threads, as many as measure the bandwidth. ``experts``: ``(expert_count,
    expert_used_count)`` of a mixture of experts, whose ``weight_bytes_per_token`` counts
    the routed experts only (:attr:`GGUFModelInfo.weight_bytes_per_token`).
    """
    from models.engine.options import ChatOptions

    progress = ProgressReporter(report, runs + 1, "Benchmark")
    if bandwidth is None:
        bandwidth = measure_memory_bandwidth(cancel=cancel, threads=threads)
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
        layers_on_gpu=offload.layers_on_gpu if offload is not None else 0,
        layers_total=offload.layers_total if offload is not None else 0,
        expert_count=experts[0], expert_used_count=experts[1],
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
        f"Memory bandwidth:   {result.memory_bandwidth / gb:8.1f} GB/s (numpy copies on this computer)",
        f"Weights per token:  {result.weight_bytes_per_token / 1e6:8.1f} MB" + _experts_note(result),
    ] + _limit_lines(result))


def _experts_note(result: BenchResult) -> str:
    if not result.expert_count:
        return ""
    return (f" (a mixture of experts: the {result.expert_used_count} of {result.expert_count} "
            "experts each token is routed to, not all of them)")


def _limit_lines(result: BenchResult) -> list[str]:
    """The RAM-bandwidth bound and how close generation comes to it, for the layers the
    CPU reads; a sentence instead where a GPU holds them all."""
    if result.decode_limit is None:
        return [f"All {result.layers_total} layers are on the GPU: this computer's RAM "
                "bandwidth does not bound generation (the GPU's own memory does)."]
    if result.cpu_weight_bytes_per_token == result.weight_bytes_per_token:
        basis = "bandwidth ÷ weights per token"
    else:
        basis = (f"bandwidth ÷ the {result.cpu_weight_bytes_per_token / 1e6:.1f} MB per token of the "
                 f"{result.layers_total - result.layers_on_gpu} layers on the CPU; the GPU's not counted")
    return [f"Bandwidth limit:    {result.decode_limit:8.1f} tok/s ({basis})",
            f"Generation reaches {result.fraction_of_limit:.0%} of the bandwidth limit."]


@dataclass(frozen=True)
class SplitTraffic:
    """Network bytes of a model split across computers (both directions, all workers).

    Attributes:
        load_bytes: Sent and received while the model loaded (mostly the workers'
            weights), as far as the connections that stayed open counted them.
        prompt_bytes_per_token: Per prompt token read (a reply of one token).
        decode_bytes_per_token: Per token generated after the first.
    """

    load_bytes: int
    prompt_bytes_per_token: float
    decode_bytes_per_token: float


def measure_split_traffic(client, prompt_tokens: int = 256,
                          generate_tokens: int = 128) -> Optional[SplitTraffic]:
    """Traffic to the loaded model's workers: a one-token reply (the prompt alone), then a
    reply of ``generate_tokens``; the second's prompt share is taken off at the first's
    rate. ``None`` where the connections cannot be counted (no ``ss``: not Linux)."""
    from models.engine.options import ChatOptions
    from models.rpc.traffic import connection_traffic

    endpoints = client.remote_endpoints
    loaded = connection_traffic(endpoints)
    if loaded is None:
        return None
    prefill = client.chat(bench_messages(1000, prompt_tokens),
                          ChatOptions(temperature=0.0, max_tokens=1, ignore_eos=True)).wait()
    after_prefill = connection_traffic(endpoints)
    reply = client.chat(bench_messages(1001, prompt_tokens),
                        ChatOptions(temperature=0.0, max_tokens=generate_tokens,
                                    ignore_eos=True)).wait()
    after_reply = connection_traffic(endpoints)
    if after_prefill is None or after_reply is None:
        return None
    per_prompt = (after_prefill - loaded).total / max(prefill.stats.prompt_tokens_evaluated, 1)
    decoded = (after_reply - after_prefill).total - per_prompt * reply.stats.prompt_tokens_evaluated
    return SplitTraffic(loaded.total, per_prompt,
                        max(decoded, 0.0) / max(reply.stats.completion_tokens - 1, 1))


def format_split_result(name: str, local: BenchResult, split: BenchResult, report,
                        traffic: Optional[SplitTraffic]) -> str:
    """The report of ``quantdesk bench --remote``: this computer alone against the split."""
    def ratio(a: float, b: float) -> str:
        return f"{a / b:6.2f}×" if b > 0 else "     —"

    lines = [
        f"Model:              {name}",
        f"Split:              {report.offload.placement() or report.offload.summary()}",
        "                    this computer   split   split ÷ this computer",
        f"Prompt processing:  {local.prefill_tokens_per_second:8.1f} tok/s "
        f"{split.prefill_tokens_per_second:8.1f} tok/s  "
        f"{ratio(split.prefill_tokens_per_second, local.prefill_tokens_per_second)}",
        f"Generation:         {local.decode_tokens_per_second:8.1f} tok/s "
        f"{split.decode_tokens_per_second:8.1f} tok/s  "
        f"{ratio(split.decode_tokens_per_second, local.decode_tokens_per_second)}",
    ]
    if traffic is None:
        lines.append("Traffic:            not measured (needs Linux's ss)")
    else:
        lines += [
            f"Traffic per token:  {traffic.decode_bytes_per_token / 1024:8.1f} KiB generated, "
            f"{traffic.prompt_bytes_per_token / 1024:.1f} KiB per prompt token (TCP payload to "
            "and from the workers, both ways)",
            f"Traffic at load:    {traffic.load_bytes / 2**20:8.1f} MiB (the workers' weights; "
            "less when a worker's cache already holds them)",
        ]
    return "\n".join(lines)
