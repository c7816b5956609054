"""How many threads a command keeps wanting the CPU, second by second, on a shared machine.

Run: ``.venv/bin/python tests/benchmarks/thread_demand.py [--every 2] -- COMMAND ...``

CPU time / (wall × threads) says how busy a process's threads were, but on a loaded
machine it mostly says how large a share the scheduler gave them: six runnable threads on
two cores each get a third of a core whether or not they had work to do. Linux keeps, per
thread, the time it ran and the time it waited in the run queue
(``/proc/PID/task/TID/schedstat``); their sum is the time the thread wanted the CPU, which
does not depend on what else runs. This samples every live thread of the command four
times a second and prints, per interval, how many threads wanted the CPU (2.0: both
workers of a two-thread job never idle) and the threads that wanted it most, then the
whole run's CPU time and average demand. Threads that start and end between two samples
(llama-quantize starts its workers per tensor) are missed for that last part.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

SAMPLE_S = 0.25


def _threads(pid: int) -> dict[int, float]:
    """Each live thread of ``pid``: seconds it has run or waited to run."""
    wanted = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return wanted
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as stat:
                ran, waited, _ = stat.read().split()
        except (OSError, ValueError):
            continue
        wanted[int(tid)] = (int(ran) + int(waited)) / 1e9
    return wanted


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=float, default=2.0, help="seconds per printed interval")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    seen: dict[int, float] = {}
    interval: dict[int, float] = {}
    total = 0.0
    next_print = args.every
    while process.poll() is None:
        for tid, wanted in _threads(process.pid).items():
            step = wanted - seen.get(tid, 0.0)
            seen[tid] = wanted
            interval[tid] = interval.get(tid, 0.0) + step
            total += step
        now = time.monotonic() - start
        if now >= next_print:
            top = sorted(interval.items(), key=lambda kv: -kv[1])[:3]
            print(f"{next_print - args.every:7.1f}-{next_print:7.1f} s  wanting the CPU: "
                  f"{sum(interval.values()) / args.every:4.2f} threads  (top: "
                  + ", ".join(f"{tid}: {v / args.every:.2f}" for tid, v in top) + ")", flush=True)
            interval.clear()
            next_print += args.every
        time.sleep(SAMPLE_S)
    wall = time.monotonic() - start
    times = os.times()  # the child, reaped by poll(), is counted in its parent's children times
    cpu = times.children_user + times.children_system
    print(f"wall {wall:.1f} s, CPU {cpu:.1f} s ({cpu / wall:.2f} cores busy), "
          f"wanting the CPU {total / wall:.2f} threads on average, exit status {process.returncode}")
    return process.returncode


if __name__ == "__main__":
    sys.exit(main())
