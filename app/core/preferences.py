"""The person's preferences: a small JSON file in the config folder.

Qt-free so the CLI and the GUI read the same values (theme, window geometry, default
load settings, the Hub endpoint...). The file is rewritten atomically (temporary file
beside it, then rename), so a crash never leaves half a file; a file that cannot be
parsed is set aside as ``preferences.json.unreadable`` and the defaults are used, so a
broken file never stops the app from opening.

Keys in use (each owner documents its values): ``theme`` (``system`` / ``light`` /
``dark``), ``window_geometry`` (base64 of Qt's saveGeometry), ``default_load_settings``
(a dict of :class:`models.engine.settings.LoadSettings` fields), ``hf_endpoint``,
``models_folder`` (read by :func:`models.foundation.paths.app_paths`), ``server`` (the local API
server's settings: :mod:`app.core.server_settings`).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any, Optional

from models.foundation.errors import QuantDeskError
from models.foundation.paths import PREFERENCES_FILE, app_paths

log = logging.getLogger(__name__)

FILE_NAME = PREFERENCES_FILE

_lock = threading.Lock()


class Preferences:
    """Read and write preferences. Cheap to create; every write saves the file.

    Args:
        path: The JSON file (default: ``preferences.json`` in the app's config folder).
    """

    def __init__(self, path: Optional[Path] = None) -> None:
        self.path = Path(path) if path is not None else app_paths().ensure().config / FILE_NAME
        self._values = self._read()

    def _read(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            log.warning("cannot read %s: %s", self.path, exc)
            return {}
        try:
            values = json.loads(text)
            if not isinstance(values, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            aside = self.path.with_name(self.path.name + ".unreadable")
            log.warning("%s is not valid JSON (%s); kept as %s, using defaults", self.path, exc, aside)
            try:
                os.replace(self.path, aside)
            except OSError:
                pass
            return {}
        return values

    def get(self, key: str, default: Any = None) -> Any:
        """The stored value of ``key``, or ``default``."""
        return self._values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        """Store ``value`` (anything JSON can hold) under ``key`` and save the file.

        Raises:
            QuantDeskError: The config folder is not writable.
        """
        with _lock:
            # Read the file again first: another Preferences object (the window's, a
            # page's) may have saved other keys since this one was created, and writing
            # this object's stale copy would silently undo them.
            self._values = self._read()
            self._values[key] = value
            self._save()

    def remove(self, key: str) -> None:
        """Forget ``key`` (nothing happens when it is not set)."""
        with _lock:
            self._values = self._read()
            if self._values.pop(key, None) is not None:
                self._save()

    def _save(self) -> None:
        """Write the values (callers hold ``_lock``)."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(self._values, indent=2, sort_keys=True), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise QuantDeskError(
                f"QuantDesk cannot save its preferences to {self.path} ({exc.strerror}).",
                "Check that the disk is not full and the folder is writable.",
            ) from exc
