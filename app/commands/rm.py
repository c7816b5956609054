"""``quantdesk rm PATH``: remove a model (models outside the models folder are only forgotten, not deleted)."""

from __future__ import annotations

import argparse
from pathlib import Path


def run(args: argparse.Namespace) -> int:
    from models.foundation.errors import QuantDeskError
    from models.library import Library

    library = Library()
    library.scan()
    matches = [m for m in library.models()
               if m.path == str(Path(args.model).expanduser().resolve()) or Path(m.path).name == args.model
               or m.name == args.model]
    if not matches:
        raise QuantDeskError(f"No model in the library matches '{args.model}'.",
                             "Run `quantdesk list` and give its path or file name.")
    if len(matches) > 1:
        raise QuantDeskError(f"'{args.model}' matches {len(matches)} models.", "Give the full path instead.")
    deleted = library.remove(Path(matches[0].path))
    print(f"Deleted {len(deleted)} file(s)." if deleted else f"Forgot {matches[0].path} (your file is kept).")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("rm", help="remove a model from disk and from the library")
    parser.add_argument("model", help="path, file name or name shown by `quantdesk list`")
    parser.set_defaults(func=run)
