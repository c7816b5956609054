"""What the chat remembers between sessions: load settings per model, sampling presets.

Qt-free, on top of :class:`app.core.preferences.Preferences` (one JSON file in the config
folder). Keys:

- ``"model_load_settings"``: ``{model path: LoadSettings fields}``, the settings last
  applied to each model. A model with none starts from ``"default_load_settings"`` (the
  Settings page edits those), then from :class:`~models.engine.LoadSettings`' defaults.
- ``"sampling_presets"``: ``{name: ChatOptions sampling fields}`` the user saved, beside
  the built-in :data:`BUILTIN_PRESETS`.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Optional

from models.engine.options import ChatOptions
from models.engine.settings import LoadSettings

LOAD_KEY = "model_load_settings"
DEFAULT_LOAD_KEY = "default_load_settings"
PRESETS_KEY = "sampling_presets"

# The sampling fields a preset holds (not the output format or speculative decoding).
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty", "seed",
                   "max_tokens", "stop")

BUILTIN_PRESETS: dict[str, dict[str, Any]] = {
    "Balanced": dict(temperature=0.7, top_p=0.95, top_k=40, min_p=0.05, repeat_penalty=1.0,
                     seed=None, max_tokens=1024, stop=[]),
    "Precise": dict(temperature=0.0, top_p=1.0, top_k=0, min_p=0.0, repeat_penalty=1.0,
                    seed=None, max_tokens=1024, stop=[]),
    "Creative": dict(temperature=1.1, top_p=0.98, top_k=80, min_p=0.02, repeat_penalty=1.05,
                     seed=None, max_tokens=2048, stop=[]),
}


def _preferences(preferences=None):
    if preferences is not None:
        return preferences
    from app.core.preferences import Preferences

    return Preferences()


def _key(model: Path | str) -> str:
    return str(Path(model).resolve())


def load_settings_for(model: Path | str, preferences=None) -> LoadSettings:
    """The settings to load ``model`` with: its remembered ones, else the defaults."""
    prefs = _preferences(preferences)
    remembered = (prefs.get(LOAD_KEY, {}) or {}).get(_key(model))
    if remembered is None:
        remembered = prefs.get(DEFAULT_LOAD_KEY, {}) or {}
    return LoadSettings.from_dict(remembered)


def remember_load_settings(model: Path | str, settings: LoadSettings, preferences=None) -> None:
    """Remember the settings just applied to ``model``."""
    prefs = _preferences(preferences)
    values = dict(prefs.get(LOAD_KEY, {}) or {})
    values[_key(model)] = settings.to_dict()
    prefs.set(LOAD_KEY, values)


def choose_projector(model: Path | str, projector: Path | str, preferences=None) -> Path:
    """Remember ``projector`` as the vision encoder ``model`` loads with (the Chat page and
    the server then load it; the next load of a loaded model). Returns its path.

    Raises:
        QuantDeskError: It is not an mmproj file, or it makes embeddings of another width
            than the model reads (the sentence names both numbers).
    """
    from dataclasses import replace

    from models.engine.gguf_info import read_model_info, read_projector_info

    info = read_projector_info(projector, read_model_info(model))
    remember_load_settings(model, replace(load_settings_for(model, preferences), mmproj=str(info.path)),
                           preferences)
    return info.path


def sampling_of(options: ChatOptions) -> dict[str, Any]:
    """The preset fields of ``options`` as plain values."""
    values = asdict(options)
    return {name: (list(values[name]) if name == "stop" else values[name])
            for name in SAMPLING_FIELDS}


def presets(preferences=None) -> dict[str, dict[str, Any]]:
    """Every preset by name: the built-in ones first, then the user's."""
    saved = _preferences(preferences).get(PRESETS_KEY, {}) or {}
    return {**BUILTIN_PRESETS, **saved}


def save_preset(name: str, options: ChatOptions, preferences=None) -> None:
    """Save the sampling of ``options`` as preset ``name`` (replacing one of that name)."""
    from models.foundation.errors import QuantDeskError

    name = name.strip()
    if not name or name in BUILTIN_PRESETS:
        raise QuantDeskError(f"A preset needs a name of its own, not {name!r}.",
                             f"Type a name other than {', '.join(BUILTIN_PRESETS)}.")
    prefs = _preferences(preferences)
    saved = dict(prefs.get(PRESETS_KEY, {}) or {})
    saved[name] = sampling_of(options)
    prefs.set(PRESETS_KEY, saved)


def apply_preset(options: ChatOptions, preset: dict[str, Any]) -> ChatOptions:
    """``options`` with the preset's sampling fields."""
    from dataclasses import replace

    fields = {k: v for k, v in preset.items() if k in SAMPLING_FIELDS}
    if "stop" in fields:
        fields["stop"] = tuple(fields["stop"] or ())
    return replace(options, **fields)


def fingerprint_changes(old: Optional[LoadSettings], new: LoadSettings) -> list[str]:
    """The settings in a saved KV state's fingerprint (``models.engine.sessions``) that
    differ between ``old`` and ``new``: when any does, open conversations' saved states
    cannot be reused and are read again from their start."""
    if old is None:
        return []
    names = {"context_length": "context length", "kv_cache_type_k": "K cache type",
             "kv_cache_type_v": "V cache type", "flash_attention": "flash attention"}
    return [label for field, label in names.items() if getattr(old, field) != getattr(new, field)]
