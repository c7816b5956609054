"""macOS disk image of the frozen ``QuantDesk.app``: dmgbuild, signed when secrets exist.

With ``MACOS_SIGN_IDENTITY`` set, ``macos/sign_and_notarize.sh`` signs every Mach-O file
and the app with the hardened runtime and ``macos/entitlements.plist``, builds the
``.dmg``, and notarizes and staples it when the Apple ID secrets are set too. Without
them the ``.dmg`` is unsigned (fine for testing; Gatekeeper asks on first open).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run by the system's Python: this checkout's app package
    sys.path.insert(0, str(HERE.parent))

from models.foundation.system_programs import require_program  # noqa: E402


def build_dmg(app: Path, info: dict, dist: Path) -> Path:
    """``dist/QuantDesk-<version>-macos-<arch>-<backend>.dmg``."""
    print("==> Packing the .dmg", flush=True)
    # Contents/Resources, not MacOS: codesign treats everything in MacOS as code.
    (app / "Contents" / "Resources" / "install-kind").write_text("dmg\n")
    arch = os.uname().machine
    out = dist / f"QuantDesk-{info['app_version']}-macos-{arch}-{info['backend']}.dmg"
    out.unlink(missing_ok=True)
    if os.environ.get("MACOS_SIGN_IDENTITY"):
        subprocess.run([str(HERE / "macos" / "sign_and_notarize.sh"), str(app), str(out)],
                       check=True)
    else:
        print("    MACOS_SIGN_IDENTITY is not set: the .dmg is not signed or notarized", flush=True)
        dmgbuild = require_program("dmgbuild", "make the .dmg",
                                   "build.py installs it in build/venv; run build.py.")
        subprocess.run([dmgbuild, "-s", str(HERE / "macos" / "dmg_settings.py"),
                        "-D", f"app={app}", "QuantDesk", str(out)], check=True)
    return out
