"""Quality measurement against llama.cpp's own tools: same numbers, same time, small files.

Runs, on one model and text with the same context, batch, threads and flash-attention
setting on both sides:

1. perplexity: ``quantdesk eval`` (no base) vs ``llama-perplexity`` — target within 0.1 %;
2. KL divergence of a Q4_K_M against its F16 source: ``quantdesk eval --base`` (compact base
   pass) vs ``llama-perplexity --kl-divergence-base/--kl-divergence`` — mean KLD within 1 %,
   "same top" within 0.1 points; and our compact pass against our exact one (every token
   kept), which is the error of keeping only the top ``k``;
3. importance matrix: ``quantdesk imatrix`` vs ``llama-imatrix`` — every ``in_sum2`` within
   1e-4 relative, every count equal; a Q4_K_M quantized with each imatrix: KLDs within
   each other's uncertainty; ``llama-quantize`` with our imatrix writes the bytes our
   quantizer writes;
4. time of each side (same run, so the ratios hold on a busy machine) and the size of the
   stored base pass, scaled to 100 chunks of 512 tokens.

    python tests/benchmarks/bench_quality_fidelity.py --llama-tools /work/llama-tools \\
        [--model SmolLM2-F16.gguf] [--text FILE] [--chunks 20] [--threads 2] [--flash-attn off]

Without --model, SmolLM2-135M-Instruct (the test model) is widened to F16 first. Without
--text, QuantDesk's built-in text is used. The tools are the llama.cpp of the pinned
llama-cpp-python sdist, built with ``tests/benchmarks/llama_tools.py``; without them the
script says so and stops.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

TOOLS = ("llama-perplexity", "llama-imatrix", "llama-quantize")


def find_tools(folder: Path) -> Path | None:
    """``folder``'s ``build/bin`` (or ``bin``) when it holds every tool, else ``None``."""
    for bin_dir in (folder / "build" / "bin", folder / "bin", folder):
        if all((bin_dir / t).is_file() for t in TOOLS):
            return bin_dir
    return None


def run_tool(bin_dir: Path, tool: str, args: list[str]) -> tuple[str, float]:
    env = {**os.environ, "LD_LIBRARY_PATH": str(bin_dir)}
    start = time.perf_counter()
    result = subprocess.run([str(bin_dir / tool), *args], env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"{tool} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result.stdout + result.stderr, elapsed


def number(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    if not match:
        sys.exit(f"could not find {pattern!r} in llama.cpp's output:\n{text[-3000:]}")
    return float(match.group(1))


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def compare_imatrix(ours: Path, theirs: Path) -> tuple[float, bool, int]:
    """Largest relative difference of ``in_sum2``, whether every count is equal, tensors."""
    from gguf import GGUFReader

    a = {t.name: np.array(t.data, dtype=np.float64) for t in GGUFReader(ours).tensors}
    b = {t.name: np.array(t.data, dtype=np.float64) for t in GGUFReader(theirs).tensors}
    if set(a) != set(b):
        sys.exit(f"tensor names differ: only ours {sorted(set(a) - set(b))[:5]}, "
                 f"only llama.cpp's {sorted(set(b) - set(a))[:5]}")
    worst, counts_equal = 0.0, True
    for name in a:
        if name.endswith(".counts"):
            counts_equal &= bool(np.array_equal(a[name], b[name]))
        else:
            rel = np.abs(a[name] - b[name]) / np.maximum(np.abs(b[name]), 1e-30)
            worst = max(worst, float(rel.max()))
    return worst, counts_equal, len(a) // 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-tools", type=Path,
                        default=Path(os.environ.get("QUANTDESK_LLAMA_TOOLS",
                                                    Path.home() / ".cache" / "quantdesk-llama-tools")))
    parser.add_argument("--model", type=Path, help="an F16/BF16/F32 GGUF (default: SmolLM2 widened to F16)")
    parser.add_argument("--text", type=Path, help="a text file (default: the built-in text)")
    parser.add_argument("--ctx", type=int, default=512)
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--flash-attn", choices=["on", "off"], default="off")
    parser.add_argument("--work", type=Path, help="folder for the files (default: a temporary one)")
    args = parser.parse_args()

    bin_dir = find_tools(args.llama_tools)
    if bin_dir is None:
        print(f"llama.cpp's tools ({', '.join(TOOLS)}) are not in {args.llama_tools}; build them with "
              "tests/benchmarks/llama_tools.py and pass --llama-tools.", file=sys.stderr)
        return 2

    from models.quality.runner import MeasureOptions, evaluate, generate_imatrix
    from models.quality.text import builtin_text, read_text
    from quantize.ftypes import parse_file_type
    from quantize.job import QuantizeOptions, QuantizeTarget, open_source, quantize_model
    from tests.quantize.model_files import describe_differences, write_dequantized_f16

    work = args.work or Path(tempfile.mkdtemp(prefix="quality-fidelity-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.model is None:
        from tests.conftest import cached_models_dir, fetch_smollm2

        args.model = work / "SmolLM2-F16.gguf"
        if not args.model.exists():
            write_dequantized_f16(fetch_smollm2(cached_models_dir()), args.model)
    text = read_text(args.text) if args.text else builtin_text()
    text_file = work / "text.txt"
    text_file.write_bytes(text.data)  # what llama.cpp's -f reads (no trailing newline to strip)
    ours_text = read_text(text_file)
    fa = "on" if args.flash_attn == "on" else "off"
    common = ["-f", str(text_file), "-c", str(args.ctx), "-b", str(args.batch), "-t", str(args.threads),
              "-fa", fa, "--chunks", str(args.chunks)]
    options = MeasureOptions(n_ctx=args.ctx, n_batch=args.batch, chunks=args.chunks, threads=args.threads,
                             flash_attn=args.flash_attn)
    cache = work / "cache"
    print(f"model {args.model.name}, text {text.name} ({len(text.data)} bytes), ctx {args.ctx}, "
          f"batch {args.batch}, {args.chunks} chunks, {args.threads} threads, flash attention {fa}\n")

    def quantize(imatrix: Path | None, out: Path) -> Path:
        source = open_source(args.model)
        try:
            quantize_model(source, [QuantizeTarget(parse_file_type("Q4_K_M"), out)],
                           QuantizeOptions(imatrix=imatrix, threads=args.threads))
        finally:
            getattr(source, "close", lambda: None)()
        return out

    # 3. importance matrix (first: the quants below use it)
    ours_imatrix = work / "ours.imatrix.gguf"
    theirs_imatrix = work / "theirs.imatrix.gguf"
    _, t_ours_imatrix = timed(lambda: generate_imatrix(args.model, ours_text, ours_imatrix, options))
    _, t_theirs_imatrix = run_tool(bin_dir, "llama-imatrix", ["-m", str(args.model), *common,
                                                              "-o", str(theirs_imatrix)])
    worst, counts_equal, n_tensors = compare_imatrix(ours_imatrix, theirs_imatrix)
    print(f"imatrix: {n_tensors} tensors, largest in_sum2 difference {worst:.2e} relative "
          f"(target 1e-4), counts {'equal' if counts_equal else 'DIFFER'}; "
          f"time ours {t_ours_imatrix:.1f} s, llama-imatrix {t_theirs_imatrix:.1f} s, "
          f"ratio {t_ours_imatrix / t_theirs_imatrix:.2f} (target <= 1.1)")

    q_ours = quantize(ours_imatrix, work / "q4km-ours-imatrix.gguf")
    q_theirs = quantize(theirs_imatrix, work / "q4km-theirs-imatrix.gguf")
    q_llama = work / "q4km-llama-quantize.gguf"
    run_tool(bin_dir, "llama-quantize", ["--imatrix", str(ours_imatrix), str(args.model), str(q_llama), "Q4_K_M",
                                         str(args.threads)])
    # llama-quantize records the imatrix path as given; ours was given the same path
    diff = describe_differences(q_ours, q_llama)
    print(f"Q4_K_M with our imatrix: our quantizer and llama-quantize "
          f"{'write identical bytes' if diff is None else 'DIFFER: ' + diff}")

    # 1. perplexity
    ppl_ours, t_ppl_ours = timed(lambda: evaluate(q_ours, None, ours_text, options))
    out, t_ppl_theirs = run_tool(bin_dir, "llama-perplexity", ["-m", str(q_ours), *common])
    ppl_theirs = number(r"Final estimate: PPL = ([\d.]+)", out)
    print(f"PPL: ours {ppl_ours.ppl:.4f}, llama-perplexity {ppl_theirs:.4f}, "
          f"difference {100 * abs(ppl_ours.ppl / ppl_theirs - 1):.4f} % (target 0.1 %); "
          f"time ratio {t_ppl_ours / t_ppl_theirs:.2f}")

    # 2. KL divergence: base pass + quant pass on each side
    kld_base = work / "base.kld"
    kld_ours, t_kld_ours = timed(lambda: evaluate(q_ours, args.model, ours_text, options, cache_folder=cache))
    _, t_base_theirs = run_tool(bin_dir, "llama-perplexity", ["-m", str(args.model), *common,
                                                             "--kl-divergence-base", str(kld_base)])
    out, t_q_theirs = run_tool(bin_dir, "llama-perplexity", ["-m", str(q_ours), *common, "--kl-divergence",
                                                            "--kl-divergence-base", str(kld_base)])
    kld_theirs = number(r"Mean\s+KLD:\s+([-\d.]+)", out)
    top_theirs = number(r"Same top p:\s+([\d.]+)", out)
    t_kld_theirs = t_base_theirs + t_q_theirs
    print(f"KLD: ours {kld_ours.mean_kld[0]:.6f} ± {kld_ours.mean_kld[1]:.6f}, llama-perplexity {kld_theirs:.6f}, "
          f"difference {100 * abs(kld_ours.mean_kld[0] / kld_theirs - 1):.3f} % (target 1 %)")
    print(f"same top: ours {100 * kld_ours.same_top[0]:.3f} %, llama-perplexity {top_theirs:.3f} %, "
          f"difference {abs(100 * kld_ours.same_top[0] - top_theirs):.3f} points (target 0.1)")
    print(f"quality report time: ours {t_kld_ours:.1f} s, llama-perplexity (base + KLD) {t_kld_theirs:.1f} s, "
          f"ratio {t_kld_ours / t_kld_theirs:.2f} (target <= 1.1)")

    # every token kept needs 8 bytes x vocabulary per position: a few chunks only
    few = min(args.chunks, 4)
    compact_few = evaluate(q_ours, args.model, ours_text, MeasureOptions(**{**options.__dict__, "chunks": few}),
                           cache_folder=cache)
    exact = evaluate(q_ours, args.model, ours_text,
                     MeasureOptions(**{**options.__dict__, "chunks": few, "top_k": 1 << 30}), cache_folder=cache)
    print(f"compact base pass (top {options.top_k}) against every token kept, {few} chunks: mean KLD "
          f"{compact_few.mean_kld[0]:.6f} vs {exact.mean_kld[0]:.6f} "
          f"({100 * abs(compact_few.mean_kld[0] / exact.mean_kld[0] - 1):.4f} %), same top "
          f"{100 * compact_few.same_top[0]:.3f} vs {100 * exact.same_top[0]:.3f} %")

    from models.quality.base_data import cache_path

    compact = cache_path(cache, args.model, ours_text.data, args.ctx, args.chunks, args.batch, options.top_k,
                         options.tail_samples)
    positions = kld_ours.count
    per_100 = compact.stat().st_size / positions * 100 * (512 - 1 - 256)  # 100 chunks of 512
    print(f"base pass on disk: ours {compact.stat().st_size / 1e6:.1f} MB, llama.cpp's "
          f"{kld_base.stat().st_size / 1e6:.1f} MB for {positions} positions; ours for 100 chunks of 512: "
          f"{per_100 / 1e6:.1f} MB (target <= 100 MB)")

    # the two imatrices lead to the same quality
    kld_theirs_imatrix = evaluate(q_theirs, args.model, ours_text, options, cache_folder=cache)
    gap = abs(kld_ours.mean_kld[0] - kld_theirs_imatrix.mean_kld[0])
    print(f"Q4_K_M with our imatrix: KLD {kld_ours.mean_kld[0]:.6f} ± {kld_ours.mean_kld[1]:.6f}; with "
          f"llama-imatrix's: {kld_theirs_imatrix.mean_kld[0]:.6f} ± {kld_theirs_imatrix.mean_kld[1]:.6f} "
          f"({'within' if gap <= min(kld_ours.mean_kld[1], kld_theirs_imatrix.mean_kld[1]) else 'NOT within'} "
          f"each other's uncertainty)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
