"""``convert()``: a Hugging Face folder → an F32, F16 or BF16 GGUF file, and for an
image-text checkpoint its vision encoder's ``mmproj-*.gguf`` beside it.

Per-tensor output types follow convert_hf_to_gguf's ``--outtype`` rules: 1-D tensors,
norms and biases stay F32 (llama.cpp's kernels for them take F32 only, and they are
tiny), so do MoE routers (``ffn_gate_inp``, ``ffn_gate_inp_shexp``: their logits pick the
experts, and llama-quantize never quantizes them), every other ``*.weight`` matrix takes
the requested type.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np
from quantize.ggml_types import GGMLQuantizationType, GGUFValueType, LlamaFileType

from models.foundation.errors import QuantDeskError
from models.foundation.jobs import CancelToken, ProgressCallback
from quantize.convert.hf_source import open_hf_folder
from quantize.encode import encode_rows, quiet_bf16_nans
from quantize.gguf_output import PlannedTensor, write_gguf
from quantize.source import MetadataEntry, SourceTensor

OUTTYPES = {
    "f32": (GGMLQuantizationType.F32, LlamaFileType.ALL_F32),
    "f16": (GGMLQuantizationType.F16, LlamaFileType.MOSTLY_F16),
    "bf16": (GGMLQuantizationType.BF16, LlamaFileType.MOSTLY_BF16),
    # Blocks of 32 values and one F16 scale, as convert_hf_to_gguf's --outtype q8_0 writes
    # them (ggml's reference rounding); a row that is not whole blocks is written as F16.
    "q8_0": (GGMLQuantizationType.Q8_0, LlamaFileType.MOSTLY_Q8_0),
}
Q8_0_BLOCK = 32


def output_type(tensor: SourceTensor, requested: GGMLQuantizationType) -> GGMLQuantizationType:
    """The type ``tensor`` is written as when ``requested`` is asked for."""
    if (len(tensor.shape) <= 1 or tensor.name.endswith("_norm.weight") or not tensor.name.endswith(".weight")
            or ".ffn_gate_inp" in tensor.name):
        return GGMLQuantizationType.F32
    return whole_blocks(tensor, requested)


def whole_blocks(tensor: SourceTensor, qtype: GGMLQuantizationType) -> GGMLQuantizationType:
    """``qtype``, or F16 for a Q8_0 tensor whose rows are not whole blocks."""
    if qtype == GGMLQuantizationType.Q8_0 and tensor.shape[-1] % Q8_0_BLOCK:
        return GGMLQuantizationType.F16
    return qtype


def converted_values(tensor: SourceTensor, qtype: GGMLQuantizationType) -> np.ndarray:
    """``tensor`` as the converter writes it as ``qtype``: float32, float16, or bfloat16
    bits (uint16), in ``tensor.shape``.

    A weight already stored in its output's 16-bit type is taken as stored, with no
    float32 round trip (that round trip changes no bits but a BF16 NaN's quiet bit,
    which :func:`quantize.encode.quiet_bf16_nans` sets); the others are rounded from
    what is stored as llama.cpp's converter rounds them from float32 (numpy's cast for
    F16, NaN payloads and all), in one compiled pass (:mod:`quantize.blocks.widen`).
    """
    if qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.Q8_0):
        return tensor.load()
    stored = tensor.load_stored() if tensor.load_stored is not None else tensor.load()
    if stored.dtype == (np.float16 if qtype == GGMLQuantizationType.F16 else np.uint16):
        return quiet_bf16_nans(stored) if qtype == GGMLQuantizationType.BF16 else stored
    from quantize.blocks.widen import to_bf16_bits, to_f16_bits  # compiled: one pass, memory speed

    if qtype == GGMLQuantizationType.F16:  # from bfloat16 bits or float32
        # bfloat16 bits become float16 bits in their own array when it is a fresh copy
        # (not a read-only map): no second gigabyte of new pages for a big matrix.
        in_place = stored.dtype == np.uint16 and stored.flags.writeable and stored.flags.c_contiguous
        return to_f16_bits(stored, out=stored if in_place else None, numpy_nan=True).view(np.float16)
    return to_bf16_bits(stored)  # from float16 or float32: gguf-py's rounding is ggml's


def encode_tensor(planned: PlannedTensor, values: np.ndarray) -> np.ndarray:
    """:func:`converted_values` → the planned type's bytes."""
    if planned.qtype == GGMLQuantizationType.Q8_0:
        return encode_rows(values.reshape(planned.tensor.n_rows, -1), planned.qtype)
    return np.ascontiguousarray(values).view(np.uint8).reshape(planned.tensor.n_rows, -1)


def default_output_path(model_dir: Path, outtype: str) -> Path:
    """``<folder>/<folder name>-<OUTTYPE>.gguf``, beside the weights."""
    return Path(model_dir) / f"{Path(model_dir).name}-{outtype.upper()}.gguf"


def mmproj_output_path(text_path: Path) -> Path:
    """``mmproj-<text file name>`` beside the text model's file (llama.cpp's naming, which
    is how QuantDesk and llama.cpp's programs find a model's vision encoder)."""
    return Path(text_path).with_name(f"mmproj-{Path(text_path).name}")


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
        report: Receives :class:`~models.foundation.jobs.Progress` in output bytes, per tensor.
        cancel: Checked before each tensor; cancelling leaves no file.
        pre_tokenizer: Explicit llama.cpp pre-tokenizer for an unrecognised BPE tokenizer.

    Returns:
        The written file's path. On any error or cancel, no file is left at ``out_path``.
        An image-text checkpoint's vision encoder is written beside it too
        (:func:`convert_with_projector` says where).
    """
    return convert_with_projector(model_dir, out_path, outtype, report, cancel, pre_tokenizer)[0]


def convert_with_projector(
    model_dir: Path | str,
    out_path: Optional[Path | str] = None,
    outtype: str = "f16",
    report: Optional[ProgressCallback] = None,
    cancel: Optional[CancelToken] = None,
    pre_tokenizer: Optional[str] = None,
) -> tuple[Path, Optional[Path]]:
    """:func:`convert`, returning the text model's path and its mmproj's (``None`` when
    the checkpoint has no vision encoder QuantDesk converts).

    The mmproj (:func:`mmproj_output_path`) is written first, then the text model; each
    file is complete or absent.
    """
    from quantize.convert.mmproj import mmproj_source

    key = outtype.lower()
    if key not in OUTTYPES:
        raise QuantDeskError(f"Unknown output type \"{outtype}\".", "Choose f32, f16, bf16 or q8_0.")
    qtype, file_type = OUTTYPES[key]
    target = Path(out_path) if out_path else default_output_path(Path(model_dir), key)
    with open_hf_folder(model_dir, pre_tokenizer) as source:
        vision = mmproj_source(source)
        projector = None
        if vision is not None:
            projector = _write_converted(mmproj_output_path(target), vision, file_type,
                                         lambda t: vision.output_type(t, qtype), report, cancel,
                                         "Converting the vision encoder")
        text = _write_converted(target, source, file_type, lambda t: output_type(t, qtype),
                                report, cancel, "Converting")
        return text, projector


def write_projector(source, text_target: Path, outtype: str = "f16",
                    report: Optional[ProgressCallback] = None,
                    cancel: Optional[CancelToken] = None) -> Optional[Path]:
    """The vision encoder of an open HF ``source`` as ``mmproj-<folder>-<OUTTYPE>.gguf``
    beside ``text_target``; ``None`` for a checkpoint without one (the quantize job writes
    it beside its quantized text models: llama.cpp runs a quantized model with an F16
    encoder)."""
    from quantize.convert.mmproj import mmproj_source

    vision = mmproj_source(source)
    if vision is None:
        return None
    qtype, file_type = OUTTYPES[outtype]
    target = Path(text_target).with_name(f"mmproj-{source.folder.path.name}-{outtype.upper()}.gguf")
    return _write_converted(target, vision, file_type, lambda t: vision.output_type(t, qtype), report,
                            cancel, "Converting the vision encoder")


def _write_converted(target: Path, source, file_type: LlamaFileType, plan, report, cancel, stage: str) -> Path:
    """Write ``source``'s tensors to ``target``, each as ``plan(tensor)`` says."""
    metadata = source.metadata()
    metadata.append(MetadataEntry("general.file_type", int(file_type), GGUFValueType.UINT32))
    planned = [PlannedTensor(t, plan(t)) for t in source.tensors()]
    types = {p.tensor.name: p.qtype for p in planned}
    return write_gguf(target, source.arch, metadata, planned, encode_tensor, report, cancel,
                      stage=stage, load=lambda t: converted_values(t, types[t.name]))
