"""Where a stock type's loss comes from: one class of tensors quantized at a time.

For a model (an F16 GGUF) and a stock type (``--type Q4_1``): the stock file, then for each
class of tensors (``token_embd``/``output``, ``attn_q``, ``attn_k``, ``attn_v``,
``attn_output``, ``ffn_gate``, ``ffn_up``, ``ffn_down``) a file where only that class takes
the stock file's types and every other tensor stays F16 (a recipe, written by the fit's
writer). Each file's mean KLD against the F16 source is measured by ``llama-perplexity
--kl-divergence`` (pinned llama.cpp) on the held-out text of ``bench_fit_size.py``; beside
it, how far the class's quantized weights are from the source's (relative error energy),
and the bytes that keeping the class in F16 would cost over the stock file.

With ``--layers`` each class is also split by layer ranges (``--layers 4``: four ranges).
With ``--keep-f16 attn_v,attn_k`` the stock file with those classes kept F16 is measured
instead (what spending bytes on the classes that lose most would buy).

    python tests/benchmarks/bench_fit_classes.py [--model F16.gguf] [--type Q4_1] [--work DIR] [--chunks 4]

Without --model, SmolLM2-135M-Instruct widened to F16 (its release is Q4_1: the question is
what of Q4_1's KLD is left when the weights come back nearly exactly).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

from tests.benchmarks.bench_fit_size import heldout_setup, quality  # noqa: E402
from tests.benchmarks.llama_tools import add_argument, require_tools  # noqa: E402


def tensor_class(name: str) -> str:
    if not name.startswith("blk."):
        return "token_embd/output"
    return name.split(".")[2]


def weight_error(source: Path, quantized: Path) -> dict[str, tuple[float, float]]:
    """Per tensor: (Σ (W − Ŵ)², Σ W²) between the source's and the file's dequantized weights."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    src = {t.name: t for t in GGUFReader(source).tensors}
    out = {}
    for t in GGUFReader(quantized).tensors:
        if t.name not in src or len(t.shape) < 2:
            continue
        a = dequantize(src[t.name].data, src[t.name].tensor_type).astype(np.float64).reshape(-1)
        b = dequantize(t.data, t.tensor_type).astype(np.float64).reshape(-1)
        out[t.name] = (float(np.square(a - b).sum()), float(np.square(a).sum()))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_argument(parser)
    parser.add_argument("--model", type=Path, help="an F16 GGUF (default: SmolLM2 widened to F16)")
    parser.add_argument("--type", default="Q4_1", help="the stock type whose loss is split")
    parser.add_argument("--chunks", type=int, default=4, help="held-out chunks of 512 tokens")
    parser.add_argument("--layers", type=int, default=0, help="also split each class into this many layer ranges")
    parser.add_argument("--keep-f16", action="append", default=[], metavar="CLASSES",
                        help="measure the stock file with these classes (comma-separated) kept F16 instead of the split; repeatable")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=Path, help="folder for the files (default: a temporary one)")
    args = parser.parse_args()

    tools = require_tools(args.llama_tools, build=False, needed=("llama-perplexity",))
    from gguf import GGUFReader

    from quantize.ftypes import FILE_TYPES
    from quantize.ggml_types import GGMLQuantizationType as T
    from quantize.fit_job import fit_model
    from quantize.job import QuantizeOptions, QuantizeTarget, quantize_model
    from quantize.recipe import Recipe
    from quantize.type_rules import allows_quantization

    work, common, base = heldout_setup(tools, args, "fit-classes-")
    options = QuantizeOptions(threads=args.threads)
    stock = work / f"{args.type}.gguf"
    if not stock.exists():
        quantize_model(args.model, [QuantizeTarget(FILE_TYPES[args.type], stock)], options)
    reader = GGUFReader(stock)
    arch = str(bytes(reader.fields["general.architecture"].parts[-1]), "utf-8")
    stock_types = {t.name: T(int(t.tensor_type)) for t in reader.tensors
                   if allows_quantization(t.name, tuple(int(d) for d in reversed(t.shape)), arch)}
    n_layers = 1 + max(int(n.split(".")[1]) for n in stock_types if n.startswith("blk."))
    errors = weight_error(args.model, stock)
    f16_cost = {t.name: (2 * int(t.n_elements)) - int(t.n_bytes) for t in reader.tensors if t.name in stock_types}

    groups: dict[str, list[str]] = defaultdict(list)
    for name in stock_types:
        cls = tensor_class(name)
        groups[cls].append(name)
        if args.layers and name.startswith("blk."):
            layer = int(name.split(".")[1])
            part = layer * args.layers // n_layers
            lo, hi = part * n_layers // args.layers, (part + 1) * n_layers // args.layers - 1
            groups[f"{cls} layers {lo}-{hi}"].append(name)
    whole = quality(tools, stock, common, base)
    print(f"\nstock {args.type} ({stock.stat().st_size:,} B): KLD {whole['kld']:.5f}  same top "
          f"{whole['same_top']:.2f} %  PPL {whole['ppl']:.3f}\n", flush=True)
    for keep in args.keep_f16:
        kept = {c.strip() for c in keep.split(",") if c.strip()}
        recipe = Recipe({n: (T.F16 if tensor_class(n) in kept else stock_types[n]) for n in stock_types})
        out = work / f"{args.type}-f16-{'+'.join(sorted(kept)).replace('/', '+')}.gguf"
        if not out.exists():
            fit_model(args.model, out, recipe=recipe, options=options)
        q = quality(tools, out, common, base)
        print(f"{args.type} with {', '.join(sorted(kept))} kept F16 ({out.stat().st_size:,} B): KLD {q['kld']:.5f} "
              f"({100 * (q['kld'] / whole['kld'] - 1):+.1f} %)  same top {q['same_top']:.2f} %  PPL {q['ppl']:.3f}",
              flush=True)
    if args.keep_f16:
        return 0
    print("| quantized as in the stock file (the rest F16) | tensors | weight error energy / source energy "
          "| F16 would cost | KLD | share of the stock file's KLD | same top |")
    print("|---|---|---|---|---|---|---|")
    total = 0.0
    for group, names in groups.items():
        recipe = Recipe({n: (stock_types[n] if n in names else T.F16) for n in stock_types})
        out = work / f"only-{group.replace('/', '+').replace(' ', '_')}.gguf"
        if not out.exists():
            fit_model(args.model, out, recipe=recipe, options=options)
        q = quality(tools, out, common, base)
        err = sum(errors[n][0] for n in names) / max(1e-30, sum(errors[n][1] for n in names))
        if " layers " not in group:
            total += q["kld"]
        print(f"| {group} | {len(names)} | {err:.2e} | {sum(f16_cost[n] for n in names) / 1e6:.1f} MB | "
              f"{q['kld']:.5f} | {100 * q['kld'] / whole['kld']:.0f} % | {q['same_top']:.2f} % |", flush=True)
    print(f"\nsum of the classes alone: {total:.5f} (the stock file: {whole['kld']:.5f}); load "
          f"{os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
