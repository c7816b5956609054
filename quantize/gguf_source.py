"""Reading an existing F32/F16/BF16 GGUF file as a :class:`~quantize.source.TensorSource`.

The file is memory-mapped by ``gguf.GGUFReader``; a tensor's bytes are touched only when
its ``load()`` runs, so quantizing a 30 GB model does not need 30 GB of RAM.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType

from app.core.errors import QuantDeskError
from quantize.source import MetadataEntry, SourceTensor

FLOAT_TYPES = (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16)

# Keys the reader synthesizes or the writer sets itself.
_SKIPPED_KEYS = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.architecture"}


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16) → float32 values (exact)."""
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


class GGUFSource:
    """A GGUF file whose tensors are F32, F16 or BF16 (quantized inputs are refused)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.description = str(self.path)
        try:
            self._reader = GGUFReader(self.path, "r")
        except (ValueError, OSError, IndexError) as exc:
            raise QuantDeskError(
                f"{self.path.name} is not a readable GGUF file ({exc}).",
                "Check that the download finished, or convert the model again.",
            ) from exc
        arch = self._reader.get_field("general.architecture")
        if arch is None:
            raise QuantDeskError(f"{self.path.name} has no general.architecture key, so it is not a model file.")
        self.arch = str(arch.contents())
        quantized = [t.name for t in self._reader.tensors if t.tensor_type not in FLOAT_TYPES]
        if quantized:
            raise QuantDeskError(
                f"{self.path.name} is already quantized ({len(quantized)} tensors such as "
                f"{quantized[0]}); quantizing it again would lose quality.",
                "Start from the F32, F16 or BF16 GGUF, or from the original safetensors folder.",
            )

    def metadata(self) -> list[MetadataEntry]:
        entries = []
        for field in self._reader.fields.values():
            if field.name in _SKIPPED_KEYS or not field.types:
                continue
            main = field.types[0]
            sub = field.types[-1] if main == GGUFValueType.ARRAY else None
            entries.append(MetadataEntry(field.name, field.contents(), main, sub))
        return entries

    def tensors(self) -> list[SourceTensor]:
        out = []
        for t in self._reader.tensors:
            shape = tuple(int(d) for d in reversed(t.shape.tolist()))
            out.append(SourceTensor(t.name, shape, GGMLQuantizationType(t.tensor_type),
                                    self._loader(t, shape)))
        return out

    @staticmethod
    def _loader(t, shape):
        def load() -> np.ndarray:
            data = np.asarray(t.data)
            if t.tensor_type == GGMLQuantizationType.BF16:
                values = bf16_bits_to_f32(data.view(np.uint16))
            else:
                values = data.astype(np.float32, copy=False)
            return np.ascontiguousarray(values.reshape(shape), dtype=np.float32)

        return load
