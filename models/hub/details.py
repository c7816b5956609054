"""A model repo's files, its GGUF quant variants, and whether it is a convertible checkpoint.

GGUF repos hold one file per quantization, named by convention after the llama.cpp file
type: ``SmolLM2-135M-Instruct-Q4_K_M.gguf``, ``model.Q8_0.gguf``, sometimes in a folder
(``Q4_K_M/x.gguf``) and split in shards (``x-Q6_K-00001-of-00003.gguf``). They are grouped
into :class:`QuantVariant` — one choice for the user, all its shards downloaded together.
A repo with ``config.json`` and ``*.safetensors`` is a Hugging Face checkpoint that the
converter can turn into GGUF. Its parameter count comes from the Hub's model info; for a
mixture of experts, the repo's config.json (a few KB, read when the repo has one) gives
the parameters a token uses too ("30.5B total, 3.3B active").
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from dataclasses import dataclass, field
from typing import Optional, Union

from huggingface_hub.hf_api import RepoFile

from models.foundation.errors import QuantDeskError
from models.foundation.jobs import CancelToken
from models.hub.client import hub_api, hub_errors

# A quant name between separators: Q4_K_M, IQ2_XXS, Q8_0, BF16, TQ1_0, MXFP4, UD-Q4_K_XL...
_QUANT = re.compile(
    r"(?:^|[-._/])((?:UD-)?(?:I?Q\d(?:_[A-Z0-9]{1,3}){1,3}|TQ\d_\d|BF16|F16|F32|MXFP4(?:_MOE)?))(?=$|[-._/])",
    re.IGNORECASE,
)
_SHARD = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
# Files the converter reads besides the weights.
CHECKPOINT_SIDE_FILES = (
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer.model",
    "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt",
    "added_tokens.json", "chat_template.jinja", "model.safetensors.index.json",
)
# Preferred when the user names no quant: a good size/quality balance first.
DEFAULT_QUANT_ORDER = ("Q4_K_M", "Q4_K_S", "Q5_K_M", "Q4_0", "Q6_K", "Q8_0", "Q3_K_M", "F16", "BF16")


@dataclass(frozen=True)
class HubFileInfo:
    """A file of the repo: path, size, LFS sha256 (large files) and git blob id."""

    path: str
    size: int
    sha256: Optional[str]
    blob_id: str


@dataclass
class QuantVariant:
    """One GGUF quantization: its name (``Q4_K_M``) and its file or shards, in order."""

    quant: str
    files: list[HubFileInfo] = field(default_factory=list)
    expected_shards: int = 1

    @property
    def size(self) -> int:
        """Bytes of all shards together."""
        return sum(f.size for f in self.files)

    @property
    def complete(self) -> bool:
        """All shards the names announce are present."""
        return len(self.files) == self.expected_shards


@dataclass
class SafetensorsCheckpoint:
    """A Hugging Face checkpoint the converter can turn into GGUF."""

    weights: list[HubFileInfo]
    side_files: list[HubFileInfo]
    architectures: list[str]

    @property
    def files(self) -> list[HubFileInfo]:
        return self.side_files + self.weights

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)


@dataclass
class ModelDetails:
    """What the model page shows: the commit, files, quant variants, checkpoint."""

    repo_id: str
    commit: str
    gated: Union[bool, str]
    files: list[HubFileInfo]
    variants: list[QuantVariant]
    checkpoint: Optional[SafetensorsCheckpoint]
    extra_gguf: list[HubFileInfo]  # GGUF files that are no quant variant (mmproj, imatrix)
    parameters: Optional[int] = None  # as the Hub counts them (safetensors or GGUF), if it does
    active_parameters: Optional[int] = None  # a mixture of experts': those one token uses

    def variant(self, quant: str) -> QuantVariant:
        """The variant named ``quant`` (case-insensitive)."""
        for v in self.variants:
            if v.quant.upper() == quant.upper():
                return v
        names = ", ".join(v.quant for v in self.variants) or "none"
        raise QuantDeskError(f"{self.repo_id} has no {quant} GGUF file (it has: {names}).",
                             "Pick one of the listed quantizations.")

    def default_variant(self) -> Optional[QuantVariant]:
        """The variant to fetch when the user names none (Q4_K_M if there is one)."""
        complete = [v for v in self.variants if v.complete]
        for name in DEFAULT_QUANT_ORDER:
            for v in complete:
                if v.quant.upper() == name:
                    return v
        return complete[0] if complete else None


def quant_bits(path: str) -> int:
    """The bits of a file's precision as its name says (Q4_K_M → 4, F16 → 16; 0 if none)."""
    match = re.search(r"(?<![A-Za-z0-9])(?:IQ|Q|BF|F)(\d+)", Path(path).name, re.IGNORECASE)
    return int(match[1]) if match else 0


def projector_for(details: "ModelDetails", variant: "QuantVariant") -> Optional[HubFileInfo]:
    """The vision encoder (``*mmproj*.gguf``) to download with ``variant``, by llama.cpp's
    rule (``common/download.cpp``): one in the variant's folder or a folder above it, the
    nearest first, then the precision closest to the variant's; ``None`` without one."""
    model_dir = variant.files[0].path.split("/")[:-1]
    best, best_key = None, None
    for f in projectors_of(details):
        folder = f.path.split("/")[:-1]
        if folder != model_dir[:len(folder)]:
            continue  # not the variant's folder nor one above it
        key = (-len(folder), abs(quant_bits(f.path) - quant_bits(variant.files[0].path)))
        if best_key is None or key < best_key:
            best, best_key = f, key
    return best


def projectors_of(details: "ModelDetails") -> list[HubFileInfo]:
    """Every vision encoder (``*mmproj*.gguf``) the repository holds, by path: what the
    Models page offers beside the one :func:`projector_for` pairs."""
    return sorted((f for f in details.extra_gguf if "mmproj" in f.path.split("/")[-1].lower()),
                  key=lambda f: f.path)


def quant_of(path: str) -> Optional[str]:
    """The quant name in a GGUF file's path (last one wins), upper-cased; ``None`` if none."""
    stem = _SHARD.sub("", path)
    stem = re.sub(r"\.gguf$", "", stem, flags=re.IGNORECASE)
    found = _QUANT.findall(stem)
    return found[-1].upper() if found else None


def shard_of(path: str) -> tuple[int, int]:
    """``(index, count)`` of a split GGUF file; ``(1, 1)`` for a single file."""
    match = _SHARD.search(path)
    return (int(match[1]), int(match[2])) if match else (1, 1)


def group_variants(files: list[HubFileInfo]) -> tuple[list[QuantVariant], list[HubFileInfo]]:
    """GGUF files → quant variants (shards sorted), and GGUF files that are none."""
    variants: dict[str, QuantVariant] = {}
    extras = []
    for f in files:
        if not f.path.lower().endswith(".gguf"):
            continue
        name = f.path.rsplit("/", 1)[-1].lower()
        quant = quant_of(f.path)
        if quant is None or name.startswith("mmproj") or "imatrix" in name:
            extras.append(f)
            continue
        variant = variants.setdefault(quant, QuantVariant(quant))
        variant.files.append(f)
        variant.expected_shards = max(variant.expected_shards, shard_of(f.path)[1])
    for variant in variants.values():
        variant.files.sort(key=lambda f: (shard_of(f.path)[0], f.path))
    return sorted(variants.values(), key=lambda v: v.size), extras


def find_checkpoint(files: list[HubFileInfo], config: Optional[dict]) -> Optional[SafetensorsCheckpoint]:
    """The safetensors checkpoint at the repo's top level, if it has one with ``config.json``."""
    top = {f.path: f for f in files if "/" not in f.path}
    weights = sorted((f for p, f in top.items() if p.endswith(".safetensors")), key=lambda f: f.path)
    if "config.json" not in top or not weights:
        return None
    side = [top[name] for name in CHECKPOINT_SIDE_FILES if name in top]
    architectures = list((config or {}).get("architectures") or [])
    return SafetensorsCheckpoint(weights, side, architectures)


def _file_info(entry: RepoFile) -> HubFileInfo:
    return HubFileInfo(entry.path, entry.size or 0, entry.lfs.sha256 if entry.lfs else None, entry.blob_id)


def model_details(repo_id: str, revision: Optional[str] = None,
                  cancel: Optional[CancelToken] = None) -> ModelDetails:
    """Ask the Hub about ``repo_id``: its commit, files with sizes and hashes, variants.

    The file list comes from the tree API pinned to the commit that ``model_info``
    reported, so files and hashes describe one consistent snapshot even if the repo
    changes in between. ``cancel`` stops the requests, also while they wait for the Hub
    (:class:`~models.foundation.errors.Cancelled`).
    """
    with hub_errors(repo_id, cancel):
        api = hub_api()
        info = api.model_info(repo_id, revision=revision)
        commit = info.sha or revision or "main"
        tree = api.list_repo_tree(repo_id, recursive=True, revision=commit)
        files = [_file_info(e) for e in tree if isinstance(e, RepoFile)]
        parameters, active = _parameter_counts(api, repo_id, commit, info, files)
    variants, extras = group_variants(files)
    return ModelDetails(
        repo_id=repo_id,
        commit=commit,
        gated=info.gated or False,
        files=sorted(files, key=lambda f: f.path),
        variants=variants,
        checkpoint=find_checkpoint(files, info.config),
        extra_gguf=extras,
        parameters=parameters,
        active_parameters=active,
    )


def _parameter_counts(api, repo_id: str, commit: str, info, files: list[HubFileInfo]
                      ) -> tuple[Optional[int], Optional[int]]:
    """The Hub's parameter count, and for a mixture of experts with a config.json the
    total and active counts computed from it (what the checkpoint's tensors hold)."""
    from quantize.convert.archs.moe import moe_parameter_counts

    safetensors = getattr(info, "safetensors", None)
    gguf = getattr(info, "gguf", None) or {}
    total = getattr(safetensors, "total", None) or (gguf.get("total") if isinstance(gguf, dict) else None)
    if not any(f.path == "config.json" for f in files):
        return total, total
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session

    url = hf_hub_url(repo_id, "config.json", revision=commit, endpoint=api.endpoint)
    answer = get_session().get(url, headers=build_hf_headers(token=api.token), timeout=30)
    if answer.status_code != 200:
        return total, total  # the counts are a nicety: the details stand without them
    try:
        counts = moe_parameter_counts(json.loads(answer.content))
    except (ValueError, KeyError, TypeError):
        counts = None
    return counts if counts is not None else (total, total)
