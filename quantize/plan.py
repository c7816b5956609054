"""The quantization plan: every tensor's output type and bytes, and the file's exact size.

Computed before any weight is read, from tensor names, shapes and GGUF metadata only, so
the UI can show "Q4_K_M: 4.58 GiB" before the user starts a job. The plan reproduces what
``llama_model_quantize`` (``src/llama-quant.cpp``) writes:

* tensors in llama.cpp's order: the model loader's ``weights_map`` sorts by layer number
  (tensors outside ``blk.N.`` first), then by name; the type rules count positions in
  that order (:mod:`quantize.type_rules`);
* the input's key/values, minus split keys, with ``general.quantization_version`` and
  ``general.file_type`` moved to the end, then the ``quantize.imatrix.*`` keys
  llama-quantize adds when an importance matrix is used;
* tensor infos with ``ggml_n_dims`` dimensions (trailing size-1 dimensions dropped).

File size = header + key/values + tensor infos, padded to the alignment, + each tensor's
data padded to the alignment.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional, Sequence

from quantize.ggml_types import GGUF_DEFAULT_ALIGNMENT, GGUFValueType
from quantize.ggml_types import GGMLQuantizationType as T

from models.foundation.errors import QuantDeskError
from quantize.encode import tensor_bytes
from quantize.ftypes import QUANTIZATION_VERSION, FileType
from quantize.gguf_output import GGUFOutput, PlannedTensor, planned_file_size, planned_header
from quantize.imatrix import ImportanceMatrix
from quantize.recipe import Recipe, recipe_metadata
from quantize.source import MetadataEntry, SourceTensor, TensorSource
from quantize.type_rules import (ModelHParams, TensorTypeChooser, TypeOverrides, allows_quantization,
                                 block_size, layer_index)

_DROPPED_KEYS = {"general.quantization_version", "general.file_type",
                 "split.no", "split.count", "split.tensors.count"}


@dataclass(frozen=True)
class PlanOptions:
    """The choices besides the file type that shape a plan (llama-quantize's flags)."""

    overrides: TypeOverrides = field(default_factory=TypeOverrides)
    #: The imatrix and the path as the user gave it (recorded in the file), or ``None``.
    imatrix: Optional[ImportanceMatrix] = None
    imatrix_given_path: str = ""
    #: Each tensor's type chosen for a target size (:mod:`quantize.fit`) instead of the
    #: file type's rules; the file type then only names the file (``general.file_type``).
    recipe: Optional[Recipe] = None


@dataclass(frozen=True)
class QuantPlan:
    """What one output file will hold, known before any weight is read.

    Attributes:
        file_type: The recipe.
        arch: ``general.architecture``.
        metadata: Key/values of the output, in file order (architecture excluded).
        tensors: Every tensor with its output type, in file order.
        alignment: Data alignment of the output.
        fallbacks: ``(tensor, wanted, used)`` where a row width forced another type.
        needs_imatrix: Tensors whose type requires an importance matrix (the grid i-quants,
            Q2_K in Q2_K_S).
        fitted: Whether the types come from a recipe (a file fitted to a size).
    """

    file_type: FileType
    arch: str
    metadata: tuple[MetadataEntry, ...]
    tensors: tuple[PlannedTensor, ...]
    alignment: int
    fallbacks: tuple[tuple[str, T, T], ...]
    needs_imatrix: tuple[str, ...]
    fitted: bool = False

    @property
    def tensor_bytes(self) -> int:
        """Bytes of tensor data, without padding."""
        return sum(p.nbytes for p in self.tensors)

    @property
    def n_parameters(self) -> int:
        return sum(p.tensor.n_elements for p in self.tensors)

    @functools.cached_property
    def header(self) -> bytes:
        """The header of the file this plan writes, byte for byte."""
        return planned_header(self.arch, self.metadata, self.tensors, self.alignment)

    @functools.cached_property
    def file_size(self) -> int:
        """The exact size in bytes of the file this plan writes."""
        return planned_file_size(self.arch, self.metadata, self.tensors, self.alignment, self.header)

    @property
    def bits_per_weight(self) -> float:
        return 8.0 * self.tensor_bytes / max(1, self.n_parameters)

    def type_counts(self) -> dict[str, int]:
        """How many tensors get each type, e.g. ``{"Q4_K": 150, "Q6_K": 31, "F32": 61}``."""
        return dict(Counter(p.qtype.name for p in self.tensors).most_common())

    def gguf_output(self, target) -> GGUFOutput:
        """This plan as the writer's description of one output file."""
        return GGUFOutput(target, self.arch, self.metadata, self.tensors, self.alignment, self.header)

    def summary(self) -> str:
        """One line for people: type, size, bits per weight, tensor types."""
        counts = ", ".join(f"{n} {name}" for name, n in self.type_counts().items())
        name = f"Fitted (recorded as {self.file_type.name})" if self.fitted else self.file_type.name
        return (f"{name}: {format_size(self.file_size)} "
                f"({self.bits_per_weight:.2f} bits per weight; tensors: {counts})")


def format_size(n_bytes: int) -> str:
    """``1234567`` → ``"1.18 MiB"``."""
    size = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.2f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def llama_tensor_order(tensors: Sequence[SourceTensor]) -> list[SourceTensor]:
    """Tensors in the order llama.cpp's loader keeps them (by layer, then by name)."""
    def key(t: SourceTensor):
        layer = layer_index(t.name)
        return (-1 if layer is None else layer, t.name.encode("utf-8"))
    return sorted(tensors, key=key)


def _value(entries: dict[str, MetadataEntry], key: str, default=None):
    entry = entries.get(key)
    if entry is None:
        return default
    value = entry.value
    if entry.type == GGUFValueType.ARRAY:  # per-layer values: llama.cpp reads layer 0
        return int(value[0]) if len(value) else default
    return int(value)


def model_hparams(arch: str, metadata: Sequence[MetadataEntry], description: str = "the model") -> ModelHParams:
    """The hyper-parameters the type rules need, read as ``llama_model::load_hparams`` does.

    Raises:
        QuantDeskError: ``{arch}.block_count`` is missing.
    """
    if arch == "clip":
        # A vision/audio encoder (mmproj): llama.cpp loads no hyper-parameters for it
        # (llama_model::load_hparams returns before them), so its counts are all 0.
        return ModelHParams(arch=arch, n_layer_all=0)
    entries = {e.key: e for e in metadata}
    n_layer = _value(entries, f"{arch}.block_count")
    if n_layer is None:
        raise QuantDeskError(f"{description} has no {arch}.block_count key, so its layers cannot be counted.",
                             "Convert the model again with a current converter.")
    n_head = _value(entries, f"{arch}.attention.head_count", 0)
    return ModelHParams(
        arch=arch,
        n_layer_all=n_layer,
        n_layer_nextn=_value(entries, f"{arch}.nextn_predict_layers", 0),
        n_head=n_head,
        n_head_kv=_value(entries, f"{arch}.attention.head_count_kv", n_head),
        n_expert=_value(entries, f"{arch}.expert_count", 0),
    )


def ggml_written_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """The shape llama.cpp records: ``ggml_n_dims`` drops trailing (numpy: leading) 1s."""
    dims = tuple(int(d) for d in shape)
    while len(dims) > 1 and dims[0] == 1:
        dims = dims[1:]
    return dims


def output_metadata(source_metadata: Sequence[MetadataEntry], file_type: FileType,
                    options: PlanOptions) -> tuple[MetadataEntry, ...]:
    """The output's key/values: the input's, then the keys llama-quantize sets."""
    kept = [e for e in source_metadata if e.key not in _DROPPED_KEYS]
    kept.append(MetadataEntry("general.quantization_version", QUANTIZATION_VERSION, GGUFValueType.UINT32))
    kept.append(MetadataEntry("general.file_type", file_type.ftype, GGUFValueType.UINT32))
    if options.imatrix is not None:
        added = options.imatrix.metadata(options.imatrix_given_path or str(options.imatrix.path))
        keys = {e.key for e in added}
        kept = [e for e in kept if e.key not in keys] + added
    return tuple(kept)


def _recipe_type(recipe: Recipe, t: SourceTensor, arch: str) -> T:
    """``t``'s type in ``recipe``; its stored type when llama.cpp never quantizes it.

    Raises:
        QuantDeskError: the recipe lacks a quantized tensor, or gives a type its rows do
            not allow or QuantDesk cannot write.
    """
    from quantize.ftypes import WRITABLE_TYPES

    if not allows_quantization(t.name, t.shape, arch):
        return t.stored_type
    qtype = recipe.type_of(t.name)
    if qtype is None:
        raise QuantDeskError(f"The recipe gives no type for the tensor {t.name}.",
                             "Use the recipe with the model it was made for.")
    if qtype not in WRITABLE_TYPES or t.n_per_row % block_size(qtype):
        raise QuantDeskError(f"The recipe gives {t.name} the type {qtype.name}, which its rows of "
                             f"{t.n_per_row} values cannot hold.", "Use the recipe with the model it was made for.")
    return qtype


def _alignment(metadata: Sequence[MetadataEntry]) -> int:
    for e in metadata:
        if e.key == "general.alignment":
            value = int(e.value)
            if value <= 0 or value & (value - 1):
                raise QuantDeskError(f"The model's general.alignment is {value}, not a power of two.",
                                     "Convert the model again.")
            return value
    return GGUF_DEFAULT_ALIGNMENT


#: Tensor types that come out as noise without an importance matrix (``tensor_requires_imatrix``).
IMATRIX_REQUIRED_TYPES = frozenset({T.IQ3_XXS, T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ1_M, T.IQ1_S})


def _requires_imatrix(name: str, qtype: T, file_type: Optional[FileType]) -> bool:
    # tensor_requires_imatrix: the 1- to 3-bit grid types, and Q2_K inside Q2_K_S; never
    # the token embedding or the output head.
    if name in ("token_embd.weight", "per_layer_token_embd.weight", "output.weight"):
        return False
    return qtype in IMATRIX_REQUIRED_TYPES or (qtype == T.Q2_K and file_type is not None
                                               and file_type.name == "Q2_K_S")


def plan_quantization(source: TensorSource, file_type: FileType,
                      options: PlanOptions = PlanOptions(),
                      metadata: Optional[Sequence[MetadataEntry]] = None,
                      tensors: Optional[Sequence[SourceTensor]] = None) -> QuantPlan:
    """Plan the output of quantizing ``source`` as ``file_type``; reads no weights.

    Args:
        source: The model.
        file_type: The recipe.
        options: Overrides and importance matrix.
        metadata: ``source.metadata()`` if already read (several plans share one read).
        tensors: ``source.tensors()`` if already listed.
    """
    metadata = list(source.metadata()) if metadata is None else list(metadata)
    ordered = llama_tensor_order(source.tensors() if tensors is None else tensors)
    chooser = TensorTypeChooser(
        file_type=file_type,
        hparams=model_hparams(source.arch, metadata, source.description),
        all_names=[t.name for t in ordered],
        overrides=options.overrides,
        has_imatrix=options.imatrix is not None,
    )
    planned, needs_imatrix = [], []
    recipe = options.recipe
    if recipe is not None:
        unknown = set(recipe.types) - {t.name for t in ordered}
        if unknown:
            raise QuantDeskError(f"The recipe names {len(unknown)} tensors the model lacks, such as "
                                 f"{sorted(unknown)[0]}.", "Use the recipe with the model it was made for.")
    for t in ordered:
        if recipe is not None:
            qtype = _recipe_type(recipe, t, source.arch)
        else:
            qtype = chooser.choose(t.name, t.shape, t.stored_type)
        written = dataclasses.replace(t, shape=ggml_written_shape(t.shape))
        planned.append(PlannedTensor(written, qtype))
        if qtype != t.stored_type and _requires_imatrix(t.name, qtype, None if recipe else file_type):
            needs_imatrix.append(t.name)
    out_meta = output_metadata(metadata, file_type, options)
    if recipe is not None:
        out_meta += (recipe_metadata([p.qtype for p in planned]),)
    return QuantPlan(file_type, source.arch, out_meta, tuple(planned), _alignment(out_meta),
                     tuple(chooser.fallbacks), tuple(needs_imatrix), fitted=recipe is not None)
