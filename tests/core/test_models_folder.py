"""The models folder can be moved (Settings writes ``models_folder``); the other folders stay."""

from pathlib import Path

from app.core.preferences import Preferences
from models.foundation.paths import app_paths


def test_models_folder_preference_moves_only_the_models_folder(tmp_path, isolated_home):
    before = app_paths()
    assert before.models == Path(isolated_home).resolve() / "models"
    Preferences().set("models_folder", str(tmp_path / "big-disk" / "models"))
    after = app_paths()
    assert after.models == tmp_path / "big-disk" / "models"
    assert (after.config, after.sessions) == (before.config, before.sessions)
    from models.library import Library

    assert Library().models_dir == (tmp_path / "big-disk" / "models").resolve()
    Preferences().set("models_folder", "")
    assert app_paths().models == before.models


def test_an_unreadable_preferences_file_keeps_the_default(isolated_home):
    config = app_paths().ensure().config
    (config / "preferences.json").write_text("{not json")
    assert app_paths().models == Path(isolated_home).resolve() / "models"
