"""``quantdesk imatrix MODEL``: an importance matrix, as ``llama-imatrix`` computes it.

Runs the model over a text (QuantDesk's built-in one, or ``--text``) in chunks and writes
the sums of squared activations of every ``blk.*`` matrix multiplication, in the GGUF
format that ``quantdesk quantize --imatrix`` and ``llama-quantize`` read.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from app.commands.measure_args import add_measure_arguments, measure_options


def default_output(model: Path) -> Path:
    """``model-F16.gguf`` → ``model-F16.imatrix.gguf`` beside it."""
    return model.with_name(f"{model.stem}.imatrix.gguf")


def run(args: argparse.Namespace) -> int:
    from app.core.console import run_job
    from models.quality.runner import generate_imatrix
    from models.quality.text import resolve_text

    model = Path(args.model)
    text = resolve_text(args.text)
    output = Path(args.output) if args.output else default_output(model)
    result = run_job(lambda report, cancel: generate_imatrix(
        model, text, output, measure_options(args), report, cancel))
    print(result.perplexity.format())
    print(f"Wrote {result.path}: {result.entries} tensors, {result.chunk_count} chunks of {args.ctx} tokens "
          f"of {text.name}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("imatrix", help="compute an importance matrix (as llama-imatrix) for low-bit quantization",
                            description="Compute a model's importance matrix on a text, as llama-imatrix does.")
    parser.add_argument("model", help="the GGUF model (best its F16/BF16/F32 source)")
    parser.add_argument("-o", "--output", help="the file to write (default: MODEL.imatrix.gguf beside it)")
    add_measure_arguments(parser)
    parser.set_defaults(func=run)
