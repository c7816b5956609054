"""Starting the computer's own programs (file manager, browser) from QuantDesk.

Why a module for this: in the frozen Linux app, PyInstaller's bootloader points
``LD_LIBRARY_PATH`` at the bundle (and keeps the user's value in ``LD_LIBRARY_PATH_ORIG``).
A system program started with that environment — ``xdg-open``, Nautilus, Firefox — loads
*our* bundled Qt, OpenSSL or ICU instead of its own and crashes or misbehaves. Every
external program therefore starts with :func:`system_environment`: the GUI calls
:func:`open_in_file_manager` / :func:`open_with_default_app` rather than ``subprocess``
or ``QDesktopServices.openUrl`` (which would start ``xdg-open`` with the bundle's
environment).

``os.environ`` itself is left as the bootloader made it, on purpose: the engine child
process is this same executable, and the bootloader marks the environment it has set up
(``_PYI_*`` variables), so a child started with the library path removed but the marks
kept would not set it up again and could not find the bundled libraries (found by the
clean-Debian smoke test: libllama failed to load libgomp in the engine process).

Programs are found with :func:`find_program`: ``PATH`` first, then the folders where Unix
systems keep the programs meant for administrators (``/usr/sbin``, ``/sbin``), which an
ordinary user's ``PATH`` leaves out on Debian although anyone may run what is there
(``ldconfig``, which the ``.deb`` build asks for the system's libraries). So a program runs
the same for a normal user as for root.

Qt-free, and standard library only (besides :mod:`models.foundation.errors`): the installer build
scripts in ``packaging/`` import it with the system's Python.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Mapping, MutableMapping, Optional, Sequence

from models.foundation.errors import QuantDeskError

#: Variables the PyInstaller bootloader sets, each saving the user's value as NAME_ORIG.
BOOTLOADER_VARIABLES = ("LD_LIBRARY_PATH", "LIBPATH", "DYLD_LIBRARY_PATH")
#: Search-path variables whose entries inside the bundle must not leak to other programs.
PATH_LIKE_VARIABLES = ("QT_PLUGIN_PATH", "QML2_IMPORT_PATH", "QT_QPA_PLATFORM_PLUGIN_PATH",
                       "GI_TYPELIB_PATH", "GIO_MODULE_DIR", "GDK_PIXBUF_MODULE_FILE",
                       "SSL_CERT_FILE", "PYTHONPATH", "PYTHONHOME", "TCL_LIBRARY", "TK_LIBRARY")


#: Folders of programs for administrators, which an ordinary user's PATH leaves out.
SBIN_FOLDERS = ("/usr/local/sbin", "/usr/sbin", "/sbin")


def _bundle_dir() -> Optional[str]:
    folder = getattr(sys, "_MEIPASS", None)
    return folder if getattr(sys, "frozen", False) and folder else None


def system_environment(env: Optional[Mapping[str, str]] = None,
                       bundle: Optional[str] = None) -> dict[str, str]:
    """A copy of ``env`` fit for starting a program of the computer's own.

    Outside a frozen bundle (and with no ``bundle`` given) it is an unchanged copy.

    Args:
        env: The environment to clean (default ``os.environ``).
        bundle: The bundle folder whose traces to remove (default: this process's).
    """
    clean = dict(os.environ if env is None else env)
    bundle = bundle if bundle is not None else _bundle_dir()
    if bundle is None:
        return clean
    _undo_bootloader(clean, bundle)
    return clean


def _inside(value: str, bundle: str) -> bool:
    return os.path.abspath(value).startswith(os.path.abspath(bundle) + os.sep) or \
        os.path.abspath(value) == os.path.abspath(bundle)


def _drop_bundle_entries(env: MutableMapping[str, str], name: str, bundle: str) -> None:
    """Remove the bundle's folders from a search-path variable; drop it when empty."""
    kept = [p for p in env[name].split(os.pathsep) if p and not _inside(p, bundle)]
    if kept:
        env[name] = os.pathsep.join(kept)
    else:
        del env[name]


def _undo_bootloader(env: MutableMapping[str, str], bundle: str) -> None:
    for name in BOOTLOADER_VARIABLES:
        original = env.pop(f"{name}_ORIG", None)
        if original is not None:
            env[name] = original
        elif name in env:
            _drop_bundle_entries(env, name, bundle)
    for name in PATH_LIKE_VARIABLES:
        if name in env:
            _drop_bundle_entries(env, name, bundle)
    # The bootloader's own marks: another PyInstaller-built program must not take them
    # for its own and skip setting itself up.
    for name in [n for n in env if n.startswith("_PYI_") or n == "_MEIPASS2"]:
        del env[name]


def find_program(name: str, env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The full path of the computer's program ``name``, or ``None`` when it has none.

    Looked up on ``PATH`` (of :func:`system_environment`, so never inside the bundle), then
    in :data:`SBIN_FOLDERS` on Unix.

    Args:
        env: The environment whose ``PATH`` to search (default ``os.environ``).
    """
    folders = system_environment(env).get("PATH", os.defpath).split(os.pathsep)
    if os.name == "posix":
        folders += [folder for folder in SBIN_FOLDERS if folder not in folders]
    return shutil.which(name, path=os.pathsep.join(folder for folder in folders if folder))


def require_program(name: str, what: str, hint: Optional[str] = None) -> str:
    """:func:`find_program`, or the sentence saying which program is missing.

    Args:
        name: The program ("ldconfig").
        what: What it is needed for, for the sentence ("list the system's libraries").
        hint: How to install it (default: "Install NAME").

    Raises:
        QuantDeskError: The program is not installed.
    """
    program = find_program(name)
    if program is None:
        raise QuantDeskError(f"QuantDesk cannot {what}: the program {name} is not installed.",
                             hint or _install_hint(name))
    return program


def start_system_program(args: Sequence[str], what: str) -> subprocess.Popen:
    """Start a program of the computer's own, detached, with :func:`system_environment`.

    Args:
        args: The command line; ``args[0]`` is found with :func:`find_program`.
        what: What the program is for, for the error sentence ("open the folder").

    Raises:
        QuantDeskError: The program is not installed or could not start.
    """
    program = require_program(args[0], what)
    try:
        return subprocess.Popen([program, *args[1:]], env=system_environment(),
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        raise QuantDeskError(f"QuantDesk cannot {what}: {args[0]} did not start ({exc.strerror}).",
                             "Open it yourself from your desktop.") from exc


def _install_hint(program: str) -> str:
    if program == "xdg-open":
        return "Install xdg-utils (Debian/Ubuntu: sudo apt install xdg-utils), or open it yourself."
    return f"Install {program}, or open it yourself."


def reveal_command(path: Path | str, platform: str = sys.platform) -> list[str]:
    """The command that shows ``path`` in the OS file manager, a file selected in its folder.

    On Linux the freedesktop ``FileManager1`` D-Bus call selects the file (Nautilus,
    Dolphin, Nemo...); without ``gdbus``, ``xdg-open`` opens its folder.
    """
    target = Path(path)
    if platform == "win32":
        return ["explorer", f"/select,{target}"] if target.is_file() else ["explorer", str(target)]
    if platform == "darwin":
        return ["open", "-R", str(target)] if target.is_file() else ["open", str(target)]
    if target.is_file() and find_program("gdbus"):
        return ["gdbus", "call", "--session", "--dest", "org.freedesktop.FileManager1",
                "--object-path", "/org/freedesktop/FileManager1",
                "--method", "org.freedesktop.FileManager1.ShowItems",
                f"['{target.resolve().as_uri()}']", ""]
    return ["xdg-open", str(target if target.is_dir() else target.parent)]


def open_in_file_manager(path: Path | str) -> subprocess.Popen:
    """Show ``path`` in the file manager: a folder opened, a file selected in its folder.

    Raises:
        QuantDeskError: The path does not exist, or no file manager can be started.
    """
    target = Path(path)
    if not target.exists():
        raise QuantDeskError(f"{target} does not exist any more.",
                             "It may have been moved or deleted; refresh the list.")
    return start_system_program(reveal_command(target), "open the folder")


def open_with_default_app(path_or_url: Path | str) -> subprocess.Popen:
    """Open a file or an ``https://`` address with the program the desktop chooses.

    Raises:
        QuantDeskError: No opener program can be started.
    """
    text = str(path_or_url)
    if sys.platform == "darwin":
        return start_system_program(["open", text], f"open {text}")
    if sys.platform == "win32":
        # "start" is a cmd built-in; its empty first argument is the window title.
        return start_system_program(["cmd", "/c", "start", "", text], f"open {text}")
    return start_system_program(["xdg-open", text], f"open {text}")
