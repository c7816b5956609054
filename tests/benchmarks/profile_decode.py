"""Where the engine's time per generated token goes: llama.cpp, sampling, and Python.

Runs the engine's own decode loop — :class:`models.engine.batching.BatchScheduler`, whose
``step`` the engine process calls, with the native abort hook installed and every delta
sent through a ``multiprocessing`` pipe to another process — in this process, so it can
be measured:

- **timers** (default): the loop's parts wrapped in ``perf_counter`` accumulators —
  ``llama_decode`` (the C call), the sampler (``llama_sampler_sample``, C), filling the
  batch, the text decoder, the reasoning counter, the stop filter, the end-of-generation
  check, the delta send (pipe) — and what is left of ``step``. Each wrapper costs well
  under a microsecond.
- **cprofile** (``--cprofile``): every Python function's own time per token (cProfile
  inflates small functions; use it for the shape, the timers for the figures).

Figures are microseconds per generated token (the mean over ``--runs`` replies of
``--tokens`` tokens after a ~300-token prompt, greedy unless ``--sampled``), printed
beside ``llama-bench``'s time per token when the tools are built (``llama_tools.py``).
``--replies 4`` makes four replies together, in one batch per step, as four concurrent
clients do (figures per token of all of them; ``llama-bench``'s line is for one).
CPU columns are this thread's own CPU time, which stays meaningful on a busy machine
where wall time does not.

Run: ``.venv/bin/python tests/benchmarks/profile_decode.py [MODEL.gguf] [--cprofile]``.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import multiprocessing
import pstats
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable, Iterator

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.benchmarks import llama_tools  # noqa: E402

BATCH = 512


def _drain(conn) -> None:
    """The client's end of the pipe, in its own process like the real client."""
    try:
        while conn.recv() is not None:
            pass
    except EOFError:
        pass


class Timers:
    """``perf_counter`` accumulators around named callables, patched in place."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)  # this thread's CPU time
        self.calls: dict[str, int] = defaultdict(int)
        self.active = False  # counting only while the reply decodes (not in its prefill)
        self.loop_cpu = self.loop_cpu_started = 0.0
        self.loop_started = 0.0  # perf_counter when counting switched on
        self.picks = 0  # tokens picked while counting
        self._undo: list[Callable[[], None]] = []

    def wrap(self, name: str, fn: Callable) -> Callable:
        seconds, cpu, calls = self.seconds, self.cpu, self.calls
        clock, cpu_clock = time.perf_counter, time.thread_time

        def timed(*args, **kwargs):
            if not self.active:
                return fn(*args, **kwargs)
            start, start_cpu = clock(), cpu_clock()
            try:
                return fn(*args, **kwargs)
            finally:
                cpu[name] += cpu_clock() - start_cpu
                seconds[name] += clock() - start
                calls[name] += 1
        return timed

    def patch(self, owner: object, attribute: str, name: str,
              wrapper: Callable[[str, Callable], Callable] | None = None) -> None:
        original = getattr(owner, attribute)
        setattr(owner, attribute, (wrapper or self.wrap)(name, original))
        self._undo.append(lambda: setattr(owner, attribute, original))

    def starter(self, on_start: Callable[[], None], replies: int,
                timing: bool = True) -> Callable[[str, Callable], Callable]:
        """A wrapper for ``Sampler.sample``: the first pick of the last of ``replies``
        replies (the end of the last prefill) switches counting on and calls ``on_start``;
        later picks are counted, and timed if ``timing``."""
        started: set[int] = set()

        def wrapper(name: str, fn: Callable) -> Callable:
            timed = self.wrap(name, fn) if timing else fn

            def sample(sampler, *args, **kwargs):
                if self.active:
                    self.picks += 1
                    return timed(sampler, *args, **kwargs)
                token = fn(sampler, *args, **kwargs)
                started.add(id(sampler))
                if len(started) == replies:
                    started.clear()
                    self.active = True
                    self.loop_started = time.perf_counter()
                    self.loop_cpu_started = time.thread_time()
                    on_start()
                return token
            return sample
        return wrapper

    def restore(self) -> None:
        while self._undo:
            self._undo.pop()()


@contextlib.contextmanager
def engine_pipe() -> Iterator[Callable[[dict], None]]:
    """The engine process's way of sending an event, to a reader in another process."""
    from models.engine.child import _event_sender

    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    reader = ctx.Process(target=_drain, args=(there,), daemon=True)
    reader.start()
    try:
        yield _event_sender(here)
    finally:
        here.send(None)
        reader.join(5)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", nargs="?", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--replies", type=int, default=1,
                        help="replies made together, in one batch (as concurrent clients)")
    parser.add_argument("--sampled", action="store_true",
                        help="the Chat page's default sampling (temperature 0.7, top-k 40, "
                             "top-p 0.95, min-p 0.05) instead of greedy")
    parser.add_argument("--cprofile", action="store_true", help="cProfile instead of timers")
    parser.add_argument("--no-pipe", action="store_true",
                        help="keep the deltas in this process instead of sending them to "
                             "another (what the pipe and the reader's wake-ups cost)")
    llama_tools.add_argument(parser)
    args = parser.parse_args()
    if args.model is None:
        from tests.conftest import cached_models_dir, fetch_smollm2

        args.model = fetch_smollm2(cached_models_dir())

    import llama_cpp

    from models.engine import runtime
    from models.engine.batching import BatchScheduler
    from models.engine.benchmark import bench_messages
    from models.engine.cancel_flag import CancelFlag, install_abort_hook
    from models.engine.llama_log import LlamaLogCapture
    from models.engine.options import ChatOptions
    from models.engine.reasoning import ReasoningSplitter
    from models.engine.settings import LoadSettings
    from models.engine.token_stream import Sampler, StopFilter, TokenTextDecoder

    settings = LoadSettings(threads=args.threads, batch_threads=args.threads,
                            context_length=1024, batch_size=BATCH, micro_batch_size=BATCH,
                            parallel=args.replies)
    # Kept referenced to the end, as the engine process keeps it: llama.cpp calls its
    # ctypes callback until the model is freed.
    log_capture = LlamaLogCapture()
    model = runtime.LoadedModel(str(args.model), settings, log_capture)
    model.self_test()
    cancel = CancelFlag(multiprocessing.get_context("spawn"))
    model.abort_hook = install_abort_hook(model.llm.ctx, cancel.shared)
    options = ChatOptions(max_tokens=args.tokens, ignore_eos=True, seed=1,
                          **({} if args.sampled else {"temperature": 0.0}))
    timers = Timers()
    loop_seconds = 0.0
    profile = cProfile.Profile() if args.cprofile else None

    def reply(scheduler: BatchScheduler, run: int, replies: int = 1) -> None:
        """``replies`` requests through the scheduler together, stepped as the engine
        loop steps it."""
        for k in range(replies):
            scheduler.submit({"id": f"{run}.{k}", "lane": k,
                              "messages": bench_messages(100 * run + k, 280),
                              "options": options.to_dict()})
        while scheduler.busy():
            scheduler.step()
            scheduler.run_after_reply()

    with (contextlib.nullcontext([].append) if args.no_pipe else engine_pipe()) as send:
        scheduler = BatchScheduler(model, cancel.shared, send, cache_ram_bytes=0)
        reply(scheduler, -1, args.replies)  # warm-up
        start_profile = profile.enable if profile is not None else (lambda: None)
        timers.patch(Sampler, "sample", "sampler (C, or numpy argmax when greedy)",
                     timers.starter(start_profile, args.replies, timing=profile is None))
        if profile is None:
            timers.patch(llama_cpp, "llama_decode", "llama_decode (C)")
            timers.patch(BatchScheduler, "_put", "filling the batch")
            timers.patch(TokenTextDecoder, "feed", "TokenTextDecoder.feed")
            timers.patch(ReasoningSplitter, "feed", "ReasoningSplitter.feed")
            timers.patch(StopFilter, "push", "StopFilter.push")
            timers.patch(model, "is_end_of_generation", "is_end_of_generation")
            timers.patch(BatchScheduler, "_send_deltas", "delta send (pipe)")
        for run in range(args.runs):
            reply(scheduler, run, args.replies)
            timers.loop_cpu += time.thread_time() - timers.loop_cpu_started
            loop_seconds += time.perf_counter() - timers.loop_started
            timers.active = False
            if profile is not None:
                profile.disable()
        tokens = timers.picks
        timers.restore()
        scheduler.close()
    model.close()
    per_token = 1e6 / tokens
    print(f"machine: {llama_tools.machine_line()}")
    print(f"{args.model.name}, {args.threads} threads, {'sampled' if args.sampled else 'greedy'}, "
          f"deltas {'kept in this process' if args.no_pipe else 'sent through a pipe'}, "
          f"{args.runs} x {args.replies} replies of {args.tokens} tokens: "
          f"{loop_seconds * per_token:.0f} us per "
          f"token in the decode loop ({tokens / loop_seconds:.1f} tok/s)")
    tools = llama_tools.find_tools(args.llama_tools, needed=("llama-bench",))
    if tools is not None:
        import json

        result = tools.run("llama-bench", ["-m", str(args.model), "-t", str(args.threads),
                                           "-fa", "0", "-p", "0", "-n", str(args.tokens),
                                           "-d", "300", "-r", "3", "-o", "json"])
        rate = json.loads(result.stdout)[0]["avg_ts"]
        print(f"llama-bench tg{args.tokens} at depth 300: {1e6 / rate:.0f} us per token "
              f"({rate:.1f} tok/s)")
    if profile is not None:
        stats = pstats.Stats(profile)
        rows = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:30]
        print(f"\n{'own us/token':>13} {'cum us/token':>13} {'calls/token':>12}  function")
        for (file, line, name), (_cc, calls, own, cum, _callers) in rows:
            where = f"{Path(file).name}:{line}" if line else file
            print(f"{own * per_token:13.1f} {cum * per_token:13.1f} {calls / tokens:12.2f}  "
                  f"{name} ({where})")
        return 0
    wall, cpu = timers.seconds, timers.cpu
    rows = [(name, name, wall[name], cpu[name]) for name in wall]
    rows.append(("rest of BatchScheduler.step", "",
                 loop_seconds - sum(row[2] for row in rows),
                 timers.loop_cpu - sum(row[3] for row in rows)))
    print("\nPer generated token (wall: elapsed; CPU: the engine thread's own CPU time, which "
          "leaves out\nthe time other processes take the core; llama_decode's CPU is the share "
          "of its work on\nthis thread, the other threads' not counted):")
    print(f"{'wall us':>9} {'CPU us':>9} {'calls':>6}  part")
    for name, key, seconds, cpu_seconds in rows:
        print(f"{seconds * per_token:9.1f} {cpu_seconds * per_token:9.1f} "
              f"{timers.calls.get(key, 0) / tokens:6.2f}  {name}")
    python = sum(row[3] for row in rows if "(C)" not in row[0])
    print(f"Python outside llama.cpp's C calls: {python * per_token:.0f} us CPU per token")
    return 0


if __name__ == "__main__":
    sys.exit(main())
