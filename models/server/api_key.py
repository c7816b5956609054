"""The API server's key: stored like the Hugging Face token (a 0600 file), never logged.

``config/server_api_key`` holds it. A generated key is 32 random bytes from
:mod:`secrets`, URL-safe, prefixed ``qd-`` so people can tell it apart from other keys.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Optional

from models.foundation.errors import QuantDeskError
from models.foundation.paths import app_paths
from models.foundation.secret_file import read_secret, write_secret

KEY_FILE_NAME = "server_api_key"
KEY_PREFIX = "qd-"


def api_key_path() -> Path:
    """Where the key is kept."""
    return app_paths().config / KEY_FILE_NAME


def load_api_key() -> Optional[str]:
    """The stored key, or ``None``."""
    return read_secret(api_key_path(), "The API server's key")


def generate_api_key() -> str:
    """A new random key (not stored: :func:`save_api_key` does that)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def save_api_key(key: str) -> Path:
    """Store ``key`` for later sessions (mode 0600).

    Raises:
        QuantDeskError: The key is empty, contains spaces, or is too short to be safe.
    """
    key = key.strip()
    if not key or any(c.isspace() for c in key) or not key.isprintable():
        raise QuantDeskError("That API key is empty or contains spaces.",
                             "Type a key without spaces, or generate one.")
    if len(key) < 8:
        raise QuantDeskError("That API key is shorter than 8 characters, easy to guess.",
                             "Use a longer key, or generate one.")
    return write_secret(api_key_path(), key)


def forget_api_key() -> None:
    """Delete the stored key."""
    api_key_path().unlink(missing_ok=True)
