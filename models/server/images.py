"""Images in API requests: every dialect's image field → the engine's image content part.

OpenAI's ``image_url`` (``{"url": "data:image/png;base64,..."}``), the Responses API's
``input_image`` (``image_url``), Anthropic's ``image`` block (``source`` of type
``base64``) and Ollama's ``images`` (bare base64) all arrive here. Images travel inside the
request as data: a URL to fetch (``http://``, ``https://``) is refused with a sentence, so
that a request can never make the server reach other machines. A damaged or unsupported
image is a 400 naming the field, never an engine error.
"""

from __future__ import annotations

from typing import Any

from app.core.errors import QuantDeskError
from models.images import image_from_data_uri
from models.server.errors import ApiError


def _invalid(exc: QuantDeskError, where: str) -> ApiError:
    return ApiError(400, f"{where}: {exc.user_message}", param=where, code="invalid_image")


def image_from_url(url: Any, where: str) -> dict:
    """An ``image_url``'s URL (a data: URI) as an image content part."""
    if not isinstance(url, str) or not url:
        raise ApiError(400, f"{where} must be a data: URI of an image.", param=where, code="invalid_value")
    if url.lower().startswith(("http://", "https://")):
        raise ApiError(400, f"{where} is a web address; this server does not download images.",
                       param=where, code="unsupported_content")
    try:
        return {"type": "image", "data": image_from_data_uri(url)}
    except QuantDeskError as exc:
        raise _invalid(exc, where) from None


def image_from_base64(data: Any, where: str) -> dict:
    """Bare base64 (Ollama, Anthropic's ``source.data``) as an image content part."""
    if not isinstance(data, str):
        raise ApiError(400, f"{where} must be base64 text.", param=where, code="invalid_value")
    try:
        return {"type": "image", "data": image_from_data_uri(data)}
    except QuantDeskError as exc:
        raise _invalid(exc, where) from None


def joined(parts: list[dict]) -> Any:
    """Content parts as the engine takes them: text alone as one string, else the parts
    (adjacent text parts joined, with nothing between, as llama-server joins them)."""
    out: list[dict] = []
    for part in parts:
        if part["type"] == "text" and out and out[-1]["type"] == "text":
            out[-1] = {"type": "text", "text": out[-1]["text"] + part["text"]}
        else:
            out.append(part)
    if all(p["type"] == "text" for p in out):
        return "".join(p["text"] for p in out)
    return out
