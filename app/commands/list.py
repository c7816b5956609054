"""``quantdesk list``: the models on disk, with their metadata."""

from __future__ import annotations

import argparse


def _print_unfinished(models_dir) -> None:
    from models.hub.downloads import incomplete_downloads

    for plan in incomplete_downloads(models_dir):
        names = ", ".join(f.path for f in plan.files)
        print(f"Unfinished download: {plan.repo_id} ({names}); `quantdesk pull {plan.repo_id}:QUANT` resumes it.")


def run(args: argparse.Namespace) -> int:
    from models.gguf_header import parameters_text  # (numpy: not at every command's start)
    from models.library import Library

    library = Library()
    library.scan()
    models = library.models()
    _print_unfinished(library.models_dir)
    if not models:
        print(f"No models yet in {library.models_dir}. Try `quantdesk search` and `quantdesk pull`.")
        return 0
    print(f"{'NAME':<32} {'ARCH':<10} {'PARAMS':>7} {'QUANT':<8} {'CTX':>7} {'SIZE':>9} {'SOURCE':<10} PATH")
    for m in models:
        ctx = str(m.context_length) if m.context_length else "-"
        reads = "" if m.is_projector or m.kind != "gguf" or m.error else _modalities(m)
        active = parameters_text(m.parameters, m.active_parameters)
        print(f"{m.name[:32]:<32} {(m.architecture or '?')[:10]:<10} {parameters_text(m.parameters):>7} "
              f"{(m.quant or '-')[:8]:<8} {ctx:>7} {m.size / 2**30:7.2f}GB {m.source:<10} {m.path}"
              + (f"  ({active})" if "active" in active else "")
              + ("  (embedding model)" if m.embedding else "")
              + ("  (vision encoder: loads with its model)" if m.is_projector else "") + reads
              + (f"  (unreadable: {m.error})" if m.error else ""))
    return 0


def _modalities(model) -> str:
    """`` (reads images)`` for a model that loads with a vision encoder (the one chosen on
    the Models page, else the one beside it)."""
    from app.core.model_settings import load_settings_for
    from models.projector import input_modalities

    return "  (reads images)" if "image" in input_modalities(model.path, load_settings_for(model.path).mmproj) else ""


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("list", help="list the models on disk")
    parser.set_defaults(func=run)
