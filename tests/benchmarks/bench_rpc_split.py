"""A model split across this computer and two workers, against this computer alone.

Starts two ``quantdesk worker`` processes — each in a network namespace of its own when
run as root with ``ip netns`` (``--netns``), else on 127.0.0.1 — and runs
``quantdesk bench MODEL --remote A,B``, which measures the model on this computer alone,
then split (the first layers on this CPU, the rest in two equal runs on the workers), and
prints both speeds, their ratio and the traffic per token. Both measurements run in the
same call, so the ratio means the same on a fast or a slow machine; on one machine the
workers share its cores and memory with the engine, so the ratio is the split's cost in
transfers and scheduling, without a real network's latency.

    .venv/bin/python tests/benchmarks/bench_rpc_split.py [--model PATH] [--gpu-layers 20]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.conftest import cached_models_dir, fetch_smollm2  # noqa: E402
from tests.models.rpc_hosts import netns_available, workers_on_hosts  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="default: SmolLM2-135M Q4_1")
    parser.add_argument("--gpu-layers", type=int, default=20,
                        help="layers on the workers (default 20 of SmolLM2's 31)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--worker-threads", type=int, default=1)
    parser.add_argument("--netns", action="store_true", help="workers as hosts in namespaces")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    model = args.model or fetch_smollm2(cached_models_dir())
    if args.netns and netns_available():
        parser.error(f"--netns: {netns_available()}")
    # Ended by a signal, still stop the workers and remove the namespaces (finally blocks).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    home = Path(tempfile.mkdtemp(prefix="bench-rpc-"))
    with workers_on_hosts(home, 2, args.netns, args.worker_threads) as workers:
        remote = ",".join(w.address for w in workers)
        command = [sys.executable, "-m", "app.cli", "bench", str(model), "--remote", remote,
                   "--gpu-layers", str(args.gpu_layers), "--split", "1,1",
                   "--threads", str(args.threads), "--batch-threads", str(args.threads),
                   "--ctx", "1024", "--runs", str(args.runs)]
        print("$", " ".join(command), flush=True)
        return subprocess.run(command, cwd=Path(__file__).resolve().parents[2]).returncode


if __name__ == "__main__":
    sys.exit(main())
