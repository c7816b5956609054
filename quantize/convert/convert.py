"""``convert()``: a Hugging Face folder → an F32, F16 or BF16 GGUF file.

Per-tensor output types follow convert_hf_to_gguf's ``--outtype`` rules: 1-D tensors,
norms and biases stay F32 (llama.cpp's kernels for them take F32 only, and they are
tiny), every other ``*.weight`` matrix takes the requested type.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, LlamaFileType

from app.core.errors import QuantDeskError
from app.core.jobs import CancelToken, ProgressCallback
from quantize.convert.hf_source import open_hf_folder
from quantize.encode import encode_rows
from quantize.gguf_output import PlannedTensor, write_gguf
from quantize.source import MetadataEntry, SourceTensor

OUTTYPES = {
    "f32": (GGMLQuantizationType.F32, LlamaFileType.ALL_F32),
    "f16": (GGMLQuantizationType.F16, LlamaFileType.MOSTLY_F16),
    "bf16": (GGMLQuantizationType.BF16, LlamaFileType.MOSTLY_BF16),
}


def output_type(tensor: SourceTensor, requested: GGMLQuantizationType) -> GGMLQuantizationType:
    """The type ``tensor`` is written as when ``requested`` is asked for."""
    if len(tensor.shape) <= 1 or tensor.name.endswith("_norm.weight") or not tensor.name.endswith(".weight"):
        return GGMLQuantizationType.F32
    return requested


def encode_tensor(planned: PlannedTensor, values: np.ndarray) -> np.ndarray:
    """Float32 values → the planned float type's bytes (:func:`quantize.encode.encode_rows`)."""
    return encode_rows(values.reshape(planned.tensor.n_rows, planned.tensor.n_per_row), planned.qtype)


def default_output_path(model_dir: Path, outtype: str) -> Path:
    """``<folder>/<folder name>-<OUTTYPE>.gguf``, beside the weights."""
    return Path(model_dir) / f"{Path(model_dir).name}-{outtype.upper()}.gguf"


def convert(
    model_dir: Path | str,
    out_path: Optional[Path | str] = None,
    outtype: str = "f16",
    report: Optional[ProgressCallback] = None,
    cancel: Optional[CancelToken] = None,
    pre_tokenizer: Optional[str] = None,
) -> Path:
    """Convert the HF checkpoint in ``model_dir`` to a GGUF file at ``out_path``.

    Args:
        model_dir: Folder with config.json, safetensors weights and tokenizer files.
        out_path: Target file; default :func:`default_output_path`.
        outtype: ``"f32"``, ``"f16"`` or ``"bf16"``.
        report: Receives :class:`~app.core.jobs.Progress` in output bytes, per tensor.
        cancel: Checked before each tensor; cancelling leaves no file.
        pre_tokenizer: Explicit llama.cpp pre-tokenizer for an unrecognised BPE tokenizer.

    Returns:
        The written file's path. On any error or cancel, no file is left at ``out_path``.
    """
    key = outtype.lower()
    if key not in OUTTYPES:
        raise QuantDeskError(f"Unknown output type \"{outtype}\".", "Choose f32, f16 or bf16.")
    qtype, file_type = OUTTYPES[key]
    target = Path(out_path) if out_path else default_output_path(Path(model_dir), key)
    with open_hf_folder(model_dir, pre_tokenizer) as source:
        metadata = source.metadata()
        metadata.append(MetadataEntry("general.file_type", int(file_type), GGUFValueType.UINT32))
        planned = [PlannedTensor(t, output_type(t, qtype)) for t in source.tensors()]
        return write_gguf(target, source.arch, metadata, planned, encode_tensor, report, cancel,
                          stage="Converting")
