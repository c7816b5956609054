"""A small, strict reader of safetensors files: validated header, lazy memory-mapped tensors.

Layout (https://github.com/huggingface/safetensors)::

    offset 0        8                      8 + N                                  end of file
           ┌────────┬──────────────────────┬───────────────────────────────────────┐
           │ u64 LE │ N bytes JSON header  │ tensor data (each tensor's bytes at   │
           │   N    │ (space padded)       │ data_offsets [begin, end) from here)  │
           └────────┴──────────────────────┴───────────────────────────────────────┘

We read the format ourselves rather than through the ``safetensors`` package so that a
hostile or damaged file becomes a :class:`QuantDeskError` naming the file (an absurd
header length, offsets past the end, overlapping tensors, a dtype whose byte count does
not match the shape) instead of a crash, and so that each tensor's pages can be released
from our memory right after it is read (a 30 GB model converts in bounded RAM).
"""

from __future__ import annotations

import json
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from models.foundation.errors import QuantDeskError
from quantize.encode import bf16_bits_to_f32

#: Largest JSON header we accept. Real headers are a few hundred KB even for 1000-tensor
#: shards; the safetensors library itself refuses more than 100 MB.
MAX_HEADER_BYTES = 100 * 1024 * 1024

#: safetensors dtype name → (numpy dtype of the stored little-endian values, bytes each).
#: BF16 has no numpy dtype: its bit patterns are read as uint16 and widened on load.
FLOAT_DTYPES = {"F32": (np.dtype("<f4"), 4), "F16": (np.dtype("<f2"), 2), "BF16": (np.dtype("<u2"), 2)}
OTHER_DTYPE_SIZES = {"F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
                     "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8}


@dataclass(frozen=True)
class TensorRecord:
    """Where one tensor lives inside a safetensors file (offsets are absolute)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int
    file: "SafetensorsFile"

    def load_f32(self) -> np.ndarray:
        """The values as a new C-contiguous float32 array of :attr:`shape`."""
        return self.file.read_f32(self)

    def load_stored(self) -> np.ndarray:
        """The values as stored (see :meth:`SafetensorsFile.read_stored`), a new array."""
        return self.file.read_stored(self)


def _bad(path: Path, why: str) -> QuantDeskError:
    return QuantDeskError(
        f"{path.name} is not a valid safetensors file: {why}.",
        "The download may be incomplete or damaged; download the model again.",
    )


class SafetensorsFile:
    """One ``*.safetensors`` file, memory-mapped, with every header entry validated.

    Raises:
        QuantDeskError: when the header or the data layout is inconsistent.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self._fh = open(self.path, "rb")
        except OSError as exc:
            raise QuantDeskError(f"Cannot open {self.path}: {exc.strerror}.",
                                 "Check that the file exists and is readable.") from exc
        try:
            self.size = self.path.stat().st_size
            self.metadata, self.tensors = self._parse_header()
            self._map = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ) if self.size else None
        except BaseException:
            self._fh.close()
            raise

    def _parse_header(self) -> tuple[dict, dict[str, TensorRecord]]:
        path = self.path
        if self.size < 8:
            raise _bad(path, f"it has only {self.size} bytes, fewer than the 8-byte header length")
        (n,) = struct.unpack("<Q", self._fh.read(8))
        if n > MAX_HEADER_BYTES or 8 + n > self.size:
            raise _bad(path, f"its header claims {n:,} bytes but the file has {self.size:,}")
        try:
            header = json.loads(self._fh.read(n).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise _bad(path, f"its header is not JSON ({exc})") from exc
        if not isinstance(header, dict):
            raise _bad(path, "its header is not a JSON object")
        data_start = 8 + n
        metadata = header.pop("__metadata__", None) or {}
        records: dict[str, TensorRecord] = {}
        for name, info in header.items():
            records[name] = self._record(name, info, data_start)
        spans = sorted((r.begin, r.end, r.name) for r in records.values() if r.end > r.begin)
        for (_, end_a, name_a), (begin_b, _, name_b) in zip(spans, spans[1:]):
            if begin_b < end_a:
                raise _bad(path, f"tensors {name_a} and {name_b} overlap")
        return metadata, records

    def _record(self, name: str, info: object, data_start: int) -> TensorRecord:
        path = self.path
        if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
            raise _bad(path, f"the entry of {name} lacks dtype, shape or data_offsets")
        dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if not (isinstance(shape, list) and all(isinstance(d, int) and 0 <= d < 2**40 for d in shape)):
            raise _bad(path, f"{name} has an invalid shape {shape!r}")
        if not (isinstance(offsets, list) and len(offsets) == 2
                and all(isinstance(o, int) and o >= 0 for o in offsets) and offsets[0] <= offsets[1]):
            raise _bad(path, f"{name} has invalid data_offsets {offsets!r}")
        itemsize = FLOAT_DTYPES[dtype][1] if dtype in FLOAT_DTYPES else OTHER_DTYPE_SIZES.get(dtype)
        if itemsize is None:
            raise _bad(path, f"{name} has an unknown dtype {dtype!r}")
        n_bytes = int(np.prod(shape, dtype=object)) * itemsize
        begin, end = data_start + offsets[0], data_start + offsets[1]
        if end - begin != n_bytes:
            raise _bad(path, f"{name} is {dtype} of shape {shape} ({n_bytes:,} bytes) "
                             f"but its data_offsets span {end - begin:,} bytes")
        if end > self.size:
            raise _bad(path, f"{name} ends at byte {end:,} but the file has only {self.size:,} "
                             "bytes (truncated)")
        return TensorRecord(name, dtype, tuple(shape), begin, end, self)

    def read_f32(self, record: TensorRecord) -> np.ndarray:
        """Copy one tensor out of the mapping as float32, then drop its pages from our RSS.

        The pages stay in the OS page cache (cheap to read again); ``MADV_DONTNEED`` only
        unmaps them from this process, which is what keeps converting a model larger than
        RAM flat in memory.
        """
        return self._read(record, as_stored=False)

    def read_stored(self, record: TensorRecord) -> np.ndarray:
        """Copy one tensor out of the mapping as stored — float16, bfloat16 bits as uint16,
        or float32 — then drop its pages from our RSS (see :meth:`read_f32`)."""
        return self._read(record, as_stored=True)

    def _read(self, record: TensorRecord, as_stored: bool) -> np.ndarray:
        if record.dtype not in FLOAT_DTYPES:
            raise QuantDeskError(
                f"{record.name} in {self.path.name} is stored as {record.dtype}, which QuantDesk "
                "cannot convert (only F32, F16 and BF16 weights are supported).",
                "Use the model's unquantized (float) checkpoint.")
        np_dtype, _ = FLOAT_DTYPES[record.dtype]
        count = (record.end - record.begin) // np_dtype.itemsize
        if self._map is None or count == 0:
            return np.zeros(record.shape, dtype=np_dtype if as_stored else np.float32)
        raw = np.frombuffer(self._map, dtype=np_dtype, count=count, offset=record.begin)
        if as_stored:
            values = raw.copy()
        elif record.dtype == "BF16":
            values = bf16_bits_to_f32(raw)  # bfloat16 is the top half of a float32
        else:
            values = raw.astype(np.float32)  # always a copy, so the mapping can be released
        del raw
        self._release(record.begin, record.end)
        return values.reshape(record.shape)

    def _release(self, begin: int, end: int) -> None:
        if not hasattr(mmap, "MADV_DONTNEED"):
            return  # Windows: the OS trims mapped file pages on its own
        page = mmap.PAGESIZE
        start = begin - begin % page
        try:
            self._map.madvise(mmap.MADV_DONTNEED, start, end - start)
        except (OSError, ValueError):
            pass  # advisory only: memory use is higher but the result is the same

    def close(self) -> None:
        """Release the mapping and the file handle."""
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass  # a caller still holds a view; the GC closes it later
        self._fh.close()

    def __repr__(self) -> str:
        return f"SafetensorsFile({self.path.name}, {len(self.tensors)} tensors)"
