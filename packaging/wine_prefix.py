"""Wine prefixes that run QuantDesk's Windows build on Linux: for building, and for testing.

``build.py --target windows`` runs Windows' own Python, pip and PyInstaller under Wine, and
``windows_smoke.sh`` installs and runs the finished installer under Wine. Debian 12's Wine
8.0 lacks a few functions that Python 3.13, numpy 2 and Qt 6 call; it has stubs that abort
the process when called. This module makes a prefix where they work:

* **Stand-in DLLs.** For a Wine DLL with missing functions, a small native DLL of the same
  name (compiled here with mingw-w64 from ``windows/wine/<name>.c``, its exports listed in
  ``<name>.exports``) implements those functions and forwards every other export to a
  renamed copy of Wine's own DLL (``wine_<name>.dll``), so the process sees one module with
  everything; ``WINEDLLOVERRIDES`` makes Wine load the native one first. A DLL Wine lacks
  altogether (``icuuc``, ``bcryptprimitives``) is a whole stand-in.
* The prefix says Windows 10 (a new one says Windows 7), as Qt 6 requires.
* Prefixes live outside the checkout (:func:`prefix_path`): a prefix's drive Z: is a
  symbolic link to ``/``, and tools that walk a project folder following links
  (setuptools building the package, for one) would walk the whole file system through it.
* Everything here belongs to the Wine test and build environment. None of it goes into the
  installer: users run Windows, which has these functions.

``python packaging/wine_prefix.py PREFIX`` makes (or refreshes) a prefix and prints the
environment to use it with.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
STANDIN_SOURCES = HERE / "windows" / "wine"
#: Debian's wine64 keeps the PE halves of its DLLs here.
WINE_PE_DIRS = [Path("/usr/lib/x86_64-linux-gnu/wine/x86_64-windows"),
                Path("/usr/lib/wine/x86_64-windows"), Path("/opt/wine-stable/lib64/wine/x86_64-windows")]
MINGW_CC = "x86_64-w64-mingw32-gcc-posix"
OBJDUMP = "x86_64-w64-mingw32-objdump"


class WineSetupError(RuntimeError):
    """A tool the Wine environment needs is missing or failed; the message says which."""


def prefix_path(name: str) -> Path:
    """Where the Wine prefix ``name`` lives: ``QUANTDESK_WINE_PREFIXES`` or the user's cache."""
    root = os.environ.get("QUANTDESK_WINE_PREFIXES") or \
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "quantdesk-wine"
    return Path(root) / name


def wine_pe_dir() -> Path:
    for folder in WINE_PE_DIRS:
        if (folder / "kernel32.dll").exists():
            return folder
    raise WineSetupError("Wine's 64-bit DLLs were not found (Debian: apt-get install wine wine64).")


def standin_names() -> list[str]:
    """The Wine DLLs this environment replaces: one ``<name>.c`` each."""
    return sorted(p.stem for p in STANDIN_SOURCES.glob("*.c"))


def wine_counterpart(name: str) -> Path | None:
    """Wine's own ``<name>.dll``, or None where Wine has no such DLL (a whole stand-in)."""
    dll = wine_pe_dir() / f"{name}.dll"
    return dll if dll.exists() else None


def exported_names(dll: Path) -> list[str]:
    """Names a PE DLL exports, read with mingw's objdump."""
    out = subprocess.run([OBJDUMP, "-p", str(dll)], check=True, capture_output=True,
                         text=True).stdout
    table = out.split("[Ordinal/Name Pointer] Table", 1)
    if len(table) < 2:
        return []
    names = []
    for line in table[1].splitlines()[1:]:
        match = re.match(r"\s*\[\s*\d+\]\s+(\S+)", line)
        if not match:
            break
        names.append(match.group(1))
    return names


def implemented(name: str) -> dict[str, str]:
    """``export -> C function`` that ``<name>.c`` implements, from its ``<name>.exports``."""
    table = {}
    for line in (STANDIN_SOURCES / f"{name}.exports").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            export, function = line.split("=")
            table[export.strip()] = function.strip()
    return table


def build_standin(name: str, cache: Path) -> Path:
    """Compile the stand-in ``<name>.dll`` (cached by its sources and Wine's DLL)."""
    builtin = wine_counterpart(name)
    source = STANDIN_SOURCES / f"{name}.c"
    key = hashlib.sha256(source.read_bytes() + (STANDIN_SOURCES / f"{name}.exports").read_bytes()
                         + (builtin.read_bytes() if builtin else b"")).hexdigest()[:16]
    out = cache / key / f"{name}.dll"
    if out.exists():
        return out
    if shutil.which(MINGW_CC) is None:
        raise WineSetupError(f"{MINGW_CC} is missing (Debian: apt-get install gcc-mingw-w64-x86-64-posix).")
    own = implemented(name)
    wine_exports = exported_names(builtin) if builtin else []
    lines = [f"LIBRARY {name}.dll", "EXPORTS"]
    for export in wine_exports:
        lines.append(f"  {export}={own[export]}" if export in own else
                     f"  {export}=wine_{name}.{export}")
    lines += [f"  {export}={function}" for export, function in own.items()
              if export not in wine_exports]
    out.parent.mkdir(parents=True, exist_ok=True)
    definition = out.with_suffix(".def")
    definition.write_text("\n".join(lines) + "\n")
    subprocess.run([MINGW_CC, "-O2", "-shared", "-fno-builtin", "-o", str(out), str(source),
                    str(definition), "-Wl,--enable-stdcall-fixup", "-static-libgcc",
                    "-loleaut32", "-lole32", "-lbcrypt"],
                   check=True)
    return out


def environment(prefix: Path, user: str | None = None) -> dict[str, str]:
    """The environment that runs programs in ``prefix`` with the stand-ins.

    ``user`` names the Windows user (Wine takes it from ``USER``): its profile folder is
    ``C:\\users\\<user>``.
    """
    overrides = ["mscoree=", "mshtml=", "winemenubuilder.exe="] + \
        [f"{name}=n,b" for name in standin_names()]
    env = dict(os.environ, WINEPREFIX=str(prefix), WINEDEBUG=os.environ.get("WINEDEBUG", "-all"),
               WINEDLLOVERRIDES=";".join(overrides), WINEARCH="win64")
    if user:
        env.update(USER=user, LOGNAME=user, USERNAME=user)
    return env


def make_prefix(prefix: Path, cache: Path | None = None, user: str | None = None) -> dict[str, str]:
    """Create ``prefix`` (when new) and put the stand-ins in its system32; return its env."""
    if shutil.which("wine") is None:
        raise WineSetupError("wine is not installed (Debian: apt-get install wine wine64).")
    env = environment(prefix, user)
    system32 = prefix / "drive_c" / "windows" / "system32"
    if not (system32 / "kernel32.dll").exists():
        prefix.parent.mkdir(parents=True, exist_ok=True)  # Wine makes the prefix, not its parent
        for command in (["wineboot", "--init"],
                        # Qt 6 and Python 3.13 want Windows 10; a new prefix says Windows 7.
                        ["wine", "reg", "add", r"HKCU\Software\Wine", "/v", "Version", "/d",
                         "win10", "/f"],
                        ["wineserver", "--wait"]):
            # Output to a file, not a pipe: wineserver lives on and would hold a pipe open.
            with tempfile.TemporaryFile() as output:
                done = subprocess.run(command, env=env, stdin=subprocess.DEVNULL, stdout=output,
                                      stderr=subprocess.STDOUT)
                output.seek(0)
                lines = output.read().decode("utf-8", "replace").strip().splitlines()
            if done.returncode != 0:
                raise WineSetupError(f"Wine could not set up the prefix {prefix} "
                                     f"({' '.join(command[:2])}: {(lines or ['no output'])[-1]}).")
    cache = cache or prefix_path("standins")
    for name in standin_names():
        if wine_counterpart(name):
            shutil.copyfile(wine_counterpart(name), system32 / f"wine_{name}.dll")
        shutil.copyfile(build_standin(name, cache), system32 / f"{name}.dll")
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("prefix", type=Path)
    args = parser.parse_args(argv)
    env = make_prefix(args.prefix.resolve())
    for key in ("WINEPREFIX", "WINEDEBUG", "WINEDLLOVERRIDES", "WINEARCH"):
        print(f"export {key}='{env[key]}'")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except WineSetupError as exc:
        print(f"wine_prefix.py: {exc}", file=sys.stderr)
        sys.exit(2)
