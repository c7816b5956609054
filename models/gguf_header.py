"""A GGUF file's header as the library and the memory-fit prediction see it.

The parsing is :func:`quantize.gguf_layout.read_gguf_layout` (``struct`` over a memory
map, milliseconds where ``gguf.GGUFReader`` takes seconds; no tensor data is read). This
module only reshapes its result for lookups: metadata as a dict, and each tensor's name,
shape, type and size in bytes; and for mixture-of-experts models, which tensors are
experts and how many parameters one token uses (:attr:`GGUFHeader.active_parameter_count`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

from quantize.gguf_layout import read_gguf_layout


# Architectures that are text encoders: they make embeddings, not replies (llama.cpp's
# names; a decoder made into an embedding model says so with a pooling_type key instead).
ENCODER_ARCHITECTURES = frozenset({
    "bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3", "neo-bert",
    "modern-bert", "t5encoder", "gemma-embedding"})
MEAN_POOLING = 1  # llama.cpp's LLAMA_POOLING_TYPE_MEAN


def is_embedding_model(metadata: dict) -> bool:
    """Whether a GGUF header describes an embedding model: an encoder architecture, or a
    ``{arch}.pooling_type`` key (Qwen3-Embedding and other decoders trained to embed)."""
    arch = metadata.get("general.architecture")
    return arch in ENCODER_ARCHITECTURES or f"{arch}.pooling_type" in metadata



@dataclass(frozen=True)
class TensorInfo:
    """One tensor's entry in the header: name, shape, ggml type, size in bytes, and where its
    data starts in the file (``offset``; llama.cpp maps the file range of the weights it
    keeps on the CPU, so the order of tensors in the file matters for memory)."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    n_bytes: int
    offset: int = 0

    @property
    def n_elements(self) -> int:
        """Number of values in the tensor."""
        count = 1
        for dim in self.shape:
            count *= dim
        return count


#: llama.cpp's ``LLM_FFN_EXPS_REGEX`` (common/common.h): the merged expert tensors, which
#: ``--n-cpu-moe`` keeps on the CPU and of which a token uses only its routed experts.
EXPERT_TENSORS_REGEX = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
_EXPERT_TENSOR = re.compile(EXPERT_TENSORS_REGEX)


def is_expert_tensor(name: str) -> bool:
    """Whether ``name`` holds a MoE layer's experts (``blk.N.ffn_up_exps.weight``...)."""
    return _EXPERT_TENSOR.search(name) is not None


def parameters_text(total: Optional[int], active: Optional[int] = None) -> str:
    """A parameter count for people: ``"1.7B"``, ``"135M"``; for a mixture of experts whose
    tokens use fewer (``active``) than all, ``"30.5B total, 3.3B active"``; ``"–"`` unknown.

    Billions keep one decimal cut, not rounded, as model names and cards count them
    (Qwen3-30B-A3B: 30.53 and 3.35 billion, "30.5B total, 3.3B activated").
    """
    def short(n: int) -> str:
        if n >= 1e9:
            return f"{n // 10**8 / 10:.1f}B"
        return f"{n / 1e6:.0f}M" if n >= 1e6 else f"{n / 1e3:.0f}K"

    if not total:
        return "–"
    if active and active < total:
        return f"{short(total)} total, {short(active)} active"
    return short(total)


@dataclass
class GGUFHeader:
    """What a GGUF file says about itself before its tensor data starts."""

    metadata: dict[str, Any] = field(default_factory=dict)
    tensors: list[TensorInfo] = field(default_factory=list)
    version: int = 0

    @property
    def architecture(self) -> str:
        """``general.architecture`` (``llama``, ``qwen2``...), or ``""`` when missing."""
        return str(self.metadata.get("general.architecture", ""))

    def arch_value(self, key: str, default: Any = None) -> Any:
        """An architecture-scoped key such as ``llama.block_count``."""
        return self.metadata.get(f"{self.architecture}.{key}", default)

    @property
    def parameter_count(self) -> int:
        """Number of weights in all tensors."""
        return sum(t.n_elements for t in self.tensors)

    @property
    def expert_count(self) -> int:
        """Experts per MoE layer (``{arch}.expert_count``); 0 for a dense model."""
        value = self.arch_value("expert_count", 0)
        return int(value) if isinstance(value, int) and value > 1 else 0

    @property
    def expert_used_count(self) -> int:
        """Experts each token is routed to (``{arch}.expert_used_count``); 0 for a dense model."""
        value = self.arch_value("expert_used_count", 0)
        if isinstance(value, list):  # per-layer counts: llama.cpp sizes by the largest
            value = max(value, default=0)
        return min(int(value or 0), self.expert_count) if self.expert_count else 0

    def active_share(self, values: Iterable[tuple[str, int]]) -> int:
        """Sum of ``(tensor name, amount)`` counting an expert tensor's amount only for the
        experts one token uses (``used / count`` of it); every other tensor in full."""
        dense = experts = 0
        for name, amount in values:
            if self.expert_count and is_expert_tensor(name):
                experts += amount
            else:
                dense += amount
        return dense + (experts * self.expert_used_count // self.expert_count if experts else 0)

    @property
    def active_parameter_count(self) -> int:
        """Weights one token uses: :attr:`parameter_count` less the experts it is not routed
        to (Qwen3-30B-A3B: 30.5 billion in all, 3.3 billion active). Equal to
        :attr:`parameter_count` for a dense model."""
        return self.active_share((t.name, t.n_elements) for t in self.tensors)


def laid_out(tensors: Iterable[tuple[str, tuple[int, ...], int, int]], alignment: int = 32) -> list[TensorInfo]:
    """Tensors of a file not written yet, given the offsets a GGUF writer gives them: one
    after the other in this order, each starting on ``alignment`` bytes."""
    out, offset = [], 0
    for name, shape, ggml_type, n_bytes in tensors:
        out.append(TensorInfo(name, shape, ggml_type, n_bytes, offset))
        offset += -(-n_bytes // alignment) * alignment
    return out


def read_gguf_header(path: Path) -> GGUFHeader:
    """Read ``path``'s metadata and tensor table.

    Raises:
        QuantDeskError: The file is missing, not GGUF, cut short, or its header is corrupt.
    """
    layout = read_gguf_layout(Path(path))
    return GGUFHeader(
        metadata={entry.key: entry.value for entry in layout.metadata},
        tensors=[TensorInfo(t.name, t.shape, int(t.qtype), t.nbytes, t.offset) for t in layout.tensors],
        version=layout.version,
    )
