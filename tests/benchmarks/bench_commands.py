"""Benchmark: whole ``quantdesk`` commands, timed from process start to exit as a person runs them.

Run: ``.venv/bin/python tests/benchmarks/bench_commands.py [--runs 10] [--repeats 3]
[--threads 2] [--layers 8] [--skip-smollm2] [--command quantdesk] [--llama-quantize PATH]``

1. **Start-up**: ``quantdesk --version`` in a fresh process, ``--runs`` times, beside the
   bare interpreter (``python -c pass``) in the same run: best and median seconds. Goal:
   ``quantdesk --version`` ≤ 0.15 s.
2. **Q8_0 of an F16 GGUF, whole process**: ``quantdesk quantize IN --type Q8_0 -o OUT
   --threads N`` against a process that runs libllama's ``llama_model_quantize`` (the work
   of llama.cpp's ``llama-quantize`` tool, through llama-cpp-python's ctypes bindings) with
   the same threads. Printed: both processes' wall time (best of ``--repeats`` rounds, the
   two taking turns, each run after ``os.sync()`` with no output file left), the time of the
   ``llama_model_quantize`` call alone, and our process as a ratio of each. The files must be
   byte-identical. With ``--llama-quantize PATH`` (llama.cpp's own ``llama-quantize`` tool,
   its libraries beside it) that program is timed too, the same way. Inputs: a synthetic llama-shaped F16 GGUF of ``--layers`` blocks (8: 0.97
   GB) and SmolLM2-135M-Instruct as F16 (271 MB). Goal: our whole process ≤ 0.5 ×
   ``llama_model_quantize``'s time on the 0.97 GB file.

Beside each wall time the process's CPU time (user + system, all threads) is printed: on a
machine busy with other work the wall times grow, the CPU times much less, so they show
what a change saved when the wall times cannot.

Our command runs with ``QUANTDESK_HOME`` in the work folder (its library and kernel cache);
one run before the timings compiles the kernels into that cache, as the first use after an
install does. ``--command`` times another ``quantdesk`` executable (an installed or frozen
one) instead of this checkout's ``python -m app.cli``.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple, Optional

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

#: What llama.cpp's llama-quantize does, in a process of its own: load libllama, quantize.
#: Prints the seconds of the llama_model_quantize call.
LLAMA_CHILD = r"""
import ctypes, sys, time
import llama_cpp.llama_cpp as L
L.llama_backend_init()
params = L.llama_model_quantize_default_params()
params.nthread, params.ftype = int(sys.argv[3]), int(sys.argv[4])
start = time.perf_counter()
status = L.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(params))
print(f"{time.perf_counter() - start:.6f}")
sys.exit(status)
"""


class Run(NamedTuple):
    wall: float  # seconds from start to exit
    cpu: float  # user + system seconds of the process (all its threads): what a busy machine adds
    #             to the wall time by running other work is not in it
    stdout: str


def timed(args: list[str], env: dict[str, str]) -> Run:
    """One process from start to exit (run in the work folder, so that ``python -m``
    imports the packages its PYTHONPATH names)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(args, env=env, capture_output=True, text=True, cwd=env["QUANTDESK_HOME"])
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"{shlex.join(args)} failed ({result.returncode}):\n{result.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Run(wall, cpu, result.stdout)


def bench_startup(quantdesk: list[str], env: dict[str, str], runs: int) -> None:
    commands = {"python -c pass": [sys.executable, "-c", "pass"],
                "quantdesk --version": [*quantdesk, "--version"]}
    runs_of: dict[str, list[Run]] = {name: [] for name in commands}
    for _ in range(runs):  # taking turns, so a busy spell falls on both
        for name, args in commands.items():
            runs_of[name].append(timed(args, env))
    print(f"\n== Start-up, {runs} fresh processes each (seconds)")
    print(f"{'command':24s} {'best':>7s} {'median':>7s} {'best CPU':>9s}")
    for name, values in runs_of.items():
        walls = [r.wall for r in values]
        print(f"{name:24s} {min(walls):7.3f} {statistics.median(walls):7.3f} {min(r.cpu for r in values):9.3f}")
    print(f"quantdesk --version: best {min(r.wall for r in runs_of['quantdesk --version']):.3f} s "
          f"(goal <= 0.15 s)")


def fresh(*paths: Path) -> None:
    for path in paths:
        path.unlink(missing_ok=True)
    os.sync()


def bench_quantize(name: str, src: Path, workdir: Path, quantdesk: list[str], env: dict[str, str],
                   threads: int, repeats: int, llama_quantize: Optional[Path] = None) -> None:
    from quantize.ftypes import FILE_TYPES
    from tests.quantize.model_files import describe_differences

    ours, ref = workdir / "ours-Q8_0.gguf", workdir / "llama-Q8_0.gguf"
    ours_cmd = [*quantdesk, "quantize", str(src), "--type", "Q8_0", "-o", str(ours), "--threads", str(threads)]
    llama_cmd = [sys.executable, "-c", LLAMA_CHILD, str(src), str(ref), str(threads),
                 str(FILE_TYPES["Q8_0"].ftype)]
    tool_cmd = tool_env = None
    if llama_quantize is not None:
        tool = workdir / "tool-Q8_0.gguf"
        tool_cmd = [str(llama_quantize), str(src), str(tool), "Q8_0", str(threads)]
        tool_env = dict(env, LD_LIBRARY_PATH=os.pathsep.join(
            filter(None, [str(llama_quantize.parent), env.get("LD_LIBRARY_PATH")])))
    ours_runs, llama_runs, tool_runs, call_s = [], [], [], []
    for _ in range(repeats):
        fresh(ref)
        llama_runs.append(timed(llama_cmd, env))
        call_s.append(float(llama_runs[-1].stdout.strip().splitlines()[-1]))
        fresh(ours)
        ours_runs.append(timed(ours_cmd, env))
        if tool_cmd is not None:
            fresh(tool)
            tool_runs.append(timed(tool_cmd, tool_env))
    same = describe_differences(ours, ref) is None
    best_ours, best_llama = min(r.wall for r in ours_runs), min(r.wall for r in llama_runs)
    best_call = min(call_s)
    print(f"\n== Q8_0 of {name} ({src.stat().st_size / 1e9:.2f} GB), {threads} threads, whole processes, "
          f"best of {repeats} (seconds; CPU: user + system, all threads)")
    rows = [("quantdesk quantize", ours_runs), ("llama_model_quantize, its process", llama_runs)]
    if tool_runs:
        rows.append(("llama-quantize (llama.cpp's tool)", tool_runs))
    for label, values in rows:
        print(f"{label:36s} {min(r.wall for r in values):7.2f}   CPU {min(r.cpu for r in values):6.2f}   "
              f"(runs: {', '.join(f'{r.wall:.2f}' for r in values)})")
    print(f"{'llama_model_quantize, the call alone':36s} {best_call:7.2f}")
    print(f"ratio ours / llama.cpp: {best_ours / best_call:.2f} of the call (goal <= 0.5), "
          f"{best_ours / best_llama:.2f} of its process; files identical: {'yes' if same else 'NO'}")
    if tool_runs:
        print(f"ratio ours / llama-quantize: {best_ours / min(r.wall for r in tool_runs):.2f}; its file identical: "
              f"{'yes' if describe_differences(tool, ref) is None else 'NO'}")
        fresh(tool)
    fresh(ours, ref)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="start-up runs")
    parser.add_argument("--repeats", type=int, default=3, help="quantize rounds")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--layers", type=int, default=8, help="blocks of the synthetic model (8: 0.97 GB)")
    parser.add_argument("--skip-smollm2", action="store_true")
    parser.add_argument("--skip-quantize", action="store_true")
    parser.add_argument("--command", help="a quantdesk executable to time instead of this checkout's")
    parser.add_argument("--llama-quantize", type=Path, help="llama.cpp's llama-quantize, timed too")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="qd-bench-commands-"))
    (workdir / "home").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, QUANTDESK_HOME=str(workdir / "home"))
    if args.command:  # as given, with the caller's PYTHONPATH
        quantdesk = shlex.split(args.command)
    else:  # this checkout's
        quantdesk = [sys.executable, "-m", "app.cli"]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    print(f"timing {shlex.join(quantdesk)}; work folder {workdir}")
    bench_startup(quantdesk, env, args.runs)
    if args.skip_quantize:
        return 0

    from tests.benchmarks.bench_quantize_file import write_synthetic_f16

    inputs = []
    synthetic = workdir / f"synthetic-{args.layers}-F16.gguf"
    if not synthetic.exists():
        write_synthetic_f16(synthetic, args.layers)
    inputs.append((f"a synthetic {args.layers}-layer llama", synthetic))
    if not args.skip_smollm2:
        from tests.conftest import cached_models_dir, fetch_smollm2
        from tests.quantize.model_files import write_dequantized_f16

        smollm2 = workdir / "SmolLM2-F16.gguf"
        if not smollm2.exists():
            write_dequantized_f16(fetch_smollm2(cached_models_dir()), smollm2)
        inputs.append(("SmolLM2-135M", smollm2))
    warm = workdir / "warm-up-Q8_0.gguf"
    first = timed([*quantdesk, "quantize", str(inputs[-1][1]), "--type", "Q8_0", "-o", str(warm)], env)
    print(f"\nfirst run (kernels compiled into the work folder's cache, or loaded): {first.wall:.1f} s")
    fresh(warm)
    for name, path in inputs:
        bench_quantize(name, path, workdir, quantdesk, env, args.threads, args.repeats, args.llama_quantize)
    return 0


if __name__ == "__main__":
    sys.exit(main())
