"""How long the Hub client takes to give up: a refused connection, and a cancelled request.

Run: ``.venv/bin/python tests/benchmarks/bench_hub_offline.py [--repeats 3] [--library]``

- refused: ``search_models`` against a port nobody listens on, until the sentence "could
  not reach the Hub" (QuantDesk's client, :mod:`models.hub.session`);
- cancel: a search the local Hub holds (no answer), cancelled 0.3 s after the Hub got it,
  until ``search_models`` raised ``Cancelled``, and the next search's time;
- with ``--library``: the same refused ``list_models`` with huggingface_hub's own client
  (its retries with 1-2-4-8-8 s backoff; ~23 s, one run).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

os.environ["HF_HUB_DISABLE_XET"] = "1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def refused_search_s() -> float:
    from models.foundation.errors import QuantDeskError
    from models.hub.search import search_models

    os.environ["HF_ENDPOINT"] = f"http://127.0.0.1:{free_port()}"
    start = time.perf_counter()
    try:
        search_models("tiny")
    except QuantDeskError as exc:
        assert "could not reach the Hub" in exc.user_message
    return time.perf_counter() - start


def cancel_and_next_s(server) -> tuple[float, float]:
    from models.foundation.errors import Cancelled
    from models.foundation.jobs import CancelToken
    from models.hub.search import search_models

    os.environ["HF_ENDPOINT"] = server.url
    server.state.faults.api_delay = 600.0
    asked = len(server.state.requests)
    cancel, ended = CancelToken(), {}

    def run() -> None:
        try:
            search_models("tiny", cancel=cancel)
        except Cancelled:
            ended["at"] = time.perf_counter()

    thread = threading.Thread(target=run)
    thread.start()
    while len(server.state.requests) == asked:
        time.sleep(0.01)
    time.sleep(0.3)
    cancelled_at = time.perf_counter()
    cancel.cancel()
    thread.join()
    server.state.faults.api_delay = 0.0
    start = time.perf_counter()
    assert search_models("tiny").results
    return ended["at"] - cancelled_at, time.perf_counter() - start


def library_refused_s() -> float:
    import httpx2
    from huggingface_hub import HfApi
    from huggingface_hub.utils import set_client_factory

    set_client_factory(lambda: httpx2.Client(follow_redirects=True, timeout=None))  # the library's settings
    start = time.perf_counter()
    try:
        list(HfApi(endpoint=f"http://127.0.0.1:{free_port()}").list_models(limit=1))
    except httpx2.TransportError:
        pass
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--library", action="store_true", help="also time huggingface_hub's own client (~23 s)")
    args = parser.parse_args()

    import logging

    logging.getLogger("huggingface_hub").setLevel(logging.ERROR)
    from tests.models.hub.conftest import make_state
    from tests.models.hub_server import HubServer

    refused = [refused_search_s() for _ in range(args.repeats)]
    with HubServer(make_state()) as server:
        runs = [cancel_and_next_s(server) for _ in range(args.repeats)]
    print(f"refused search -> sentence   best {min(refused):.3f} s, worst {max(refused):.3f} s ({args.repeats} runs)")
    print(f"cancel -> Cancelled raised   best {min(r[0] for r in runs):.3f} s, "
          f"worst {max(r[0] for r in runs):.3f} s ({args.repeats} runs)")
    print(f"next search after a cancel   best {min(r[1] for r in runs):.3f} s, "
          f"worst {max(r[1] for r in runs):.3f} s ({args.repeats} runs)")
    if args.library:
        print(f"refused list_models, huggingface_hub's own client: {library_refused_s():.1f} s (1 run)")


if __name__ == "__main__":
    main()
