"""``quantdesk doctor``: print the report a bug report needs."""

from __future__ import annotations

import argparse


def run(_args: argparse.Namespace) -> int:
    from app.core import doctor

    print(doctor.format_report(doctor.collect()))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("doctor", help="print versions, CPU/GPU backends, folders, disk and RAM")
    parser.set_defaults(func=run)
