"""``quantdesk bench MODEL``: how fast a model runs here, and how fast it could.

Prints prompt-processing and generation speeds measured through the engine, the memory
bandwidth of this computer (a numpy copy of a large array), and generation as a
fraction of the bandwidth limit (bandwidth ÷ bytes of weights read per token).
"""

from __future__ import annotations

import argparse
import sys

from app.commands.engine_args import add_load_arguments, load_settings_from_args


def run(args: argparse.Namespace) -> int:
    from app.core.console import run_job
    from models.engine import EngineClient
    from models.engine.benchmark import format_result, run_benchmark
    from models.engine.gguf_info import read_model_info

    settings = load_settings_from_args(args)
    info = read_model_info(args.model)
    with EngineClient() as client:
        print(f"Loading {args.model} ...", file=sys.stderr, flush=True)
        report = client.load(args.model, settings)
        print(report.summary(), file=sys.stderr, flush=True)
        result = run_job(lambda progress, cancel: run_benchmark(
            client, info.weight_bytes_per_token, prompt_tokens=args.prompt_tokens,
            generate_tokens=args.gen_tokens, runs=args.runs, report=progress, cancel=cancel,
            offload=report.offload, threads=report.settings.threads,
            experts=(info.expert_count, info.expert_used_count)))
    threads = report.settings.threads
    print(format_result(f"{info.name} ({args.model.name}), {threads} threads", result))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("bench", help="measure prompt and generation speed of a GGUF model")
    add_load_arguments(parser)
    parser.add_argument("--prompt-tokens", type=int, default=256,
                        help="about how many prompt tokens to process (default 256)")
    parser.add_argument("--gen-tokens", type=int, default=128,
                        help="tokens to generate per run (default 128)")
    parser.add_argument("--runs", type=int, default=3, help="runs; the median is reported")
    parser.set_defaults(func=run)
