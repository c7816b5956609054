"""``quantdesk bench MODEL``: how fast a model runs here, and how fast it could.

Prints prompt-processing and generation speeds measured through the engine, the memory
bandwidth of this computer (a numpy copy of a large array), and generation as a
fraction of the bandwidth limit (bandwidth ÷ bytes of weights read per token).

With ``--remote`` (other computers' workers), it measures the model on this computer
alone first, then split across this computer and the workers, and prints both speeds,
their ratio, and the network traffic per token (:mod:`models.rpc.traffic`).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from app.commands.engine_args import add_load_arguments, load_settings_from_args


def _measure(client, args, info, report):
    from app.core.console import run_job
    from models.engine.benchmark import run_benchmark

    return run_job(lambda progress, cancel: run_benchmark(
        client, info.weight_bytes_per_token, prompt_tokens=args.prompt_tokens,
        generate_tokens=args.gen_tokens, runs=args.runs, report=progress, cancel=cancel,
        offload=report.offload, threads=report.settings.threads,
        experts=(info.expert_count, info.expert_used_count)))


def run(args: argparse.Namespace) -> int:
    from models.engine import EngineClient
    from models.engine.benchmark import format_result
    from models.engine.gguf_info import read_model_info

    settings = load_settings_from_args(args)
    info = read_model_info(args.model)
    if settings.remote_devices:
        return _run_split(args, settings, info)
    with EngineClient() as client:
        print(f"Loading {args.model} ...", file=sys.stderr, flush=True)
        report = client.load(args.model, settings)
        print(report.details(), file=sys.stderr, flush=True)
        result = _measure(client, args, info, report)
    threads = report.settings.threads
    print(format_result(f"{info.name} ({args.model.name}), {threads} threads", result))
    return 0


def _run_split(args: argparse.Namespace, settings, info) -> int:
    """This computer alone, then split with the workers: speeds side by side, traffic."""
    from models.engine import EngineClient
    from models.engine.benchmark import format_split_result, measure_split_traffic

    local_settings = replace(settings, remote_devices=(), device_split=(),
                             gpu_layers=-1 if settings.gpu_layers != 0 else 0)
    with EngineClient() as client:
        print(f"Loading {args.model} on this computer alone ...", file=sys.stderr, flush=True)
        report = client.load(args.model, local_settings)
        print(report.details(), file=sys.stderr, flush=True)
        local = _measure(client, args, info, report)
        print(f"Loading {args.model} split with {', '.join(settings.remote_devices)} ...",
              file=sys.stderr, flush=True)
        report = client.load(args.model, settings)
        print(report.details(), file=sys.stderr, flush=True)
        traffic = measure_split_traffic(client, args.prompt_tokens, args.gen_tokens)
        split = _measure(client, args, info, report)
    print(format_split_result(f"{info.name} ({args.model.name})", local, split, report, traffic))
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
