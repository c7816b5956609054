"""Preferences: a JSON file written atomically; a broken file never stops the app."""

import json

from app.core.preferences import FILE_NAME, Preferences
from models.foundation.paths import app_paths


def test_values_survive_a_new_instance_and_the_file_is_json():
    prefs = Preferences()
    assert prefs.get("theme", "system") == "system"
    prefs.set("theme", "dark")
    prefs.set("default_load_settings", {"n_ctx": 8192, "n_gpu_layers": -1})
    again = Preferences()
    assert again.get("theme") == "dark"
    assert again.get("default_load_settings") == {"n_ctx": 8192, "n_gpu_layers": -1}
    path = app_paths().config / FILE_NAME
    assert json.loads(path.read_text())["theme"] == "dark"
    assert [p.name for p in path.parent.iterdir()] == [FILE_NAME]  # no temporary file left
    again.remove("theme")
    assert Preferences().get("theme") is None


def test_unreadable_file_is_set_aside_and_defaults_used():
    path = app_paths().ensure().config / FILE_NAME
    path.write_text("{ this is not json")
    prefs = Preferences()
    assert prefs.get("theme", "system") == "system"
    aside = path.with_name(FILE_NAME + ".unreadable")
    assert aside.read_text() == "{ this is not json"
    prefs.set("theme", "light")
    assert Preferences().get("theme") == "light"
