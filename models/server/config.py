"""The API server's settings, and the rule that keeps it safe by default.

It listens on 127.0.0.1. Any other address lets other computers connect, so the server
refuses to start there without an API key (:func:`check_exposure`): a model server
without a key on a network is open to anyone who finds it (the most reported problem
with other local runners).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Optional

from models.foundation.errors import QuantDeskError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class ServerConfig:
    """How the server listens and behaves.

    Attributes:
        host: The address to listen on; 127.0.0.1 (this computer only) by default.
        port: The TCP port; 0 picks a free one (tests).
        api_key: Clients must send it (``Authorization: Bearer`` or ``x-api-key``);
            ``None`` for none, allowed on a loopback address only.
        parallel: Slots per model (requests decoded together); ``None`` sizes it to memory.
        idle_unload_seconds: A model the server loaded is unloaded after this long without
            requests; 0 never.
        cors_origins: Web origins allowed to call the server from a browser; none by default.
        allowed_hosts: Host names accepted besides the loopback names and the bound
            address (a name this computer has on the network, say).
        queue_limit: Requests that may wait for a slot, per model; more are answered 429.
        max_body_bytes: The largest request body accepted (413 past it).
        prompt_cache_ram_mb: RAM for the engine's prompt cache (``None``: the engine's default).
        log_requests: Write one log line per request (``quantdesk serve`` prints it too).
        ollama_port: Also answer Ollama's API on this port (same host; 0 picks a free
            one); ``None``, the default, leaves it off.
        image_urls: Download images that requests give as http(s) addresses (size- and
            time-limited, :mod:`models.server.images`); off by default, so that a request
            cannot make the server reach other machines.
    """

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    api_key: Optional[str] = None
    parallel: Optional[int] = None
    idle_unload_seconds: float = 600.0
    cors_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = field(default_factory=tuple)
    queue_limit: int = 64
    max_body_bytes: int = 8 << 20
    prompt_cache_ram_mb: Optional[int] = None
    log_requests: bool = True
    ollama_port: Optional[int] = None
    image_urls: bool = False


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this computer only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_exposure(config: ServerConfig) -> None:
    """Refuse a configuration that would serve the network without a key.

    Raises:
        QuantDeskError: A non-loopback host and no API key, or an out-of-range setting.
    """
    if not is_loopback(config.host) and not config.api_key:
        raise QuantDeskError(
            f"Serving on {config.host} lets other computers use your models, so it needs an "
            "API key, and none is set.",
            "Set a key (`quantdesk serve --api-key KEY`, or generate one on the Server page), "
            "or serve on 127.0.0.1 for this computer only.")
    if not isinstance(config.port, int) or not 0 <= config.port <= 65535:
        raise QuantDeskError(f"The port {config.port!r} is not a TCP port.",
                             "Choose a port from 1024 to 65535, such as 8080.")
    if config.parallel is not None and (not isinstance(config.parallel, int)
                                        or not 1 <= config.parallel <= 64):
        raise QuantDeskError(f"The number of parallel slots {config.parallel!r} is not 1 to 64.",
                             "Choose 1 to 64 slots, or leave it unset to size it to memory.")
