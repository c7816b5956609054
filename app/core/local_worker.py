"""A worker on this computer, started and stopped by the window (Settings page).

The same server as ``quantdesk worker`` (:func:`models.rpc.worker.serve`) in a child
process of its own: the RPC server blocks inside llama.cpp forever and llama.cpp may
abort its process, so neither may happen in the window's process. Started with
``multiprocessing``'s ``spawn`` context, like the engine, so it works the same from a
source install and from the frozen bundle. Qt-free: the page calls :meth:`start`,
:meth:`stop` and reads :attr:`running`.
"""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import dataclass
from typing import Optional

from models.foundation.errors import QuantDeskError
from models.rpc.endpoints import DEFAULT_WORKER_PORT
from models.rpc.worker import LOOPBACK


def _worker_main(host: str, port: int, threads: Optional[int]) -> None:
    """The child process: serve until terminated."""
    from models.foundation.logs import setup_logging
    from models.foundation.paths import app_paths
    from models.rpc.worker import serve

    setup_logging()
    serve(host, port, None, threads, app_paths().cache / "rpc-worker")


@dataclass(frozen=True)
class WorkerStatus:
    """What the Settings page shows."""

    running: bool
    address: str
    sentence: str


class LocalWorker:
    """One worker process on this computer (at most one at a time)."""

    def __init__(self) -> None:
        self._process: Optional[multiprocessing.process.BaseProcess] = None
        self.host = LOOPBACK
        self.port = DEFAULT_WORKER_PORT

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.is_alive()

    def start(self, port: int = DEFAULT_WORKER_PORT, host: str = LOOPBACK,
              threads: Optional[int] = None, ready_timeout: float = 30.0) -> WorkerStatus:
        """Start the worker and wait until it answers the RPC handshake.

        Raises:
            QuantDeskError: It ended at once (the port is taken...) or never answered.
        """
        from models.rpc.probe import probe_worker

        self.stop()
        self.host, self.port = host, port
        process = multiprocessing.get_context("spawn").Process(
            target=_worker_main, args=(host, port, threads), name="quantdesk-worker", daemon=True)
        process.start()
        self._process = process
        deadline = time.monotonic() + ready_timeout
        probe_host = LOOPBACK if host in ("0.0.0.0", "") else host
        while True:
            if not process.is_alive():
                self._process = None
                raise QuantDeskError(
                    f"The worker could not start on {host}:{port} (it exited with status "
                    f"{process.exitcode}); another program may use that port.",
                    "Choose another port, or stop the program that uses it.")
            try:
                probe_worker(probe_host, port, f"{host}:{port}", timeout=2.0)
                return self.status()
            except QuantDeskError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise QuantDeskError(f"The worker on {host}:{port} did not answer within "
                                         f"{ready_timeout:g} seconds.",
                                         "The log file has llama.cpp's messages.") from None
                time.sleep(0.2)

    def stop(self) -> None:
        """End the worker (a model using it on another computer loses it)."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.is_alive():
            process.terminate()
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)

    def status(self) -> WorkerStatus:
        """A sentence about the worker for the page."""
        from models.rpc.worker import listening_sentence

        address = f"{self.host}:{self.port}"
        if not self.running:
            return WorkerStatus(False, address, "No worker is running on this computer.")
        return WorkerStatus(True, address, listening_sentence(self.host, self.port))
