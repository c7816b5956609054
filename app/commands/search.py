"""``quantdesk search TEXT``: find GGUF (or safetensors) models on the Hub."""

from __future__ import annotations

import argparse


def _count(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.1f}k" if n >= 1e3 else str(n)


def run(args: argparse.Namespace) -> int:
    from models.hub.search import search_models

    page = search_models(" ".join(args.text), fmt=args.format, sort=args.sort,
                         page=args.page - 1, page_size=args.limit)
    if not page.results:
        print("No models found.")
        return 0
    width = max(len(m.repo_id) for m in page.results)
    print(f"{'MODEL':<{width}}  {'DOWNLOADS':>9}  {'LIKES':>6}  {'UPDATED':<10}  {'LICENSE':<14}  GATED")
    for m in page.results:
        updated = m.updated.strftime("%Y-%m-%d") if m.updated else "-"
        print(f"{m.repo_id:<{width}}  {_count(m.downloads):>9}  {_count(m.likes):>6}  {updated:<10}  "
              f"{(m.license or '-'):<14}  {m.gated or 'no'}")
    if page.has_more:
        print(f"More results: quantdesk search {' '.join(args.text)} --page {args.page + 1}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("search", help="search the Hugging Face Hub for models")
    parser.add_argument("text", nargs="*", help="words in the model name")
    parser.add_argument("--format", choices=["gguf", "safetensors", "any"], default="gguf")
    parser.add_argument("--sort", choices=["downloads", "likes", "recent"], default="downloads")
    parser.add_argument("--page", type=int, default=1, help="page number, from 1")
    parser.add_argument("--limit", type=int, default=20, help="results per page (1-100)")
    parser.set_defaults(func=run)
