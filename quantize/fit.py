"""Fitting a model to a size: each tensor's type chosen by measurement, the least loss that fits.

A stock file type (``Q4_K_M``) applies rules tuned by hand on a few models. Here, for a
size the user names, every quantized tensor gets the type that makes the whole file's
loss least while the file stays within that size:

1. **Candidates** per tensor (:func:`candidate_types`): the block types its rows allow
   (256-value k-/i-quants only when a row is a multiple of 256; the 32-value types
   always), the grid i-quants only where an importance matrix covers the tensor
   (llama.cpp's ``tensor_requires_imatrix``), never the ternary or MXFP4 types (made
   for models trained for them); and F16 (BF16 too where the source holds BF16, whose
   range F16 may not hold) — llama.cpp stores any tensor so. Tensors llama.cpp never
   quantizes keep their type.
2. **Sensitivity** (:func:`measure_errors`): for each tensor and candidate, a sample of
   rows spread over the tensor is quantized by the very encoder the writer uses (with the
   importance matrix when one is given, so the bytes are those of the file) and
   dequantized. Where input rows of the tensor were recorded on calibration text, the
   error is the change of the matrix product *as llama.cpp's CPU kernels compute it*::

       error(t, type) = mean_x ‖Ŵ·r_type(x) − W·r_source(x)‖² / (median_j a_j · Σ W²)

   where ``r_type`` rounds the input as the kernel for that weight type does before its
   dot products (ggml-cpu's ``vec_dot_type``: Q8_0 blocks for Q4_0/Q5_0/Q8_0/IQ4_NL, Q8_1
   for Q4_1/Q5_1, Q8_K for the 256-value types, F16 for F16, BF16 for BF16) — so a weight
   that a block type reproduces exactly still costs the 8-bit rounding of its inputs,
   which only F16/BF16 avoid. The error is relative to the product's output for inputs of
   the tensor's typical scale, ``median_j a_j · Σ W²`` with ``a_j`` the mean squared input of
   column ``j``: the scale of the inputs differs a thousandfold between layers of one model
   while what reaches the output does not, and the median, not the mean, because in some
   layers a few columns carry "massive activations" (SmolLM2's ``ffn_down`` of layers 11
   and 28) that would make every other column's error look small. Without recorded rows
   (a model llama.cpp cannot run, experts) the weight error weighted by ``a`` stands for
   the numerator::

       error(t, type) = Σ_rows Σ_j a_j (W_ij − Ŵ_ij)² / (median_j a_j · Σ W²)

   Either is measured on the sampled rows. Where the model can be run, each class of
   tensor's errors are then converted to KL divergence of the model's output by a
   measured gain (:mod:`quantize.fit_gains`), so that every tensor's error is in one unit.
3. **Choice** (:func:`choose_types`): an exact multiple-choice knapsack — least total
   error under the byte budget — by dynamic programming over sizes rounded *up* to
   1/131072 of the budget (so the budget always holds), then the bytes that rounding left
   are spent on the best upgrades that still fit.

Sizes are exact and known before any weight is read: a fitted file's header does not
depend on the types chosen (:mod:`quantize.recipe`), and each tensor's data is padded to
the alignment, so the smallest and largest possible files (:func:`fit_bounds`) and the
refusal of a target below the smallest come first.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

import numpy as np
from quantize.ggml_types import GGMLQuantizationType as T

from models.foundation.errors import QuantDeskError
from models.foundation.jobs import CancelToken, ProgressCallback, ProgressReporter, check
from quantize.encode import tensor_bytes
from quantize.ftypes import FILE_TYPES, FileType, is_quantized_type
from quantize.gguf_encoding import padded
from quantize.imatrix import ImportanceMatrix
from quantize.plan import IMATRIX_REQUIRED_TYPES, PlanOptions, format_size, llama_tensor_order, \
    plan_quantization
from quantize.recipe import Recipe
from quantize.source import SourceTensor, TensorSource
from quantize.type_rules import allows_quantization

#: Block types tried for every tensor whose rows are multiples of 32 values.
TYPES_32 = (T.Q4_0, T.IQ4_NL, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0)
#: Block types tried where rows are multiples of 256 values.
TYPES_256 = (T.Q2_K, T.Q3_K, T.IQ3_S, T.IQ4_XS, T.Q4_K, T.Q5_K, T.Q6_K)
#: Tried only where an importance matrix covers the tensor (noise without one).
TYPES_256_IMATRIX = (T.IQ2_XS, T.IQ2_S, T.IQ3_XXS)
#: Rows of a tensor quantized to estimate its errors (spread evenly over the tensor).
SAMPLE_ROWS = 128
# The knapsack's size resolution: the budget in this many units.
_RESOLUTION = 1 << 17
#: Stock types a fitted file may be recorded as (not those made for special models).
_RECORDED_AS = tuple(name for name, ft in FILE_TYPES.items()
                     if ft.is_quantized and name not in ("MXFP4_MOE", "TQ1_0", "TQ2_0"))


@dataclass(frozen=True)
class FitTarget:
    """What the user asked for: a whole file of at most ``file_size`` bytes, or at most
    ``bits_per_weight`` bits per parameter (tensor data only, as llama.cpp counts bpw)."""

    file_size: Optional[int] = None
    bits_per_weight: Optional[float] = None

    def describe(self) -> str:
        return format_size(self.file_size) if self.file_size is not None else f"{self.bits_per_weight:g} bpw"


def candidate_types(tensor: SourceTensor, covered_by_imatrix: bool) -> tuple[T, ...]:
    """The types ``tensor`` may take in a fitted file, smallest first."""
    n = tensor.n_per_row
    types = [t for t in TYPES_32 if n % 32 == 0]
    if n % 256 == 0:
        types += TYPES_256
        if covered_by_imatrix:
            types += TYPES_256_IMATRIX
    types.append(T.F16)  # no rounding of the inputs to 8 bits, at 16 bits a weight
    if tensor.stored_type == T.BF16:
        types.append(T.BF16)
    return tuple(sorted(set(types), key=lambda t: (tensor_bytes(tensor.shape, t), t.name)))


@dataclass(frozen=True)
class FitProblem:
    """A model's sizes for fitting: what is fixed and what each tensor may take.

    Attributes:
        header_bytes: The fitted file's header (independent of the types chosen).
        fixed_tensors: Tensors llama.cpp never quantizes, in file order.
        choices: ``(tensor, candidate types)`` of every quantized tensor, in file order.
        alignment: Data alignment.
        n_parameters: All tensors' elements (the denominator of bits per weight).
    """

    header_bytes: int
    fixed_tensors: tuple[SourceTensor, ...]
    choices: tuple[tuple[SourceTensor, tuple[T, ...]], ...]
    alignment: int
    n_parameters: int

    def item_bytes(self, tensor: SourceTensor, qtype: T, padded_sizes: bool) -> int:
        n = tensor_bytes(tensor.shape, qtype)
        return padded(n, self.alignment) if padded_sizes else n

    def fixed_bytes(self, target: FitTarget) -> int:
        """Bytes every choice pays: header and unquantized tensors (file), or the latter's data (bpw)."""
        by_file = target.file_size is not None
        data = sum(self.item_bytes(t, t.stored_type, by_file) for t in self.fixed_tensors)
        return data + (self.header_bytes if by_file else 0)

    def budget(self, target: FitTarget) -> int:
        """Bytes the quantized tensors may take together."""
        if target.file_size is not None:
            return target.file_size - self.fixed_bytes(target)
        return math.floor(target.bits_per_weight * self.n_parameters / 8) - self.fixed_bytes(target)

    def file_size(self, types: Mapping[str, T]) -> int:
        """The exact size of the file with these types."""
        fixed = FitTarget(file_size=0)
        return self.fixed_bytes(fixed) + sum(self.item_bytes(t, types[t.name], True) for t, _ in self.choices)

    def extreme(self, largest: bool) -> dict[str, T]:
        return {t.name: (c[-1] if largest else c[0]) for t, c in self.choices}


def fit_problem(source: TensorSource, options: PlanOptions = PlanOptions(),
                metadata=None, tensors=None) -> FitProblem:
    """The sizes of ``source``'s fitted files (no weights read)."""
    metadata = list(source.metadata()) if metadata is None else list(metadata)
    ordered = llama_tensor_order(source.tensors() if tensors is None else tensors)
    fixed, choices = [], []
    for t in ordered:
        if allows_quantization(t.name, t.shape, source.arch):
            covered = options.imatrix is not None and options.imatrix.entries.get(t.name) is not None
            choices.append((t, candidate_types(t, covered)))
        else:
            fixed.append(t)
    smallest = Recipe({t.name: c[0] for t, c in choices})
    plan = plan_quantization(source, FILE_TYPES["Q8_0"], dataclasses.replace(options, recipe=smallest),
                             metadata, ordered)
    n_parameters = sum(t.n_elements for t in ordered)
    return FitProblem(len(plan.header), tuple(fixed), tuple(choices), plan.alignment, n_parameters)


def fit_bounds(problem: FitProblem) -> tuple[int, int]:
    """The smallest and the largest file a fit can write, in bytes."""
    return problem.file_size(problem.extreme(False)), problem.file_size(problem.extreme(True))


def check_target(problem: FitProblem, target: FitTarget, model: str) -> None:
    """Refuse a target no choice of types meets, with the smallest size that can be had.

    Raises:
        QuantDeskError: the target is below the smallest possible file (or bits per weight).
    """
    smallest, _ = fit_bounds(problem)
    if target.file_size is not None:
        if target.file_size < smallest:
            raise QuantDeskError(
                f"{model} cannot be made as small as {format_size(target.file_size)} "
                f"({target.file_size:,} bytes): the smallest file QuantDesk can write of it is "
                f"{format_size(smallest)} ({smallest:,} bytes), with every tensor in its smallest type.",
                f"Ask for {smallest:,} bytes or more.")
        return
    bits = 8 * (problem.fixed_bytes(target) + sum(problem.item_bytes(t, c[0], False) for t, c in problem.choices))
    least = bits / max(1, problem.n_parameters)
    if target.bits_per_weight is None or target.bits_per_weight * problem.n_parameters < bits:
        raise QuantDeskError(
            f"{model} cannot be made as small as {target.bits_per_weight} bits per weight: the fewest "
            f"QuantDesk can write is {math.ceil(least * 1000) / 1000:.3f} bits per weight "
            f"({format_size(smallest)}), with every tensor in its smallest type.",
            f"Ask for {math.ceil(least * 1000) / 1000:.3f} bits per weight or more.")


# -- sensitivity ---------------------------------------------------------------------------


def _sample_rows(n_rows: int) -> np.ndarray:
    if n_rows <= SAMPLE_ROWS:
        return np.arange(n_rows)
    return np.unique(np.linspace(0, n_rows - 1, SAMPLE_ROWS).round().astype(np.int64))


def _dequantize(data: np.ndarray, qtype: T) -> np.ndarray:
    from gguf.quants import dequantize

    return dequantize(data, qtype).reshape(data.shape[0], -1)


#: How llama.cpp's CPU matrix product rounds the inputs of a weight of each type before its
#: dot products (ggml-cpu's ``vec_dot_type``); types not named keep F32 inputs.
INPUT_ROUNDING = {
    **{q: T.Q8_0 for q in (T.Q4_0, T.Q5_0, T.Q8_0, T.IQ4_NL)},
    **{q: T.Q8_1 for q in (T.Q4_1, T.Q5_1)},
    **{q: T.Q8_K for q in (T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ2_XXS, T.IQ2_XS, T.IQ2_S,
                           T.IQ3_XXS, T.IQ3_S, T.IQ1_S, T.IQ1_M, T.IQ4_XS)},
    T.F16: T.F16, T.BF16: T.BF16,
}


def round_inputs(x: np.ndarray, kind: T) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """Input rows ``x`` as the kernel sees them after rounding to ``kind`` (float64), and for
    Q8_1 each 32-value block's stored sum ``fp16(d·Σq)``, which Q4_1/Q5_1 multiply by their
    minimum (ggml's ``quantize_row_q8_*_ref``, rounding to nearest)."""
    x = np.asarray(x, dtype=np.float32)
    if kind == T.F16:
        return x.astype(np.float16).astype(np.float64), None
    if kind == T.BF16:
        bits = x.view(np.uint32).astype(np.uint64)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint32) << 16
        return bits.view(np.float32).astype(np.float64), None
    if kind not in (T.Q8_0, T.Q8_1, T.Q8_K):
        return x.astype(np.float64), None
    size = 256 if kind == T.Q8_K else 32
    blocks = x.reshape(x.shape[0], -1, size)
    if kind == T.Q8_K:
        at = np.abs(blocks).argmax(axis=2)[..., None]
        peak = np.take_along_axis(blocks, at, axis=2)  # the signed value of largest magnitude
        with np.errstate(divide="ignore", invalid="ignore"):
            iscale = np.where(peak != 0, np.float32(-127) / peak, np.float32(0)).astype(np.float32)
            d = np.where(peak != 0, np.float32(1) / iscale, np.float32(0)).astype(np.float32)
        q = np.minimum(127, np.rint(iscale * blocks))
        return (q * d).reshape(x.shape).astype(np.float64), None
    d = (np.abs(blocks).max(axis=2, keepdims=True) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inverse = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = np.rint(blocks * inverse)
    restored = (q * d.astype(np.float16).astype(np.float64)).reshape(x.shape)
    sums = None
    if kind == T.Q8_1:
        sums = (d[..., 0].astype(np.float64) * q.sum(axis=2)).astype(np.float32).astype(np.float16)
    return restored.astype(np.float64), None if sums is None else sums.astype(np.float64)


def _block_minimums(data: np.ndarray, qtype: T) -> Optional[np.ndarray]:
    """Q4_1/Q5_1 blocks' minimums ``m`` (rows, blocks): the kernel adds ``m · s`` with the
    input block's stored sum ``s`` rather than the sum of the rounded inputs."""
    if qtype not in (T.Q4_1, T.Q5_1):
        return None
    block_bytes = 20 if qtype == T.Q4_1 else 24
    raw = np.ascontiguousarray(data).reshape(data.shape[0], -1, block_bytes)
    return np.ascontiguousarray(raw[:, :, 2:4]).view(np.float16)[..., 0].astype(np.float64)


def kernel_product(restored: np.ndarray, minimums: Optional[np.ndarray], qtype: T,
                   inputs: Mapping[T, tuple[np.ndarray, Optional[np.ndarray]]]) -> np.ndarray:
    """``(rows, inputs)``: the dequantized rows ``restored`` times the inputs, as llama.cpp's
    CPU dot product for ``qtype`` computes it (inputs rounded by :func:`round_inputs`, keyed
    by the rounding kind; ``minimums`` from :func:`_block_minimums`)."""
    x, sums = inputs[INPUT_ROUNDING.get(qtype, T.F32)]
    y = restored.astype(np.float64) @ x.T
    if minimums is not None and sums is not None:
        block_sums = x.reshape(x.shape[0], -1, 32).sum(axis=2)
        y += minimums @ (sums - block_sums).T
    return y


def tensor_errors(tensor: SourceTensor, types: Sequence[T], imatrix: Optional[ImportanceMatrix],
                  activations: Optional[ImportanceMatrix]) -> dict[T, float]:
    """``error(tensor, type)`` for each of ``types`` (see the module's docstring).

    Args:
        tensor: The tensor, loaded here (a sample of its rows).
        types: Candidate types.
        imatrix: Used by the encoder, as the writer uses it.
        activations: Mean squared inputs per column, and input rows where they were
            recorded; ``None`` weighs columns equally.
    """
    from quantize.blocks.widen import to_f32
    from quantize.encode import encode_rows

    stored = tensor.load_stored() if tensor.load_stored else tensor.load()
    rows = stored.reshape(-1, tensor.n_per_row)
    picked = _sample_rows(rows.shape[0])
    values = to_f32(np.ascontiguousarray(rows[picked]))
    if tensor.release:
        tensor.release()
    n_matrices = _n_matrices(tensor)
    rows_per_matrix = rows.shape[0] // max(1, n_matrices)
    matrix_of = picked // max(1, rows_per_matrix)
    quant_w = imatrix.for_tensor(tensor.name, tensor.shape) if imatrix is not None else None
    act_w = activations.for_tensor(tensor.name, tensor.shape) if activations is not None else None
    recorded = activations.samples.get(tensor.name) if activations is not None and n_matrices == 1 else None
    if recorded is not None and (recorded.ndim != 2 or recorded.shape[1] != tensor.n_per_row or not len(recorded)):
        recorded = None
    inputs, reference = {}, None
    if recorded is not None:
        kinds = {INPUT_ROUNDING.get(q, T.F32) for q in types} | {INPUT_ROUNDING.get(tensor.stored_type, T.F32)}
        inputs = {kind: round_inputs(recorded, kind) for kind in kinds}
        reference = values.astype(np.float64) @ inputs[INPUT_ROUNDING.get(tensor.stored_type, T.F32)][0].T
    # the output energy for inputs of the tensor's typical (median) column scale
    if recorded is not None:
        typical = np.full(n_matrices, float(np.median(np.mean(np.square(recorded, dtype=np.float64), axis=0))))
    elif act_w is not None:
        typical = np.median(act_w, axis=1).astype(np.float64)
    else:
        typical = np.ones(n_matrices)
    energy = sum(float(np.square(values[matrix_of == m], dtype=np.float64).sum()) * typical[m]
                 for m in np.unique(matrix_of))
    scale = 1.0 / energy if energy > 0 else rows.shape[0] / len(picked)
    errors: dict[T, float] = {}
    for qtype in types:
        total = 0.0
        for m in np.unique(matrix_of):
            sel = values[matrix_of == m]
            weights = None if quant_w is None else quant_w[m]
            minimums = None
            if qtype in (T.F16, T.BF16):
                restored = _to_float_type(sel, qtype)
            else:
                data = encode_rows(sel, qtype, weights)
                restored = _dequantize(data, qtype)
                minimums = _block_minimums(data, qtype)
            if recorded is not None:
                y = kernel_product(restored, minimums, qtype, inputs)
                total += float(np.square(y - reference).sum()) / len(recorded)
                continue
            diff = np.square(sel - restored, dtype=np.float64).sum(axis=0)
            total += float(diff @ act_w[m]) if act_w is not None else float(diff.sum())
        errors[qtype] = total * scale
    return errors


def _to_float_type(values: np.ndarray, qtype: T) -> np.ndarray:
    if qtype == T.F16:
        return values.astype(np.float16).astype(np.float32)
    return round_inputs(values, T.BF16)[0].astype(np.float32)


def _n_matrices(tensor: SourceTensor) -> int:
    return int(math.prod(tensor.shape[:-2])) if len(tensor.shape) > 2 else 1


def measure_errors(problem: FitProblem, imatrix: Optional[ImportanceMatrix],
                   activations: Optional[ImportanceMatrix], threads: Optional[int] = None,
                   report: Optional[ProgressCallback] = None,
                   cancel: Optional[CancelToken] = None) -> dict[str, dict[T, float]]:
    """Every quantized tensor's error for each of its candidates (stage "Measuring")."""
    _prepare_encoders(problem, imatrix is not None, report, cancel)
    total = sum(t.n_elements for t, _ in problem.choices)
    progress = ProgressReporter(report, total, "Measuring")

    def one(item):
        tensor, types = item
        check(cancel)
        result = tensor_errors(tensor, types, imatrix, activations)
        progress.advance(tensor.n_elements, tensor.name)
        return tensor.name, result

    workers = max(1, threads or os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fit") as pool:
        return dict(pool.map(one, problem.choices))


def _prepare_encoders(problem: FitProblem, imatrix: bool, report: Optional[ProgressCallback],
                      cancel: Optional[CancelToken]) -> None:
    from quantize.blocks import compile_kernels

    needed = sorted({q for _, types in problem.choices for q in types if is_quantized_type(q)})
    progress = ProgressReporter(report, None, "Preparing", min_interval=0)
    for qtype in needed:
        check(cancel)
        progress.advance(1, f"the {qtype.name} quantizer (compiled once after an install, then loaded from the cache)")
        compile_kernels([qtype], imatrix or qtype in IMATRIX_REQUIRED_TYPES)


_LAYER = re.compile(r"^blk\.\d+\.")


def tensor_class(name: str) -> str:
    """``blk.7.attn_v.weight`` → ``attn_v``; ``token_embd.weight`` → ``token_embd``."""
    return _LAYER.sub("", name).removesuffix(".weight")


def scale_errors(errors: Mapping[str, Mapping[T, float]], gains: Mapping[str, float]) -> dict[str, dict[T, float]]:
    """Each tensor's errors times its class's gain (:mod:`quantize.fit_gains`; classes
    without one keep theirs)."""
    return {name: {q: e * gains.get(tensor_class(name), 1.0) for q, e in by_type.items()}
            for name, by_type in errors.items()}


# -- the choice ----------------------------------------------------------------------------


def choose_types(problem: FitProblem, errors: Mapping[str, Mapping[T, float]], target: FitTarget) -> dict[str, T]:
    """The types of least total error whose bytes fit ``target`` (a multiple-choice knapsack).

    Raises:
        QuantDeskError: nothing fits (see :func:`check_target`).
    """
    by_file = target.file_size is not None
    budget = problem.budget(target)
    names = [t.name for t, _ in problem.choices]
    sizes = [[problem.item_bytes(t, q, by_file) for q in types] for t, types in problem.choices]
    errs = [[errors[t.name][q] for q in types] for t, types in problem.choices]
    if sum(s[0] for s in sizes) > budget:
        raise QuantDeskError(f"Nothing fits in {target.describe()}.", "Ask for a larger size.")
    unit = max(1, -(-budget // _RESOLUTION))
    capacity = budget // unit
    best = np.zeros(capacity + 1)  # least error of the tensors so far within b units
    picks = []
    for size, err in zip(sizes, errs):
        new = np.full(capacity + 1, np.inf)
        pick = np.zeros(capacity + 1, dtype=np.int8)
        for k, (s, e) in enumerate(zip(size, err)):
            w = -(-s // unit)
            if w > capacity:
                continue
            candidate = best[:capacity + 1 - w] + e
            better = candidate < new[w:]
            new[w:][better] = candidate[better]
            pick[w:][better] = k
        best = new
        picks.append(pick)
    chosen = [0] * len(names)
    b = capacity
    for i in range(len(names) - 1, -1, -1):
        chosen[i] = int(picks[i][b])
        b -= -(-sizes[i][chosen[i]] // unit)
    _spend_slack(chosen, sizes, errs, budget)
    return {name: problem.choices[i][1][chosen[i]] for i, name in enumerate(names)}


def _spend_slack(chosen: list[int], sizes: list[list[int]], errs: list[list[float]], budget: int) -> None:
    """Upgrade tensors while exact bytes allow, best error saved per byte first."""
    used = sum(s[c] for s, c in zip(sizes, chosen))
    while True:
        best_gain, best_move = 0.0, None
        for i, (s, e) in enumerate(zip(sizes, errs)):
            c = chosen[i]
            for k in range(len(s)):
                extra = s[k] - s[c]
                if e[k] < e[c] and used + extra <= budget:
                    gain = (e[c] - e[k]) / max(1, extra)
                    if gain > best_gain:
                        best_gain, best_move = gain, (i, k, extra)
        if best_move is None:
            return
        i, k, extra = best_move
        chosen[i] = k
        used += extra


def nearest_file_type(source: TensorSource, file_size: int, options: PlanOptions,
                      metadata=None, tensors=None) -> FileType:
    """The stock file type whose file is nearest in size (what ``general.file_type`` says)."""
    metadata = list(source.metadata()) if metadata is None else metadata
    tensors = source.tensors() if tensors is None else tensors
    best: Optional[tuple[int, FileType]] = None
    for name in _RECORDED_AS:
        plan = plan_quantization(source, FILE_TYPES[name], dataclasses.replace(options, recipe=None),
                                 metadata, tensors)
        distance = abs(plan.file_size - file_size)
        if best is None or distance < best[0]:
            best = (distance, FILE_TYPES[name])
    return best[1]


@dataclass(frozen=True)
class FitResult:
    """A fitted recipe and what it costs.

    Attributes:
        recipe: Each quantized tensor's type.
        file_type: The stock type the file is recorded as.
        file_size: The fitted file's exact size.
        predicted_error: Total weighted error of the choice (the knapsack's objective).
    """

    recipe: Recipe
    file_type: FileType
    file_size: int
    predicted_error: float


def fit_recipe(source: TensorSource, target: FitTarget, options: PlanOptions,
               activations: Optional[ImportanceMatrix] = None, threads: Optional[int] = None,
               report: Optional[ProgressCallback] = None, cancel: Optional[CancelToken] = None,
               gains: Optional[Mapping[str, float]] = None) -> FitResult:
    """Choose every tensor's type for ``target``: check, measure, choose.

    Args:
        source: The model (an F32/F16/BF16 GGUF or an HF folder).
        target: The size or bits per weight to stay within.
        options: The importance matrix (used to quantize, and to weigh errors when
            ``activations`` is ``None``).
        activations: Mean squared inputs measured on calibration text, to weigh errors.
        gains: Each class's KL divergence per unit of error (:mod:`quantize.fit_gains`),
            to put every tensor's errors in that one unit.

    Raises:
        QuantDeskError: the target is below the smallest possible file.
    """
    metadata, tensors = list(source.metadata()), source.tensors()
    problem = fit_problem(source, options, metadata, tensors)
    check_target(problem, target, Path(source.description).name)
    weights = activations if activations is not None else options.imatrix
    errors = measure_errors(problem, options.imatrix, weights, threads, report, cancel)
    if gains:
        errors = scale_errors(errors, gains)
    types = choose_types(problem, errors, target)
    recipe = Recipe(types, options.imatrix_given_path)
    size = problem.file_size(types)
    file_type = nearest_file_type(source, size, options, metadata, tensors)
    return FitResult(recipe, file_type, size, sum(errors[n][q] for n, q in types.items()))
