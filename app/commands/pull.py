"""``quantdesk pull REPO[:QUANT]``: download a model into the models folder.

Run it again after an interruption (Ctrl+C, a dropped connection, a killed process)
and it continues from the bytes already on disk.
"""

from __future__ import annotations

import argparse


def run(args: argparse.Namespace) -> int:
    from app.core.console import run_job
    from models.hub.details import model_details
    from models.hub.downloads import download_plan, parse_pull_spec, plan_pull
    from models.library import Library

    if args.list:
        repo_id, _ = parse_pull_spec(args.spec)
        details = model_details(repo_id, args.revision)
        for v in details.variants:
            shards = f" ({len(v.files)} parts)" if len(v.files) > 1 else ""
            print(f"{v.quant:<12} {v.size / 2**30:8.2f} GiB{shards}")
        if details.checkpoint:
            print(f"{'safetensors':<12} {details.checkpoint.size / 2**30:8.2f} GiB (convertible)")
        return 0
    plan = plan_pull(args.spec, args.revision)
    print(f"Downloading {plan.repo_id} {plan.label}: {len(plan.files)} file(s), "
          f"{plan.size / 2**20:.1f} MiB (commit {plan.commit[:10]})")
    paths = run_job(lambda report, cancel: download_plan(plan, report, cancel))
    library = Library()
    library.scan()
    for path in paths:
        print(path)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("pull", help="download a model from the Hub (resumable)")
    parser.add_argument("spec", metavar="REPO[:QUANT]", help="e.g. bartowski/SmolLM2-135M-Instruct-GGUF:Q4_K_M")
    parser.add_argument("--revision", help="branch, tag or commit (default: main)")
    parser.add_argument("--list", action="store_true", help="only list the quantizations on offer")
    parser.set_defaults(func=run)
