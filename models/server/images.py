"""Images in API requests: every dialect's image field → the engine's image content part.

OpenAI's ``image_url`` (``{"url": "data:image/png;base64,..."}``), the Responses API's
``input_image`` (``image_url``), Anthropic's ``image`` block (``source`` of type
``base64`` or ``url``) and Ollama's ``images`` (bare base64) all arrive here. Images
travel inside the request as data. A web address (``http://``, ``https://``) becomes a
part to download (:func:`download_images`, in the request's worker thread), which the
server does only when it was started to (``ServerConfig.image_urls``), within
:data:`DOWNLOAD_SECONDS` and :data:`~models.images.MAX_IMAGE_BYTES`, following redirects
to http(s) only; otherwise it is a 400 that says so, and a request can never make the
server reach other machines. A damaged or unsupported image is a 400 naming the field,
never an engine error.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

from models.foundation.errors import QuantDeskError
from models.images import MAX_IMAGE_BYTES, check_image, image_from_data_uri
from models.server.errors import ApiError


def _invalid(exc: QuantDeskError, where: str) -> ApiError:
    return ApiError(400, f"{where}: {exc.user_message}", param=where, code="invalid_image")


def image_from_url(url: Any, where: str) -> dict:
    """An ``image_url``'s URL (a data: URI) as an image content part."""
    if not isinstance(url, str) or not url:
        raise ApiError(400, f"{where} must be a data: URI of an image.", param=where, code="invalid_value")
    if url.lower().startswith(("http://", "https://")):
        return {"type": "image_url", "url": url, "where": where}  # downloaded later, if allowed
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


#: How long a download may take, connecting and reading (seconds).
DOWNLOAD_SECONDS = 10.0


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects to http(s) addresses only (never ftp: or file:)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if not newurl.lower().startswith(("http://", "https://")):
            raise urllib.error.URLError(f"a redirect to {newurl.split(':', 1)[0]}: addresses")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _download(url: str, where: str) -> dict:
    opener = urllib.request.build_opener(_HttpOnlyRedirects)
    request = urllib.request.Request(url, headers={"User-Agent": "QuantDesk"})
    try:
        with opener.open(request, timeout=DOWNLOAD_SECONDS) as response:
            data = response.read(MAX_IMAGE_BYTES + 1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise ApiError(400, f"{where}: the image at {url} could not be downloaded ({reason}).",
                       param=where, code="invalid_image") from None
    if len(data) > MAX_IMAGE_BYTES:
        raise ApiError(400, f"{where}: the image at {url} is larger than "
                            f"{MAX_IMAGE_BYTES // (1024 * 1024)} MB.", param=where, code="invalid_image")
    try:
        check_image(data)
    except QuantDeskError as exc:
        raise _invalid(exc, where) from None
    return {"type": "image", "data": data}


def download_images(messages: list, allowed: bool) -> list:
    """``messages`` with every web-address image part downloaded (``allowed``) or refused."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list) and any(p.get("type") == "image_url" for p in content):
            parts = []
            for part in content:
                if part.get("type") != "image_url":
                    parts.append(part)
                elif not allowed:
                    raise ApiError(400, f"{part['where']} is a web address; this server downloads "
                                        "images only when started with --allow-image-urls. Send the "
                                        "image itself (a data: URI).", param=part["where"],
                                   code="unsupported_content")
                else:
                    parts.append(_download(part["url"], part["where"]))
            message = {**message, "content": parts}
        out.append(message)
    return out


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
