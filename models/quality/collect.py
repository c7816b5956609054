"""Collecting input activations of matrix multiplications, as llama-imatrix does.

llama.cpp's scheduler can call a function for every node of a compute graph
(``cb_eval``): first to ask whether we want the node's result (``ask = true``), then,
if we said yes, with the node computed. :class:`ActivationCollector` is such a function
(a ctypes callback; it runs only in the quality child process). It follows
``IMatrixCollector::collect_imatrix`` of ``tools/imatrix/imatrix.cpp``:

* a ``MUL_MAT`` node whose weight (``src[0]``) is named ``blk.*`` and whose input
  (``src[1]``) is F32 with at least 16 rows: for every input row ``x``, ``Σ x²`` is added
  per column to the weight's sums (per matrix of a 3-D weight), and the rows are counted
  (one count per weight);
* a ``MUL_MAT_ID`` node (mixture of experts): for every token and every expert it was
  routed to (``src[2]``), the token's row is added to that expert's sums and counted for
  that expert.

Rows are added one after another in float32, in llama.cpp's order. On request it also
keeps a sample of the input rows themselves (every ``sample_every``-th row of a dense
weight's inputs, at most ``sample_rows``): a size fit computes each matrix product from
them as llama.cpp's CPU kernels do, the inputs rounded to 8 bits included. The layout of
``struct ggml_tensor`` is taken from ``ggml.h``; it is checked against the library's own
``ggml_tensor_overhead()`` before use.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Optional

import numpy as np

from models.foundation.errors import QuantDeskError

log = logging.getLogger(__name__)

GGML_MAX_DIMS, GGML_MAX_SRC, GGML_MAX_OP_PARAMS, GGML_MAX_NAME = 4, 10, 64, 64
GGML_TYPE_F32 = 0
_GGML_OBJECT_SIZE = 32  # sizeof(struct ggml_object) on 64-bit systems
#: Rows below this are skipped (llama-imatrix: "why are small batches ignored (<16 tokens)?").
MIN_ROWS = 16


class GgmlTensor(ctypes.Structure):
    """``struct ggml_tensor`` (ggml.h)."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * GGML_MAX_DIMS),
        ("nb", ctypes.c_size_t * GGML_MAX_DIMS),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * (GGML_MAX_OP_PARAMS // 4)),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * GGML_MAX_SRC),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * GGML_MAX_NAME),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


EVAL_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_bool, ctypes.c_void_p)


def weight_name(raw: bytes) -> str:
    """A weight's name without a backend's decorations: ``CUDA0#blk.0.attn_k.weight#0`` →
    ``blk.0.attn_k.weight`` (llama-imatrix's ``filter_tensor_name``)."""
    name = raw.decode("utf-8", errors="replace")
    if "#" in name:
        name = name.split("#", 2)[1]
    return name


class _Ggml:
    """The few ggml functions the collector calls (tensor layout checked against this build)."""

    def __init__(self) -> None:
        from models.llama_lib import ggml_api

        lib = ggml_api()
        self.lib = lib
        expected = lib.ggml_tensor_overhead() - _GGML_OBJECT_SIZE
        if ctypes.sizeof(GgmlTensor) != expected:
            raise QuantDeskError(
                f"This build of llama.cpp lays out its tensors differently ({expected} bytes, "
                f"expected {ctypes.sizeof(GgmlTensor)}), so activations cannot be read from it.",
                "Reinstall QuantDesk with the llama-cpp-python version it was made for.")
        self.mul_mat = self._op("MUL_MAT", 30)
        self.mul_mat_id = self._op("MUL_MAT_ID", 31)

    def _op(self, name: str, guess: int) -> int:
        # enum ggml_op has no public count, so the value is looked up near where ggml.h puts it
        for value in [guess, *range(1, 120)]:
            if self.lib.ggml_op_name(value) == name.encode():
                return value
        raise QuantDeskError(f"This build of llama.cpp has no {name} operation.",
                             "Reinstall QuantDesk with the llama-cpp-python version it was made for.")

    def read(self, t: GgmlTensor, address: int, dtype, shape: tuple, strides: tuple) -> np.ndarray:
        """The tensor's data as an array (a copy when it lives on a GPU)."""
        nbytes = self.lib.ggml_nbytes(address)
        if t.buffer and not self.lib.ggml_backend_buffer_is_host(t.buffer):
            buf = (ctypes.c_char * nbytes)()
            self.lib.ggml_backend_tensor_get(address, buf, 0, nbytes)
        else:
            buf = (ctypes.c_char * nbytes).from_address(t.data)
        return np.ndarray(shape, dtype=dtype, buffer=buf, strides=strides)


def _add_rows(acc: np.ndarray, rows: np.ndarray) -> None:
    """``acc += Σ rows²``, one row after another in float32 (llama.cpp's order)."""
    squares = np.square(rows, dtype=np.float32)
    acc[:] = np.add.reduce(np.concatenate((acc[None, :], squares)), axis=0)


class ActivationCollector:
    """The ``cb_eval`` callback that accumulates llama-imatrix's sums and counts.

    Attributes:
        sums: Weight name → float32 ``(n_mat, n_per_row)`` sums of squared activations.
        counts: Weight name → int64 counts (one for a dense weight, one per expert).
        samples: Weight name → float32 ``(rows, n_per_row)`` input rows kept (dense weights
            only; empty unless ``sample_rows`` was given).
        callback: The ctypes function to put in ``llama_context_params.cb_eval``.
        error: An exception raised inside the callback (raised again by :meth:`check`).
    """

    def __init__(self, include_output: bool = False, sample_rows: int = 0, sample_every: int = 1) -> None:
        #: Also the output head's inputs (``output.weight``, or ``token_embd.weight`` when
        #: tied), as ``llama-imatrix --process-output`` does: a size fit weighs its error too.
        self.include_output = include_output
        self.ggml = _Ggml()
        self.sums: dict[str, np.ndarray] = {}
        self.counts: dict[str, np.ndarray] = {}
        self.sample_rows, self.sample_every = sample_rows, max(1, sample_every)
        self._sampled: dict[str, list[np.ndarray]] = {}
        self._seen: dict[str, int] = {}
        self.error: Optional[BaseException] = None
        self.callback = EVAL_CALLBACK(self._on_eval)

    @property
    def samples(self) -> dict[str, np.ndarray]:
        return {name: np.concatenate(parts)[:self.sample_rows] for name, parts in self._sampled.items() if parts}

    def check(self) -> None:
        """Raise what went wrong inside the callback, if anything."""
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def _on_eval(self, address: int, ask: bool, _user_data: int) -> bool:
        try:
            t = GgmlTensor.from_address(address)
            if ask:
                return self._wanted(t)
            if self.error is None:
                if t.op == self.ggml.mul_mat_id:
                    self._collect_experts(t)
                else:
                    self._collect_dense(t)
            return True
        except BaseException as exc:  # never let a Python error unwind through C
            self.error = exc
            return True

    def _wanted(self, t: GgmlTensor) -> bool:
        if t.op == self.ggml.mul_mat_id:
            return True
        if t.op != self.ggml.mul_mat:
            return False
        src1 = GgmlTensor.from_address(t.src[1])
        if src1.ne[1] < MIN_ROWS or src1.type != GGML_TYPE_F32:
            return False
        name = weight_name(GgmlTensor.from_address(t.src[0]).name)
        return name.startswith("blk.") or (self.include_output and name in ("output.weight", "token_embd.weight"))

    def _entry(self, name: str, n_mat: int, n_per_row: int, n_counts: int) -> tuple[np.ndarray, np.ndarray]:
        sums = self.sums.get(name)
        if sums is None:
            sums = self.sums[name] = np.zeros((n_mat, n_per_row), dtype=np.float32)
            self.counts[name] = np.zeros(n_counts, dtype=np.int64)
        elif sums.shape != (n_mat, n_per_row):
            raise QuantDeskError(f"The inputs of {name} changed size during the pass "
                                 f"({sums.shape} then {(n_mat, n_per_row)}).",
                                 "Please report this model; its graph is not supported yet.")
        return sums, self.counts[name]

    def _finite(self, name: str, sums: np.ndarray) -> None:
        if not np.isfinite(sums).all():
            raise QuantDeskError(f"The activations of {name} became infinite or NaN on this text.",
                                 "The model is broken or overflows in this precision; try its F16/BF16 source.")

    def _collect_dense(self, t: GgmlTensor) -> None:
        src0 = GgmlTensor.from_address(t.src[0])
        src1 = GgmlTensor.from_address(t.src[1])
        name = weight_name(src0.name)
        ne, nb = list(src1.ne), list(src1.nb)
        x = self.ggml.read(src1, t.src[1], np.float32, (ne[3], ne[2], ne[1], ne[0]),
                           (nb[3], nb[2], nb[1], nb[0]))
        n_mat = src0.ne[2] * src0.ne[3]
        sums, counts = self._entry(name, n_mat, ne[0], 1)
        for i3 in range(ne[3]):
            for i2 in range(ne[2]):
                mat = (i3 % src0.ne[3]) * src0.ne[2] + (i2 % src0.ne[2])
                _add_rows(sums[mat], x[i3, i2])
                if n_mat == 1 and self.sample_rows:
                    self._sample(name, x[i3, i2])
        self._finite(name, sums)
        counts[0] += (ne[1] * ne[2] * ne[3]) // n_mat

    def _sample(self, name: str, rows: np.ndarray) -> None:
        """Keep every ``sample_every``-th row counted over the whole pass, up to ``sample_rows``."""
        seen = self._seen.get(name, 0)
        self._seen[name] = seen + rows.shape[0]
        kept = self._sampled.setdefault(name, [])
        if self.sample_rows <= sum(len(k) for k in kept):
            return
        first = (-seen) % self.sample_every
        kept.append(np.array(rows[first::self.sample_every], dtype=np.float32))

    def _collect_experts(self, t: GgmlTensor) -> None:
        src0 = GgmlTensor.from_address(t.src[0])
        src1 = GgmlTensor.from_address(t.src[1])
        ids_t = GgmlTensor.from_address(t.src[2])
        name = weight_name(src0.name)
        ne, nb = list(src1.ne), list(src1.nb)
        if ne[3] != 1:
            raise QuantDeskError(f"The expert inputs of {name} have more than 3 dimensions.",
                                 "Please report this model; its graph is not supported yet.")
        n_as = src0.ne[2]
        x = self.ggml.read(src1, t.src[1], np.float32, (ne[2], ne[1], ne[0]), (nb[2], nb[1], nb[0]))
        # the ids are always copied: small, and not contiguous
        ids_bytes = self.ggml.lib.ggml_nbytes(t.src[2])
        raw = (ctypes.c_char * ids_bytes)()
        self.ggml.lib.ggml_backend_tensor_get(t.src[2], raw, 0, ids_bytes)
        ids = np.ndarray((ids_t.ne[1], ids_t.ne[0]), dtype=np.int32, buffer=raw,
                         strides=(ids_t.nb[1], ids_t.nb[0]))
        sums, counts = self._entry(name, n_as, ne[0], n_as)
        for idx in range(ids_t.ne[0]):
            experts = ids[:, idx]
            if experts.min(initial=0) < 0 or experts.max(initial=0) >= n_as:
                raise QuantDeskError(f"{name} was routed to an expert that does not exist.",
                                     "The model file is damaged.")
            rows = x[:, idx % ne[1], :]
            np.add.at(sums, experts, np.square(rows, dtype=np.float32))
            counts += np.bincount(experts, minlength=n_as)
        self._finite(name, sums)
