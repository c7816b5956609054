"""Benchmark: speculative decoding inside the batch, against plain decoding and llama-server.

Two workloads, greedy, through the OpenAI API from one client (``httpx``, streamed):

- **edit**: the client sends a Python file of this repository (cut to about 1,000–2,000
  tokens) and asks for it back with one small change (a function renamed); the reply
  copies almost all of the prompt. Up to the file's tokens plus 64.
- **chat**: free writing (short stories): nothing to copy. Up to ``--chat-tokens`` (200).

Each with 1 client and with 4 clients at once (4 slots), on:

- ``quantdesk serve`` with prompt lookup (the default) and without (``"speculative.n_max":
  0`` in the request), taking turns request by request in alternated pairs (every other
  pair starts with the other side), so the machine's drift falls on both alike;
- ``llama-server`` built from the same llama.cpp (``llama_tools.py``: ``--llama-tools
  DIR``), with each of its n-gram ``--spec-type`` modes (``--spec-types``) on the edit
  workload, then its best mode against ours in alternated pairs (``-np 4`` for 4 clients).

Speed is the generation rate the client sees: reply tokens after each reply's first, over
the time from the first content to the last (4 clients: all replies' tokens over the span
of the group), so the prefill — the same for every side, and cached before each pair — is
left out. Printed per configuration: the median of the ratios within pairs with quartiles
(``timing.paired_ratio``), drafted and accepted tokens, in how many rounds each side's
greedy replies were ours plain's token for token, and whether ours with and without
speculation were identical in every round (they must be). llama-server's replies with
speculation need not be: its drafts of 48–64 tokens put 64 or more tokens of a sequence in a
micro-batch, where llama.cpp's CPU flash attention takes its tiled kernel, which rounds
differently from the one-token kernel (ours keep a reply below that, ``speculation.
MOST_STEP_TOKENS``).

Both servers get the same GGUF (SmolLM2-135M-Instruct unless a path is given; ``--f32``
serves its weights dequantized to F32 instead: four times the bytes per step, which makes a
step bound by reading the weights as a larger model's is, rather than by arithmetic), threads
(``--threads``, 1 by default: on a 2-core machine shared with other work, two threads that
wait for each other at every barrier lose more to preemption than they gain), context per
slot 4096, batch 512, and flash attention on (``--no-flash-attention`` for off: llama.cpp's
plain attention rounds a batch of positions differently from one, so a greedy reply may
then change at a near-tie).

``--identity N`` times nothing: it sends N different requests of each workload, one at a
time and 4 at once, with prompt lookup and without, and counts the greedy replies that
differ (none may); each reply up to ``--identity-tokens`` (160) tokens.

Run: ``.venv/bin/python tests/benchmarks/bench_speculative.py [MODEL.gguf] [--runs N]
[--clients 1,4] [--workloads edit,chat] [--spec-types ngram-simple,...] [--threads N]
[--f32] [--llama-tools DIR] [--no-llama-server] [--identity N]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.benchmarks import bench_server, llama_tools  # noqa: E402
from tests.benchmarks.timing import paired_ratio_text  # noqa: E402

SPEC_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
# Files sent back with a change: (path, function renamed, its new name).
EDITS = [("models/engine/prompt_cache.py", "common_prefix", "shared_prefix_length"),
         ("models/engine/token_stream.py", "StopFilter", "StopStringFilter"),
         ("models/engine/cancel_flag.py", "lane_cancelled", "is_lane_cancelled"),
         ("models/engine/fallback.py", "remember", "remember_fallback"),
         ("models/engine/llama_log.py", "parse_offload_report", "read_offload_report")]
STORIES = ["a fox and a miller", "a lighthouse keeper and a storm", "two robots who open a "
           "bakery", "a girl who finds a map in a library book", "a dragon afraid of the dark",
           "a clockmaker who builds a bird", "a ship's cat", "a city under the sea"]
EDIT_CHARS = 4000  # 1,000 to 1,300 SmolLM2 tokens of Python
PLAIN = {"speculative.n_max": 0}


@dataclass
class Side:
    """One configuration under test: a server and the fields its requests carry."""

    name: str
    server: bench_server.Server
    extra: dict = field(default_factory=dict)
    rates: list[float] = field(default_factory=list)
    drafted: int = 0
    accepted: int = 0
    same: int = 0  # rounds whose greedy replies were ours plain's, token for token


def edit_messages(run: int) -> tuple[list[dict], int]:
    """The edit request of run ``run`` and its reply budget in characters' tokens."""
    path, old, new = EDITS[run % len(EDITS)]
    source = (REPO / path).read_text()[:EDIT_CHARS]
    source = source[:source.rfind("\n") + 1]
    prompt = (f"Here is a Python file. Return the whole file with one change: rename "
              f"`{old}` to `{new}` everywhere. Reply with the file only.\n\n```python\n"
              f"{source}```")
    return [{"role": "user", "content": prompt}], len(source) // 3 + 64


def chat_messages(run: int) -> tuple[list[dict], int]:
    return [{"role": "user", "content": f"Write a short story about {STORIES[run % len(STORIES)]}."}], 0


def identity_requests(workload: str, count: int) -> list[list[dict]]:
    """``count`` different requests: edits of this repository's engine modules (each one's
    functions renamed in turn), or short stories and descriptions of varied subjects."""
    import re

    requests = []
    if workload == "edit":
        for path in sorted((REPO / "models" / "engine").glob("*.py")):
            source = path.read_text()[:EDIT_CHARS // 2]
            source = source[:source.rfind("\n") + 1]
            for name in re.findall(r"^def (\w+)", path.read_text(), re.M)[:3]:
                requests.append([{"role": "user", "content": (
                    f"Here is a Python file. Return the whole file with one change: rename "
                    f"`{name}` to `{name}_v2` everywhere. Reply with the file only.\n\n"
                    f"```python\n{source}```")}])
    else:
        for story in STORIES:
            for ask in ("Write a short story about {}.", "Describe {} in three sentences.",
                        "Write a poem about {}.", "Tell a child about {}.",
                        "List five facts one might invent about {}.",
                        "Write a news report about {}.", "Write a dialogue about {}."):
                requests.append([{"role": "user", "content": ask.format(story)}])
    if len(requests) < count:
        raise SystemExit(f"only {len(requests)} different {workload} requests, not {count}")
    return requests[:count]


def identity(http, server: bench_server.Server, model_id: str, workloads: list[str],
             count: int, tokens: int) -> int:
    """Greedy replies with prompt lookup against those without, ``count`` requests of each
    workload alone and 4 at once; print and return how many differed."""
    differed = 0
    for workload in workloads:
        requests = [(m, tokens) for m in identity_requests(workload, count)]
        for clients in (1, 4):
            same = drafted = accepted = 0
            for start in range(0, count, clients):
                group = requests[start:start + clients]
                # The prompts in the cache first, as in the timed rounds: a prompt read
                # afresh and one reused round differently, which can flip a near-tie.
                run_group(http, Side("", server), model_id, [(m, 1) for m, _ in group])
                texts = []
                for extra in ({}, PLAIN):
                    replies = run_group(http, Side("", server, extra), model_id, group)
                    texts.append([r.text for r in replies])
                    for reply in replies:
                        d, a = speculation_counts(reply)
                        drafted, accepted = drafted + d, accepted + a
                same += sum(x == y for x, y in zip(*texts))
            differed += count - same
            print(f"-- {workload}, {clients} at once: {same} of {count} greedy replies identical "
                  f"with and without prompt lookup (drafted {drafted}, accepted {accepted})",
                  flush=True)
    return differed


def group_rate(replies: list) -> float:
    """Reply tokens after each first one, over the span from the first content to the last."""
    starts = [r.content_times[0] for r in replies if r.content_times]
    ends = [r.content_times[-1] for r in replies if r.content_times]
    tokens = sum(max(r.completion_tokens - 1, 0) for r in replies)
    return tokens / (max(ends) - min(starts)) if starts and max(ends) > min(starts) else 0.0


def speculation_counts(reply) -> tuple[int, int]:
    """Drafted and accepted tokens: ours in ``usage.speculative``, llama-server's in timings."""
    ours = (reply.usage or {}).get("speculative")
    if ours:
        return ours["drafted_tokens"], ours["accepted_tokens"]
    timings = reply.timings or {}
    return int(timings.get("draft_n", 0)), int(timings.get("draft_n_accepted", 0))


def run_group(http, side: Side, model_id: str, requests: list[tuple[list[dict], int]]) -> list:
    """Send ``requests`` at once (one thread each); the replies, in order."""
    replies: list = [None] * len(requests)

    def one(k: int) -> None:
        messages, budget = requests[k]
        replies[k] = bench_server.chat(http, side.server, model_id, messages, budget,
                                       ignore_eos=False, extra=side.extra)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return replies


def compare(http, sides: list[Side], model_id: str, workload: str, clients: int,
            runs: int, chat_tokens: int) -> int:
    """Alternated rounds of ``sides`` on ``workload``; print; return greedy mismatches
    between the first two sides (ours with and without speculation)."""
    make = edit_messages if workload == "edit" else chat_messages
    mismatches = 0
    for run in range(runs):
        requests = [make(run * clients + k) for k in range(clients)]
        requests = [(m, budget or chat_tokens) for m, budget in requests]
        for side in sides:  # the prompts in every server's cache first
            run_group(http, Side(side.name, side.server, side.extra), model_id,
                      [(m, 1) for m, _ in requests])
        order = sides if run % 2 == 0 else sides[::-1]
        texts = {}
        for side in order:
            replies = run_group(http, side, model_id, requests)
            side.rates.append(group_rate(replies))
            for reply in replies:
                drafted, accepted = speculation_counts(reply)
                side.drafted += drafted
                side.accepted += accepted
            texts[side.name] = [r.text for r in replies]
        for side in sides:
            side.same += texts[side.name] == texts[sides[1].name]
        if len(sides) >= 2 and texts[sides[0].name] != texts[sides[1].name]:
            mismatches += 1
    reference = sides[1]
    print(f"-- {workload}, {clients} client{'s' if clients > 1 else ''}, {runs} rounds")
    for side in sides:
        rate = f"{side.accepted / side.drafted:.0%}" if side.drafted else "-"
        ratio = paired_ratio_text(side.rates, reference.rates) if side is not reference else "1"
        print(f"  {side.name:<34} {statistics.median(side.rates):7.1f} tok/s  drafted "
              f"{side.drafted:6} accepted {side.accepted:6} ({rate:>4})  / ours plain: {ratio}"
              f"  same text: {side.same}/{runs}")
    print("  greedy replies with and without speculation identical in every round"
          if not mismatches else f"  WARNING: they differed in {mismatches} of {runs} rounds")
    return mismatches


def best_spec_type(http, tools, model: Path, model_id: str, types: list[str], threads: int,
                   flash: bool, runs: int) -> str:
    """llama-server's fastest n-gram mode on the edit workload (one client), by median rate."""
    rates = {}
    for spec in types:
        server = bench_server.start_llama_server(tools, model, 1, model_id, ["--spec-type", spec],
                                                 threads, flash)
        try:
            side = Side(f"llama-server {spec}", server)
            for run in range(runs):
                messages, budget = edit_messages(run)
                run_group(http, side, model_id, [(messages, 1)])
                side.rates.append(group_rate(run_group(http, side, model_id, [(messages, budget)])))
            rates[spec] = statistics.median(side.rates)
            print(f"  llama-server --spec-type {spec:<14} {rates[spec]:7.1f} tok/s", flush=True)
        finally:
            server.stop()
    return max(rates, key=rates.get)


def main() -> int:
    import httpx

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", help="GGUF file (default: the SmolLM2 test model)")
    parser.add_argument("--runs", type=int, default=3, help="alternated rounds per configuration")
    parser.add_argument("--clients", default="1,4")
    parser.add_argument("--workloads", default="edit,chat")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--chat-tokens", type=int, default=200)
    parser.add_argument("--spec-types", default=",".join(SPEC_TYPES))
    parser.add_argument("--screen-runs", type=int, default=1,
                        help="edit replies per llama-server mode when choosing its best")
    parser.add_argument("--f32", action="store_true",
                        help="serve the model's weights dequantized to F32")
    parser.add_argument("--no-flash-attention", action="store_true")
    parser.add_argument("--no-llama-server", action="store_true")
    parser.add_argument("--llama-server-plain", action="store_true",
                        help="also llama-server without speculation (its plain decoding)")
    parser.add_argument("--draft-tokens", type=int, default=0, metavar="N",
                        help="also ours with prompt lookup drafting at most N tokens at once")
    parser.add_argument("--identity", type=int, default=0, metavar="N",
                        help="compare N greedy replies per workload with and without "
                             "speculation, alone and 4 at once, instead of timing")
    parser.add_argument("--identity-tokens", type=int, default=160)
    llama_tools.add_argument(parser)
    args = parser.parse_args()

    model = Path(args.model) if args.model else None
    if model is None:
        from tests.conftest import cached_models_dir, fetch_smollm2
        model = fetch_smollm2(cached_models_dir())
    flash = not args.no_flash_attention
    clients = [int(c) for c in args.clients.split(",")]
    workloads = args.workloads.split(",")
    tools = None if args.no_llama_server or args.identity else llama_tools.require_tools(
        args.llama_tools, needed=("llama-server",))
    mismatches = 0
    best = None
    with tempfile.TemporaryDirectory() as folder, httpx.Client(timeout=1800) as http:
        if args.f32:
            from tests.quantize.model_files import write_dequantized_f16
            model = write_dequantized_f16(model, Path(folder) / f"{model.stem}-F32.gguf", "f32")
        model_id = bench_server.prepare_home(Path(folder) / "home", model, args.threads, flash)
        print(f"== {model.name}, {args.threads} thread(s), context "
              f"{bench_server.CONTEXT_PER_SLOT} per slot, flash attention "
              f"{'on' if flash else 'off'}, greedy; {llama_tools.machine_line()}", flush=True)
        if args.identity:
            server = bench_server.start_ours(Path(folder) / "home", model_id, 4)
            try:
                return 1 if identity(http, server, model_id, workloads, args.identity,
                                     args.identity_tokens) else 0
            finally:
                server.stop()
        if tools is not None and "edit" in workloads:
            print("-- llama-server's modes on the edit workload, 1 client:", flush=True)
            best = best_spec_type(http, tools, model, model_id, args.spec_types.split(","),
                                  args.threads, flash, args.screen_runs)
        for count in clients:
            servers = [bench_server.start_ours(Path(folder) / "home", model_id, count)]
            try:
                if tools is not None:
                    servers.append(bench_server.start_llama_server(
                        tools, model, count, model_id, ["--spec-type", best] if best else [],
                        args.threads, flash))
                    if args.llama_server_plain:
                        servers.append(bench_server.start_llama_server(
                            tools, model, count, model_id, [], args.threads, flash))
                for workload in workloads:
                    sides = [Side("ours, prompt lookup", servers[0]),
                             Side("ours, plain", servers[0], dict(PLAIN))]
                    if args.draft_tokens:
                        sides.append(Side(f"ours, prompt lookup, {args.draft_tokens} at most",
                                          servers[0], {"speculative.n_max": args.draft_tokens}))
                    if tools is not None:
                        label = f"llama-server --spec-type {best}" if best else "llama-server"
                        sides.append(Side(label, servers[1]))
                    if len(servers) > 2:
                        sides.append(Side("llama-server, plain", servers[2]))
                    mismatches += compare(http, sides, model_id, workload, count, args.runs,
                                          args.chat_tokens)
                    sys.stdout.flush()
            finally:
                for server in servers:
                    server.stop()
    return 0 if not mismatches else 1


if __name__ == "__main__":
    sys.exit(main())
