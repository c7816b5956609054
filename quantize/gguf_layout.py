"""A GGUF file's complete header — every key/value and the tensor table — read fast.

``gguf.GGUFReader`` builds a numpy view for every part of every field: for a model with
a 49k-token vocabulary and 49k merges that is ~250k views, 3 s on an idle machine, paid
before a quantize job can start (llama.cpp parses the same header in milliseconds).
This reader walks the header with ``struct`` over a memory map and keeps values as
plain Python objects, exactly as ``GGUFReader``'s ``contents()`` returns them, so they
can be written again unchanged. Arrays of strings (the vocabulary, the merges) stay as
read, in an :class:`EncodedStrings` that decodes on first use: a quantize job copies them
to its output byte for byte and never needs them as text. Tensor data is not read; the table gives each tensor's
absolute offset for a memory-mapped view.

Layout (little-endian)::

    "GGUF" | version u32 (2 or 3) | n_tensors u64 | n_kv u64
    n_kv      x [ key: string | value_type u32 | value ]
    n_tensors x [ name: string | n_dims u32 | ne u64 x n_dims | ggml_type u32 | offset u64 ]
    zero padding to general.alignment (32 by default) | tensor data (offsets relative to here)

    string = length u64 | UTF-8 bytes        array = item_type u32 | count u64 | items
"""

from __future__ import annotations

import math
import mmap
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from quantize.ggml_types import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType, GGUFValueType

from models.foundation.errors import QuantDeskError
from quantize.source import MetadataEntry

_SCALAR_FORMATS = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d",
}
_U64 = struct.Struct("<Q")
#: The numpy dtype of each scalar GGUF type (also what quantize.gguf_encoding writes).
SCALAR_DTYPES = {t: np.dtype(f) for t, f in _SCALAR_FORMATS.items()}


def _text(raw: bytes):
    """A GGUF string as ``str``; one that is not UTF-8 stays ``bytes``, so that writing it
    again gives the same bytes."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


class EncodedStrings(Sequence):
    """A GGUF array of strings kept as stored: ``count`` items of u64 length + bytes.

    A read-only sequence equal to the list ``GGUFReader`` gives (``str`` items, ``bytes``
    for one that is not UTF-8), decoded the first time an item is asked for;
    :attr:`raw` is what :mod:`quantize.gguf_encoding` writes back.
    """

    __slots__ = ("raw", "count", "_items")
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, raw: bytes, count: int) -> None:
        self.raw, self.count, self._items = raw, count, None

    def _decoded(self) -> list:
        if self._items is None:
            items, pos, raw = [], 0, self.raw
            for _ in range(self.count):
                (length,) = struct.unpack_from("<Q", raw, pos)
                items.append(_text(raw[pos + 8: pos + 8 + length]))
                pos += 8 + length
            self._items = items
        return self._items

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):
        return self._decoded()[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, EncodedStrings):
            return self.raw == other.raw
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes)):
            return self._decoded() == list(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"EncodedStrings({self.count} strings, {len(self.raw)} bytes)"


@dataclass(frozen=True)
class TensorLayout:
    """One tensor of the table: numpy-order shape, type, absolute data offset, size."""

    name: str
    shape: tuple[int, ...]
    qtype: GGMLQuantizationType
    offset: int
    nbytes: int


@dataclass(frozen=True)
class GGUFLayout:
    """A GGUF header: key/values in file order (architecture included) and tensors."""

    version: int
    metadata: list[MetadataEntry]
    tensors: list[TensorLayout]
    alignment: int


class _Cursor:
    def __init__(self, buf: mmap.mmap, path: Path) -> None:
        self.buf, self.pos, self.path = buf, 0, path

    def fail(self, why: str) -> QuantDeskError:
        return QuantDeskError(f"{self.path.name} is not a readable GGUF file ({why}).",
                              "Check that the download finished, or convert the model again.")

    def unpack(self, fmt: str, size: int):
        if self.pos + size > len(self.buf):
            raise self.fail("it ends inside its header")
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += size
        return value

    def string(self):
        length = self.unpack("<Q", 8)
        if self.pos + length > len(self.buf):
            raise self.fail("it ends inside its header")
        raw = self.buf[self.pos:self.pos + length]  # slicing a map copies: no view outlives it
        self.pos += length
        return _text(raw)

    def strings(self, count: int) -> EncodedStrings:
        """``count`` strings, walked by their lengths only (decoding waits until used)."""
        start, pos, buf, unpack = self.pos, self.pos, self.buf, _U64.unpack_from
        try:
            for _ in range(count):  # the hot loop of a header: 100k strings in a 49k vocabulary
                pos += 8 + unpack(buf, pos)[0]
        except struct.error:  # a length read past the end of the file
            raise self.fail("it ends inside its header") from None
        if pos > len(buf):
            raise self.fail("it ends inside its header")
        self.pos = pos
        return EncodedStrings(self.buf[start:pos], count)  # a copy: no view outlives the map

    def value(self, vtype: GGUFValueType, sub_type_out: list):
        if vtype in _SCALAR_FORMATS:
            return self.unpack(_SCALAR_FORMATS[vtype], SCALAR_DTYPES[vtype].itemsize)
        if vtype == GGUFValueType.STRING:
            return self.string()
        if vtype == GGUFValueType.ARRAY:
            item = self.value_type()
            count = self.unpack("<Q", 8)
            sub_type_out.append(item)
            if item in SCALAR_DTYPES:
                size = SCALAR_DTYPES[item].itemsize * count
                if self.pos + size > len(self.buf):
                    raise self.fail("it ends inside its header")
                values = np.frombuffer(self.buf, SCALAR_DTYPES[item], count, self.pos).tolist()
                self.pos += size
                return values
            if item == GGUFValueType.STRING:
                return self.strings(count)
            raise self.fail("it holds nested arrays")
        raise self.fail(f"unknown value type {int(vtype)}")

    def value_type(self) -> GGUFValueType:
        raw = self.unpack("<I", 4)
        try:
            return GGUFValueType(raw)
        except ValueError:
            raise self.fail(f"unknown value type {raw}") from None


def read_gguf_layout(path: Path) -> GGUFLayout:
    """Read every key/value and the tensor table of ``path``.

    Raises:
        QuantDeskError: not a GGUF file, an unsupported version, a header cut short, or
            tensor data that lies beyond the end of the file.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if size < 24:
                raise QuantDeskError(f"{path.name} is not a readable GGUF file (it is only {size} bytes).",
                                     "Check that the download finished, or convert the model again.")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                return _parse(mm, path, size)
    except OSError as exc:
        raise QuantDeskError(f"{path} could not be read ({exc.strerror}).",
                             "Check that the file exists and you may read it.") from exc


def _parse(buf: mmap.mmap, path: Path, size: int) -> GGUFLayout:
    cur = _Cursor(buf, path)
    if buf[:4] != b"GGUF":
        raise cur.fail("it does not start with 'GGUF'")
    cur.pos = 4
    version = cur.unpack("<I", 4)
    if version not in (2, 3):
        raise cur.fail(f"GGUF version {version} is not supported")
    n_tensors, n_kv = cur.unpack("<Q", 8), cur.unpack("<Q", 8)
    metadata = []
    for _ in range(n_kv):
        key = cur.string()
        vtype, sub = cur.value_type(), []
        value = cur.value(vtype, sub)
        metadata.append(MetadataEntry(str(key), value, vtype, sub[0] if sub else None))
    alignment = next((int(e.value) for e in metadata if e.key == "general.alignment"), GGUF_DEFAULT_ALIGNMENT)
    table = []
    for _ in range(n_tensors):
        name = str(cur.string())
        ne = [cur.unpack("<Q", 8) for _ in range(cur.unpack("<I", 4))]
        raw_type, offset = cur.unpack("<I", 4), cur.unpack("<Q", 8)
        try:
            qtype = GGMLQuantizationType(raw_type)
        except ValueError:
            raise cur.fail(f"tensor {name} has an unknown type {raw_type}") from None
        table.append((name, tuple(reversed(ne)), qtype, offset))
    data_start = (cur.pos + alignment - 1) // alignment * alignment
    tensors = []
    for name, shape, qtype, offset in table:
        block, type_size = GGML_QUANT_SIZES[qtype]
        nbytes = math.prod(shape) // block * type_size
        if data_start + offset + nbytes > size:
            raise cur.fail(f"the data of {name} lies beyond the end of the file")
        tensors.append(TensorLayout(name, shape, qtype, data_start + offset, nbytes))
    return GGUFLayout(version, metadata, tensors, alignment)
