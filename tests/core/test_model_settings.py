"""Per-model load settings and sampling presets, remembered in the preferences file."""

from __future__ import annotations

import pytest

from app.core import model_settings
from app.core.preferences import Preferences
from models.engine import ChatOptions, LoadSettings
from models.foundation.errors import QuantDeskError


def test_load_settings_are_remembered_per_model_and_default_from_preferences(tmp_path):
    prefs = Preferences()
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    assert model_settings.load_settings_for(a, prefs) == LoadSettings()
    prefs.set("default_load_settings", {"context_length": 2048, "threads": 2})
    assert model_settings.load_settings_for(a, prefs).context_length == 2048
    model_settings.remember_load_settings(a, LoadSettings(context_length=8192, flash_attention=True), prefs)
    again = Preferences()  # read back from the file
    assert model_settings.load_settings_for(a, again).context_length == 8192
    assert model_settings.load_settings_for(b, again).context_length == 2048


def test_presets_and_fingerprint_changes():
    prefs = Preferences()
    assert {"Balanced", "Precise", "Creative"} <= set(model_settings.presets(prefs))
    options = ChatOptions(temperature=0.3, top_k=12, stop=("END",))
    model_settings.save_preset("Mine", options, prefs)
    saved = model_settings.presets(Preferences())["Mine"]
    applied = model_settings.apply_preset(ChatOptions(), saved)
    assert (applied.temperature, applied.top_k, applied.stop) == (0.3, 12, ("END",))
    with pytest.raises(QuantDeskError, match="name of its own"):
        model_settings.save_preset("Precise", options, prefs)
    old = LoadSettings()
    assert model_settings.fingerprint_changes(old, LoadSettings(gpu_layers=3, threads=4)) == []
    assert model_settings.fingerprint_changes(old, LoadSettings(context_length=1024, flash_attention=True)) \
        == ["context length", "flash attention"]


def test_two_preferences_objects_do_not_undo_each_others_keys(tmp_path):
    window_prefs = Preferences()  # created at start, as the window does
    model_settings.remember_load_settings(tmp_path / "a.gguf", LoadSettings(context_length=512))
    window_prefs.set("window_geometry", "abc")  # saved at close, from its old copy
    again = Preferences()
    assert again.get("window_geometry") == "abc"
    assert model_settings.load_settings_for(tmp_path / "a.gguf", again).context_length == 512
