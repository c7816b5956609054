"""Writing a GGUF file from a tensor stream, one tensor in memory at a time.

GGUF layout: header, key/values, tensor infos (name, shape, type, offset), then the
tensor data, each aligned to ``general.alignment`` (32 bytes by default). Because every
tensor's type and byte size are planned before writing, the infos go out first and
each tensor's data follows as soon as it is encoded; the file is written beside the
target and renamed only when complete (:func:`app.core.jobs.atomic_output`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter

from app.core.jobs import CancelToken, ProgressCallback, ProgressReporter, atomic_output, check
from quantize.encode import tensor_bytes
from quantize.source import MetadataEntry, SourceTensor


@dataclass(frozen=True)
class PlannedTensor:
    """A source tensor and the type it will be written as."""

    tensor: SourceTensor
    qtype: GGMLQuantizationType

    @property
    def nbytes(self) -> int:
        return tensor_bytes(self.tensor.shape, self.qtype)


#: ``encode(planned_tensor, values_f32) -> uint8 array of planned_tensor.nbytes bytes``
TensorEncoder = Callable[[PlannedTensor, np.ndarray], np.ndarray]


def write_gguf(
    target: Path,
    arch: str,
    metadata: Sequence[MetadataEntry],
    planned: Sequence[PlannedTensor],
    encode: TensorEncoder,
    report: Optional[ProgressCallback] = None,
    cancel: Optional[CancelToken] = None,
    stage: str = "Writing",
) -> Path:
    """Write ``planned`` tensors with ``metadata`` to ``target`` atomically.

    Progress is reported in output bytes, with the tensor name as detail; the cancel
    token is checked before each tensor. On cancel or error no file is left behind.
    """
    total = sum(p.nbytes for p in planned)
    progress = ProgressReporter(report, total, stage)
    with atomic_output(target) as tmp:
        writer = GGUFWriter(tmp, arch)
        try:
            for entry in metadata:
                writer.add_key_value(entry.key, entry.value, entry.type, entry.sub_type)
            for p in planned:
                byte_shape = (*p.tensor.shape[:-1], p.nbytes // max(1, p.tensor.n_rows))
                writer.add_tensor_info(p.tensor.name, byte_shape, np.dtype(np.uint8), p.nbytes, p.qtype)
            writer.write_header_to_file(tmp)
            writer.write_kv_data_to_file()
            writer.write_ti_data_to_file()
            for p in planned:
                check(cancel)
                data = encode(p, p.tensor.load())
                if data.nbytes != p.nbytes:
                    raise RuntimeError(f"{p.tensor.name}: encoded {data.nbytes} bytes, planned {p.nbytes}")
                writer.write_tensor_data(np.ascontiguousarray(data).view(np.uint8).reshape(-1))
                progress.advance(p.nbytes, p.tensor.name)
        finally:
            writer.close()
    return Path(target)
