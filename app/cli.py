"""The ``quantdesk`` command: the window with no arguments, a job with a subcommand.

The CLI drives the same ``app.core`` functions as the GUI. Errors meant for users
(:class:`~models.foundation.errors.QuantDeskError`) are printed as one sentence without a
traceback; the details go to the log file.
"""

from __future__ import annotations

import argparse
import atexit
import gc
import importlib
import os
import sys
from typing import Optional, Sequence

from app import __version__
from app.commands import COMMAND_MODULES
from models.foundation import APP_NAME
from models.foundation.errors import QuantDeskError
from models.foundation.versions import installed_version

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
    return (
        f"{APP_NAME} {__version__}\n"
        f"llama-cpp-python {installed_version('llama-cpp-python') or 'not installed'}\n"
        f"Python {sys.version.split()[0]}"
    )


def _cmd_gui(args: argparse.Namespace) -> int:
    open_path = getattr(args, "open_path", None)
    if not has_display():
        if open_path:
            print(f"{APP_NAME}: no display was found, so the window cannot open {open_path} here. "
                  f"To chat in the terminal, run `quantdesk chat {open_path}`; to quantize, "
                  f"`quantdesk quantize {open_path} --type Q4_K_M`.", file=sys.stderr)
            return 2
        from app.commands import doctor

        print(NO_DISPLAY_MESSAGE, flush=True)
        return doctor.run(args)
    from app.ui.application import run_gui

    return run_gui(initial_path=open_path)


def open_path_argument(argv: Sequence[str], commands: set[str]) -> Optional[str]:
    """The path in ``quantdesk PATH`` (a file manager's "Open with"), else ``None``.

    A first argument that is neither an option nor a command's name is a path to open in
    the window; when a file manager passes several, the first is opened.
    """
    if argv and not argv[0].startswith("-") and argv[0] not in commands:
        return argv[0]
    return None


def unknown_command(argv: Sequence[str], commands: set[str]) -> Optional[str]:
    """The sentence for ``quantdesk WORD …`` when WORD is neither a command nor a path to
    open (no such file or folder, and nothing that makes it look like one: no folder
    separator, no extension), with the command closest to it; else ``None``.

    ``quantdesk evl x`` is a mistyped ``eval``, not a model file named ``evl`` to open.
    """
    if not argv or argv[0].startswith(("-", "~")) or argv[0] in commands:
        return None
    word = argv[0]
    if "/" in word or "\\" in word or os.path.splitext(word)[1] or os.path.exists(word):
        return None
    import difflib

    closest = difflib.get_close_matches(word, sorted(commands), n=1, cutoff=0.6)
    hint = f" Did you mean `quantdesk {closest[0]}`?" if closest else ""
    return (f"{APP_NAME}: unknown command '{word}' (and no file or folder of that name is "
            f"here).{hint} Run `quantdesk --help` for the list of commands.")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; each module of :data:`app.commands.COMMAND_MODULES` adds its subcommand."""
    parser = argparse.ArgumentParser(
        prog="quantdesk",
        description="Run large language models locally. With no command, opens the window.",
    )
    parser.add_argument("--version", action="store_true", help="print versions and exit")
    parser.set_defaults(func=_cmd_gui)
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(sub)
    parser.set_defaults(commands=set(sub.choices))
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``quantdesk`` console script.

    Each command imports what it needs when it runs (``--version`` and ``--help`` import
    none of it): the start of every command is paid for each call.
    """
    from app.core.console import utf8_streams

    utf8_streams()
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = parser.get_default("commands")
    mistyped = unknown_command(argv, commands)
    if mistyped is not None:
        print(mistyped, file=sys.stderr)
        return 2
    open_path = open_path_argument(argv, commands)
    args = parser.parse_args([] if open_path else argv)
    args.open_path = open_path
    if args.version:
        print(version_text())
        return 0
    from models.foundation.logs import setup_logging

    if args.func is not _cmd_gui:
        # The command's process ends with it: the objects it leaves (numba's and llvmlite's
        # by the hundred thousand after a quantize) are the system's to free, not the
        # interpreter's collector's, which went over them all at exit (0.1-0.3 s of CPU).
        atexit.register(gc.freeze)
    try:
        setup_logging()
        return int(args.func(args) or 0)
    except QuantDeskError as exc:
        import logging

        logging.getLogger(__name__).info("user-facing error: %s", exc.user_message, exc_info=True)
        print(f"{APP_NAME}: {exc.user_message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
