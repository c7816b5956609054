"""Benchmark: QuantDesk's API server (``quantdesk serve``) beside llama.cpp's ``llama-server``.

Both serve the same GGUF (SmolLM2-135M-Instruct unless a path is given) with the same
threads (2), context per slot (4096), batch (512), flash attention (off) and number of
slots, and both run at once as separate processes; ``llama-server`` is built from the
same llama.cpp source with the same CPU options (``llama_tools.py``: ``--llama-tools
DIR``, built there once when missing). The same requests go to both from the same client
(``httpx``, streaming parsed as the OpenAI clients do), the two taking turns request by
request so that load from other processes hits both alike (in the paired parts, every
other pair begins with the other server). Printed, with ratios:

1. **Single-client decode** (1 slot): tok/s of a 128-token greedy reply as the client
   sees the tokens arrive (``ignore_eos``), ``--decode-runs`` pairs (15). Goal: the median
   of ours / llama-server's within each pair ≥ 0.97 (``timing.paired_ratio``: the pair
   ratios cancel the VM's drift, which moves both sides by ±20 % from minute to minute;
   the ratio of the two medians is printed too).
2. **Added latency** (1 slot): a ``max_tokens=1`` request with a prompt the server has
   just seen, end to end, against the same call through ``EngineClient`` (the engine
   without HTTP), taking turns; the median of the differences within each round is what
   the server adds. Goal ≤ 5 ms. llama-server's time for the same request is printed
   beside it.
3. **A 2,000-token conversation resumed by one of 8 clients taking turns** (1 slot):
   each client's first request is a cold prefill; then they take turns, each resending
   its whole conversation plus one new message. Time to first token of the resumed turns
   over the cold ones, both servers. Goal ≤ 0.1.
4. **4 concurrent clients** (4 slots, ``--parallel 4`` / ``-np 4``): total generated tok/s
   of 4 streams of 128 tokens started together, ``--concurrent-runs`` pairs (8). Goal: the
   median of the ratios within pairs ≥ 1.0. Then each of those
   requests again alone: how many of the batched greedy replies differ from the reply
   alone, and after how many characters (llama.cpp's batched kernels round a little
   differently, so a near-tie can go the other way), for both servers.

Our server runs as ``quantdesk serve MODEL`` in a QuantDesk home of its own (a temporary
folder: its Library holds the GGUF, its default load settings are the ones above).

Run: ``.venv/bin/python tests/benchmarks/bench_server.py [MODEL.gguf] [--runs N]
[--decode-runs N] [--concurrent-runs N] [--llama-tools DIR] [--only decode,latency,resume,concurrent]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.benchmarks import llama_tools  # noqa: E402
from tests.benchmarks.timing import paired_ratio_text  # noqa: E402

THREADS, CONTEXT_PER_SLOT, BATCH = 2, 4096, 512
DECODE_TOKENS = 128
CONVERSATIONS, RESUMED_ROUNDS, REPLY_TOKENS = 8, 2, 16
START_TIMEOUT = 900.0  # seconds; a busy 2-core machine loads slowly
PARTS = ("decode", "latency", "resume", "concurrent")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    """A server process and where to reach it."""

    name: str
    process: subprocess.Popen
    base_url: str
    output: list[str] = field(default_factory=list)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _start(name: str, command: list[str], env: dict, port: int, ready_line: Optional[str]) -> Server:
    """Start ``command`` and wait until it serves: ``ready_line`` printed, else ``/health``
    answering 200 (llama-server answers 503 while it loads)."""
    import httpx

    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, bufsize=1)
    server = Server(name, process, f"http://127.0.0.1:{port}")
    ready = threading.Event()

    def read() -> None:
        for line in process.stdout:
            server.output.append(line.rstrip())
            if ready_line and ready_line in line:
                ready.set()
    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited ({process.returncode}):\n"
                               + "\n".join(server.output[-30:]))
        if ready_line:
            if ready.wait(0.5):
                return server
            continue
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{server.base_url}/health", timeout=5).status_code == 200:
                return server
        time.sleep(0.5)
    server.stop()
    raise RuntimeError(f"{name} did not start in {START_TIMEOUT:.0f} s:\n"
                       + "\n".join(server.output[-30:]))


def start_llama_server(tools, model: Path, slots: int, model_id: str,
                       extra: Sequence[str] = (), threads: int = THREADS,
                       flash_attention: bool = False) -> Server:
    """llama-server with this benchmark's settings, and ``extra`` options (``--spec-type``)."""
    port = free_port()
    command = [str(tools.path("llama-server")), "-m", str(model), "--host", "127.0.0.1",
               "--port", str(port), "-t", str(threads), "-tb", str(threads),
               "-c", str(CONTEXT_PER_SLOT * slots), "-np", str(slots), "-b", str(BATCH),
               "-ub", str(BATCH), "-fa", "on" if flash_attention else "off", "--no-webui",
               "--alias", model_id, *extra]
    return _start("llama-server", command, tools.env(), port, None)


def prepare_home(home: Path, model: Path, threads: int = THREADS,
                 flash_attention: bool = False) -> str:
    """A QuantDesk home whose Library holds ``model`` and whose default load settings are
    this benchmark's; returns the model's id."""
    os.environ["QUANTDESK_HOME"] = str(home)  # read by Preferences and Library below
    from app.core.model_settings import DEFAULT_LOAD_KEY
    from app.core.preferences import Preferences
    from models.library import Library
    from models.server.catalog import served_models

    Preferences().set(DEFAULT_LOAD_KEY, dict(
        threads=threads, batch_threads=threads, context_length=CONTEXT_PER_SLOT,
        batch_size=BATCH, micro_batch_size=BATCH, flash_attention=flash_attention))
    library = Library()
    library.import_path(model)
    return next(m.id for m in served_models(library) if m.path == model.resolve())


def start_ours(home: Path, model_id: str, slots: int) -> Server:
    port = free_port()
    env = dict(os.environ, QUANTDESK_HOME=str(home), PYTHONPATH=str(REPO))
    command = [sys.executable, "-m", "app.cli", "serve", model_id, "--port", str(port),
               "--parallel", str(slots), "--idle-unload", "0"]
    return _start("quantdesk serve", command, env, port, "Serving the OpenAI API")


@dataclass
class Reply:
    """One request as the client saw it."""

    seconds: float  # request sent → stream ended
    ttft: Optional[float] = None  # request sent → first content
    content_times: list[float] = field(default_factory=list)
    text: str = ""
    usage: Optional[dict] = None
    timings: Optional[dict] = None  # llama-server's own figures, when it sends them

    @property
    def completion_tokens(self) -> int:
        if self.usage and self.usage.get("completion_tokens"):
            return int(self.usage["completion_tokens"])
        return len(self.content_times)

    @property
    def cached_tokens(self) -> Optional[int]:
        details = (self.usage or {}).get("prompt_tokens_details") or {}
        return details.get("cached_tokens")

    @property
    def decode_rate(self) -> float:
        """Tokens after the first over the time from the first content to the last."""
        span = self.content_times[-1] - self.content_times[0] if self.content_times else 0
        return (self.completion_tokens - 1) / span if span > 0 else 0.0


def chat(http, server: Server, model_id: str, messages: list[dict], max_tokens: int,
         stream: bool = True, ignore_eos: bool = True, extra: Optional[dict] = None) -> Reply:
    """One greedy chat completion, timed as it arrives; ``extra`` fields join the body."""
    body = {"model": model_id, "messages": messages, "max_tokens": max_tokens,
            "temperature": 0.0, "ignore_eos": ignore_eos, "stream": stream, **(extra or {})}
    url = f"{server.base_url}/v1/chat/completions"
    started = time.perf_counter()
    if not stream:
        response = http.post(url, json=body)
        response.raise_for_status()
        data = response.json()
        reply = Reply(time.perf_counter() - started, usage=data.get("usage"),
                      text=data["choices"][0]["message"]["content"] or "")
        return reply
    body["stream_options"] = {"include_usage": True}
    reply = Reply(0.0)
    parts = []
    with http.stream("POST", url, json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data.strip() == "[DONE]":
                break
            chunk = json.loads(data)
            if chunk.get("usage"):
                reply.usage = chunk["usage"]
            if chunk.get("timings"):
                reply.timings = chunk["timings"]
            for choice in chunk.get("choices") or ():
                content = (choice.get("delta") or {}).get("content")
                if content:
                    now = time.perf_counter()
                    if reply.ttft is None:
                        reply.ttft = now - started
                    reply.content_times.append(now)
                    parts.append(content)
    reply.seconds = time.perf_counter() - started
    reply.text = "".join(parts)
    return reply


def short_messages(run: int) -> list[dict]:
    return [{"role": "system", "content": f"Run {run}. You are a careful writer."},
            {"role": "user", "content": "Write a long story about a lighthouse keeper."}]


def ratio_line(label: str, values: list[float], goal: str) -> str:
    """``label``: ours and llama-server's, and their ratio (ours alone without llama-server)."""
    if len(values) == 1:
        return f"{label}: ours {values[0]:.1f} (llama-server not run)"
    ours, theirs = values
    return f"{label}: ours {ours:.1f}, llama-server {theirs:.1f}, ratio {ours / theirs:.3f} ({goal})"


def in_turn(servers: list[Server], run: int) -> list[Server]:
    """The servers in the order of pair ``run``: every other pair the other way round, so
    that whatever the side before leaves behind (a process just woken, a VM's spent CPU
    credit) falls on each side alike."""
    return servers if run % 2 == 0 else servers[::-1]


def print_pairs(label: str, ours: list[float], theirs: list[float], goal: str) -> None:
    """The median of ours / llama-server's within each pair, and the same for the pairs
    each side began (a difference between the two shows what going first is worth)."""
    print(f"{label}, ours / llama-server within each pair: {paired_ratio_text(ours, theirs)} "
          f"(goal: median {goal})")
    if len(ours) >= 4:
        print(f"  pairs begun by ours {paired_ratio_text(ours[::2], theirs[::2])}; "
              f"by llama-server {paired_ratio_text(ours[1::2], theirs[1::2])}")


def bench_decode(http, servers: list[Server], model_id: str, runs: int) -> None:
    rates: dict[str, list[float]] = {s.name: [] for s in servers}
    inside: list[float] = []
    for run in range(runs):
        for server in in_turn(servers, run):
            reply = chat(http, server, model_id, short_messages(run), DECODE_TOKENS)
            rates[server.name].append(reply.decode_rate)
            if reply.timings and reply.timings.get("predicted_per_second"):
                inside.append(reply.timings["predicted_per_second"])
        print(f"  run {run + 1}: " + ", ".join(f"{name} {values[-1]:.1f}"
                                               for name, values in rates.items()) + " tok/s",
              flush=True)
    print(ratio_line(f"single-client decode tok/s (client side, median of {runs})",
                     [statistics.median(rates[s.name]) for s in servers], "ratio of the medians"))
    if len(servers) == 2:
        print_pairs("single-client decode", *(rates[s.name] for s in servers), ">= 0.97")
    if inside:
        print(f"  (llama-server's own figure for its decode: {statistics.median(inside):.1f} tok/s)")


def bench_latency(http, servers: list[Server], model_id: str, model: Path, runs: int) -> None:
    from models.engine import ChatOptions, EngineClient, LoadSettings

    messages = short_messages(0)
    repeats = max(10, 4 * runs)
    times: dict[str, list[float]] = {s.name: [] for s in servers}
    times["EngineClient"] = []
    settings = LoadSettings(threads=THREADS, batch_threads=THREADS,
                            context_length=CONTEXT_PER_SLOT, batch_size=BATCH,
                            micro_batch_size=BATCH)
    options = ChatOptions(temperature=0.0, max_tokens=1, ignore_eos=True)
    with EngineClient() as engine:
        engine.load(model, settings)
        for index in range(repeats + 1):  # the first round fills every cache
            for server in servers:
                seconds = chat(http, server, model_id, messages, 1, stream=False).seconds
                if index:
                    times[server.name].append(seconds)
            started = time.perf_counter()
            engine.chat(messages, options).wait()
            if index:
                times["EngineClient"].append(time.perf_counter() - started)
    med = {name: statistics.median(values) * 1e3 for name, values in times.items()}
    ours = servers[0].name
    theirs = "".join(f", {s.name} {med[s.name]:.1f} ms" for s in servers[1:])
    print(f"max_tokens=1 request, same prompt again, median of {repeats}: {ours} "
          f"{med[ours]:.1f} ms, EngineClient alone {med['EngineClient']:.1f} ms{theirs}")
    # Within each round the requests ran back to back, so the VM's drift cancels in their
    # difference; the median of those differences is the figure the goal is about.
    added = statistics.median(a - b for a, b in zip(times[ours], times["EngineClient"])) * 1e3
    print(f"our added latency per request: {added:.1f} ms, the median of the differences within "
          f"each round ({med[ours] - med['EngineClient']:.1f} ms between the medians; goal <= 5 ms)")


def bench_resume(http, servers: list[Server], model_id: str, length: int) -> None:
    from models.engine.benchmark import bench_messages

    talks = {s.name: [bench_messages(1000 + k, length) for k in range(CONVERSATIONS)]
             for s in servers}
    cold: dict[str, list[float]] = {s.name: [] for s in servers}
    warm: dict[str, list[float]] = {s.name: [] for s in servers}
    cached: dict[str, list[int]] = {s.name: [] for s in servers}
    prompt_tokens: dict[str, int] = {}
    for round_ in range(1 + RESUMED_ROUNDS):
        for client in range(CONVERSATIONS):
            for server in servers:
                messages = talks[server.name][client]
                reply = chat(http, server, model_id, messages, REPLY_TOKENS)
                (cold if round_ == 0 else warm)[server.name].append(reply.ttft)
                if round_ and reply.cached_tokens is not None:
                    cached[server.name].append(reply.cached_tokens)
                if reply.usage and round_ == 0:  # the cold prompt's length
                    prompt_tokens[server.name] = reply.usage.get("prompt_tokens", 0)
                messages += [{"role": "assistant", "content": reply.text},
                             {"role": "user", "content": f"Go on (turn {round_ + 1})."}]
        print(f"  round {round_ + 1}: " + ", ".join(
            f"{name} ttft {statistics.median((cold if round_ == 0 else warm)[name][-CONVERSATIONS:]):.3f} s"
            for name in cold), flush=True)
    for server in servers:
        name = server.name
        c, w = statistics.median(cold[name]), statistics.median(warm[name])
        reused = f", cached_tokens {statistics.median(cached[name]):.0f}" if cached[name] else ""
        print(f"{name}: {CONVERSATIONS} clients' ~{prompt_tokens.get(name, 0)}-token "
              f"conversations, cold TTFT {c:.3f} s, resumed {w:.3f} s, ratio {w / c:.3f}"
              f"{reused}")
    print("goal: our resumed / cold <= 0.1")


def bench_concurrent(servers: list[Server], model_id: str, runs: int) -> None:
    import httpx

    totals: dict[str, list[float]] = {s.name: [] for s in servers}
    batched: dict[str, dict[int, str]] = {s.name: {} for s in servers}
    for run in range(runs):
        for server in in_turn(servers, run):
            replies: list[Reply] = []

            def one(client: int) -> None:
                with httpx.Client(timeout=600) as http:
                    reply = chat(http, server, model_id, short_messages(100 * run + client),
                                 DECODE_TOKENS)
                    replies.append(reply)
                    batched[server.name][100 * run + client] = reply.text
            threads = [threading.Thread(target=one, args=(k,)) for k in range(4)]
            started = time.perf_counter()
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            seconds = time.perf_counter() - started
            totals[server.name].append(sum(r.completion_tokens for r in replies) / seconds)
        print(f"  run {run + 1}: " + ", ".join(f"{name} {values[-1]:.1f}"
                                               for name, values in totals.items()) + " tok/s",
              flush=True)
    print(ratio_line(f"4 concurrent clients, total tok/s (median of {runs})",
                     [statistics.median(totals[s.name]) for s in servers], "ratio of the medians"))
    if len(servers) == 2:
        print_pairs("4 concurrent clients", *(totals[s.name] for s in servers), ">= 1.0")
    with httpx.Client(timeout=600) as http:
        for server in servers:
            parted = []
            for key, text in batched[server.name].items():
                alone = chat(http, server, model_id, short_messages(key), DECODE_TOKENS).text
                if alone != text:
                    parted.append(next((i for i, (a, b) in enumerate(zip(alone, text))
                                        if a != b), min(len(alone), len(text))))
            where = f", parting after {sorted(parted)} characters" if parted else ""
            print(f"{server.name}: {len(parted)} of {len(batched[server.name])} batched greedy "
                  f"replies differ from the same request alone{where}", flush=True)


@contextlib.contextmanager
def both_servers(tools, model: Path, home: Path, model_id: str,
                 slots: int) -> Iterator[list[Server]]:
    servers: list[Server] = []
    try:
        servers.append(start_ours(home, model_id, slots))
        if tools is not None:
            servers.append(start_llama_server(tools, model, slots, model_id))
        yield servers
    finally:
        for server in servers:
            server.stop()


def main() -> int:
    global THREADS
    parser = argparse.ArgumentParser()
    parser.add_argument("model", nargs="?", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--decode-runs", type=int, default=15,
                        help="pairs of single-client decode runs (default 15)")
    parser.add_argument("--concurrent-runs", type=int, default=8,
                        help="pairs of 4-client runs (default 8)")
    parser.add_argument("--only", default=",".join(PARTS),
                        help=f"comma-separated parts to run (default: all of {', '.join(PARTS)})")
    parser.add_argument("--threads", type=int, default=THREADS,
                        help=f"threads of both servers (default {THREADS})")
    parser.add_argument("--conversation-tokens", type=int, default=2000,
                        help="length of each client's conversation in part 3 (default 2000)")
    parser.add_argument("--no-llama-server", action="store_true",
                        help="our server alone (no ratios), e.g. while the tools build")
    llama_tools.add_argument(parser)
    args = parser.parse_args()
    THREADS = args.threads
    # Stopped from outside: still stop the servers (the finally blocks run on SystemExit).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    parts = set(args.only.split(","))
    if args.model is None:
        from tests.conftest import cached_models_dir, fetch_smollm2

        args.model = fetch_smollm2(cached_models_dir())
    tools = None if args.no_llama_server else llama_tools.require_tools(
        args.llama_tools, needed=("llama-server",))

    import httpx

    with tempfile.TemporaryDirectory(prefix="bench-server-") as folder:
        home = Path(folder)
        model_id = prepare_home(home, args.model)
        print(f"{model_id}: {THREADS} threads, context {CONTEXT_PER_SLOT} per slot, batch "
              f"{BATCH}, flash attention off; quantdesk serve vs llama-server", flush=True)
        print(f"machine: {llama_tools.machine_line()}", flush=True)
        if parts & {"decode", "latency", "resume"}:
            with both_servers(tools, args.model, home, model_id, 1) as servers, \
                    httpx.Client(timeout=600) as http:
                if "decode" in parts:
                    print("\n1. single-client decode (1 slot)", flush=True)
                    bench_decode(http, servers, model_id, args.decode_runs)
                if "latency" in parts:
                    print("\n2. added latency per request (1 slot)", flush=True)
                    bench_latency(http, servers, model_id, args.model, args.runs)
                if "resume" in parts:
                    print(f"\n3. {CONVERSATIONS} clients taking turns, ~{args.conversation_tokens}-"
                          "token conversations (1 slot)", flush=True)
                    bench_resume(http, servers, model_id, args.conversation_tokens)
        if "concurrent" in parts:
            with both_servers(tools, args.model, home, model_id, 4) as servers:
                print("\n4. 4 concurrent clients (4 slots)", flush=True)
                bench_concurrent(servers, model_id, args.concurrent_runs)
    print(f"\nmachine at the end: {llama_tools.machine_line()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
