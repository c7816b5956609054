"""Which Hub to talk to and with which token.

Read at call time rather than import time (``huggingface_hub.constants`` freezes
``HF_ENDPOINT`` and ``HF_HOME`` when first imported), so a setting changed in the app, or
a test pointing ``HF_ENDPOINT`` at a local server, takes effect at once.

Token order: ``HF_TOKEN`` in the environment, then the token stored by QuantDesk
(``config/hf_token``, mode 0600), then the Hugging Face CLI's login (``$HF_HOME/token``).
A token is never logged or printed: :func:`describe_token` shows only where it came from.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from models.foundation.errors import QuantDeskError
from models.foundation.paths import app_paths
from models.foundation.secret_file import read_secret, write_secret

DEFAULT_ENDPOINT = "https://huggingface.co"
TOKEN_FILE_NAME = "hf_token"


def hub_endpoint() -> str:
    """The Hub's base URL: ``HF_ENDPOINT`` or huggingface.co, without a trailing slash."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hf_home() -> Path:
    """The Hugging Face home folder (``HF_HOME``, else ``$XDG_CACHE_HOME/huggingface``)."""
    if os.environ.get("HF_HOME"):
        return Path(os.path.expandvars(os.environ["HF_HOME"])).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "huggingface"


def stored_token_path() -> Path:
    """Where QuantDesk keeps the token a user entered in its settings."""
    return app_paths().config / TOKEN_FILE_NAME


def _read_token(path: Path) -> Optional[str]:
    return read_secret(path, "The Hugging Face token")


def resolve_token() -> tuple[Optional[str], str]:
    """The token to send and where it came from (``"HF_TOKEN"``, a file path, or ``"none"``)."""
    env_token = os.environ.get("HF_TOKEN", "").strip()
    if env_token:
        return env_token, "HF_TOKEN"
    for path in (stored_token_path(), hf_home() / "token"):
        token = _read_token(path)
        if token:
            return token, str(path)
    return None, "none"


def describe_token() -> str:
    """Where the token comes from, for ``doctor`` and error messages; never the token."""
    token, source = resolve_token()
    return "no Hugging Face token" if token is None else f"a Hugging Face token from {source}"


def store_token(token: str) -> Path:
    """Save ``token`` for later sessions, readable by this user only (mode 0600).

    The file is created with 0600 from the start (:mod:`models.foundation.secret_file`), so the
    token is never briefly readable by others.
    """
    token = token.strip()
    if not token or any(c.isspace() for c in token):
        raise QuantDeskError("That Hugging Face token is empty or contains spaces.",
                             "Copy the token again from huggingface.co/settings/tokens.")
    return write_secret(stored_token_path(), token)


def forget_token() -> None:
    """Delete the token QuantDesk stored (``HF_TOKEN`` and the HF CLI login are untouched)."""
    stored_token_path().unlink(missing_ok=True)
