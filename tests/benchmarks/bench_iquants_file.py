"""Benchmark: whole ``quantdesk quantize`` commands for the i-quant, ternary and MXFP4 file
types against llama.cpp's ``llama-quantize`` tool built from the pinned source.

Run: ``.venv/bin/python tests/benchmarks/bench_iquants_file.py --llama-quantize PATH
[--types IQ4_XS,IQ2_XXS] [--threads 2] [--layers 8] [--experts 0] [--repeats 1] [--workdir DIR]``

The input is the synthetic llama-shaped F16 GGUF of ``bench_commands.py`` (``--layers``
blocks; 8: 0.97 GB), with a GGUF importance matrix written for it (random, every
quantizable weight). ``--experts 8`` splits each feed-forward into 8 experts (the same
size): on the dense file MXFP4_MOE writes Q8_0 everywhere, since its MXFP4 is for expert
tensors only. Each type is quantized by ``quantdesk quantize --type T --imatrix M
--threads N`` and by ``llama-quantize --imatrix M IN OUT T N`` (its libraries beside it,
the ``quantize.imatrix.*`` keys llama-quantize adds), both whole processes after
``os.sync()``, the two taking turns; the best wall time and CPU time of each, their
ratios (goal: ≤ 0.5, ≤ 0.33 for IQ1_M and IQ2_XXS; CPU time is the fair one on a shared
machine), the share of the threads each kept busy (CPU / (wall × threads): on a loaded
machine this is the share the scheduler gave, not idleness), whether the files are
byte-identical and the load average after the type's runs are printed. A type that needs no importance matrix is run with it too,
as people quantize these types.

Building llama-quantize from the sdist (about 10 minutes on 2 cores)::

    cmake -S vendor/llama.cpp -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \\
        -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON ...
    cmake --build build --target llama-quantize
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.benchmarks.bench_commands import fresh, timed  # noqa: E402

TYPES = ["IQ4_NL", "IQ4_XS", "IQ3_M", "IQ3_S", "IQ3_XS", "IQ3_XXS", "IQ2_M", "IQ2_S", "IQ2_XS", "IQ2_XXS",
         "IQ1_M", "IQ1_S", "TQ2_0", "TQ1_0", "MXFP4_MOE"]
GOAL = {"IQ1_M": 0.33, "IQ2_XXS": 0.33}
#: As the first use after an install: the kernels compiled into the app cache the timed runs load.
COMPILE = "from quantize.blocks import compile_kernels; compile_kernels()"


def write_imatrix(model: Path, path: Path) -> Path:
    from tests.quantize.test_imatrix import write_model_imatrix

    return write_model_imatrix(model, path, seed=1)


def bench_type(name: str, src: Path, imatrix: Path, workdir: Path, quantdesk: list[str], env: dict[str, str],
               tool: Path, threads: int, repeats: int) -> None:
    from tests.quantize.model_files import describe_differences

    ours, ref = workdir / f"ours-{name}.gguf", workdir / f"tool-{name}.gguf"
    ours_cmd = [*quantdesk, "quantize", str(src), "--type", name, "-o", str(ours), "--threads", str(threads),
                "--imatrix", str(imatrix)]
    tool_cmd = [str(tool), "--imatrix", str(imatrix), str(src), str(ref), name, str(threads)]
    tool_env = dict(env, LD_LIBRARY_PATH=os.pathsep.join(filter(None, [str(tool.parent), env.get("LD_LIBRARY_PATH")])))
    ours_runs, tool_runs = [], []
    for _ in range(repeats):
        fresh(ref)
        tool_runs.append(timed(tool_cmd, tool_env))
        fresh(ours)
        ours_runs.append(timed(ours_cmd, env))
    problem = describe_differences(ours, ref)
    best_ours, best_tool = min(r.wall for r in ours_runs), min(r.wall for r in tool_runs)
    cpu_ours, cpu_tool = min(r.cpu for r in ours_runs), min(r.cpu for r in tool_runs)
    print(f"| {name} | {best_ours:.1f} (CPU {cpu_ours:.1f}) | {best_tool:.1f} (CPU {cpu_tool:.1f}) | "
          f"{best_ours / best_tool:.2f} | {cpu_ours / cpu_tool:.2f} | ≤ {GOAL.get(name, 0.5)} | "
          f"{cpu_ours / (best_ours * threads):.2f} / {cpu_tool / (best_tool * threads):.2f} | "
          f"{'yes' if problem is None else 'NO: ' + problem} | {os.getloadavg()[0]:.1f} |", flush=True)
    fresh(ours, ref)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-quantize", type=Path, required=True, help="llama.cpp's llama-quantize")
    parser.add_argument("--types", default=",".join(TYPES))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--layers", type=int, default=8, help="blocks of the synthetic model (8: 0.97 GB)")
    parser.add_argument("--experts", type=int, default=0, help="split each feed-forward into this many experts")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="qd-bench-iquants-"))
    (workdir / "home").mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, QUANTDESK_HOME=str(workdir / "home"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    # As after a first run: the app's bytecode is written below and loaded by the timed runs (with
    # PYTHONDONTWRITEBYTECODE set, every run compiled the app's modules again: 0.2-0.3 s of CPU).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    quantdesk = [sys.executable, "-m", "app.cli"]
    from tests.benchmarks.bench_quantize_file import write_synthetic_f16

    moe = f"x{args.experts}" if args.experts else ""
    src = workdir / f"synthetic-{args.layers}{moe}-F16.gguf"
    if not src.exists():
        write_synthetic_f16(src, args.layers, args.experts)
    imatrix = workdir / f"synthetic{moe}.imatrix.gguf"
    if not imatrix.exists():
        write_imatrix(src, imatrix)
    print(f"timing {shlex.join(quantdesk)} against {args.llama_quantize}; {src} ({src.stat().st_size / 1e9:.2f} GB), "
          f"{args.threads} threads, best of {args.repeats}; work folder {workdir}")
    timed([sys.executable, "-m", "compileall", "-q", *(str(REPO / d) for d in ("app", "models", "quantize"))], env)
    warm = timed([sys.executable, "-c", COMPILE], env)
    print(f"first use: every kernel compiled into the work folder's cache, grids built: {warm.wall:.1f} s")
    print("\n| type | quantdesk s | llama-quantize s | wall ratio | CPU ratio | goal | threads busy, ours / tool "
          "| identical | load |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.types.split(","):
        bench_type(name, src, imatrix, workdir, quantdesk, env, args.llama_quantize, args.threads, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
