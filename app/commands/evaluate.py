"""``quantdesk eval QUANT --base SOURCE``: what a quantization costs, as llama-perplexity measures it.

Prints the statistics of ``llama-perplexity --kl-divergence`` (perplexity of both models,
KL divergence, "same top token", Δp), computed the same way; the source model's pass is
stored and reused for every quant of it. Without ``--base``, the model's perplexity alone.
``--json`` prints one object for scripts. A report against a base is stored with the
file's Library entry (:meth:`models.library.Library.record_quality`).
"""

from __future__ import annotations

import argparse
import json
import logging
import sqlite3
from pathlib import Path

from app.commands.measure_args import add_measure_arguments, measure_options

log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> int:
    from app.core.console import run_job
    from models.quality.kld import QualityStats
    from models.quality.runner import evaluate
    from models.quality.text import resolve_text

    text = resolve_text(args.text)
    base = Path(args.base) if args.base else None
    stats = run_job(lambda report, cancel: evaluate(Path(args.model), base, text, measure_options(args),
                                                    report, cancel))
    if isinstance(stats, QualityStats):
        from models.library import Library

        settings = {"text": text.name, "n_ctx": args.ctx, "chunks": args.chunks, "tokens": stats.count}
        try:
            Library().record_quality(Path(args.model), base, settings, stats.to_dict())
        except (OSError, sqlite3.Error) as exc:  # the report is printed all the same
            log.warning("could not store the quality report of %s: %s", args.model, exc)
    if args.json:
        out = {"model": args.model, "base": args.base, "text": text.name, "n_ctx": args.ctx,
               **stats.to_dict()}
        print(json.dumps(out, indent=2))
    else:
        if isinstance(stats, QualityStats):
            print(f"{Path(args.model).name} against {base.name if base else ''}, "
                  f"{stats.count} tokens of {text.name}:")
        print(stats.format())
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("eval", help="measure a quant against its source: KL divergence, perplexity, same top token",
                            description="Measure a quantized model against its source model as "
                                        "llama-perplexity --kl-divergence does.")
    parser.add_argument("model", help="the GGUF model to measure (a quant)")
    parser.add_argument("--base", help="the model it was quantized from (F16/BF16/F32 GGUF); "
                                       "without it, perplexity alone")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_measure_arguments(parser)
    parser.set_defaults(func=run)
