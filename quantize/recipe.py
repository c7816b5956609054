"""A recipe: the type of every quantized tensor of one model, chosen by QuantDesk rather
than by a stock file type's rules — what ``--target-size`` produces and ``--recipe``
re-applies.

A recipe is written two ways, and either reproduces the file byte for byte (with the same
model and importance matrix):

* in the GGUF itself: ``quantdesk.recipe.tensor_types``, a UINT8 array with the ggml type
  of every tensor in the file's order (one byte each, so the header's size does not depend
  on the types chosen and a file's exact size is known before choosing them); the file's
  ``general.file_type`` is the stock type nearest in size, which is what other programs
  show ("Q4_K_M");
* as a JSON file beside it (``model-FIT-1.20GB.recipe.json``)::

      {"format": "quantdesk-recipe", "version": 1, "model": "...", "imatrix": "...",
       "tensors": {"token_embd.weight": "Q6_K", "blk.0.attn_q.weight": "IQ4_NL", ...}}

  naming only the tensors that are quantized.

Sizes a person types (``3.5GB``, ``900MiB``, ``123456789``) are read by
:func:`parse_size`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from quantize.ggml_types import GGUFValueType
from quantize.ggml_types import GGMLQuantizationType as T

from models.foundation.errors import QuantDeskError
from models.foundation.jobs import atomic_output
from quantize.source import MetadataEntry

#: The GGUF key holding a fitted file's tensor types, in file order.
RECIPE_KEY = "quantdesk.recipe.tensor_types"
_FORMAT = "quantdesk-recipe"
_VERSION = 1

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*$")


def parse_size(text: str) -> int:
    """``"3.5GB"`` → 3500000000, ``"900MiB"`` → 943718400, ``"123456"`` → 123456 (bytes).

    Raises:
        QuantDeskError: not a size, or a unit that could mean two things (``3.5G``).
    """
    match = _SIZE.match(text or "")
    if not match:
        raise QuantDeskError(f"'{text}' is not a size.", "Write a number of bytes or a size with a unit, "
                             "e.g. 3.5GB (10^9 bytes) or 900MiB (2^20 bytes).")
    number, unit = float(match.group(1)), match.group(2).upper()
    if unit in ("K", "M", "G", "T"):
        raise QuantDeskError(f"'{text}' could mean {unit}B (powers of 1000) or {unit}iB (powers of 1024).",
                             f"Write {match.group(1)}{unit}B or {match.group(1)}{unit}iB.")
    if unit not in _UNITS:
        raise QuantDeskError(f"'{text}' has a unit QuantDesk does not know ({match.group(2)}).",
                             "Use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB.")
    size = int(number * _UNITS[unit])
    if size <= 0:
        raise QuantDeskError(f"'{text}' is not a size a file can have.", "Give a size above zero.")
    return size


def format_target(n_bytes: int) -> str:
    """A size for a file name: ``1234567890`` → ``"1.23GB"`` (powers of 1000, 3 digits)."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if n_bytes >= scale:
            value = n_bytes / scale
            return f"{value:.3g}{unit}"
    return f"{n_bytes}B"


@dataclass(frozen=True)
class Recipe:
    """The type of each quantized tensor, by name.

    Attributes:
        types: Tensor name → ggml type, for every tensor that llama.cpp would quantize.
        imatrix: The importance matrix's path as given when the recipe was made ("" for
            none); informative: the file's bytes depend on the matrix given when applying.
    """

    types: Mapping[str, T]
    imatrix: str = ""

    def type_of(self, name: str) -> Optional[T]:
        return self.types.get(name)

    def to_json(self, model: str) -> str:
        return json.dumps({"format": _FORMAT, "version": _VERSION, "model": model, "imatrix": self.imatrix,
                           "tensors": {n: t.name for n, t in self.types.items()}}, indent=1) + "\n"

    def save(self, path: Path, model: str) -> Path:
        """Write the recipe as JSON (beside a target, or wherever the user asks); atomic."""
        with atomic_output(Path(path)) as tmp:
            Path(tmp).write_text(self.to_json(model), encoding="utf-8")
        return Path(path)


def recipe_metadata(tensor_types: Sequence[T]) -> MetadataEntry:
    """The GGUF key/value recording every tensor's type in file order."""
    return MetadataEntry(RECIPE_KEY, [int(t) for t in tensor_types], GGUFValueType.ARRAY, GGUFValueType.UINT8)


def load_recipe(path: Path) -> Recipe:
    """A recipe from its JSON file, or from a GGUF that QuantDesk fitted.

    Raises:
        QuantDeskError: the file cannot be read or holds no recipe.
    """
    path = Path(path)
    try:
        head = path.open("rb").read(4)
    except OSError as exc:
        raise QuantDeskError(f"Cannot read the recipe {path} ({exc.strerror}).", "Check the path.") from exc
    if head == b"GGUF":
        return _recipe_from_gguf(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("format") != _FORMAT:
            raise ValueError("not a QuantDesk recipe")
        if data.get("version") != _VERSION:
            raise ValueError(f"version {data.get('version')}, this QuantDesk reads version {_VERSION}")
        types = {str(name): _tensor_type(str(value)) for name, value in data["tensors"].items()}
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as exc:
        raise QuantDeskError(f"{path.name} is not a recipe QuantDesk can read ({exc}).",
                             "Give a .recipe.json written by QuantDesk, or a GGUF it fitted to a size.") from exc
    if not types:
        raise QuantDeskError(f"The recipe {path.name} names no tensor.", "Give a recipe written by QuantDesk.")
    return Recipe(types, str(data.get("imatrix") or ""))


def _tensor_type(name: str) -> T:
    try:
        return T[name]
    except KeyError:
        raise ValueError(f"unknown tensor type {name}") from None


def _recipe_from_gguf(path: Path) -> Recipe:
    from quantize.gguf_layout import read_gguf_layout
    from quantize.type_rules import allows_quantization

    layout = read_gguf_layout(path)
    meta = {e.key: e for e in layout.metadata}
    entry = meta.get(RECIPE_KEY)
    if entry is None:
        raise QuantDeskError(f"{path.name} holds no QuantDesk recipe (it was not fitted to a size).",
                             "Give a GGUF that `quantdesk quantize --target-size` wrote, or its .recipe.json.")
    values = [int(v) for v in entry.value]
    if values != [int(t.qtype) for t in layout.tensors]:
        raise QuantDeskError(f"{path.name}'s recipe does not match its tensors.",
                             "The file was changed after it was written; use its .recipe.json.")
    arch = str(meta["general.architecture"].value) if "general.architecture" in meta else ""
    imatrix = str(meta["quantize.imatrix.file"].value) if "quantize.imatrix.file" in meta else ""
    types = {t.name: t.qtype for t in layout.tensors if allows_quantization(t.name, t.shape, arch)}
    return Recipe(types, imatrix)
