"""Reading llama.cpp importance matrices (``--imatrix``) into one vector per tensor.

An importance matrix says, for every weight tensor, how strongly each input column was
activated on some calibration text; quantizers then spend their precision where it
matters. ``llama-imatrix`` writes two formats, and ``llama-quantize`` reads both
(``common/imatrix-loader.cpp`` and ``load_imatrix`` in ``tools/quantize/quantize.cpp``):

GGUF (current)::

    key/values  general.type = "imatrix", imatrix.datasets (string array),
                imatrix.chunk_count (u32), imatrix.chunk_size (u32)   -- all three required
    tensors     <name>.in_sum2  F32, ne = [n_per_row, n_mat]   sums of squared activations
                <name>.counts   F32, ne = [1, n_mat]            tokens seen, per matrix

    vector[j*n_per_row + i] = in_sum2[j, i] / lround(counts[j])   (1.0 where the count is 0)

legacy ``.dat`` (little-endian)::

    int32 n_entries
    n_entries x { int32 len, char name[len], int32 ncall, int32 nval, float32 sums[nval] }
    optional:    int32 chunk_count, int32 len, char dataset[len]

    vector[i] = sums[i] / ncall   (sums as stored when ncall <= 0)

:func:`save_imatrix` writes the GGUF format as llama-imatrix does (no
``general.architecture``; tensors sorted by name, each ``in_sum2`` before its ``counts``).

``n_mat`` is 1 for a dense weight and the number of experts for a stacked MoE tensor; the
quantizer gives expert ``e`` the slice ``vector[e*n_per_row:(e+1)*n_per_row]``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from quantize.ggml_types import GGMLQuantizationType, GGUFValueType

from models.foundation.errors import QuantDeskError
from models.foundation.jobs import atomic_output
from quantize.source import MetadataEntry
from quantize.type_rules import ggml_ne

GGUF_MAGIC = b"GGUF"
_REQUIRED_KEYS = ("imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size")
# What llama-quantize records in the quantized file (a 127-character string limit).
_KV_FILE, _KV_DATASET = "quantize.imatrix.file", "quantize.imatrix.dataset"
_KV_ENTRIES, _KV_CHUNKS = "quantize.imatrix.entries_count", "quantize.imatrix.chunks_count"


@dataclass(frozen=True)
class ImportanceMatrix:
    """Per-tensor importance vectors, already averaged as llama-quantize averages them.

    Attributes:
        path: The file they came from.
        entries: Tensor name → float32 vector of ``n_per_row * n_mat`` values.
        datasets: Calibration text files named in the imatrix.
        chunk_count: Chunks of text the matrix was computed on (0 when unknown).
        is_legacy: Whether it came from the legacy ``.dat`` format.
        samples: Tensor name → ``(rows, n_per_row)`` input rows seen on the text, when they
            were kept (:func:`models.quality.runner.measure_activations`; never saved).
    """

    path: Path
    entries: dict[str, np.ndarray]
    datasets: list[str] = field(default_factory=list)
    chunk_count: int = 0
    is_legacy: bool = False
    samples: dict[str, np.ndarray] = field(default_factory=dict)

    def for_tensor(self, name: str, shape: Sequence[int]) -> Optional[np.ndarray]:
        """The ``(n_mat, n_per_row)`` weights of tensor ``name``, or ``None`` if it has none.

        Follows ``llama_model_quantize_impl``: a tensor missing from the matrix is
        quantized without one; a size that fits neither ``n_per_row`` per expert is an
        error, except for the token embedding, for which it is ignored.

        Raises:
            QuantDeskError: the vector does not fit the tensor's shape.
        """
        vector = self.entries.get(name)
        if vector is None:
            return None
        ne = ggml_ne(shape)
        if vector.size != ne[0] * ne[2]:
            if name in ("token_embd.weight", "per_layer_token_embd.weight"):
                return None
            raise QuantDeskError(
                f"The importance matrix {self.path.name} has {vector.size} values for {name}, "
                f"which has rows of {ne[0]} values and {ne[2]} experts.",
                "The importance matrix was computed for another model; use one made for this model.",
            )
        return vector.reshape(ne[2], ne[0])

    def metadata(self, given_path: str) -> list[MetadataEntry]:
        """The ``quantize.imatrix.*`` keys llama-quantize adds to a file quantized with this matrix.

        Args:
            given_path: The imatrix path as the user gave it (llama-quantize records it as typed).
        """
        entries = [MetadataEntry(_KV_FILE, _truncate(given_path), GGUFValueType.STRING)]
        if self.datasets:
            entries.append(MetadataEntry(_KV_DATASET, _truncate(self.datasets[0]), GGUFValueType.STRING))
        entries.append(MetadataEntry(_KV_ENTRIES, len(self.entries), GGUFValueType.UINT32))
        if self.chunk_count > 0:
            entries.append(MetadataEntry(_KV_CHUNKS, self.chunk_count, GGUFValueType.UINT32))
        return entries


def save_imatrix(path: Path, sums: dict[str, np.ndarray], counts: dict[str, np.ndarray],
                 datasets: Sequence[str], chunk_count: int, chunk_size: int) -> Path:
    """Write an importance matrix in llama-imatrix's GGUF format, atomically.

    Args:
        path: The file to write (``NAME.imatrix.gguf`` by convention).
        sums: Tensor name → sums of squared activations, ``(n_mat, n_per_row)`` float32.
        counts: Tensor name → rows counted: one count per expert, or a single count for
            a dense weight (whose matrices then share it, as llama-imatrix stores them).
        datasets: The calibration texts' names (``imatrix.datasets``).
        chunk_count: Chunks the sums cover (``imatrix.chunk_count``).
        chunk_size: Tokens per chunk (``imatrix.chunk_size``).
    """
    from gguf import GGUFWriter, Keys  # only here: importing the gguf package costs every start

    path = Path(path)
    with atomic_output(path) as tmp:
        writer = GGUFWriter(tmp, "")
        writer.kv_data[0].pop(Keys.General.ARCHITECTURE, None)  # llama-imatrix writes none
        writer.add_type("imatrix")
        writer.add_array("imatrix.datasets", list(datasets))
        writer.add_uint32("imatrix.chunk_count", int(chunk_count))
        writer.add_uint32("imatrix.chunk_size", int(chunk_size))
        for name in sorted(sums):
            # ne = [n_per_row, n_mat] and [1, n_mat], trailing 1s dropped (ggml_n_dims)
            n_mat = counts[name].size
            values = np.asarray(sums[name], dtype=np.float32).reshape(n_mat, -1)
            tally = np.asarray(counts[name], dtype=np.float32).reshape(n_mat, 1)
            writer.add_tensor(f"{name}.in_sum2", values[0] if n_mat == 1 else values)
            writer.add_tensor(f"{name}.counts", tally[0] if n_mat == 1 else tally)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
    return path


def _truncate(text: str) -> str:
    # llama_model_kv_override.val_str is char[128]: strncpy(..., 127) keeps 127 bytes.
    return text.encode("utf-8")[:127].decode("utf-8", errors="ignore")


def _malformed(path: Path, why: str) -> QuantDeskError:
    return QuantDeskError(f"{path.name} is not a usable importance matrix: {why}.",
                          "Compute it again with llama-imatrix, or quantize without --imatrix.")


def load_imatrix(path: Path) -> ImportanceMatrix:
    """Read a GGUF or legacy ``.dat`` importance matrix.

    Raises:
        QuantDeskError: the file is missing, truncated, inconsistent, or holds NaN/inf.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise QuantDeskError(f"Cannot read the importance matrix {path} ({exc.strerror}).",
                             "Check the path.") from exc
    matrix = _load_gguf(path) if magic == GGUF_MAGIC else _load_legacy(path)
    for name, vector in matrix.entries.items():
        if not np.isfinite(vector).all():
            raise _malformed(path, f"the values for {name} include NaN or infinity")
    return matrix


def _load_gguf(path: Path) -> ImportanceMatrix:
    from gguf import GGUFReader  # only here: importing the gguf package costs every start

    try:
        reader = GGUFReader(path, "r")
    except (ValueError, OSError, IndexError, struct.error) as exc:
        raise _malformed(path, f"its GGUF structure cannot be read ({exc})") from exc
    if not reader.tensors:
        raise _malformed(path, "it holds no tensors")
    if any(reader.get_field(k) is None for k in _REQUIRED_KEYS):
        raise _malformed(path, "it lacks the imatrix.datasets / chunk_count / chunk_size keys")
    datasets_field = reader.get_field("imatrix.datasets")
    datasets = []
    if datasets_field.types[:2] == [GGUFValueType.ARRAY, GGUFValueType.STRING]:
        datasets = [str(d) for d in datasets_field.contents()]
    chunk_field = reader.get_field("imatrix.chunk_count")
    if chunk_field.types != [GGUFValueType.UINT32]:
        raise _malformed(path, "imatrix.chunk_count is not an unsigned 32-bit integer")

    pairs: dict[str, dict[str, object]] = {}
    for t in reader.tensors:
        for suffix in (".in_sum2", ".counts"):
            if t.name.endswith(suffix) and len(t.name) > len(suffix):
                pairs.setdefault(t.name[: -len(suffix)], {})[suffix] = t
    entries: dict[str, np.ndarray] = {}
    for name in sorted(pairs):
        sums_t, counts_t = pairs[name].get(".in_sum2"), pairs[name].get(".counts")
        if sums_t is None or counts_t is None:
            raise _malformed(path, f"{name} has sums without counts or counts without sums")
        if sums_t.tensor_type != GGMLQuantizationType.F32 or counts_t.tensor_type != GGMLQuantizationType.F32:
            raise _malformed(path, f"the sums and counts of {name} are not F32")
        sums = np.asarray(sums_t.data, dtype=np.float32).reshape(-1)
        counts = _lround(np.asarray(counts_t.data, dtype=np.float32).reshape(-1))
        if counts.size == 0 or sums.size % counts.size:
            raise _malformed(path, f"{name} has {sums.size} sums for {counts.size} counts")
        per_matrix = sums.reshape(counts.size, -1)
        divisor = counts.astype(np.float32)[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = np.where(divisor > 0, per_matrix / divisor, np.float32(1.0))
        entries[name] = mean.astype(np.float32).reshape(-1)
    return ImportanceMatrix(path, entries, datasets, int(chunk_field.contents()), is_legacy=False)


def _lround(x: np.ndarray) -> np.ndarray:
    """C's ``lround``: to nearest, halves away from zero (numpy's round goes to even)."""
    x = x.astype(np.float64)
    return (np.sign(x) * np.floor(np.abs(x) + 0.5)).astype(np.int64)


class _Cursor:
    """Little-endian reads from a byte string that say which field ran out."""

    def __init__(self, path: Path, data: bytes) -> None:
        self.path, self.data, self.pos = path, data, 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise _malformed(self.path, f"it ends in the middle of {what}")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def int32(self, what: str) -> int:
        return struct.unpack("<i", self.take(4, what))[0]

    @property
    def left(self) -> int:
        return len(self.data) - self.pos


def _load_legacy(path: Path) -> ImportanceMatrix:
    cur = _Cursor(path, path.read_bytes())
    if cur.left < 4:
        raise _malformed(path, "it is empty")
    n_entries = cur.int32("the entry count")
    if n_entries < 1:
        raise _malformed(path, "it holds no entries (neither a GGUF nor a legacy .dat imatrix)")
    entries: dict[str, np.ndarray] = {}
    for i in range(n_entries):
        length = cur.int32(f"the name of entry {i + 1}")
        raw_name = cur.take(length, f"the name of entry {i + 1}")
        name = raw_name.split(b"\0", 1)[0].decode("utf-8", errors="replace")
        ncall = cur.int32(f"the call count of {name}")
        nval = cur.int32(f"the value count of {name}")
        if nval < 1:
            raise _malformed(path, f"entry {name} has {nval} values")
        sums = np.frombuffer(cur.take(4 * nval, f"the values of {name}"), dtype="<f4").astype(np.float32)
        entries[name] = sums / np.float32(ncall) if ncall > 0 else sums.copy()
    chunk_count, datasets = 0, []
    if cur.left >= 4:  # the trailer is optional
        chunk_count = cur.int32("the chunk count")
        if cur.left >= 4:
            length = cur.int32("the dataset name")
            if 0 < length <= cur.left:
                datasets.append(cur.take(length, "the dataset name").split(b"\0", 1)[0].decode("utf-8", errors="replace"))
    return ImportanceMatrix(path, entries, datasets, chunk_count, is_legacy=True)
