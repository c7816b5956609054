"""``general.*`` metadata: the model's name, size label and license, for people and UIs.

The name comes from the folder (what the user downloaded or chose), the size label from
the parameter count (``135M``, ``1.5B``, as gguf-py's ``size_label`` formats it), the
license from the model card's YAML front matter (``license: apache-2.0``), when present,
and the publisher's recommended sampling settings from ``generation_config.json``
(``general.sampling.*``, which llama.cpp's programs take as their defaults).
"""

from __future__ import annotations

import re
from typing import Optional

from quantize.ggml_types import GGUFValueType

from quantize.source import MetadataEntry

_LICENSE = re.compile(r"^license:\s*[\"']?([^\"'\n]+?)[\"']?\s*$", re.MULTILINE)


def size_label(n_params: int) -> str:
    """``135M``, ``1.5B``, ``7.2K``: three significant digits at most, like gguf-py."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n_params >= scale:
            return f"{n_params / scale:.3g}{suffix}"
    return str(n_params)


def card_license(readme: Optional[str]) -> Optional[str]:
    """The ``license:`` of a model card's front matter, if the card has one."""
    if not readme or not readme.startswith("---"):
        return None
    end = readme.find("\n---", 3)
    match = _LICENSE.search(readme[3:end if end > 0 else None])
    return match.group(1).strip() if match else None


#: ``general.sampling.<key>`` ← the first of the ``generation_config.json`` names, and its type
#: (convert_hf_to_gguf's ``Metadata.load`` reads the same names).
_SAMPLING = (
    ("sequence", ("sequence",), GGUFValueType.STRING),
    ("top_k", ("top_k",), GGUFValueType.INT32),
    ("top_p", ("top_p",), GGUFValueType.FLOAT32),
    ("min_p", ("min_p",), GGUFValueType.FLOAT32),
    ("xtc_probability", ("xtc_probability",), GGUFValueType.FLOAT32),
    ("xtc_threshold", ("xtc_threshold",), GGUFValueType.FLOAT32),
    ("temp", ("temperature",), GGUFValueType.FLOAT32),
    ("penalty_last_n", ("penalty_last_n",), GGUFValueType.INT32),
    ("penalty_repeat", ("penalty_repeat", "repetition_penalty"), GGUFValueType.FLOAT32),
    ("mirostat", ("mirostat",), GGUFValueType.INT32),
    ("mirostat_tau", ("mirostat_tau",), GGUFValueType.FLOAT32),
    ("mirostat_eta", ("mirostat_eta",), GGUFValueType.FLOAT32),
)
_CASTS = {GGUFValueType.STRING: str, GGUFValueType.INT32: int, GGUFValueType.FLOAT32: float}


def sampling_entries(generation_config: Optional[dict]) -> list[MetadataEntry]:
    """``general.sampling.*`` from a ``generation_config.json`` (none without one)."""
    out = []
    for key, names, kind in _SAMPLING:
        value = next((generation_config[n] for n in names if (generation_config or {}).get(n) is not None), None)
        if value is not None and not isinstance(value, (dict, list)):
            out.append(MetadataEntry(f"general.sampling.{key}", _CASTS[kind](value), kind))
    return out


def general_entries(name: str, n_params: int, readme: Optional[str],
                    generation_config: Optional[dict] = None, kind: str = "model") -> list[MetadataEntry]:
    S = GGUFValueType.STRING
    out = [MetadataEntry("general.type", kind, S),
           MetadataEntry("general.name", name, S),
           MetadataEntry("general.size_label", size_label(n_params), S)]
    license_name = card_license(readme)
    if license_name:
        out.append(MetadataEntry("general.license", license_name, S))
    return out + sampling_entries(generation_config)
