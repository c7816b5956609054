"""The remote devices of one loaded model, as the app's process holds them.

:class:`RemoteSession` is opened by the engine client before a load: it opens an SSH
tunnel for each ``ssh://`` entry, does the RPC handshake with every worker
(:mod:`models.rpc.probe`), and hands the engine the ``host:port`` endpoints llama.cpp must
connect to. It is closed when the model unloads (the tunnels end with it).

When the engine process dies while a model on remote devices works, the likely cause is a
worker that went away: llama.cpp's RPC client aborts the process on a lost connection
(``RPC_STATUS_ASSERT`` in ``ggml-rpc.cpp``). :meth:`RemoteSession.diagnose` asks every
worker again and returns the sentence naming the one that no longer answers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional, Sequence

from models.foundation.errors import QuantDeskError
from models.rpc.endpoints import RemoteDevice, parse_remote_devices
from models.rpc.probe import WorkerInfo, probe_worker
from models.rpc.tunnel import SshTunnel

log = logging.getLogger(__name__)

#: Seconds a worker gets to answer the check after a crash.
DIAGNOSE_TIMEOUT = 3.0


@dataclass(frozen=True)
class ConnectedWorker:
    """A worker ready for llama.cpp: the entry, the address to use, what it said."""

    device: RemoteDevice
    endpoint: str
    info: WorkerInfo
    tunnel: Optional[SshTunnel] = None


class RemoteSession:
    """Tunnels and handshakes for a list of remote devices.

    Args:
        entries: Remote devices as the user wrote them (``host:port``, ``ssh://...``).

    Raises:
        QuantDeskError: An entry is malformed, a tunnel cannot open, or a worker is
            unreachable or of another build (what is already open is closed again).
    """

    def __init__(self, entries: Sequence[str]) -> None:
        self.workers: list[ConnectedWorker] = []
        try:
            for device in parse_remote_devices(entries):
                self.workers.append(self._connect(device))
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _connect(device: RemoteDevice) -> ConnectedWorker:
        if device.via_ssh:
            tunnel = SshTunnel(device)
            assert tunnel.info is not None
            return ConnectedWorker(device, tunnel.endpoint, tunnel.info, tunnel)
        info = probe_worker(device.host, device.port, device.text)
        return ConnectedWorker(device, f"{device.host}:{device.port}", info)

    @property
    def endpoints(self) -> list[str]:
        """``host:port`` of each worker, in the user's order, for llama.cpp."""
        return [w.endpoint for w in self.workers]

    @property
    def device_count(self) -> int:
        """Devices all workers offer together."""
        return sum(w.info.device_count for w in self.workers)

    def device_memory(self) -> list[tuple[str, int, int]]:
        """``(name, free, total)`` of each remote device, in llama.cpp's order."""
        return [(f"{w.device.text} #{i}" if w.info.device_count > 1 else w.device.text, free, total)
                for w in self.workers for i, (free, total) in enumerate(w.info.memory)]

    def name_of(self, endpoint: str) -> str:
        """The entry the user wrote for an endpoint llama.cpp knows."""
        for worker in self.workers:
            if worker.endpoint == endpoint:
                return worker.device.text
        return endpoint

    def diagnose(self) -> Optional[str]:
        """Which worker stopped answering, as a sentence; ``None`` when all answer."""
        for worker in self.workers:
            name = worker.device.text
            if worker.tunnel is not None and not worker.tunnel.alive():
                return f"the SSH tunnel to the worker {name} closed"
            host, port = worker.endpoint.rsplit(":", 1)
            try:
                probe_worker(host, int(port), name, timeout=DIAGNOSE_TIMEOUT)
            except QuantDeskError as exc:
                log.info("remote device %s after the engine stopped: %s", name, exc.what)
                return f"the worker {name} stopped answering"
        return None

    def close(self) -> None:
        """End the tunnels."""
        for worker in self.workers:
            if worker.tunnel is not None:
                worker.tunnel.close()
        self.workers = []
