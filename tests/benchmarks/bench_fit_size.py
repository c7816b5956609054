"""Fitted files against stock types: mean KL divergence at the same size, by llama.cpp's own tool.

For a model (an F16 GGUF), with and without an importance matrix:

1. every stock type QuantDesk writes (those needing an importance matrix only with one) is
   quantized in one pass — the time is the stock types' cost;
2. for each reference size (by default Q3_K_M's, Q4_K_M's and Q5_K_M's file), a file is
   fitted to that size (``quantdesk quantize --target-size``, timed: activations,
   measuring, choosing and writing);
3. every file's mean KLD, "same top" and perplexity against the F16 source is measured by
   ``llama-perplexity --kl-divergence`` built from the pinned llama.cpp, on **held-out text**
   that no step above saw (Python's own documentation topics, ``pydoc_data``); the fit's
   activations (measured once and shared by the fits; their time is printed apart) and the
   importance matrix come from QuantDesk's built-in calibration text. Stock types smaller
   than ``--window`` (0.9) times the smallest target are not measured (to save time);
4. the table: each fitted file beside the best stock type of its size or smaller, and the
   KLD change (the goal: at least 10 % lower).

    python tests/benchmarks/bench_fit_size.py [--model F16.gguf] [--llama-tools DIR] \\
        [--chunks 10] [--sizes Q3_K_M,Q4_K_M,Q5_K_M] [--modes none,imatrix] [--work DIR] \\
        [--stage stock|fit|all]

With ``--work``, what a run measured is kept there and reused by the next run with the same
folder (the stock files, their times and figures in ``MODE/stock.json``, the activations in
``activations.pkl``): a long comparison can be run in pieces (``--stage stock`` per mode,
then ``--stage fit``), and a piece that was stopped goes on where it stopped.

Without --model, SmolLM2-135M-Instruct (the test model, shipped as Q4_1) is widened to F16.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

from tests.benchmarks.llama_tools import add_argument, machine_line, require_tools  # noqa: E402


def heldout_text(path: Path) -> Path:
    """Python's documentation topics as plain text: English prose and code no calibration saw."""
    import pydoc_data.topics as topics

    if not path.exists():
        path.write_text("\n\n".join(topics.topics[k] for k in sorted(topics.topics)), encoding="utf-8")
    return path


def perplexity(tools, model: Path, args: list[str]) -> str:
    result = subprocess.run([str(tools.path("llama-perplexity")), "-m", str(model), *args],
                            env=tools.env(), capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"llama-perplexity failed on {model.name}:\n{result.stderr[-3000:]}")
    return result.stdout + result.stderr


def number(pattern: str, text: str) -> float:
    match = re.search(pattern, text)
    if not match:
        sys.exit(f"could not find {pattern!r} in llama-perplexity's output:\n{text[-2000:]}")
    return float(match.group(1))


def heldout_setup(tools, args: argparse.Namespace, prefix: str) -> tuple[Path, list[str], Path]:
    """The work folder, llama-perplexity's arguments on the held-out text, and the F16
    source's base pass (made once); ``args.model`` defaults to SmolLM2 widened to F16."""
    work = args.work or Path(tempfile.mkdtemp(prefix=prefix))
    work.mkdir(parents=True, exist_ok=True)
    if args.model is None:
        from tests.conftest import cached_models_dir, fetch_smollm2
        from tests.quantize.model_files import write_dequantized_f16

        args.model = work / "SmolLM2-F16.gguf"
        if not args.model.exists():
            write_dequantized_f16(fetch_smollm2(cached_models_dir()), args.model)
    text = heldout_text(work / "heldout.txt")
    common = ["-f", str(text), "-c", "512", "-b", "2048", "-t", str(args.threads), "-fa", "off",
              "--chunks", str(args.chunks)]
    print(f"{machine_line()}; model {args.model.name}; held-out text {text.name} ({text.stat().st_size} bytes), "
          f"{args.chunks} chunks of 512; load {os.getloadavg()[0]:.1f}", flush=True)
    base = work / "base.kld"
    if not base.exists():
        perplexity(tools, args.model, [*common, "--kl-divergence-base", str(base)])
    return work, common, base


#: A row of llama-perplexity's KLD table: chunk, PPL(Q), ln ratio, KLD, RMS Δp, same top — each a
#: running value over every chunk so far, so the last row holds the whole text's figures.
_KLD_ROW = re.compile(r"^\s*\d+\s+([\d.]+) ± +[\d.]+\s+-?[\d.]+ ± +[\d.]+\s+([\d.]+) ± +[\d.]+\s+"
                      r"[\d.]+ ± +[\d.]+ %\s+([\d.]+) ± +[\d.]+ %\s*$", re.M)


def quality(tools, model: Path, common: list[str], base: Path) -> dict:
    out = perplexity(tools, model, [*common, "--kl-divergence", "--kl-divergence-base", str(base)])
    if not re.search(r"Mean\s+KLD:", out):
        # Some runs end without the summary (seen on a small model's Q4_1, every time);
        # the table's last row holds the same running means.
        rows = _KLD_ROW.findall(out)
        if rows:
            ppl, kld, same_top = rows[-1]
            return {"kld": float(kld), "same_top": float(same_top), "ppl": float(ppl)}
    return {"kld": number(r"Mean\s+KLD:\s+([-\d.]+)", out), "same_top": number(r"Same top p:\s+([\d.]+)", out),
            "ppl": number(r"Mean PPL\(Q\)\s*:\s*([\d.]+)", out)}


def cached_activations(work: Path, measure, chunks: int):
    """The fit's activations on the calibration text, measured once per work folder."""
    path = work / "activations.pkl"
    if path.exists():
        activations, seconds, load = pickle.loads(path.read_bytes())
        print(f"activations from {path} (measured in {seconds:.1f} s, load {load:.1f})", flush=True)
        return activations
    load = os.getloadavg()[0]
    start = time.perf_counter()
    activations = measure()
    seconds = time.perf_counter() - start
    path.write_bytes(pickle.dumps((activations, seconds, load)))
    print(f"activations on the calibration text ({chunks} chunks of 512), once for every fit: "
          f"{seconds:.1f} s, load {load:.1f}", flush=True)
    return activations


def cached_gains(path: Path, measure) -> dict:
    """Each class's KLD per unit of error (``quantize.fit_gains``), measured once per mode."""
    if path.exists():
        cached = json.loads(path.read_text())
    else:
        load = os.getloadavg()[0]
        start = time.perf_counter()
        cached = {"gains": measure(), "seconds": time.perf_counter() - start, "load": load}
        path.write_text(json.dumps(cached, indent=1))
    print(f"class gains (once for every fit of this mode): {cached['seconds']:.1f} s, load {cached['load']:.1f}: "
          + ", ".join(f"{k} {v:.3g}" for k, v in sorted(cached["gains"].items(), key=lambda kv: -kv[1])), flush=True)
    return cached["gains"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_argument(parser)
    parser.add_argument("--model", type=Path, help="an F16 GGUF (default: SmolLM2 widened to F16)")
    parser.add_argument("--chunks", type=int, default=4, help="held-out chunks of 512 tokens")
    parser.add_argument("--window", type=float, default=0.9,
                        help="stock types from this fraction of the smallest target's size up are measured")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sizes", default="Q3_K_M,Q4_K_M,Q5_K_M", help="stock types whose sizes are the targets")
    parser.add_argument("--modes", default="none,imatrix", help="none (no importance matrix), imatrix, or both")
    parser.add_argument("--calibration-chunks", type=int, default=None,
                        help="chunks of 512 tokens of the calibration text for the activations and the importance "
                             "matrix (default: the fit's own, quantize.fit_job.ACTIVATION_CHUNKS)")
    parser.add_argument("--work", type=Path, help="folder for the files (default: a temporary one)")
    parser.add_argument("--stage", choices=("stock", "fit", "all"), default="all",
                        help="stock: only write and measure the stock types; fit: only the fits (stock from before)")
    args = parser.parse_args()

    tools = require_tools(args.llama_tools, build=False, needed=("llama-perplexity",))
    from app.core.quantize_queue import offered_types
    from models.quality.runner import MeasureOptions, generate_imatrix, measure_activations
    from models.quality.text import builtin_text
    from quantize.fit import FitTarget, fit_problem
    from quantize.fit_gains import measure_gains
    from quantize.imatrix import load_imatrix
    from quantize.job import open_source as source_of
    from quantize.fit_job import ACTIVATION_CHUNKS, ACTIVATION_SAMPLE_ROWS, fit_model
    from quantize.ftypes import FILE_TYPES
    from quantize.job import QuantizeOptions, QuantizeTarget, quantize_model

    work, common, base = heldout_setup(tools, args, "fit-size-")
    size_names = [s.strip() for s in args.sizes.split(",") if s.strip()]
    results = work / "results.json"
    rows = json.loads(results.read_text()) if results.exists() else []  # earlier pieces' rows, replaced when rerun
    calibration = args.calibration_chunks or ACTIVATION_CHUNKS
    activations = None
    if args.stage != "stock":
        activations = cached_activations(work, lambda: measure_activations(
            args.model, builtin_text(), MeasureOptions(chunks=calibration, flash_attn="off"),
            sample_rows=ACTIVATION_SAMPLE_ROWS), calibration)
    for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
        imatrix = None
        if mode == "imatrix":
            imatrix = work / "imatrix.gguf"
            if not imatrix.exists():
                generate_imatrix(args.model, builtin_text(), imatrix, MeasureOptions(chunks=calibration,
                                                                                     flash_attn="off"))
        folder = work / mode
        folder.mkdir(exist_ok=True)
        names = [n for n in offered_types() if FILE_TYPES[n].is_quantized and n not in ("TQ1_0", "TQ2_0", "MXFP4_MOE")
                 and (imatrix is not None or not FILE_TYPES[n].needs_imatrix)]
        options = QuantizeOptions(imatrix=imatrix, threads=args.threads)
        cache_file = folder / "stock.json"
        cache = json.loads(cache_file.read_text()) if cache_file.exists() else {}
        if cache.get("types") != names or not all((folder / f"{n}.gguf").exists() for n in names):
            load = os.getloadavg()[0]
            start = time.perf_counter()
            quantize_model(args.model, [QuantizeTarget(FILE_TYPES[n], folder / f"{n}.gguf") for n in names], options)
            cache = {"types": names, "seconds": time.perf_counter() - start, "load": load,
                     "sizes": {n: (folder / f"{n}.gguf").stat().st_size for n in names}, "measured": {}}
            cache_file.write_text(json.dumps(cache, indent=1))
        stock, stock_time = cache["sizes"], cache["seconds"]
        print(f"[{mode}] {len(names)} stock types in one pass: {stock_time:.1f} s "
              f"({stock_time / len(names):.1f} s a type), load {cache['load']:.1f}", flush=True)
        limit = max(stock[s] for s in size_names)
        floor = args.window * min(stock[s] for s in size_names)
        measured = cache["measured"]
        for n in sorted(names, key=stock.get):
            if floor <= stock[n] <= limit:
                if n not in measured:
                    measured[n] = quality(tools, folder / f"{n}.gguf", common, base)
                    cache_file.write_text(json.dumps(cache, indent=1))  # kept if the run is stopped
                print(f"[{mode}] {n:<8} {stock[n]:>11,} B  KLD {measured[n]['kld']:.5f}  same top "
                      f"{measured[n]['same_top']:.2f} %  PPL {measured[n]['ppl']:.3f}", flush=True)
        if args.stage == "stock":
            continue
        gains = cached_gains(folder / "gains.json", lambda: measure_gains(
            args.model, fit_problem(source_of(args.model), options.plan_options(load_imatrix(imatrix) if imatrix else None)),
            options, activations))
        for s in size_names:
            out = folder / f"fit-{s}.gguf"
            load = os.getloadavg()[0]
            start = time.perf_counter()
            fit_model(args.model, out, FitTarget(file_size=stock[s]), options=options, activations=activations,
                      gains=gains)
            fit_time = time.perf_counter() - start
            q = quality(tools, out, common, base)
            candidates = {n: m for n, m in measured.items() if stock[n] <= stock[s]}
            best = min(candidates, key=lambda n: candidates[n]["kld"])
            change = q["kld"] / candidates[best]["kld"] - 1
            row = {"mode": mode, "size_of": s, "target": stock[s], "fit_size": out.stat().st_size, **q,
                   "best_stock": best, "best_stock_size": stock[best], "best_stock_kld": candidates[best]["kld"],
                   "best_stock_same_top": candidates[best]["same_top"], "best_stock_ppl": candidates[best]["ppl"],
                   "kld_change": change, "fit_seconds": fit_time, "stock_seconds_per_type": stock_time / len(names),
                   "load": load}
            rows = [r for r in rows if (r["mode"], r["size_of"]) != (mode, s)] + [row]
            results.write_text(json.dumps(rows, indent=1))  # kept if the run is stopped
            print(f"[{mode}] fit to {s} ({stock[s]:,} B): {row['fit_size']:,} B  KLD {q['kld']:.5f}  same top "
                  f"{q['same_top']:.2f} %  PPL {q['ppl']:.3f} | best stock ≤ size: {best} KLD "
                  f"{candidates[best]['kld']:.5f} -> {100 * change:+.1f} % | fit {fit_time:.0f} s, load {load:.1f}",
                  flush=True)
    print("\n| imatrix | size of | fitted file | KLD | same top | PPL | best stock ≤ size | its KLD | same top | PPL "
          "| KLD change | fit time | stock time/type | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['size_of']} ({r['target']:,} B) | {r['fit_size']:,} B | {r['kld']:.5f} | "
              f"{r['same_top']:.2f} % | {r['ppl']:.3f} | {r['best_stock']} ({r['best_stock_size']:,} B) | "
              f"{r['best_stock_kld']:.5f} | {r['best_stock_same_top']:.2f} % | {r['best_stock_ppl']:.3f} | "
              f"{100 * r['kld_change']:+.1f} % | {r['fit_seconds']:.0f} s | {r['stock_seconds_per_type']:.1f} s | "
              f"{r['load']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
