"""Small secrets (the Hugging Face token, the API server's key) in files only this user reads.

A secret is written to a temporary file created with mode 0600 from the start (never
chmod-ed after writing, so it is not briefly readable by others), then renamed over the
old one, so a crash never leaves half a key. Callers never log what these return.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

from models.foundation.errors import QuantDeskError


def write_secret(path: Path, secret: str) -> Path:
    """Save ``secret`` to ``path``, readable and writable by this user only (mode 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(tmp, flags, 0o600)
    try:
        os.write(fd, secret.encode("utf-8"))
    finally:
        os.close(fd)
    if sys.platform != "win32":
        os.chmod(tmp, 0o600)  # in case the file already existed with a wider mode
    os.replace(tmp, path)
    return path


def read_secret(path: Path, what: str) -> Optional[str]:
    """The secret stored in ``path`` (stripped), or ``None`` when there is none.

    Args:
        what: The secret's name for the error message ("The Hugging Face token").

    Raises:
        QuantDeskError: The file exists but cannot be read.
    """
    try:
        secret = path.read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise QuantDeskError(f"{what} file {path} could not be read ({exc.strerror}).",
                             "Fix its permissions or store it again.") from exc
    return secret or None
