"""The ``quantdesk`` command: the window with no arguments, a job with a subcommand.

The CLI drives the same ``app.core`` functions as the GUI. Errors meant for users
(:class:`~app.core.errors.QuantDeskError`) are printed as one sentence without a
traceback; the details go to the log file.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from typing import Optional, Sequence

from app import APP_NAME, __version__
from app.commands import COMMAND_MODULES
from app.core.errors import QuantDeskError

log = logging.getLogger(__name__)

NO_DISPLAY_MESSAGE = (
    "QuantDesk is installed, but no display was found (DISPLAY and WAYLAND_DISPLAY are not "
    "set), so its window cannot open here. On a desktop, run `quantdesk` to open it. "
    "Showing `quantdesk doctor` instead:"
)


def has_display(env: Optional[dict] = None) -> bool:
    """Whether a Qt window can open: always on macOS/Windows, with X11/Wayland elsewhere."""
    env = os.environ if env is None else env
    if sys.platform in ("win32", "darwin"):
        return True
    return bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY") or env.get("QT_QPA_PLATFORM"))


def version_text() -> str:
    """One line per component: QuantDesk, llama-cpp-python, Python."""
    from models.llama_lib import llama_cpp_python_version

    return (
        f"{APP_NAME} {__version__}\n"
        f"llama-cpp-python {llama_cpp_python_version() or 'not installed'}\n"
        f"Python {sys.version.split()[0]}"
    )


def _cmd_gui(args: argparse.Namespace) -> int:
    if not has_display():
        from app.commands import doctor

        print(NO_DISPLAY_MESSAGE, flush=True)
        return doctor.run(args)
    from app.ui.application import run_gui

    return run_gui()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; subcommands register here as issues add them."""
    parser = argparse.ArgumentParser(
        prog="quantdesk",
        description="Run large language models locally. With no command, opens the window.",
    )
    parser.add_argument("--version", action="store_true", help="print versions and exit")
    parser.set_defaults(func=_cmd_gui)
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``quantdesk`` console script."""
    from app.core.logs import setup_logging

    args = build_parser().parse_args(argv)
    if args.version:
        print(version_text())
        return 0
    try:
        setup_logging()
        return int(args.func(args) or 0)
    except QuantDeskError as exc:
        log.info("user-facing error: %s", exc.user_message, exc_info=True)
        print(f"{APP_NAME}: {exc.user_message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
