"""The quantize job: one model in, one GGUF per requested file type out, in one pass.

``quantize_model`` plans every output first (types, bytes, exact file sizes — see
:mod:`quantize.plan`), checks the importance matrix against the plans, then streams the
model once (:func:`quantize.gguf_output.write_ggufs`): each tensor is read a single time
— from a GGUF, as a view of its memory map, pages mapped ahead on a loader thread — and
encoded for every target on a thread pool over row chunks, each chunk widened to float32
right before its compiled kernel (which releases the GIL, so all cores work), or, for Q8_0
of F16 values, read by one kernel that widens as it goes. The next
tensor's chunks are queued before the current one's are waited for, so no core idles at
a tensor's end, and finished outputs are written on a writer thread meanwhile. A tensor
whose type does not change is copied from the file (``StoredBytes``) on the job's own
thread: nothing to overlap, so no hand-off between threads. Memory holds a few tensors
and their encodings at a time, whatever the model's size. Outputs are written beside
their targets and renamed only when complete; cancel or failure leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np
from quantize.ggml_types import GGMLQuantizationType as T

from models.foundation.errors import QuantDeskError
from models.foundation.jobs import CancelToken, JobResult, ProgressCallback, ProgressReporter, check
from quantize import kernel_loader
from quantize.encode import ENCODERS, bf16_bits_to_f32, encode_rows, row_bytes
from quantize.ftypes import FileType, is_quantized_type
from quantize.gguf_output import write_ggufs
from quantize.gguf_source import GGUFSource
from quantize.imatrix import ImportanceMatrix, load_imatrix
from quantize.plan import PlanOptions, QuantPlan, plan_quantization
from quantize.recipe import Recipe
from quantize.source import SourceTensor, StoredBytes, TensorSource
from quantize.type_rules import TypeOverrides, ggml_ne

# Rows of one thread-pool task: at least 256K values (each task costs Python-side work in the pool and
# under the GIL; llama.cpp's own minimum of 32*512 values made a 2-thread Q4_0 of
# SmolLM2-135M 0.65 s instead of 0.44 s), and small enough that a big tensor gives every
# thread several tasks.
_MIN_CHUNK_VALUES = 1 << 18
_MAX_CHUNK_VALUES = 1 << 22
# A task widens its rows to float32 this many values at a time, right before encoding
# them, so the widened values are read back from cache (and Python's per-call cost stays
# a few percent of the kernels' time).
_PIECE_VALUES = 1 << 18
# Relative encoding cost per value, only to make the progress bar and its ETA even.
# Integers, so that the units done add up exactly to the total.
_COST = {T.F32: 1, T.F16: 2, T.BF16: 2}
_QUANTIZED_COST = 50
# What SourceTensor.load_stored's dtypes hold: a tensor whose type does not change is
# copied as stored, as llama_model_quantize copies it (no float32 round trip).
_STORED_AS = {np.dtype(np.float16): T.F16, np.dtype(np.uint16): T.BF16, np.dtype(np.float32): T.F32}


@dataclass(frozen=True)
class QuantizeTarget:
    """One output: a file type and where to write it.

    Attributes:
        file_type: The stock recipe, or, with ``recipe``, the stock type the file is
            recorded as (:func:`quantize.fit.nearest_file_type`).
        path: The output file.
        recipe: Each tensor's type, chosen for a target size (:mod:`quantize.fit`).
    """

    file_type: FileType
    path: Path
    recipe: Optional[Recipe] = None


@dataclass(frozen=True)
class QuantizeOptions:
    """llama-quantize's flags, shared by every target of a job.

    Attributes:
        pure: ``--pure``: no k-quant mixture; every weight in the default type.
        output_tensor_type: ``--output-tensor-type``.
        token_embedding_type: ``--token-embedding-type``.
        imatrix: ``--imatrix``: path of a GGUF or legacy ``.dat`` importance matrix (recorded
            in the output as given, like llama-quantize records the argument).
        threads: Worker threads; ``None`` uses every core.
    """

    pure: bool = False
    output_tensor_type: Optional[T] = None
    token_embedding_type: Optional[T] = None
    imatrix: Optional[Union[Path, str]] = None
    threads: Optional[int] = None

    def plan_options(self, imatrix: Optional[ImportanceMatrix]) -> PlanOptions:
        overrides = TypeOverrides(self.pure, self.output_tensor_type, self.token_embedding_type)
        return PlanOptions(overrides, imatrix, str(self.imatrix) if self.imatrix else "")


class _RoundedSource:
    """An HF folder seen as the F16/BF16 GGUF the converter would write from it.

    Quantizing a folder must give the bytes of "convert, then llama-quantize": weights
    pass through the 16-bit intermediate (BF16 for a BF16 checkpoint, F16 otherwise) and
    tensors that are never quantized keep the converter's type.
    """

    def __init__(self, source: TensorSource) -> None:
        from quantize.convert import output_type

        self.hf_source = source  # its vision encoder, if any, is written apart (write_projector)
        self.description, self.arch = source.description, source.arch
        originals = source.tensors()
        bf16 = any(t.stored_type == T.BF16 for t in originals)
        self.intermediate = T.BF16 if bf16 else T.F16
        self._tensors = [self._rounded(t, output_type(t, self.intermediate)) for t in originals]

    def metadata(self):
        return self.hf_source.metadata()

    def tensors(self) -> list[SourceTensor]:
        return list(self._tensors)

    def close(self) -> None:
        getattr(self.hf_source, "close", lambda: None)()

    @staticmethod
    def _rounded(t: SourceTensor, stored: T) -> SourceTensor:
        from quantize.convert.convert import converted_values

        if stored == T.F32:
            return dataclasses.replace(t, stored_type=T.F32)

        def load_stored(tensor=t) -> np.ndarray:
            return converted_values(tensor, stored)

        def load(stored_load=load_stored) -> np.ndarray:
            values = stored_load()
            return values.astype(np.float32) if values.dtype == np.float16 else bf16_bits_to_f32(values)

        # The job takes the 16-bit values as the intermediate file would hold them: an F16
        # or BF16 target copies them as they are, as llama-quantize copies that file's tensors.
        return dataclasses.replace(t, stored_type=stored, load=load, load_stored=load_stored)


def open_source(path: Union[Path, str]) -> TensorSource:
    """Open ``path``: an F32/F16/BF16 GGUF file, or a Hugging Face safetensors folder.

    Raises:
        QuantDeskError: the path does not exist or is neither kind of model.
    """
    path = Path(path)
    if path.is_dir():
        try:
            from quantize.convert import open_hf_folder
        except ImportError as exc:  # the converter is an optional part of a build
            raise QuantDeskError(f"{path} is a folder, and this QuantDesk cannot read Hugging Face folders.",
                                 "Convert it to an F16 GGUF first.") from exc
        return _RoundedSource(open_hf_folder(path))
    if path.is_file():
        return GGUFSource(path)
    raise QuantDeskError(f"{path} does not exist.", "Check the path of the model to quantize.")


def plan_targets(source: TensorSource, targets: Sequence[QuantizeTarget], options: QuantizeOptions,
                 imatrix: Optional[ImportanceMatrix] = None) -> list[QuantPlan]:
    """Plan every target (reads metadata and tensor shapes once, no weights)."""
    metadata, tensors = list(source.metadata()), source.tensors()
    plan_options = options.plan_options(imatrix)
    return [plan_quantization(source, t.file_type, dataclasses.replace(plan_options, recipe=t.recipe),
                              metadata, tensors) for t in targets]


def check_imatrix(plans: Sequence[QuantPlan], imatrix: Optional[ImportanceMatrix]) -> None:
    """Refuse before writing anything what llama-quantize would refuse half-way.

    Raises:
        QuantDeskError: a type needs an importance matrix and none (or none for a
            tensor) was given, or the matrix does not fit a tensor.
    """
    for plan in plans:
        if plan.needs_imatrix and imatrix is None:
            first = next(p for p in plan.tensors if p.tensor.name == plan.needs_imatrix[0])
            raise QuantDeskError(
                f"{plan.file_type.name} needs an importance matrix (its {first.qtype.name} tensors, such as "
                f"{first.tensor.name}, come out as noise without one).",
                "Make one with `quantdesk imatrix MODEL` (or the Quantize page's importance-matrix step) and "
                "give it with --imatrix, or choose a type that needs none, such as Q2_K, Q3_K_S or IQ3_S.")
        if imatrix is None:
            continue
        for p in plan.tensors:
            if is_quantized_type(p.qtype):
                found = imatrix.for_tensor(p.tensor.name, p.tensor.shape)  # raises on a misfit
                if found is None and p.tensor.name in plan.needs_imatrix:
                    raise QuantDeskError(
                        f"The importance matrix {imatrix.path.name} has no data for {p.tensor.name}, "
                        f"which {plan.file_type.name} stores as {p.qtype.name}.",
                        "Use an importance matrix computed for this model.")


def _row_chunks(n_rows: int, rows_per_matrix: int, n_per_row: int, threads: int) -> list[tuple[int, int]]:
    """Row ranges for the pool; none crosses a matrix (expert) boundary."""
    per_thread = -(-n_rows // (4 * threads))
    lo = -(-_MIN_CHUNK_VALUES // n_per_row)
    hi = max(1, _MAX_CHUNK_VALUES // n_per_row)
    rows = max(1, min(max(per_thread, lo), hi))
    chunks = []
    for first in range(0, n_rows, rows_per_matrix):
        end = min(n_rows, first + rows_per_matrix)
        chunks += [(s, min(end, s + rows)) for s in range(first, end, rows)]
    return chunks


class _TensorEncoder:
    """Hands one loaded tensor's encoding for every plan to a shared thread pool."""

    def __init__(self, plans: Sequence[QuantPlan], imatrix: Optional[ImportanceMatrix],
                 pool: ThreadPoolExecutor, threads: int, cancel: Optional[CancelToken],
                 progress: ProgressReporter) -> None:
        self.plans, self.imatrix, self.pool = plans, imatrix, pool
        self.threads, self.cancel, self.progress = threads, cancel, progress

    def __call__(self, index: int, values: Union[np.ndarray, StoredBytes]):
        tensor = self.plans[0].tensors[index].tensor
        units = sum(_units(tensor, plan.tensors[index].qtype) for plan in self.plans)
        detail = f"{tensor.name} → {'/'.join(plan.tensors[index].qtype.name for plan in self.plans)}"
        if isinstance(values, StoredBytes):  # unchanged in every output: copied by the writer
            self.progress.advance(units, detail)
            return [values] * len(self.plans)
        rows = values.reshape(-1, tensor.n_per_row)
        ne = ggml_ne(tensor.shape)
        outs: list[np.ndarray] = []
        futures: list[Future] = []
        for plan in self.plans:
            qtype = plan.tensors[index].qtype
            if _STORED_AS.get(rows.dtype) == qtype:  # unchanged type: the bytes as they are
                outs.append(rows.view(np.uint8))
                continue
            out = np.empty((rows.shape[0], row_bytes(tensor.n_per_row, qtype)), dtype=np.uint8)
            weights = None
            if self.imatrix is not None and is_quantized_type(qtype):
                weights = self.imatrix.for_tensor(tensor.name, tensor.shape)
            futures += [self.pool.submit(self._encode_chunk, rows, out, start, stop, qtype,
                                         None if weights is None else weights[start // ne[1]])
                        for start, stop in _row_chunks(rows.shape[0], ne[1], tensor.n_per_row, self.threads)]
            outs.append(out)
        if not futures:  # nothing to compute: copied as stored
            self.progress.advance(units, detail)
            return outs
        return _PendingTensor(outs, futures, lambda: self.progress.advance(units, detail))

    def _encode_chunk(self, rows, out, start, stop, qtype, weights) -> None:
        check(self.cancel)
        from quantize.blocks import F16_KERNELS, encode_f16_into
        from quantize.blocks.widen import to_bf16_bits, to_f16_bits, to_f32

        if qtype in F16_KERNELS and rows.dtype == np.float16:  # one compiled pass, file to output
            encode_f16_into(qtype, rows[start:stop], out[start:stop])
            return
        step = max(1, _PIECE_VALUES // rows.shape[1])
        for first in range(start, stop, step):
            last = min(stop, first + step)
            if qtype == T.BF16 and rows.dtype != np.uint16:  # one compiled pass, into the output
                to_bf16_bits(rows[first:last], out[first:last].view(np.uint16))
            elif qtype == T.F16:  # one compiled pass too, with ggml's NaN (encode_rows has numpy's)
                to_f16_bits(rows[first:last], out[first:last].view(np.uint16))
            else:
                out[first:last] = encode_rows(to_f32(rows[first:last]), qtype, weights)


class _PendingTensor:
    """One tensor's encodings, running on the pool (see :class:`quantize.gguf_output.PendingEncoding`)."""

    def __init__(self, outs: list[np.ndarray], futures: list[Future], finished) -> None:
        self.outs, self.futures, self.finished = outs, futures, finished

    def result(self) -> list[np.ndarray]:
        try:
            for f in self.futures:
                f.result()
        except BaseException:
            self.cancel()
            raise
        self.finished()
        return self.outs

    def cancel(self) -> None:
        for f in self.futures:
            f.cancel()


def _copied_unchanged(plans: Sequence[QuantPlan]) -> set[str]:
    """Tensors whose type no output changes and whose source can hand out its bytes."""
    return {planned[0].tensor.name for planned in zip(*(plan.tensors for plan in plans))
            if planned[0].tensor.stored_bytes is not None
            and all(p.qtype == p.tensor.stored_type for p in planned)}


def _load(copied: set[str], tensor: SourceTensor) -> Union[np.ndarray, StoredBytes]:
    """What the encoder gets for ``tensor``: its bytes unread when every output copies
    it, else its values as stored (widened chunk by chunk later) or as float32."""
    if tensor.name in copied:
        return tensor.stored_bytes
    return tensor.load_stored() if tensor.load_stored else tensor.load()


def _register_encoders() -> None:
    """Import the block quantizers, which register themselves in ``ENCODERS`` on import."""
    try:
        importlib.import_module("quantize.blocks")
    except ModuleNotFoundError as exc:  # a build without them can still write F16/BF16
        if exc.name != "quantize.blocks":
            raise


def _check_encoders(plans: Sequence[QuantPlan]) -> None:
    missing = sorted({p.qtype.name for plan in plans for p in plan.tensors
                      if is_quantized_type(p.qtype) and p.qtype not in ENCODERS})
    if missing:
        raise QuantDeskError(f"QuantDesk cannot write {', '.join(missing)} tensors yet.",
                             "Choose another quantization type.")


def _prepare_kernels(plans: Sequence[QuantPlan], imatrix: bool, report: Optional[ProgressCallback],
                     cancel: Optional[CancelToken]) -> None:
    """Load the compiled block quantizers the plans use, before any tensor is read.

    The first use of a type after an install compiles its kernels (Q4_K and Q6_K
    together: 26 s on a 2-core x86-64 VM, November 2026; later jobs load them from the cache in ~0.1 s).
    Done here, the user reads "Preparing … the Q4_K quantizer" instead of watching the
    first tensor sit at 0 %, and can cancel between types. Most of it has usually been done
    meanwhile by :mod:`quantize.kernel_loader`'s thread, started when the job began.
    """
    needed = sorted({p.qtype for plan in plans for p in plan.tensors if is_quantized_type(p.qtype)})
    if not needed:  # F16/BF16/F32 only: no block kernel (and no need of the compiled package)
        return
    # No total: loading a cached kernel takes milliseconds, compiling one seconds, and which
    # it will be is not known ahead (the GUI shows a busy bar).
    progress = ProgressReporter(report, None, "Preparing", min_interval=0)
    for qtype in needed:
        check(cancel)
        progress.advance(1, f"the {qtype.name} quantizer (compiled once after an install, then loaded from the cache)")
        while not kernel_loader.wait(0.1):  # the kernels the loader thread is loading meanwhile
            check(cancel)
        from quantize.blocks import compile_kernels  # every quantized type's encoder is there (_check_encoders)

        compile_kernels([qtype], imatrix)


def _units(tensor: SourceTensor, qtype: T) -> int:
    return tensor.n_elements * _COST.get(qtype, _QUANTIZED_COST)


def _check_targets(source: TensorSource, targets: Sequence[QuantizeTarget]) -> None:
    if not targets:
        raise QuantDeskError("No quantization type was chosen.", "Choose at least one, e.g. Q4_K_M.")
    paths = [Path(t.path).resolve() for t in targets]
    if len(set(paths)) != len(paths):
        raise QuantDeskError("Two quantization types would be written to the same file.",
                             "Give each type its own output file.")
    source_path = getattr(source, "path", None)
    if source_path is not None and Path(source_path).resolve() in paths:
        raise QuantDeskError(f"The output {source_path} is the input model itself.",
                             "Choose another output file name.")


def quantize_model(
    input: Union[Path, str, TensorSource],
    targets: Sequence[QuantizeTarget],
    options: QuantizeOptions = QuantizeOptions(),
    report: Optional[ProgressCallback] = None,
    cancel: Optional[CancelToken] = None,
) -> JobResult:
    """Quantize a model to every target in one pass over its tensors.

    Args:
        input: An F32/F16/BF16 GGUF path, a Hugging Face folder, or any TensorSource.
        targets: File type and output path for each file to write.
        options: Overrides, importance matrix and thread count.
        report: Receives :class:`~models.foundation.jobs.Progress` after each tensor (stage
            "Quantizing", the tensor name and its types as detail).
        cancel: Checked between tensors and between row chunks.

    Returns:
        The written paths (after them, an image-text checkpoint's F16 vision encoder,
        ``mmproj-<folder>-F16.gguf`` beside the first) and a one-line summary per output.

    Raises:
        QuantDeskError: bad input, bad importance matrix, or a type that needs one;
            :class:`~models.foundation.errors.Cancelled` when cancelled. Nothing is left on disk.
    """
    kernel_loader.start([t.file_type.name for t in targets], imatrix=bool(options.imatrix))
    source = open_source(input) if isinstance(input, (str, Path)) else input
    try:
        _check_targets(source, targets)
        imatrix = load_imatrix(Path(options.imatrix)) if options.imatrix else None
        plans = plan_targets(source, targets, options, imatrix)
        check_imatrix(plans, imatrix)
        _register_encoders()
        _check_encoders(plans)
        _prepare_kernels(plans, imatrix is not None, report, cancel)
        threads = max(1, options.threads or os.cpu_count() or 1)
        total = sum(_units(p.tensor, p.qtype) for plan in plans for p in plan.tensors)
        progress = ProgressReporter(report, total, "Quantizing")
        outputs = [plan.gguf_output(Path(t.path)) for plan, t in zip(plans, targets)]
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="quantize") as pool:
            encoder = _TensorEncoder(plans, imatrix, pool, threads, cancel, progress)
            copied = _copied_unchanged(plans)
            paths = write_ggufs(outputs, [p.tensor for p in plans[0].tensors], encoder, cancel,
                                load=functools.partial(_load, copied),
                                release=lambda t: t.release and t.release(),
                                copied=lambda t: t.name in copied)
        if isinstance(source, _RoundedSource):  # an image-text checkpoint: its encoder too
            from quantize.convert.convert import write_projector

            projector = write_projector(source.hf_source, Path(targets[0].path), report=report, cancel=cancel)
            paths = paths + [projector] if projector is not None else paths
    finally:
        if source is not input:
            getattr(source, "close", lambda: None)()
    return JobResult(outputs=paths, summary="\n".join(plan.summary() for plan in plans))
