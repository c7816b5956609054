"""What the window remembers about its local API server: on or off, port, slots, idle time,
whether it serves the local network, and whether it also answers Ollama's API (and on
which port).

Qt-free, on top of :class:`app.core.preferences.Preferences` (key ``"server"``: the
fields of :class:`ServerSettings`). The window's Server page edits them and, when the
server was on when the window closed, starts it again with the window. The API key is
not here: it is a secret, kept in its own 0600 file by :mod:`models.server.api_key`.
"""

from __future__ import annotations

import socket
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Optional

SERVER_KEY = "server"

LOOPBACK_HOST = "127.0.0.1"
#: Every interface: what "serve on the local network" listens on.
NETWORK_HOST = "0.0.0.0"

DEFAULT_PORT = 8080
#: Ollama's own port: clients that speak only Ollama's API look there first.
DEFAULT_OLLAMA_PORT = 11434
MIN_PORT = 1024  # below it a port needs administrator rights on most systems
MAX_PORT = 65535
MAX_PARALLEL = 64
#: Ten minutes: a model a client used recently stays loaded across a pause in its work.
DEFAULT_IDLE_UNLOAD_MINUTES = 10


@dataclass(frozen=True)
class ServerSettings:
    """The server's settings as the person chose them.

    Attributes:
        enabled: The server was on (it starts with the window).
        port: The TCP port it listens on.
        network: Listen on every interface (the local network), not only this computer.
        parallel: Requests served at once per model; 0 lets the server size it to memory.
        idle_unload_minutes: Unload a model after this long without requests; 0 never.
        ollama: Also answer Ollama's API (``/api/chat``, ``/api/tags``…), off by default.
        ollama_port: The port Ollama's API listens on (same address as the server).
    """

    enabled: bool = False
    port: int = DEFAULT_PORT
    network: bool = False
    parallel: int = 0
    idle_unload_minutes: int = DEFAULT_IDLE_UNLOAD_MINUTES
    ollama: bool = False
    ollama_port: int = DEFAULT_OLLAMA_PORT

    @property
    def host(self) -> str:
        """The address to bind: loopback, or every interface when serving the network."""
        return NETWORK_HOST if self.network else LOOPBACK_HOST

    @classmethod
    def from_dict(cls, values: Any) -> "ServerSettings":
        """Settings from a stored dict; a missing, unknown or out-of-range value is the default
        (a hand-edited preferences file never stops the window from opening)."""
        values = values if isinstance(values, dict) else {}
        default = cls()
        kept: dict[str, Any] = {}
        for field in fields(cls):
            value = values.get(field.name)
            wanted = type(getattr(default, field.name))
            if isinstance(value, wanted) and (wanted is bool or not isinstance(value, bool)):
                kept[field.name] = value
        settings = replace(default, **kept)
        if not MIN_PORT <= settings.port <= MAX_PORT:
            settings = replace(settings, port=DEFAULT_PORT)
        if not MIN_PORT <= settings.ollama_port <= MAX_PORT:
            settings = replace(settings, ollama_port=DEFAULT_OLLAMA_PORT)
        if not 0 <= settings.parallel <= MAX_PARALLEL:
            settings = replace(settings, parallel=0)
        if settings.idle_unload_minutes < 0:
            settings = replace(settings, idle_unload_minutes=DEFAULT_IDLE_UNLOAD_MINUTES)
        return settings

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_server_settings(preferences=None) -> ServerSettings:
    """The remembered settings (the defaults when none are stored)."""
    prefs = _preferences(preferences)
    return ServerSettings.from_dict(prefs.get(SERVER_KEY) if prefs is not None else None)


def save_server_settings(settings: ServerSettings, preferences=None) -> None:
    """Remember ``settings``.

    Raises:
        QuantDeskError: The preferences file cannot be written.
    """
    prefs = _preferences(preferences)
    if prefs is not None:
        prefs.set(SERVER_KEY, settings.to_dict())


def lan_address() -> Optional[str]:
    """This computer's address on its local network (the one other computers reach it by),
    or ``None`` when it has no network.

    A UDP socket "connected" to a private address makes the system choose the interface it
    would route through; no packet is sent.
    """
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.254.254.254", 1))
        address = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith(("0.", "127.")) else address


def _preferences(preferences=None):
    if preferences is not None:
        return preferences
    from app.core.preferences import Preferences
    from models.foundation.errors import QuantDeskError

    try:
        return Preferences()
    except QuantDeskError:
        return None
