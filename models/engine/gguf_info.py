"""What the engine needs to know about a GGUF file before loading it.

The offload sliders need the layer count, the context slider needs the trained context
length, the KV-cache rules need the attention head size, the chat needs the model's own
template and ``quantdesk bench`` needs the bytes a decode step reads (for a mixture of
experts, only the experts a token is routed to: ``expert_used_count`` of ``expert_count``). All of it is in the
GGUF header and tensor table, which :func:`models.gguf_header.read_gguf_header` reads in
milliseconds without touching the weights, so this is safe to call in the GUI process
(nothing here runs llama.cpp).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from models.foundation.errors import QuantDeskError
from models.gguf_header import is_embedding_model, read_gguf_header


# The tensor llama.cpp only indexes (one row per token) rather than multiplies, unless the
# model ties its output projection to it: then every decode step reads all of it.
_TOKEN_EMBEDDING = "token_embd.weight"
_OUTPUT_PROJECTION = "output.weight"
@dataclass(frozen=True)
class GGUFModelInfo:
    """Facts from a GGUF header that settings, templates and benchmarks depend on.

    Attributes:
        path: The GGUF file.
        architecture: ``general.architecture`` (``llama``, ``gemma2``, ...).
        name: ``general.name`` or the file name.
        block_count: Transformer blocks; llama.cpp offloads up to ``block_count + 1``
            layers (the blocks plus the output layer).
        context_length: The context length the model was trained for.
        head_size_k: Size of one attention head's key vector (the KV-cache block rule).
        chat_template: ``tokenizer.chat_template`` or ``None`` when the file has none.
        file_size: Bytes on disk.
        weight_bytes_per_token: Bytes of weights one decode step reads (a MoE model's
            routed experts only).
        expert_count: Experts per layer of a mixture-of-experts model; 0 when dense.
        expert_used_count: Experts each token uses; 0 when dense.
        embedding: The model makes embeddings (:func:`is_embedding_model`).
        pooling_type: llama.cpp's pooling of token vectors into one (``{arch}.pooling_type``:
            1 mean, 2 CLS, 3 last), or ``None`` when the header does not say.
    """

    path: Path
    architecture: str
    name: str
    block_count: int
    context_length: int
    head_size_k: int
    chat_template: Optional[str]
    file_size: int
    weight_bytes_per_token: int
    expert_count: int = 0
    expert_used_count: int = 0
    embedding: bool = False
    pooling_type: Optional[int] = None
    embedding_length: int = 0

    @property
    def is_moe(self) -> bool:
        """Whether the model is a mixture of experts (its experts can stay on the CPU)."""
        return self.expert_count > 1

    @property
    def max_gpu_layers(self) -> int:
        """The largest meaningful "GPU layers" value: every block plus the output layer."""
        return self.block_count + 1


def read_model_info(path: Path | str) -> GGUFModelInfo:
    """Read :class:`GGUFModelInfo` from the header of the GGUF file at ``path``.

    Raises:
        QuantDeskError: The file is missing or is not a readable GGUF file.
    """
    path = Path(path)
    if not path.is_file():
        raise QuantDeskError(
            f"The model file {path} does not exist.",
            "Choose a GGUF file that is on this computer.",
        )
    header = read_gguf_header(path)
    metadata = header.metadata
    tensor_bytes = {t.name: t.n_bytes for t in header.tensors}  # per token: see active_share
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str):
        raise QuantDeskError(
            f"{path} has no general.architecture entry, so it is not a model GGUF.",
            "Convert the model to GGUF again with QuantDesk.",
        )
    block_count = metadata.get(f"{arch}.block_count")
    if not isinstance(block_count, int) or block_count <= 0:
        raise QuantDeskError(
            f"{path} does not say how many layers the model has ({arch}.block_count).",
            "Convert the model to GGUF again with QuantDesk.",
        )
    context_length = metadata.get(f"{arch}.context_length") or 0
    head_size_k = metadata.get(f"{arch}.attention.key_length")
    if not head_size_k:
        embedding = metadata.get(f"{arch}.embedding_length") or 0
        heads = metadata.get(f"{arch}.attention.head_count") or 0
        if not isinstance(heads, int):  # per-layer head counts (a list, or a long array)
            heads = max(heads) if isinstance(heads, list) and heads else 0
        head_size_k = embedding // heads if heads else 0
    template = metadata.get("tokenizer.chat_template")
    per_token = header.active_share(tensor_bytes.items())
    if _OUTPUT_PROJECTION in tensor_bytes:
        per_token -= tensor_bytes.get(_TOKEN_EMBEDDING, 0)
    name = metadata.get("general.name")
    return GGUFModelInfo(
        path=path,
        architecture=arch,
        name=name if isinstance(name, str) and name else path.stem,
        block_count=int(block_count),
        context_length=int(context_length),
        head_size_k=int(head_size_k),
        chat_template=template if isinstance(template, str) and template.strip() else None,
        file_size=path.stat().st_size,
        weight_bytes_per_token=per_token,
        expert_count=header.expert_count,
        expert_used_count=header.expert_used_count,
        embedding=is_embedding_model(metadata),
        pooling_type=metadata.get(f"{arch}.pooling_type"),
        embedding_length=int(metadata.get(f"{arch}.embedding_length") or 0),
    )


@dataclass(frozen=True)
class ProjectorInfo:
    """What an mmproj file's header says (llama.cpp's ``clip`` architecture).

    Attributes:
        path: The file.
        projector_type: ``clip.projector_type`` (``gemma3``, ``idefics3``...).
        projection_dim: Width of the embeddings it makes (the text model's must match).
        vision: It reads images. ``audio``: it reads sound.
        max_image_tokens: The most tokens one image chunk can take (the batch must hold one).
    """

    path: Path
    projector_type: str
    projection_dim: int
    vision: bool
    audio: bool
    max_image_tokens: int


def _max_image_tokens(metadata: dict, projector: str) -> int:
    """Tokens of the largest image chunk: the patch grid, merged as the projector merges it."""
    size = int(metadata.get("clip.vision.image_size") or 0)
    patch = int(metadata.get("clip.vision.patch_size") or 0)
    if not size or not patch:
        return 0
    side = size // patch
    if projector == "gemma3":  # pooled 4×4 unless the file says otherwise
        side //= int(metadata.get("clip.vision.projector.scale_factor") or 4)
    elif projector == "idefics3":  # each tile folded scale × scale
        side //= int(metadata.get("clip.vision.projector.scale_factor") or 1)
    return side * side


def read_projector_info(path: Path | str, model: Optional[GGUFModelInfo] = None) -> ProjectorInfo:
    """Read an mmproj file's header; with ``model``, check that the two belong together.

    Raises:
        QuantDeskError: The file is missing, is not an mmproj, or makes embeddings of
            another width than the model reads (a sentence names both numbers).
    """
    path = Path(path)
    if not path.is_file():
        raise QuantDeskError(f"The vision encoder file {path} does not exist.",
                             "Choose the model's mmproj GGUF file.")
    metadata = read_gguf_header(path).metadata
    if metadata.get("general.architecture") != "clip":
        raise QuantDeskError(f"{path.name} is not a vision encoder (mmproj) file: its architecture "
                             f"is {metadata.get('general.architecture')!r}, not 'clip'.",
                             "Choose the mmproj-*.gguf file published with the model.")
    projector = str(metadata.get("clip.projector_type") or metadata.get("clip.vision.projector_type") or "")
    dim = int(metadata.get("clip.vision.projection_dim") or metadata.get("clip.audio.projection_dim") or 0)
    if model is not None and model.embedding_length and dim and dim != model.embedding_length:
        raise QuantDeskError(
            f"The vision encoder {path.name} makes embeddings of {dim} values, but {model.name} "
            f"reads embeddings of {model.embedding_length}: they are not a pair.",
            "Choose the mmproj file made for this model.")
    return ProjectorInfo(path.resolve(), projector, dim, bool(metadata.get("clip.has_vision_encoder")),
                         bool(metadata.get("clip.has_audio_encoder")), _max_image_tokens(metadata, projector))
