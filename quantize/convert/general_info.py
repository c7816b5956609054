"""``general.*`` metadata: the model's name, size label and license, for people and UIs.

The name comes from the folder (what the user downloaded or chose), the size label from
the parameter count (``135M``, ``1.5B``, as gguf-py's ``size_label`` formats it), and the
license from the model card's YAML front matter (``license: apache-2.0``), when present.
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


def general_entries(name: str, n_params: int, readme: Optional[str]) -> list[MetadataEntry]:
    S = GGUFValueType.STRING
    out = [MetadataEntry("general.type", "model", S),
           MetadataEntry("general.name", name, S),
           MetadataEntry("general.size_label", size_label(n_params), S)]
    license_name = card_license(readme)
    if license_name:
        out.append(MetadataEntry("general.license", license_name, S))
    return out
