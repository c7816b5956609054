"""Where QuantDesk keeps its files.

By default the folders follow each OS's conventions through ``platformdirs`` (e.g.
``~/.local/share/QuantDesk`` on Linux, ``~/Library/Application Support/QuantDesk`` on
macOS, ``%LOCALAPPDATA%\\QuantDesk`` on Windows). Setting ``QUANTDESK_HOME`` puts every
folder under that one directory instead: tests use it for isolation, and a portable
install on a USB disk uses it to keep everything beside the program.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

import platformdirs

from app import APP_NAME
from app.core.errors import QuantDeskError

HOME_ENV = "QUANTDESK_HOME"


@dataclass(frozen=True)
class AppPaths:
    """The application's folders. Create them with :meth:`ensure`."""

    models: Path
    conversations: Path
    sessions: Path
    logs: Path
    config: Path
    cache: Path

    def all(self) -> dict[str, Path]:
        """Name → folder, in a stable order (for ``quantdesk doctor``)."""
        return {
            "models": self.models,
            "conversations": self.conversations,
            "sessions": self.sessions,
            "logs": self.logs,
            "config": self.config,
            "cache": self.cache,
        }

    def ensure(self) -> "AppPaths":
        """Create every folder that does not exist yet and return ``self``."""
        for name, folder in self.all().items():
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise QuantDeskError(
                    f"QuantDesk cannot create its {name} folder {folder} ({exc.strerror}).",
                    f"Check that the disk is writable, or set {HOME_ENV} to a folder you own.",
                ) from exc
        return self


def app_paths(env: Optional[Mapping[str, str]] = None) -> AppPaths:
    """Return the application's folders, honouring ``QUANTDESK_HOME``.

    Args:
        env: Environment to read instead of ``os.environ`` (for tests).
    """
    env = os.environ if env is None else env
    home = env.get(HOME_ENV, "").strip()
    if home:
        root = Path(home).expanduser().resolve()
        return AppPaths(
            models=root / "models",
            conversations=root / "conversations",
            sessions=root / "sessions",
            logs=root / "logs",
            config=root / "config",
            cache=root / "cache",
        )
    dirs = platformdirs.PlatformDirs(APP_NAME, appauthor=False)
    data = Path(dirs.user_data_dir)
    return AppPaths(
        models=data / "models",
        conversations=data / "conversations",
        sessions=data / "sessions",
        logs=Path(dirs.user_log_dir),
        config=Path(dirs.user_config_dir),
        cache=Path(dirs.user_cache_dir),
    )
