"""Windows installer of the frozen bundle: ``packaging/windows/quantdesk.nsi`` via makensis.

llama.cpp's CPU backend uses OpenMP, whose runtime must be in the bundle next to
``ggml-cpu.dll`` (llama_cpp adds ``llama_cpp\\lib`` to the DLL search path):

* built with mingw-w64 on Linux (``build.py --target windows``), the wheel already carries
  libgomp and the rest of the mingw runtime;
* built with MSVC on Windows (the release workflow's CUDA build), this copies
  ``vcomp140.dll`` there: a computer without the Visual C++ redistributable has none. It
  comes from the MSVC toolset's redistributable folder (``VCToolsRedistDir``, set by the
  Developer Command Prompt) or ``QUANTDESK_VCOMP``.

makensis builds the 64-bit installer stub (``-XTarget amd64-unicode``), which is the one
that runs without 32-bit support (Wine without wine32 too).

On Linux, ``python packaging/pack_windows.py --standin dist/QuantDesk`` compiles the same
script against the Linux bundle, uncompressed, only to check its syntax (the smoke test
does this); the result is deleted.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NSI = HERE / "windows" / "quantdesk.nsi"
if str(HERE.parent) not in sys.path:  # run by the system's Python: this checkout's app package
    sys.path.insert(0, str(HERE.parent))

from models.foundation.system_programs import find_program  # noqa: E402


def find_vcomp() -> Path | None:
    """vcomp140.dll from ``QUANTDESK_VCOMP`` or the MSVC redistributable folders."""
    if os.environ.get("QUANTDESK_VCOMP"):
        return Path(os.environ["QUANTDESK_VCOMP"])
    patterns = []
    if os.environ.get("VCToolsRedistDir"):
        patterns.append(os.path.join(os.environ["VCToolsRedistDir"], "x64", "Microsoft.VC*.OpenMP",
                                     "vcomp140.dll"))
    patterns.append(r"C:\Program Files*\Microsoft Visual Studio\*\*\VC\Redist\MSVC\*\x64"
                    r"\Microsoft.VC*.OpenMP\vcomp140.dll")
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        if found:
            return Path(found[-1])
    return None


def makensis(bundle: Path, version: str, backend: str, out: Path, standin: bool) -> None:
    program = find_program("makensis")
    if program is None:
        raise SystemExit("makensis is not installed (Windows: choco install nsis; "
                         "Debian: apt-get install nsis).")
    args = [program, "-V2", "-XTarget amd64-unicode", f"-DVERSION={version}", f"-DBUNDLE={bundle}",
            f"-DOUTFILE={out}", f"-DBACKEND={backend}"]
    if standin:
        args.append("-DSTANDIN=1")
    subprocess.run([*args, str(NSI)], check=True)


def build_installer(bundle: Path, info: dict, dist: Path) -> Path:
    """``dist/QuantDesk-<version>-windows-x64-<backend>-setup.exe``, with its time and size."""
    print("==> Packing the Windows installer (NSIS)", flush=True)
    lib = bundle / "_internal" / "llama_cpp" / "lib"
    if not (lib / "vcomp140.dll").exists() and not (lib / "libgomp-1.dll").exists():
        vcomp = find_vcomp()
        if vcomp is None:
            raise SystemExit("vcomp140.dll (OpenMP runtime of an MSVC build) not found: run "
                             "from a Developer Command Prompt or set QUANTDESK_VCOMP to its path.")
        shutil.copy2(vcomp, lib / "vcomp140.dll")
    out = dist / f"QuantDesk-{info['app_version']}-windows-x64-{info['backend']}-setup.exe"
    started = time.monotonic()
    makensis(bundle, info["app_version"], info["backend"], out, standin=False)
    print(f"    packed in {time.monotonic() - started:.0f} s: {out.name} "
          f"{out.stat().st_size / 2**20:.1f} MiB", flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description="Compile the NSIS script.")
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--standin", action="store_true",
                        help="check the script against a non-Windows bundle; output deleted")
    args = parser.parse_args()
    out = HERE.parent / "build" / "QuantDesk-standin-setup.exe"
    out.parent.mkdir(parents=True, exist_ok=True)
    makensis(args.bundle.resolve(), "0.0.0", "cpu", out, standin=args.standin)
    print(f"makensis compiled {NSI.name}: {out.stat().st_size / 2**20:.0f} MiB "
          f"({'stand-in payload, removed' if args.standin else 'kept'})")
    if args.standin:
        out.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
