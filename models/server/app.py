"""The ASGI application: Starlette routes, the safety checks in front of them, and CORS.

Starlette rather than FastAPI: the request bodies are read by our own field readers
(:mod:`.parameters`), which answer every mistake with OpenAI's error object and a
sentence; FastAPI's pydantic validation would answer 422 in its own shape and need
undoing, and its OpenAPI machinery is not wanted here.

In front of every route, :class:`Guard` (plain ASGI middleware) checks:

- the ``Host`` header: a loopback name, the bound address, a name given in
  ``allowed_hosts``, or an IP address. A web page can reach a local server only through
  a host *name* it controls that resolves to 127.0.0.1 (DNS rebinding); such a name is
  refused with 403, so the page cannot read the replies;
- the API key, when one is set: ``Authorization: Bearer KEY`` or ``x-api-key: KEY``,
  compared in constant time (:func:`hmac.compare_digest`); ``/health`` needs none.

CORS is off unless origins are listed (Starlette's ``CORSMiddleware``, outermost, so a
browser's preflight is answered before the key check).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hmac
import ipaddress
import logging
import socket
from typing import Any, Optional

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from models.server import anthropic_api, ollama_api, openai_api, responses_api
from models.server.config import LOOPBACK_NAMES
from models.server.core import ServerCore, error_response, run_blocking
from models.server.errors import ApiError, internal_error

log = logging.getLogger(__name__)

WORKER_THREADS = 32
OPEN_PATHS = ("/health",)  # answered without a key (load balancers, the Server page)


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port (``[::1]:8080`` → ``::1``)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def allowed_host_names(bound: str, extra: tuple[str, ...] = ()) -> set[str]:
    """The host names the server answers to besides IP addresses."""
    names = {*LOOPBACK_NAMES, bound.lower().strip("[]"), *(h.lower() for h in extra)}
    if bound in ("0.0.0.0", "::", ""):  # every interface: the names this computer goes by
        hostname = socket.gethostname().lower()
        names |= {hostname, f"{hostname}.local", socket.getfqdn().lower()}
    return names


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


class Guard:
    """ASGI middleware: the Host allow-list, then the API key."""

    def __init__(self, app: Any, core: ServerCore) -> None:
        self.app = app
        self.core = core
        config = core.config
        self.key = config.api_key.encode("utf-8") if config.api_key else None
        self.names = allowed_host_names(config.host, config.allowed_hosts)

    def host_allowed(self, header: str) -> bool:
        name = host_name(header)
        return not name or _is_ip(name) or name in self.names or name.endswith(".localhost")

    def key_given(self, request: Request) -> bool:
        given = request.headers.get("x-api-key", "")
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            given = credentials.strip()
        return self.key is not None and hmac.compare_digest(given.encode("utf-8"), self.key)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        error = None
        host = request.headers.get("host", "")
        if not self.host_allowed(host):
            error = ApiError(403, f"This server does not answer to the host name "
                                  f"{host_name(host)!r}: a web page may be trying to reach it "
                                  "through DNS rebinding. Use the address the server printed "
                                  "(such as http://127.0.0.1), or allow the name in the "
                                  "server's settings.", code="host_not_allowed")
        elif self.key is not None and scope["path"] not in OPEN_PATHS \
                and scope["method"] != "OPTIONS" and not self.key_given(request):
            error = ApiError(401, "This server needs an API key: send it as `Authorization: "
                                  "Bearer KEY` (the OpenAI clients' api_key) or `x-api-key: "
                                  "KEY`. The key sent is missing or wrong.",
                             code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
        if error is None:
            await self.app(scope, receive, send)
            return
        fields = self.core.request_log_fields(request)
        self.core.log_request(dict(fields, status=error.status, error=error.message))
        await error_response(error)(scope, receive, send)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = (f"There is no endpoint {request.url.path}. This server offers GET /health, "
                   "GET /v1/models, POST /v1/chat/completions, POST /v1/completions, "
                   "POST /v1/responses, POST /v1/embeddings and POST /v1/messages.")
    elif exc.status_code == 405:
        message = f"{request.url.path} does not accept {request.method} requests."
    else:
        message = str(exc.detail)
    return error_response(ApiError(exc.status_code, message, code="not_found"
                                   if exc.status_code == 404 else None))


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("server: %s %s failed", request.method, request.url.path, exc_info=exc)
    return error_response(internal_error())


class PortDispatch:
    """ASGI: requests that arrive on the Ollama port go to the Ollama application, the
    rest (and the lifespan) to the main one."""

    def __init__(self, main: Any, ollama: Any, ollama_port: int) -> None:
        self.main = main
        self.ollama = ollama
        self.ollama_port = ollama_port

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        server = scope.get("server") or ("", None)
        if scope["type"] == "http" and server[1] == self.ollama_port:
            await self.ollama(scope, receive, send)
        else:
            await self.main(scope, receive, send)


def build_app(core: ServerCore, ollama_port: Optional[int] = None) -> Any:
    """The server's ASGI application for ``core``; with ``ollama_port``, requests on that
    port are answered by Ollama's API (:mod:`.ollama_api`) instead."""

    async def health(request: Request, log_fields: dict) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        async def unload_idle() -> None:
            period = max(1.0, min(30.0, core.pool.idle_unload_seconds / 4 or 30.0))
            while True:
                await asyncio.sleep(period)
                await run_blocking(core.pool.unload_idle)

        # Model loads and library scans run in the loop's worker threads: more than the
        # default (CPU count + 4), so a slow load never holds up other requests.
        asyncio.get_running_loop().set_default_executor(
            concurrent.futures.ThreadPoolExecutor(WORKER_THREADS, "quantdesk-server-worker"))
        task = asyncio.ensure_future(unload_idle())
        try:
            yield
        finally:
            task.cancel()

    middleware = []
    if core.config.cors_origins:
        middleware.append(Middleware(CORSMiddleware, allow_origins=list(core.config.cors_origins),
                                     allow_methods=["GET", "POST", "OPTIONS"],
                                     allow_headers=["Authorization", "Content-Type",
                                                    "x-api-key"]))
    middleware.append(Middleware(Guard, core=core))
    handlers = {HTTPException: _http_error, Exception: _unexpected}
    main = Starlette(routes=[Route("/health", core.endpoint(health), methods=["GET"]),
                             *openai_api.routes(core), *responses_api.routes(core),
                             *anthropic_api.routes(core)],
                     middleware=middleware, lifespan=lifespan, exception_handlers=handlers)
    if ollama_port is None:
        return main
    ollama = Starlette(routes=ollama_api.routes(core), middleware=middleware,
                       exception_handlers=handlers)
    return PortDispatch(main, ollama, ollama_port)
