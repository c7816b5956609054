"""App folders follow QUANTDESK_HOME or the OS conventions; logging goes to a file."""

import logging
from pathlib import Path

import pytest

from models.foundation.errors import QuantDeskError
from models.foundation.logs import LOG_FILE_NAME, setup_logging
from models.foundation.paths import HOME_ENV, app_paths


def test_home_variable_relocates_every_folder(tmp_path):
    paths = app_paths({HOME_ENV: str(tmp_path / "portable")})
    for name, folder in paths.all().items():
        assert folder.is_relative_to(tmp_path / "portable"), name
    paths.ensure()
    assert all(folder.is_dir() for folder in paths.all().values())


def test_default_folders_are_per_user_and_distinct():
    paths = app_paths({})
    folders = list(paths.all().values())
    assert len(set(folders)) == len(folders)
    assert all("QuantDesk" in str(f) for f in folders)
    assert all(f.is_absolute() for f in folders)


def test_unwritable_home_gives_a_sentence(tmp_path):
    blocker = tmp_path / "file-not-folder"
    blocker.write_text("x")
    with pytest.raises(QuantDeskError) as info:
        app_paths({HOME_ENV: str(blocker / "home")}).ensure()
    assert "cannot create" in info.value.user_message and HOME_ENV in info.value.user_message


def test_logging_writes_to_the_logs_folder(isolated_home: Path):
    log_path = setup_logging()
    assert setup_logging() == log_path  # idempotent: one handler
    logging.getLogger("quantdesk.test").warning("hello from the test")
    for handler in logging.getLogger().handlers:
        handler.flush()
    assert log_path == isolated_home / "logs" / LOG_FILE_NAME
    assert "hello from the test" in log_path.read_text()
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "baseFilename", None) == str(log_path):
            root.removeHandler(handler)
            handler.close()
