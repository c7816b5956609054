"""Command-line options shared by ``quantdesk imatrix`` and ``quantdesk eval``.

Not a command itself: both measure a model on a text in chunks, with the flags of
llama.cpp's ``llama-imatrix`` and ``llama-perplexity`` under our names (``--ctx`` is
``-c``, ``--batch`` is ``-b``, ``--flash-attn`` is ``-fa``).
"""

from __future__ import annotations

import argparse


def add_measure_arguments(parser: argparse.ArgumentParser) -> None:
    """``--text``, ``--ctx``, ``--chunks``, ``--batch``, ``--threads``, ``--flash-attn``, ``--gpu-layers``."""
    group = parser.add_argument_group("measurement")
    group.add_argument("--text", help="a text file to measure on (default: QuantDesk's built-in text)")
    group.add_argument("--ctx", type=int, default=512, help="tokens per chunk (default 512, as llama.cpp)")
    group.add_argument("--chunks", type=int, default=None, help="at most this many chunks (default: the whole text)")
    group.add_argument("--batch", type=int, default=2048,
                       help="tokens per decode call; chunks are decoded batch/ctx at a time (default 2048)")
    group.add_argument("--threads", type=int, default=None, help="CPU threads (default: every core)")
    group.add_argument("--flash-attn", choices=["auto", "on", "off"], default="auto",
                       help="flash attention (default auto, as llama.cpp)")
    group.add_argument("--gpu-layers", type=int, default=None, help="layers on the GPU (default: llama.cpp's)")


def measure_options(args: argparse.Namespace):
    """The :class:`~models.quality.runner.MeasureOptions` the flags describe."""
    from models.quality.runner import MeasureOptions

    return MeasureOptions(n_ctx=args.ctx, n_batch=args.batch, chunks=args.chunks, threads=args.threads,
                          flash_attn=args.flash_attn, gpu_layers=args.gpu_layers)
