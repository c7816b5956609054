"""Where QuantDesk keeps its files.

By default the folders follow each OS's conventions through ``platformdirs`` (e.g.
``~/.local/share/QuantDesk`` on Linux, ``~/Library/Application Support/QuantDesk`` on
macOS, ``%LOCALAPPDATA%\\QuantDesk`` on Windows). Setting ``QUANTDESK_HOME`` puts every
folder under that one directory instead: tests use it for isolation, and a portable
install on a USB disk uses it to keep everything beside the program.

The models folder alone can be moved to another disk from Settings: the preference
``models_folder`` (in ``config/preferences.json``) then replaces it, whichever way the
other folders were chosen.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Optional

import platformdirs

from models.foundation import APP_NAME
from models.foundation.errors import QuantDeskError

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
    paths = _default_paths(os.environ if env is None else env)
    moved = models_folder_preference(paths.config)
    return replace(paths, models=moved) if moved is not None else paths


MODELS_FOLDER_KEY = "models_folder"
PREFERENCES_FILE = "preferences.json"


def models_folder_preference(config: Path) -> Optional[Path]:
    """The models folder the user chose in Settings (``models_folder`` in the preferences
    file of ``config``), or ``None``. Read directly, not through
    :class:`app.core.preferences.Preferences`, which itself needs these paths."""
    try:
        data = json.loads((config / PREFERENCES_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = data.get(MODELS_FOLDER_KEY) if isinstance(data, dict) else None
    return Path(value).expanduser() if isinstance(value, str) and value.strip() else None


def _default_paths(env: Mapping[str, str]) -> AppPaths:
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
