"""Errors as the OpenAI API returns them: ``{"error": {"message", "type", "param", "code"}}``.

Every failure a client can see is an :class:`ApiError` with an HTTP status and a sentence
a person understands; :func:`from_quantdesk_error` turns the app's own
:class:`~models.foundation.errors.QuantDeskError` sentences into one. Nothing here ever carries a
traceback: unexpected exceptions become a 500 saying to look at the log.
"""

from __future__ import annotations

from typing import Optional

from models.foundation.errors import QuantDeskError

# The OpenAI ``type`` for each status this server uses.
_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error",
          429: "rate_limit_error", 500: "server_error", 501: "invalid_request_error",
          503: "server_error"}


class ApiError(Exception):
    """A request that ends with an error response.

    Args:
        status: The HTTP status.
        message: The sentence for the client.
        param: The request field at fault, if one is.
        code: A short machine-readable code (``model_not_found``...).
        headers: Extra response headers (``Retry-After``).
    """

    def __init__(self, status: int, message: str, param: Optional[str] = None,
                 code: Optional[str] = None, headers: Optional[dict[str, str]] = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict:
        """The JSON body (also the payload of an error event in a stream)."""
        return {"error": {"message": self.message,
                          "type": _TYPES.get(self.status, "invalid_request_error"
                                             if self.status < 500 else "server_error"),
                          "param": self.param, "code": self.code}}


def from_quantdesk_error(error: QuantDeskError, status: int = 400,
                         code: Optional[str] = None, param: Optional[str] = None) -> ApiError:
    """The app's sentence (what went wrong and what to do) as an API error."""
    return ApiError(status, error.user_message, param=param, code=code)


def internal_error() -> ApiError:
    """What a client sees of a bug: no details, which go to the server's log."""
    return ApiError(500, "The server failed while handling this request; the QuantDesk log "
                         "file has the details.", code="internal_error")
