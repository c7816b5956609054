"""The HTTP client under every Hub request: it fails fast when the Hub cannot be reached,
stops when the caller cancels, and is never closed under another thread's feet.

``huggingface_hub`` sends all its requests through one shared ``httpx2.Client``
(``get_session()``), built by a factory that ``huggingface_hub.set_client_factory`` — the
library's supported hook for configuring its HTTP — replaces. :func:`install` puts
QuantDesk's factory there (``models.hub.client`` calls it on import, before any request);
its :class:`HubClient` keeps the library client's hooks and settings and changes three things.

**A connection that cannot be opened fails at once.** The library's ``http_backoff``
(``huggingface_hub/utils/_http.py``: ``list_models``, ``list_repo_tree``,
``get_hf_file_metadata`` … go through it) retries ``httpx2.NetworkError`` and
``TimeoutException`` five times with 1, 2, 4, 8 and 8 s sleeps — about 23 s that no caller
can cut short and that none of its public methods lets us shorten — and on each
``ConnectError`` it calls ``close_session()``, which closes the client other threads are
using at that moment (a download running beside a refused search then dies with "Bad file
descriptor"). :class:`HubClient` re-raises a refused, unroutable, unresolvable or timed-out
connect as :class:`HubUnreachable`: a ``TransportError`` but neither a ``NetworkError`` nor
a ``TimeoutException``, so the library neither retries nor closes anything, and the caller
says "could not reach the Hub" within the connect attempt. Whoever wants retries has its own
(downloads retry with a backoff that cancelling cuts short, see :mod:`models.hub.transfer`).
A dropped connection or a slow answer from a Hub that *was* reached is still the library's
to retry.

**A request made inside** :func:`cancellable` **stops when its token is cancelled**: before
it is sent, and while a socket read waits (checked every :data:`POLL_S`), by raising
:class:`~models.foundation.errors.Cancelled`; the connection it was using is closed, the others in the
pool stay. So a superseded search or a closed page costs no background time. Not
interruptible: the DNS lookup and TCP connect (bounded by the connect timeout), and the
library's sleeps between retries of HTTP 429/5xx answers (the retry itself is then not sent).

**Timeouts the library leaves open** (it passes ``timeout=None``) become :data:`TIMEOUT`, so
a request to a Hub that accepts and never answers ends (after the library's retries, or at
once when cancelled) instead of hanging for ever where nothing can cancel it (the CLI).

Reads become cancellable through an ``httpcore2`` network backend wrapped around each
connection pool's own. ``httpx2.HTTPTransport`` takes no backend argument, so
:func:`_cancel_aware_pools` sets it on the pools the client built — the one place here that
touches private attributes (``Client._transport``/``_mounts``, ``HTTPTransport._pool``,
``ConnectionPool._network_backend``). Without them (another ``httpx2``) everything above
still works except interrupting a read in progress, and a warning is logged.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from typing import Any, Iterator, Optional

import httpcore2
import httpx2

from models.foundation.jobs import CancelToken, check

log = logging.getLogger(__name__)

#: Connect and read/write limits for requests that name none (the library's default is none).
TIMEOUT = httpx2.Timeout(60.0, connect=10.0)
#: How often a socket read waiting inside :func:`cancellable` looks at the token.
POLL_S = 0.2

_CANCEL: contextvars.ContextVar[Optional[CancelToken]] = contextvars.ContextVar("quantdesk_hub_cancel",
                                                                                   default=None)


class HubUnreachable(httpx2.TransportError):
    """No connection to the Hub could be opened (refused, no route, DNS, connect timeout).

    Deliberately not an ``httpx2.NetworkError``/``TimeoutException``: those make
    ``huggingface_hub`` retry for ~23 s and close the shared client (see the module's doc).
    """


@contextlib.contextmanager
def cancellable(cancel: Optional[CancelToken]) -> Iterator[None]:
    """Hub requests made by this thread inside the block stop when ``cancel`` is set.

    They raise :class:`~models.foundation.errors.Cancelled`. ``None`` changes nothing: inside an
    outer block its token still applies.
    """
    if cancel is None:
        yield
        return
    reset = _CANCEL.set(cancel)
    try:
        yield
    finally:
        _CANCEL.reset(reset)


class _CancellableStream(httpcore2.NetworkStream):
    """A connection's socket whose reads give up when the current thread's token is set."""

    def __init__(self, stream: httpcore2.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: Optional[float] = None) -> bytes:
        token = _CANCEL.get()
        if token is None:
            return self._stream.read(max_bytes, timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            token.raise_if_cancelled()
            wait = POLL_S
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:  # (a 0 s socket timeout would mean "non-blocking", not "timed out")
                    raise httpcore2.ReadTimeout("timed out")
                wait = min(wait, left)
            try:
                return self._stream.read(max_bytes, wait)
            except httpcore2.ReadTimeout:
                continue  # a slice ran out, not the caller's timeout: look at the token again

    def write(self, buffer: bytes, timeout: Optional[float] = None) -> None:
        check(_CANCEL.get())
        self._stream.write(buffer, timeout)

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context, server_hostname: Optional[str] = None,
                  timeout: Optional[float] = None) -> "_CancellableStream":
        return _CancellableStream(self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _CancellableBackend(httpcore2.NetworkBackend):
    """Opens connections through ``backend`` and hands out :class:`_CancellableStream` s."""

    def __init__(self, backend: httpcore2.NetworkBackend) -> None:
        self._backend = backend

    def connect_tcp(self, host: str, port: int, timeout: Optional[float] = None,
                    local_address: Optional[str] = None, socket_options=None) -> _CancellableStream:
        check(_CANCEL.get())
        return _CancellableStream(self._backend.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: Optional[float] = None,
                            socket_options=None) -> _CancellableStream:
        check(_CANCEL.get())
        return _CancellableStream(self._backend.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        token = _CANCEL.get()
        if token is None:
            self._backend.sleep(seconds)
        elif token.wait(seconds):
            token.raise_if_cancelled()


def _cancel_aware_pools(client: httpx2.Client) -> bool:
    """Wrap the network backend of each connection pool ``client`` built (direct and proxies).

    The one workaround here: ``httpx2.HTTPTransport`` builds its ``httpcore2`` pool without
    a ``network_backend`` argument, so the backend is swapped on the built pool. False (and
    nothing changed) when this ``httpx2`` keeps its pools elsewhere.
    """
    transports = [getattr(client, "_transport", None), *getattr(client, "_mounts", {}).values()]
    pools = [getattr(t, "_pool", None) for t in transports if isinstance(t, httpx2.HTTPTransport)]
    if not pools or not all(hasattr(p, "_network_backend") for p in pools):
        return False
    for pool in pools:
        if not isinstance(pool._network_backend, _CancellableBackend):
            pool._network_backend = _CancellableBackend(pool._network_backend)
    return True


class HubClient(httpx2.Client):
    """The shared client: refused connections raise :class:`HubUnreachable`, requests inside
    :func:`cancellable` stop on cancel, open timeouts become :data:`TIMEOUT`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not _cancel_aware_pools(self):
            log.warning("this httpx2 keeps its connection pools elsewhere: a Hub read in progress "
                        "cannot be cancelled (requests still stop before they are sent)")

    def send(self, request: httpx2.Request, **kwargs: Any) -> httpx2.Response:
        check(_CANCEL.get())
        limits = dict(request.extensions.get("timeout") or self.timeout.as_dict())
        defaults = TIMEOUT.as_dict()
        request.extensions["timeout"] = {k: defaults.get(k) if v is None else v for k, v in limits.items()}
        try:
            return super().send(request, **kwargs)
        except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
            raise HubUnreachable(str(exc) or type(exc).__name__, request=request) from exc


def _client_factory(template: httpx2.Client):
    """A factory making :class:`HubClient` s with ``template``'s hooks and settings."""
    hooks = {name: list(functions) for name, functions in template.event_hooks.items()}
    follow_redirects, trust_env, headers = template.follow_redirects, template.trust_env, template.headers.copy()

    def factory() -> HubClient:
        return HubClient(event_hooks={name: list(f) for name, f in hooks.items()}, follow_redirects=follow_redirects,
                         trust_env=trust_env, headers=headers, timeout=TIMEOUT)
    return factory


def install() -> None:
    """Make ``huggingface_hub`` build :class:`HubClient` s (idempotent).

    The library's own client is the template, so its request hook (offline mode, request
    ids, download counting), redirects and proxy settings carry over unchanged.
    """
    from huggingface_hub.utils import get_session, set_client_factory

    current = get_session()
    if not isinstance(current, HubClient):
        set_client_factory(_client_factory(current))
