"""Start and stop the server from the window or the ``quantdesk serve`` command.

:class:`ServerController` runs uvicorn in a background thread with its own event loop.
The listening socket is bound here, before uvicorn starts, so a port in use is a
sentence from :meth:`~ServerController.start` (and port 0 picks a free port, whose number
:attr:`~ServerController.address` then reports).
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
from typing import Any, Callable, Optional

from models.foundation.errors import QuantDeskError
from models.server.catalog import served_models
from models.server.config import ServerConfig, check_exposure
from models.server.engine_pool import EnginePool, ModelStatus
from models.server.request_log import RequestLogEntry

log = logging.getLogger(__name__)

START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0


def _bind(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise QuantDeskError(f"The address {host} is not one this computer can serve on "
                             f"({exc.strerror}).",
                             "Use 127.0.0.1, 0.0.0.0 (every network) or one of this computer's "
                             "addresses.") from exc
    family, _, _, _, address = infos[0]
    # The protocol must be named: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on
    # sockets whose ``proto`` is IPPROTO_TCP, and accepted connections inherit it. With Nagle
    # on, a response's body waits for the client's delayed ACK of its header: 40 ms a request
    # on a kept-alive connection.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise QuantDeskError(f"Port {port} on {host} is already in use by another program "
                                 "(another server, or QuantDesk running twice).",
                                 "Choose another port, or stop the other program.") from exc
        raise QuantDeskError(f"The server cannot listen on {host}:{port} ({exc.strerror}).",
                             "Choose another address or a port above 1024.") from exc
    sock.set_inheritable(True)
    return sock


class ServerController:
    """The API server, running in a background thread.

    Args:
        config: Address, key, slots and limits.
        engines: The engine pool (shared with the window's Chat page), made with the
            config's slots, idle time and prompt cache.
        library: The models offered (default: the app's Library).
    """

    def __init__(self, config: ServerConfig, engines: EnginePool,
                 library: Any = None) -> None:
        self.config = config
        self.engines = engines
        self.library = library
        self._listeners: list[Callable[[RequestLogEntry], None]] = []
        self._server: Any = None
        self._thread: Optional[threading.Thread] = None
        self._core: Any = None
        self._port = config.port
        self.ollama_port: Optional[int] = None  # where Ollama's API listens, when on
        self._stop_lock = threading.Lock()

    # -- the request log --------------------------------------------------------------

    def add_listener(self, callback: Callable[[RequestLogEntry], None]) -> None:
        """Call ``callback(entry)`` after each request (from a server thread)."""
        self._listeners.append(callback)

    def remove_listener(self, callback: Callable[[RequestLogEntry], None]) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    def _notify(self, entry: RequestLogEntry) -> None:
        for callback in list(self._listeners):
            try:
                callback(entry)
            except Exception:
                log.exception("server: a request-log listener failed")

    # -- running ----------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def address(self) -> str:
        """The base URL clients use, such as ``http://127.0.0.1:8080``."""
        host = self.config.host
        if host in ("0.0.0.0", "::", ""):
            host = socket.gethostname()
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self._port}"

    @property
    def port(self) -> int:
        return self._port

    def start(self) -> None:
        """Start serving; returns once the server listens.

        Raises:
            QuantDeskError: A network address without a key, the port in use, or the
                server could not start.
        """
        import uvicorn

        from models.server.app import build_app
        from models.server.core import ServerCore

        if self.running:
            return
        check_exposure(self.config)
        sock = _bind(self.config.host, self.config.port)
        self._port = sock.getsockname()[1]
        sockets = [sock]
        self.ollama_port = None
        if self.config.ollama_port is not None:
            try:
                sockets.append(_bind(self.config.host, self.config.ollama_port))
            except QuantDeskError:
                sock.close()
                raise
            self.ollama_port = sockets[1].getsockname()[1]
        if self.library is None:
            from models.library import Library

            self.library = Library()
        self._core = ServerCore(self.config, self.engines, self.library, on_log=self._notify)
        uv_config = uvicorn.Config(build_app(self._core, self.ollama_port), log_config=None,
                                   access_log=False,
                                   lifespan="on", timeout_graceful_shutdown=5,
                                   h11_max_incomplete_event_size=64 * 1024)
        server = uvicorn.Server(uv_config)
        failure: list[BaseException] = []

        def serve() -> None:
            try:
                server.run(sockets=sockets)
            except BaseException as exc:  # uvicorn exits with SystemExit on startup errors
                failure.append(exc)
                log.exception("server: uvicorn stopped")
            finally:
                for each in sockets:
                    each.close()

        self._server = server
        self._thread = threading.Thread(target=serve, name="quantdesk-server", daemon=True)
        self._thread.start()
        while not server.started and self._thread.is_alive():
            self._thread.join(0.02)
            if not server.started and not self._thread.is_alive():
                break
        if not server.started:
            self._thread.join(START_TIMEOUT)
            self._thread = None
            raise QuantDeskError(f"The API server could not start on {self.address}"
                                 f"{f' ({failure[0]})' if failure else ''}.",
                                 "The QuantDesk log file has the details.")
        log.info("server: listening on %s", self.address)

    def stop(self) -> None:
        """Stop serving: replies in progress end with an error; returns when stopped."""
        with self._stop_lock:
            server, thread = self._server, self._thread
            if server is None:
                return
            if self._core is not None:
                self._core.cancel_all()
            server.should_exit = True
            if thread is not None:
                thread.join(STOP_TIMEOUT)
                if thread.is_alive():
                    server.force_exit = True
                    thread.join(STOP_TIMEOUT)
            self._server = self._thread = None
            log.info("server: stopped")

    def close(self) -> None:
        """Stop serving and unload the models the server loaded."""
        self.stop()
        self.engines.close()

    # -- what the Server page shows ---------------------------------------------------

    def models_status(self) -> list[ModelStatus]:
        """Every model the library offers, loaded or not, with its slots and load."""
        if self.library is None:
            from models.library import Library

            self.library = Library()
        statuses = []
        for model in served_models(self.library):
            entry = self.engines.peek(model.path)
            if entry is None:
                statuses.append(ModelStatus(model.id, model.path, False, 0, 0, 0, 0))
            else:
                statuses.append(ModelStatus(model.id, model.path, True, entry.slots,
                                            entry.context_per_slot, entry.active,
                                            entry.queued))
        return statuses
