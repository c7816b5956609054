"""Bytes between this computer and its workers: what a split costs the network.

A model split across computers sends, for every token, the activations at each border
between devices (one row of ``n_embd`` floats per token and border) plus the graph
description and small results, over TCP; at load, it sends the weights the workers hold
(unless a worker's cache already has them). ``quantdesk bench --remote`` measures that
traffic from the kernel's own counters of the engine's TCP connections to the workers
(``ss -ti``: ``bytes_sent`` and ``bytes_received`` per connection; Linux). Through an
SSH tunnel the counted connection is the one to ssh's local end: the bytes llama.cpp
sends, before ssh's encryption and compression.
"""

from __future__ import annotations

import re
import socket
import subprocess
from dataclasses import dataclass
from typing import Optional, Sequence

from models.foundation.system_programs import find_program, system_environment

_BYTES = re.compile(r"\bbytes_(sent|received):(\d+)")


@dataclass(frozen=True)
class Traffic:
    """Bytes sent to and received from the workers."""

    sent: int = 0
    received: int = 0

    @property
    def total(self) -> int:
        return self.sent + self.received

    def __sub__(self, other: "Traffic") -> "Traffic":
        return Traffic(self.sent - other.sent, self.received - other.received)


def _numeric(endpoint: str) -> tuple[str, str]:
    host, port = endpoint.rsplit(":", 1)
    try:
        host = socket.gethostbyname(host)
    except OSError:
        pass
    return host, port


def connection_traffic(endpoints: Sequence[str]) -> Optional[Traffic]:
    """Bytes so far on the open TCP connections to ``endpoints`` (``host:port``), from
    ``ss``; ``None`` where ``ss`` is missing (not Linux) or says nothing usable."""
    ss = find_program("ss")
    if ss is None:
        return None
    sent = received = 0
    seen = False
    for endpoint in endpoints:
        host, port = _numeric(endpoint)
        try:
            output = subprocess.run([ss, "-tinH", "state", "established", "dst", f"{host}:{port}"],
                                    capture_output=True, text=True, timeout=10, check=False,
                                    env=system_environment()).stdout
        except (OSError, subprocess.SubprocessError):
            return None
        for kind, value in _BYTES.findall(output):
            seen = True
            if kind == "sent":
                sent += int(value)
            else:
                received += int(value)
    return Traffic(sent, received) if seen else None
