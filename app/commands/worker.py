"""``quantdesk worker``: lend this computer's devices to another computer's model.

Runs llama.cpp's RPC server (:mod:`models.rpc.worker`) in this process until Ctrl+C. On
127.0.0.1 by default: the loading computer reaches it through an SSH tunnel
(``--remote ssh://USER@THIS-COMPUTER``). ``--host`` with a network address makes it
reachable directly, without a password or encryption, and says so.
"""

from __future__ import annotations

import argparse


def run(args: argparse.Namespace) -> int:
    from models.foundation.paths import app_paths
    from models.rpc.worker import serve

    devices = [d.strip() for d in args.device.split(",") if d.strip()] if args.device else None
    cache = None if args.no_cache else app_paths().cache / "rpc-worker"
    serve(args.host, args.port, devices, args.threads, cache)
    return 1  # serve returns only by raising


def register(sub: argparse._SubParsersAction) -> None:
    from models.rpc.endpoints import DEFAULT_WORKER_PORT

    parser = sub.add_parser(
        "worker", help="lend this computer's devices to a model loaded on another computer",
        description="Run llama.cpp's RPC server, so a model loaded on another computer can put "
                    "part of its layers here. Both computers need the same QuantDesk version.")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: reached through an SSH "
                             "tunnel only; a network address lets anyone on it use the worker)")
    parser.add_argument("--port", type=int, default=DEFAULT_WORKER_PORT,
                        help=f"TCP port (default {DEFAULT_WORKER_PORT})")
    parser.add_argument("--device", default=None, metavar="NAME[,NAME]",
                        help="devices to offer, by the names `quantdesk doctor` lists (CPU, "
                             "CUDA0...); default: the GPUs, or the CPU when there is none")
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads (default: half the logical cores)")
    parser.add_argument("--no-cache", action="store_true",
                        help="do not keep received weights on disk (by default a model loaded "
                             "again is sent as hashes, not bytes)")
    parser.set_defaults(func=run)
