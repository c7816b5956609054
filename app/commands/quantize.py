"""``quantdesk quantize``: a GGUF or Hugging Face folder → one GGUF per quantization type.

Mirrors ``llama-quantize``: the same type names (``Q4_K_M``, ``Q6_K`` ...), ``--pure``,
``--imatrix``, ``--output-tensor-type`` and ``--token-embedding-type``, with several types
written in one pass (``--type Q4_K_M,Q6_K``). The plan (each file's exact size and tensor
types) is printed before any weight is read.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from models.foundation.errors import QuantDeskError


def default_output(input_path: Path, type_name: str) -> Path:
    """``model-F16.gguf`` → ``model-Q4_K_M.gguf`` beside it; a folder gets it inside.

    The same rule as the Quantize page's default (:func:`app.core.quantize_queue.output_path`).
    """
    from app.core.quantize_queue import output_path

    return output_path(input_path, type_name)


def output_paths(input_path: Path, type_names: list[str], output: str | None) -> list[Path]:
    """Where each type goes: ``-o`` is a file for one type, a folder or a ``{type}`` template for several."""
    if output is None:
        return [default_output(input_path, name) for name in type_names]
    if "{type}" in output:
        return [Path(output.replace("{type}", name)) for name in type_names]
    out = Path(output)
    if len(type_names) == 1 and not out.is_dir():
        return [out]
    if out.exists() and not out.is_dir():
        raise QuantDeskError(f"{out} is a file, but several types need one file each.",
                             "Give a folder, or a name with {type} in it, e.g. model-{type}.gguf.")
    return [out / default_output(input_path, name).name for name in type_names]


def run(args: argparse.Namespace) -> int:
    from quantize import kernel_loader

    if args.target_size or args.target_bpw is not None or args.recipe:
        return _run_fit(args)
    if not args.type:
        raise QuantDeskError("No quantization type was chosen.",
                             "Give one with --type (e.g. Q4_K_M), or a size with --target-size (e.g. 3.5GB).")
    if args.dry_run:
        return _run(args)
    # First: numba and the kernels load on their own thread while the rest is imported
    # and the model's header is read and planned.
    kernel_loader.start(args.type.split(","), imatrix=bool(args.imatrix))
    try:
        return _run(args)
    finally:  # an early error: the loader ends before the interpreter does
        kernel_loader.wait()


def _run(args: argparse.Namespace) -> int:
    from app.core.console import run_job
    from quantize.ftypes import parse_file_type, parse_tensor_type
    from quantize.imatrix import load_imatrix
    from quantize.job import (QuantizeOptions, QuantizeTarget, check_imatrix, open_source,
                              plan_targets, quantize_model)
    from quantize.plan import format_size

    if args.type.strip().lower() == "list":
        return _list_types(Path(args.input), args)
    file_types = [parse_file_type(t) for t in args.type.split(",") if t.strip()]
    if not file_types:
        raise QuantDeskError("--type names no quantization type.", "Give one, e.g. --type Q4_K_M.")
    input_path = Path(args.input)
    paths = output_paths(input_path, [ft.name for ft in file_types], args.output)
    targets = [QuantizeTarget(ft, p) for ft, p in zip(file_types, paths)]
    options = QuantizeOptions(
        pure=args.pure,
        output_tensor_type=parse_tensor_type(args.output_tensor_type) if args.output_tensor_type else None,
        token_embedding_type=parse_tensor_type(args.token_embedding_type) if args.token_embedding_type else None,
        imatrix=args.imatrix,
        threads=args.threads,
    )
    source = open_source(input_path)
    try:
        imatrix = load_imatrix(Path(options.imatrix)) if options.imatrix else None
        plans = plan_targets(source, targets, options, imatrix)
        print(f"Plan for {source.description}:")
        for plan, target in zip(plans, targets):
            print(f"  {plan.summary()}")
            print(f"      -> {target.path}")
            if plan.fallbacks:
                print(f"      {len(plan.fallbacks)} tensors use a fallback type (rows not a multiple of the block)")
        if args.dry_run:
            return 0
        check_imatrix(plans, imatrix)
        result = run_job(lambda report, cancel: quantize_model(source, targets, options, report, cancel))
    finally:
        getattr(source, "close", lambda: None)()
    from models.library import Library

    library = Library()
    for path in result.outputs:
        print(f"Wrote {path} ({format_size(path.stat().st_size)})")
        library.record_output(path, "quantized")
    return 0


def _run_fit(args: argparse.Namespace) -> int:
    """``--target-size``/``--target-bpw``: choose each tensor's type for that size;
    ``--recipe``: write a fitted file again from its recipe."""
    from app.core.console import run_job
    from quantize.fit import FitTarget, check_target, fit_bounds, fit_problem
    from quantize.fit_job import fit_model, recipe_path
    from quantize.imatrix import load_imatrix
    from quantize.job import QuantizeOptions, open_source
    from quantize.plan import format_size
    from quantize.recipe import format_target, load_recipe, parse_size

    if args.type:
        raise QuantDeskError("--type and a fit (--target-size, --target-bpw, --recipe) cannot be combined.",
                             "Give one of them.")
    if sum(bool(x) for x in (args.target_size, args.target_bpw is not None, args.recipe)) > 1:
        raise QuantDeskError("Give only one of --target-size, --target-bpw and --recipe.",
                             "A recipe already fixes every tensor's type, and so the size.")
    input_path = Path(args.input)
    target = recipe = None
    if args.target_size:
        target = FitTarget(file_size=parse_size(args.target_size))
        name = f"fit-{format_target(target.file_size)}"
    elif args.target_bpw is not None:
        target = FitTarget(bits_per_weight=args.target_bpw)
        name = f"fit-{args.target_bpw:g}bpw"
    else:
        recipe = load_recipe(Path(args.recipe))
        name = "fit"
    output = Path(args.output) if args.output else default_output(input_path, name)
    make_matrix = (args.imatrix or "").lower() == "make" and not args.dry_run
    if make_matrix:  # the best result: the model's importance matrix, made (or reused) first
        from app.core.quality_checks import MeasureSettings, make_imatrix
        from quantize.fit_job import ACTIVATION_CHUNKS

        made = run_job(lambda report, cancel: make_imatrix(input_path, MeasureSettings(None, 512, ACTIVATION_CHUNKS),
                                                           report, cancel))
        print(f"Importance matrix: {made.path}{' (made before, reused)' if made.reused else ''}")
        args.imatrix = str(made.path)
    options = QuantizeOptions(imatrix=args.imatrix, threads=args.threads)
    source = open_source(input_path)
    try:
        if target is not None:
            imatrix = load_imatrix(Path(args.imatrix)) if args.imatrix else None
            problem = fit_problem(source, options.plan_options(imatrix))
            smallest, largest = fit_bounds(problem)
            print(f"Fitting {source.description} to {target.describe()}: files from {format_size(smallest)} "
                  f"to {format_size(largest)} can be made")
            check_target(problem, target, input_path.name)
        print(f"      -> {output} (recipe: {recipe_path(output).name})")
        if args.dry_run:
            return 0
        result = run_job(lambda report, cancel: fit_model(source, output, target, recipe, options, report, cancel))
    finally:
        getattr(source, "close", lambda: None)()
    print(result.summary)
    from models.library import Library

    gguf, saved_recipe = result.outputs[0], result.outputs[-1]
    print(f"Wrote {gguf} ({format_size(gguf.stat().st_size)}) and its recipe {saved_recipe}")
    Library().record_output(gguf, "quantized")
    return 0


def _list_types(input_path: Path, args: argparse.Namespace) -> int:
    """``--type list``: every type this model can be quantized to, largest first (each
    i-quant beside the k-quants of its size), with its exact file size; nothing is written."""
    from app.core.quantize_queue import offered_types
    from quantize.ftypes import parse_file_type
    from quantize.imatrix import load_imatrix
    from quantize.job import QuantizeOptions, QuantizeTarget, open_source, plan_targets
    from quantize.plan import format_size

    names = offered_types()
    targets = [QuantizeTarget(parse_file_type(n), default_output(input_path, n)) for n in names]
    options = QuantizeOptions(pure=args.pure, imatrix=args.imatrix)
    source = open_source(input_path)
    try:
        imatrix = load_imatrix(Path(args.imatrix)) if args.imatrix else None
        plans = plan_targets(source, targets, options, imatrix)
    finally:
        getattr(source, "close", lambda: None)()
    print(f"Types for {source.description} (exact sizes; nothing is written):")
    for name, plan in zip(names, plans):
        note = ""
        if plan.needs_imatrix:
            note = "  uses the importance matrix" if imatrix is not None else "  needs an importance matrix"
        print(f"  {name:<10} {plan.bits_per_weight:5.2f} bpw  {format_size(plan.file_size):>11}{note}")
    if any(p.needs_imatrix for p in plans) and imatrix is None:
        print("Make an importance matrix with `quantdesk imatrix MODEL`, then give it with --imatrix.")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    from quantize.ftypes import FILE_TYPES  # names only: no numpy, no kernels

    parser = sub.add_parser(
        "quantize", help="quantize a GGUF or Hugging Face folder to Q4_K_M, Q8_0, ... (llama-quantize's types)",
        description="Quantize a model exactly as llama-quantize does. Types: " + ", ".join(FILE_TYPES) + ".")
    parser.add_argument("input", help="an F32/F16/BF16 GGUF file or a Hugging Face safetensors folder")
    parser.add_argument("--type",
                        help="one or more types, comma-separated, e.g. Q4_K_M,Q6_K; 'list' prints every type "
                             "with its exact size for this model")
    parser.add_argument("--target-size", metavar="SIZE",
                        help="instead of a type: the least loss that fits this size, each tensor's type chosen "
                             "by measurement (bytes, or 3.5GB, 900MiB)")
    parser.add_argument("--target-bpw", type=float, metavar="BPW",
                        help="instead of a type: the least loss within this many bits per weight")
    parser.add_argument("--recipe", metavar="FILE",
                        help="write a fitted file again from its .recipe.json (or from the fitted GGUF itself)")
    parser.add_argument("-o", "--output", help="output file (one type), or folder / name with {type} (several)")
    parser.add_argument("--imatrix", help="importance matrix from llama-imatrix (GGUF or legacy .dat); with "
                                          "--target-size, 'make' makes one first from the built-in text (the best result)")
    parser.add_argument("--pure", action="store_true", help="no k-quant mixture: every weight in the default type")
    parser.add_argument("--output-tensor-type", help="type of output.weight, e.g. Q8_0")
    parser.add_argument("--token-embedding-type", help="type of token_embd.weight, e.g. Q8_0")
    parser.add_argument("--threads", type=int, help="worker threads (default: every core)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan (sizes and types) and stop")
    parser.set_defaults(func=run)
