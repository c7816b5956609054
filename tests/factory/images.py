"""Pictures for tests as image files, written without an imaging library (PNG is zlib and CRCs).

:func:`sample_picture` is an RGB array whose three channels, left and right, top and bottom
all differ, so a preprocessing that swaps channels (BGR), flips or transposes the picture
gives another embedding; :func:`png_bytes` writes any RGB array as a PNG file.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_bytes(pixels: np.ndarray) -> bytes:
    """An 8-bit RGB PNG file of ``pixels`` (height × width × 3, uint8)."""
    pixels = np.ascontiguousarray(pixels, dtype=np.uint8)
    height, width, channels = pixels.shape
    assert channels == 3
    rows = b"".join(b"\x00" + pixels[y].tobytes() for y in range(height))  # filter 0 per row
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(rows, 9))
            + _chunk(b"IEND", b""))


def sample_picture(size: int = 64, seed: int = 0) -> np.ndarray:
    """A ``size`` × ``size`` RGB picture: a gradient per channel, a bright square off centre,
    and some noise."""
    y, x = np.mgrid[0:size, 0:size].astype(np.float32) / max(size - 1, 1)
    rgb = np.stack([255 * x, 255 * y, 255 * (1 - x) * y], axis=-1)
    rgb[size // 8: size // 3, size // 2: size - size // 6] = (250, 40, 90)
    rgb += np.random.default_rng(seed).normal(0, 12, rgb.shape)
    return np.clip(rgb, 0, 255).astype(np.uint8)
