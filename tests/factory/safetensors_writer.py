"""A minimal safetensors writer, so tests control every byte of a checkpoint.

Format (https://github.com/huggingface/safetensors)::

    [ u64 little-endian N ][ N bytes of JSON header, space-padded to 8 ][ tensor data ]

    header = {"__metadata__": {str: str},
              "<name>": {"dtype": "F32"|"F16"|"BF16"|..., "shape": [...],
                         "data_offsets": [begin, end]}   # relative to the data start
             }

Writing it ourselves (rather than through ``safetensors.numpy``) lets the factory emit
BF16 without torch and lets converter tests craft broken files (truncated data, absurd
sizes) from the same code.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from quantize.encode import f32_to_bf16_bits

DTYPE_NAMES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}


#: float32 → bfloat16 bits, rounded to nearest even (tests check it against torch).
to_bf16_bits = f32_to_bf16_bits


def encode(values: np.ndarray, dtype: str) -> bytes:
    """The raw little-endian bytes of ``values`` stored as ``dtype``."""
    if dtype == "float32":
        return np.ascontiguousarray(values, dtype="<f4").tobytes()
    if dtype == "float16":
        return np.ascontiguousarray(values, dtype="<f2").tobytes()
    if dtype == "bfloat16":
        return to_bf16_bits(values).astype("<u2").tobytes()
    raise ValueError(f"unsupported dtype {dtype}")


def write_safetensors(
    path: Path,
    tensors: Mapping[str, np.ndarray],
    dtype: str,
    metadata: Optional[Mapping[str, str]] = None,
) -> int:
    """Write ``tensors`` (float arrays) to ``path`` as ``dtype``; return data bytes written."""
    header: dict = {"__metadata__": dict(metadata or {"format": "pt"})}
    blobs = []
    offset = 0
    for name, values in tensors.items():
        blob = encode(values, dtype)
        header[name] = {
            "dtype": DTYPE_NAMES[dtype],
            "shape": list(values.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for blob in blobs:
            f.write(blob)
    return offset
