"""Images a person or a program sends with a message: checked before any model sees them.

An image travels as the bytes of its file (PNG, JPEG, GIF, BMP: what llama.cpp's image
decoder reads). Before those bytes reach the engine, :func:`check_image` reads the
format and size from the file's header alone — no decoding — and refuses, with a sentence,
what the engine must not try: an empty or truncated file, a format the decoder cannot
read (WebP, HEIC, SVG...), a picture so large that decoding it would take gigabytes
(:data:`MAX_PIXELS`). :func:`image_from_data_uri` turns the ``data:`` URIs of the
OpenAI and Ollama dialects into bytes with the same checks.

Messages carry images as content parts (:func:`image_part`), beside text parts; the
engine puts its media marker where each image goes and keeps the text around it as it is.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import struct
from dataclasses import dataclass
from typing import Optional

from models.foundation.errors import QuantDeskError

#: Largest picture accepted, in pixels: decoding takes 3 bytes a pixel (and the encoder
#: scales it down to a few hundred pixels a side anyway). 50-megapixel photos are refused.
MAX_PIXELS = 40_000_000
#: Largest image file accepted.
MAX_IMAGE_BYTES = 32 * 1024 * 1024
FORMATS = ("PNG", "JPEG", "GIF", "BMP")


@dataclass(frozen=True)
class ImageInfo:
    """What an image file's header says."""

    format: str
    width: int
    height: int
    sha256: str


def _bad(what: str, fix: str = "Send a PNG, JPEG, GIF or BMP image.") -> QuantDeskError:
    return QuantDeskError(what, fix)


def _png_size(data: bytes) -> tuple[int, int]:
    if len(data) < 24 or data[12:16] != b"IHDR":
        raise _bad("The PNG image is truncated (its header is incomplete).")
    return struct.unpack(">II", data[16:24])


def _jpeg_size(data: bytes) -> tuple[int, int]:
    """The frame size from the first SOFn marker (JPEG's segments are walked by length)."""
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            raise _bad("The JPEG image is damaged (a segment does not start where it should).")
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        length = struct.unpack(">H", data[i + 2:i + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if i + 9 > len(data):
                break
            height, width = struct.unpack(">HH", data[i + 5:i + 9])
            return width, height
        i += 2 + length
    raise _bad("The JPEG image is truncated (it ends before its picture begins).")


def _image_size(data: bytes) -> tuple[str, int, int]:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return ("PNG", *_png_size(data))
    if data.startswith(b"\xff\xd8"):
        return ("JPEG", *_jpeg_size(data))
    if data[:6] in (b"GIF87a", b"GIF89a"):
        if len(data) < 10:
            raise _bad("The GIF image is truncated (its header is incomplete).")
        return ("GIF", *struct.unpack("<HH", data[6:10]))
    if data.startswith(b"BM"):
        if len(data) < 26:
            raise _bad("The BMP image is truncated (its header is incomplete).")
        width, height = struct.unpack("<ii", data[18:26])
        return "BMP", abs(width), abs(height)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        raise _bad("This is a WebP image, which the model's image reader cannot open.",
                   "Save it as PNG or JPEG first.")
    if data[4:8] == b"ftyp":
        raise _bad("This is a HEIC or AVIF image, which the model's image reader cannot open.",
                   "Save it as PNG or JPEG first.")
    raise _bad("This is not an image file QuantDesk recognises.")


def check_image(data: bytes) -> ImageInfo:
    """The format, size and hash of an image file, or a sentence saying why it is refused."""
    if not isinstance(data, (bytes, bytearray)) or not data:
        raise _bad("The image is empty.")
    if len(data) > MAX_IMAGE_BYTES:
        raise _bad(f"The image is {len(data) / 1e6:.0f} MB; QuantDesk accepts images up to "
                   f"{MAX_IMAGE_BYTES // (1024 * 1024)} MB.", "Send a smaller image.")
    kind, width, height = _image_size(bytes(data[:65536]))
    if width <= 0 or height <= 0:
        raise _bad(f"The {kind} image says it is {width}×{height} pixels, which cannot be.")
    if width * height > MAX_PIXELS:
        raise _bad(f"The image is {width}×{height} pixels ({width * height / 1e6:.0f} megapixels); "
                   f"QuantDesk accepts up to {MAX_PIXELS // 1_000_000} megapixels.",
                   "Scale it down first; the model sees a few hundred pixels a side anyway.")
    return ImageInfo(kind, width, height, hashlib.sha256(data).hexdigest())


def image_from_data_uri(uri: str) -> bytes:
    """The bytes of a ``data:image/...;base64,...`` URI (or of bare base64), checked."""
    if not isinstance(uri, str):
        raise _bad("An image must be a data: URI or base64 text.")
    payload = uri
    if uri.startswith("data:"):
        header, sep, payload = uri.partition(",")
        if not sep or ";base64" not in header:
            raise _bad("The image's data: URI is not base64-encoded.",
                       "Send data:image/png;base64,... (or JPEG).")
    if len(payload) > MAX_IMAGE_BYTES * 4 // 3 + 4:
        raise _bad(f"The image is larger than {MAX_IMAGE_BYTES // (1024 * 1024)} MB.", "Send a smaller image.")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise _bad("The image's base64 text is damaged.", "Encode the image file again.") from None
    check_image(data)
    return data


def image_part(data: bytes) -> dict:
    """A message content part holding an image (checked)."""
    check_image(data)
    return {"type": "image", "data": bytes(data)}


def message_images(content) -> list[bytes]:
    """The images of one message's content (a string has none)."""
    if isinstance(content, str):
        return []
    return [part["data"] for part in content if isinstance(part, dict) and part.get("type") == "image"]


def has_images(messages) -> bool:
    return any(message_images(m.get("content")) for m in messages or () if isinstance(m, dict))


def content_text(content, marker: Optional[str] = None) -> str:
    """A message's content as text: text parts joined with nothing between them, each
    image as ``marker`` (left out when ``marker`` is None), as llama-server joins them."""
    if isinstance(content, str):
        return content
    out = []
    for part in content:
        if part.get("type") == "text":
            out.append(part["text"])
        elif part.get("type") == "image" and marker is not None:
            out.append(marker)
    return "".join(out)
