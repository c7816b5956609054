"""The "remote devices" a user writes, parsed: ``host:port`` or ``ssh://user@host``.

Two forms:

- ``HOST:PORT`` (or ``HOST``, port 50052, the port ``quantdesk worker`` and llama.cpp's
  ``rpc-server`` listen on by default): a worker reached directly. Fine on this computer
  (``127.0.0.1:50052``) or a network the user trusts; llama.cpp's RPC has no
  authentication or encryption.
- ``ssh://[USER@]HOST[:SSH_PORT][/WORKER_PORT]``: a worker listening on 127.0.0.1 of
  ``HOST``, reached through an SSH tunnel that QuantDesk opens with the system's ``ssh``
  for as long as the model is loaded. The worker's port is never exposed.

Nothing here opens a connection; :mod:`models.rpc.probe` and :mod:`models.rpc.tunnel` do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Optional

from models.foundation.errors import QuantDeskError

DEFAULT_WORKER_PORT = 50052

#: llama.cpp's ``GGML_RPC_MAX_SERVERS`` (ggml-rpc.h).
MAX_REMOTE_DEVICES = 16

_HOST = r"[A-Za-z0-9](?:[A-Za-z0-9.\-]*[A-Za-z0-9])?"
_DIRECT = re.compile(rf"^(?P<host>{_HOST})(?::(?P<port>\d+))?$")
_SSH = re.compile(rf"^ssh://(?:(?P<user>[A-Za-z0-9._\-]+)@)?(?P<host>{_HOST})"
                  rf"(?::(?P<ssh_port>\d+))?(?:/(?P<port>\d+))?/?$")

_FORMS = ("Write HOST:PORT (a worker on this computer or a trusted network, e.g. "
          "127.0.0.1:50052) or ssh://USER@HOST (a worker on another computer, reached through "
          "an SSH tunnel; ssh://USER@HOST:SSH_PORT/WORKER_PORT for other ports).")


@dataclass(frozen=True)
class RemoteDevice:
    """One worker the user listed.

    Attributes:
        text: The entry as written (for sentences that name it).
        host: Where the worker is (for ``ssh://``: the computer SSH logs in to).
        port: The worker's TCP port (for ``ssh://``: on that computer's 127.0.0.1).
        ssh_user: The SSH login, or ``None`` for ssh's default.
        ssh_port: The SSH port, or ``None`` for ssh's default.
        via_ssh: Whether the worker is reached through an SSH tunnel.
    """

    text: str
    host: str
    port: int
    via_ssh: bool = False
    ssh_user: Optional[str] = None
    ssh_port: Optional[int] = None

    @property
    def ssh_destination(self) -> str:
        """``user@host`` (or ``host``), as ssh takes it."""
        return f"{self.ssh_user}@{self.host}" if self.ssh_user else self.host

    @property
    def loopback(self) -> bool:
        """A direct entry on this computer (nothing crosses a network)."""
        return not self.via_ssh and (self.host == "localhost" or self.host.startswith("127."))


def _port(value: Optional[str], entry: str, default: Optional[int]) -> Optional[int]:
    if value is None:
        return default
    port = int(value)
    if not 1 <= port <= 65535:
        raise QuantDeskError(f"The remote device {entry!r} names port {port}, which is not "
                             "a TCP port (1 to 65535).", _FORMS)
    return port


def parse_remote_device(entry: str) -> RemoteDevice:
    """One entry parsed.

    Raises:
        QuantDeskError: The entry is in neither form.
    """
    text = entry.strip()
    if match := _SSH.match(text):
        return RemoteDevice(text, match["host"], _port(match["port"], text, DEFAULT_WORKER_PORT),
                            via_ssh=True, ssh_user=match["user"],
                            ssh_port=_port(match["ssh_port"], text, None))
    if match := _DIRECT.match(text):
        return RemoteDevice(text, match["host"], _port(match["port"], text, DEFAULT_WORKER_PORT))
    raise QuantDeskError(f"The remote device {text!r} is not in a form QuantDesk reads.", _FORMS)


def parse_remote_devices(entries: Iterable[str] | str) -> tuple[RemoteDevice, ...]:
    """Entries parsed, from a list or from text separated by commas or line breaks.

    Raises:
        QuantDeskError: An entry is malformed, listed twice, or there are more than
            llama.cpp takes.
    """
    if isinstance(entries, str):
        entries = re.split(r"[,\n]", entries)
    devices = tuple(parse_remote_device(e) for e in entries if e.strip())
    seen: set[tuple] = set()
    for device in devices:
        key = (device.via_ssh, device.host, device.port, device.ssh_port)
        if key in seen:
            raise QuantDeskError(f"The remote device {device.text!r} is listed twice.",
                                 "List each worker once.")
        seen.add(key)
    if len(devices) > MAX_REMOTE_DEVICES:
        raise QuantDeskError(f"{len(devices)} remote devices were listed; llama.cpp takes at "
                             f"most {MAX_REMOTE_DEVICES}.", "List fewer workers.")
    return devices
