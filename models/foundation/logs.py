"""Logging to a rotating file in the app's logs folder.

Every process of QuantDesk (GUI, CLI, engine child) logs to ``quantdesk.log`` in the
logs folder so a bug report can attach one file. Secrets never reach the log: code that
handles tokens logs only whether one is set.
"""

from __future__ import annotations

import logging
import logging.handlers
from pathlib import Path
from typing import Optional

from models.foundation.paths import AppPaths, app_paths

LOG_FILE_NAME = "quantdesk.log"
_FORMAT = "%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"


def setup_logging(paths: Optional[AppPaths] = None, level: int = logging.INFO) -> Path:
    """Send the root logger's records to the rotating log file and return its path.

    Calling it again is harmless: the file handler is installed once per process.
    """
    paths = (paths or app_paths()).ensure()
    log_path = paths.logs / LOG_FILE_NAME
    root = logging.getLogger()
    root.setLevel(level)
    for handler in root.handlers:
        if getattr(handler, "baseFilename", None) == str(log_path):
            return log_path
    handler = logging.handlers.RotatingFileHandler(
        log_path, maxBytes=5 * 1024 * 1024, backupCount=3, encoding="utf-8"
    )
    handler.setFormatter(logging.Formatter(_FORMAT))
    root.addHandler(handler)
    return log_path
