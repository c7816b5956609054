"""A GGUF file's header as the library and the memory-fit prediction see it.

The parsing is :func:`quantize.gguf_layout.read_gguf_layout` (``struct`` over a memory
map, milliseconds where ``gguf.GGUFReader`` takes seconds; no tensor data is read). This
module only reshapes its result for lookups: metadata as a dict, and each tensor's name,
shape, type and size in bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quantize.gguf_layout import read_gguf_layout


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's entry in the header: name, shape, ggml type and size in bytes."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    n_bytes: int

    @property
    def n_elements(self) -> int:
        """Number of values in the tensor."""
        count = 1
        for dim in self.shape:
            count *= dim
        return count


@dataclass
class GGUFHeader:
    """What a GGUF file says about itself before its tensor data starts."""

    metadata: dict[str, Any] = field(default_factory=dict)
    tensors: list[TensorInfo] = field(default_factory=list)
    version: int = 0

    @property
    def architecture(self) -> str:
        """``general.architecture`` (``llama``, ``qwen2``...), or ``""`` when missing."""
        return str(self.metadata.get("general.architecture", ""))

    def arch_value(self, key: str, default: Any = None) -> Any:
        """An architecture-scoped key such as ``llama.block_count``."""
        return self.metadata.get(f"{self.architecture}.{key}", default)

    @property
    def parameter_count(self) -> int:
        """Number of weights in all tensors."""
        return sum(t.n_elements for t in self.tensors)


def read_gguf_header(path: Path) -> GGUFHeader:
    """Read ``path``'s metadata and tensor table.

    Raises:
        QuantDeskError: The file is missing, not GGUF, cut short, or its header is corrupt.
    """
    layout = read_gguf_layout(Path(path))
    return GGUFHeader(
        metadata={entry.key: entry.value for entry in layout.metadata},
        tensors=[TensorInfo(t.name, t.shape, int(t.qtype), t.nbytes) for t in layout.tensors],
        version=layout.version,
    )
