"""Reading an existing F32/F16/BF16 GGUF file as a :class:`~quantize.source.TensorSource`.

The file is memory-mapped; a tensor's bytes are touched only when it is loaded, and
dropped from the process when its consumer releases it, so quantizing a 30 GB model
does not need 30 GB of RAM. ``load_stored()`` gives a view of the map itself (no copy);
``stored_bytes`` reads a tensor's bytes with ``pread`` for one copied unchanged.
:meth:`GGUFSource.close` lets go of the file.
"""

from __future__ import annotations

import mmap
import os
import sys
import threading
from pathlib import Path
from typing import Optional

import numpy as np
from quantize.ggml_types import GGMLQuantizationType

from models.foundation.errors import QuantDeskError
from quantize.encode import bf16_bits_to_f32
from quantize.gguf_layout import TensorLayout, read_gguf_layout
from quantize.source import MetadataEntry, SourceTensor, StoredBytes

FLOAT_TYPES = (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.BF16)

# madvise(MADV_POPULATE_READ) (Linux 5.14+; Python's mmap module names it from 3.13):
# read a range of the map in and map it in one call.
_POPULATE: Optional[int] = getattr(mmap, "MADV_POPULATE_READ", 22 if sys.platform.startswith("linux") else None)

# Keys the reader synthesizes or the writer sets itself.
_SKIPPED_KEYS = {"GGUF.version", "GGUF.tensor_count", "GGUF.kv_count", "general.architecture"}


class GGUFSource:
    """A GGUF file whose tensors are F32, F16 or BF16 (quantized inputs are refused)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.description = str(self.path)
        # The header is parsed by quantize.gguf_layout (milliseconds, where GGUFReader
        # takes seconds on a large vocabulary); tensor data stays memory-mapped.
        self._layout = read_gguf_layout(self.path)
        arch = next((e.value for e in self._layout.metadata if e.key == "general.architecture"), None)
        if arch is None:
            raise QuantDeskError(f"{self.path.name} has no general.architecture key, so it is not a model file.")
        self.arch = str(arch)
        quantized = [t.name for t in self._layout.tensors if t.qtype not in FLOAT_TYPES]
        if quantized:
            raise QuantDeskError(
                f"{self.path.name} is already quantized ({len(quantized)} tensors such as "
                f"{quantized[0]}); quantizing it again would lose quality.",
                "Start from the F32, F16 or BF16 GGUF, or from the original safetensors folder.",
            )
        self._map = None
        self._file = None  # opened by the first stored_bytes read (pread: any thread)
        self._file_lock = threading.Lock()
        if self._layout.tensors:
            with open(self.path, "rb") as f:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)

    def close(self) -> None:
        """Let go of the file. Arrays from ``load_stored`` that are still referenced keep
        the map alive (it closes when the last one goes); nothing may be loaded after."""
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:  # a view of it is still held: the map outlives this call
                pass
        with self._file_lock:
            if self._file is not None:
                self._file.close()

    def __enter__(self) -> "GGUFSource":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def metadata(self) -> list[MetadataEntry]:
        return [e for e in self._layout.metadata if e.key not in _SKIPPED_KEYS]

    def tensors(self) -> list[SourceTensor]:
        return [SourceTensor(t.name, t.shape, t.qtype, self._loader(t), self._viewer(t),
                             lambda t=t: self._release(t.offset, t.nbytes),
                             StoredBytes(t.nbytes, self._reader(t))) for t in self._layout.tensors]

    def _loader(self, t: TensorLayout):
        def load() -> np.ndarray:
            data = np.frombuffer(self._map, dtype=np.uint8, count=t.nbytes, offset=t.offset)
            if t.qtype == GGMLQuantizationType.BF16:
                values = bf16_bits_to_f32(data.view(np.uint16))
            elif t.qtype == GGMLQuantizationType.F16:
                values = data.view(np.float16).astype(np.float32)
            else:
                values = np.array(data.view(np.float32))  # a copy: nothing may point into the map
            del data
            self._release(t.offset, t.nbytes)
            return values.reshape(t.shape)

        return load

    def _viewer(self, t: TensorLayout):
        stored = {GGMLQuantizationType.BF16: np.uint16, GGMLQuantizationType.F16: np.float16}.get(
            t.qtype, np.float32)

        def load_stored() -> np.ndarray:
            # No copy: the quantizer's workers read the map itself, and a tensor whose type
            # does not change is written from it. Its pages are read and mapped now, in one
            # call (on the job's loader thread), not one page fault at a time where they are
            # used: faults cost 0.1 s per 271 MB here, half the time of writing them out.
            self._populate(t.offset, t.nbytes)
            return np.frombuffer(self._map, dtype=stored, count=t.nbytes // np.dtype(stored).itemsize,
                                 offset=t.offset).reshape(t.shape)

        return load_stored

    def _reader(self, t: TensorLayout):
        def read_into(buffer: memoryview, start: int) -> int:
            size = min(len(buffer), t.nbytes - start)
            if hasattr(os, "preadv"):
                return os.preadv(self._fileno(), [buffer[:size]], t.offset + start)
            chunk = self._map[t.offset + start:t.offset + start + size]  # Windows: no pread
            buffer[:len(chunk)] = chunk  # shorter (or empty) where the file was cut short
            return len(chunk)

        return read_into

    def _fileno(self) -> int:
        with self._file_lock:
            if self._file is None:
                self._file = open(self.path, "rb", buffering=0)
            return self._file.fileno()

    def _release(self, offset: int, nbytes: int) -> None:
        # Like llama.cpp's unmap_weight: drop the tensor's pages from this process once
        # they are used, so resident memory stays flat as the model grows.
        self._advise(getattr(mmap, "MADV_DONTNEED", None), offset, nbytes)

    def _populate(self, offset: int, nbytes: int) -> None:
        global _POPULATE
        if _POPULATE is not None:
            try:
                self._advise(_POPULATE, offset, nbytes)
                return
            except OSError:  # Linux before 5.14: the kernel reads ahead instead
                _POPULATE = None
        self._advise(getattr(mmap, "MADV_WILLNEED", None), offset, nbytes)

    def _advise(self, advice: Optional[int], offset: int, nbytes: int) -> None:
        if nbytes and advice is not None and hasattr(self._map, "madvise"):
            start = offset // mmap.PAGESIZE * mmap.PAGESIZE
            self._map.madvise(advice, start, offset + nbytes - start)
