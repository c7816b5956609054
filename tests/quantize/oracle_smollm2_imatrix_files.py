"""Oracle run: whole SmolLM2 files of the types that need an importance matrix, ours against
``llama_model_quantize``.

Run: ``.venv/bin/python tests/quantize/oracle_smollm2_imatrix_files.py [--types IQ1_S,IQ2_XXS]
[--chunks 16] [--ctx 128] [--threads 2] [--workdir DIR]``

The test suite compares every file type with an importance matrix on the tiny test models
(``test_imatrix.py``) and SmolLM2's files of the types that need none
(``test_quantize_job.py``); the types llama.cpp refuses without a matrix (IQ1_S, IQ1_M,
IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M, IQ3_XXS, IQ3_XS, Q2_K_S) are too slow to quantize whole
on SmolLM2 there. This is that check: SmolLM2-135M-Instruct widened to F16, a real
importance matrix made from it by ``quantdesk imatrix`` on the built-in text, every type
quantized by QuantDesk in one job and by libllama's ``llama_model_quantize`` (the pinned
build inside llama-cpp-python, through ctypes, with the ``quantize.imatrix.*`` keys the
``llama-quantize`` tool adds), and the two files compared byte for byte; the planned size
is checked against the file too. Prints one line per type and the wall seconds of each side.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def main() -> int:
    from quantize.ftypes import FILE_TYPES

    needing = [name for name, ft in FILE_TYPES.items() if ft.needs_imatrix]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", default=",".join(needing))
    parser.add_argument("--chunks", type=int, default=16, help="imatrix chunks of the built-in text")
    parser.add_argument("--ctx", type=int, default=128, help="tokens per imatrix chunk")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()

    from quantize.gguf_source import GGUFSource
    from quantize.imatrix import load_imatrix
    from quantize.job import QuantizeOptions, QuantizeTarget, quantize_model
    from quantize.plan import PlanOptions, plan_quantization
    from tests.conftest import cached_models_dir, fetch_smollm2
    from tests.quantize.llama_quant_oracle import llama_quantize
    from tests.quantize.model_files import describe_differences, write_dequantized_f16

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="qd-oracle-smollm2-imatrix-"))
    workdir.mkdir(parents=True, exist_ok=True)
    source = workdir / "SmolLM2-135M-F16.gguf"
    if not source.exists():
        write_dequantized_f16(fetch_smollm2(cached_models_dir()), source)
    imatrix_path = workdir / "SmolLM2-135M.imatrix.gguf"
    if not imatrix_path.exists():
        subprocess.run([sys.executable, "-m", "app.cli", "imatrix", str(source), "-o", str(imatrix_path),
                        "--ctx", str(args.ctx), "--chunks", str(args.chunks), "--threads", str(args.threads)],
                       check=True, cwd=REPO)
    matrix = load_imatrix(imatrix_path)
    overrides = [(e.key, e.value, e.type) for e in matrix.metadata(str(imatrix_path))]
    plan_options = PlanOptions(imatrix=matrix, imatrix_given_path=str(imatrix_path))
    types = [FILE_TYPES[name] for name in args.types.split(",")]
    print(f"{source.name} ({source.stat().st_size / 2**20:.1f} MiB), imatrix of {len(matrix.entries)} tensors "
          f"({args.chunks} chunks of {args.ctx} tokens), {args.threads} threads; work folder {workdir}", flush=True)

    targets = [QuantizeTarget(ft, workdir / f"ours-{ft.name}.gguf") for ft in types]
    start = time.perf_counter()
    quantize_model(source, targets, QuantizeOptions(imatrix=imatrix_path, threads=args.threads))
    ours_s = time.perf_counter() - start
    print(f"QuantDesk, every type in one job: {ours_s:.1f} s", flush=True)

    print("\n| type | size MiB | planned size | identical to llama_model_quantize | llama_model_quantize s |")
    print("| --- | --- | --- | --- | --- |")
    failures = 0
    for ft, target in zip(types, targets):
        ref = workdir / f"llama-{ft.name}.gguf"
        start = time.perf_counter()
        status = llama_quantize(source, ref, ft.ftype, nthread=args.threads, imatrix=matrix.entries,
                                kv_overrides=overrides)
        llama_s = time.perf_counter() - start
        planned = plan_quantization(GGUFSource(source), ft, plan_options).file_size
        size = target.path.stat().st_size
        problem = f"llama_model_quantize failed ({status})" if status else describe_differences(target.path, ref)
        failures += problem is not None or planned != size
        print(f"| {ft.name} | {size / 2**20:.1f} | {'yes' if planned == size else f'NO: {planned}'} | "
              f"{'yes' if problem is None else 'NO: ' + problem} | {llama_s:.1f} |", flush=True)
        ref.unlink(missing_ok=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
