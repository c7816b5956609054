"""The tensor stream: what the converter produces and the quantizer consumes.

A :class:`TensorSource` is a model seen as GGUF metadata plus a sequence of named
float tensors that are loaded one at a time. The converter's HF-folder source and the
reader of an existing F32/F16/BF16 GGUF both implement it, so "HF folder → Q4_K_M"
goes through the same writer as "GGUF → Q4_K_M" with no intermediate file on disk.

Shapes are numpy order: ``(..., rows, n_per_row)``, i.e. GGUF's ``ne`` reversed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Protocol

import numpy as np
from quantize.ggml_types import GGMLQuantizationType, GGUFValueType


@dataclass(frozen=True)
class MetadataEntry:
    """One GGUF key/value pair, with its GGUF type (and element type for arrays)."""

    key: str
    value: Any
    type: GGUFValueType
    sub_type: Optional[GGUFValueType] = None


@dataclass(frozen=True)
class StoredBytes:
    """A tensor's bytes exactly as its source file holds them, read on demand.

    A tensor whose type does not change is copied from the source file to the output
    through one small reused buffer (:func:`quantize.gguf_output.write_ggufs`): no
    float round trip, and no page of the source mapped into the process. Mapping 271 MB
    of tensors and writing them out from the map took 0.07-0.31 s here; reading them into
    an 8 MB buffer and writing that took 0.08-0.09 s, every time.

    Attributes:
        nbytes: The tensor's size in bytes.
        read_into: ``read_into(buffer, start)`` fills ``buffer`` (or its first part) with
            the tensor's bytes from byte ``start`` on and returns how many it read.
    """

    nbytes: int
    read_into: Callable[[memoryview, int], int]


@dataclass(frozen=True)
class SourceTensor:
    """A named tensor whose values are read only when :attr:`load` is called.

    Attributes:
        name: GGUF tensor name, e.g. ``blk.0.attn_q.weight``.
        shape: numpy-order shape; the last axis is the row (``n_per_row``).
        stored_type: How the source stores it (F32, F16 or BF16).
        load: Returns the values as a C-contiguous float32 array of ``shape``.
        load_stored: Optional: the values as stored, unconverted — float16, bfloat16
            bits as uint16, or float32 (see :func:`quantize.blocks.widen.to_f32`). The quantizer widens
            them to float32 chunk by chunk on its worker threads, where each chunk is
            quantized while it is in cache, instead of widening the whole tensor first.
            The array may be a read-only view of the source's memory map (no copy):
            valid while the source is open, and until :attr:`release` is called.
        release: Optional: called once the consumer is done with ``load_stored``'s
            array; a memory-mapped source drops the tensor's pages from the process,
            so resident memory stays flat as the model grows.
        stored_bytes: Optional: the bytes as stored in a file (:class:`StoredBytes`), for
            a consumer that copies the tensor unchanged.
    """

    name: str
    shape: tuple[int, ...]
    stored_type: GGMLQuantizationType
    load: Callable[[], np.ndarray]
    load_stored: Optional[Callable[[], np.ndarray]] = None
    release: Optional[Callable[[], None]] = None
    stored_bytes: Optional[StoredBytes] = None

    @property
    def n_elements(self) -> int:
        return int(math.prod(self.shape))  # Python ints: numpy's prod costs ~5 us a call

    @property
    def n_per_row(self) -> int:
        return self.shape[-1]

    @property
    def n_rows(self) -> int:
        return self.n_elements // self.shape[-1] if self.shape else 1


class TensorSource(Protocol):
    """A model as GGUF metadata and a lazily loaded, ordered list of tensors."""

    #: Where the model comes from, for messages ("model.gguf", "folder/").
    description: str
    #: ``general.architecture``, e.g. ``llama``.
    arch: str

    def metadata(self) -> list[MetadataEntry]:
        """Every key/value to write, except ``general.architecture`` (the writer adds it)."""
        ...

    def tensors(self) -> list[SourceTensor]:
        """All tensors in output order; cheap (nothing is loaded)."""
        ...


def iter_loaded(source: TensorSource) -> Iterator[tuple[SourceTensor, np.ndarray]]:
    """Yield each tensor with its loaded values, one at a time (bounded memory)."""
    for tensor in source.tensors():
        yield tensor, tensor.load()
