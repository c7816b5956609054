"""``quantdesk worker``: llama.cpp's RPC server on this computer's devices.

:func:`serve` runs ``ggml_backend_rpc_start_server`` from the ``libggml-rpc`` that
llama-cpp-python ships (the same build as the ``libllama`` QuantDesk loads models with),
through ctypes. It never returns: the server accepts one client at a time, forever, and
the process ends by a signal. So it always runs in a process of its own: the
``quantdesk worker`` command, or a child the Settings page starts
(:class:`app.core.local_worker.LocalWorker`).

The C signature (``ggml-rpc.h`` of the pinned llama.cpp)::

    void ggml_backend_rpc_start_server(const char * endpoint, const char * cache_dir,
                                       size_t n_threads, size_t n_devices,
                                       ggml_backend_dev_t * devices);

Devices: by default this computer's GPUs, or the CPU when it has none (llama.cpp's own
``rpc-server`` does the same: a worker offering its CPU beside a GPU would get most
layers, because a split follows free memory and RAM is larger). ``cache_dir`` lets the
worker keep the weights it received on disk by hash, so loading the same model again sends
hashes instead of gigabytes.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from models.foundation.errors import QuantDeskError
from models.rpc.endpoints import DEFAULT_WORKER_PORT
from models.rpc.probe import PROTOCOL_VERSION

LOOPBACK = "127.0.0.1"

NETWORK_WARNING = (
    "Warning: this worker listens on {host}, so every computer that can reach port {port} "
    "can use it: llama.cpp's RPC protocol has no password and no encryption, and a client "
    "can read what the worker holds and make it compute anything. Use it only on a network "
    "you trust; between computers, prefer the default 127.0.0.1 with an ssh:// remote device "
    "on the loading side, which reaches the worker through an SSH tunnel.")


@dataclass(frozen=True)
class BuildId:
    """Which llama.cpp a worker or client is: both sides of a split must match."""

    ggml_version: str
    ggml_commit: str
    protocol: tuple[int, int, int]

    def text(self) -> str:
        return (f"llama.cpp ggml {self.ggml_version} (commit {self.ggml_commit}), RPC protocol "
                f"{'.'.join(map(str, self.protocol))}")


def build_id() -> BuildId:
    """This installation's llama.cpp build, from ``ggml_version()``/``ggml_commit()``."""
    from models.llama_lib import ggml_api

    ggml = ggml_api()
    return BuildId(ggml.ggml_version().decode(), ggml.ggml_commit().decode(), PROTOCOL_VERSION)


def _start_server_function():
    """``ggml_backend_rpc_start_server`` from the RPC backend (registry proc address)."""
    from models.rpc.devices import ggml_registry

    ggml = ggml_registry()
    rpc = ggml.ggml_backend_reg_by_name(b"RPC")
    address = ggml.ggml_backend_reg_get_proc_address(rpc, b"ggml_backend_rpc_start_server") \
        if rpc else None
    if not address:
        raise QuantDeskError(
            "This QuantDesk's llama.cpp was built without the RPC backend, so it cannot be a "
            "worker.", "Reinstall QuantDesk (packaging/install.sh builds llama.cpp with "
            "GGML_RPC=ON); `quantdesk doctor` says whether RPC is available.")
    return ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                            ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p))(address)


def choose_devices(wanted: Optional[Sequence[str]] = None) -> list[tuple[int, str]]:
    """The devices to offer: those named (``CPU``, ``CUDA0``...), else the GPUs, else the CPU.

    Raises:
        QuantDeskError: A named device does not exist here.
    """
    from models.rpc.devices import local_devices

    devices = local_devices()
    if wanted:
        by_name = {name.lower(): (pointer, name) for pointer, name, _ in devices}
        chosen = []
        for name in wanted:
            if name.lower() not in by_name:
                raise QuantDeskError(f"This computer has no device {name!r}.",
                                     f"Choose from {', '.join(n for _, n, _ in devices)}.")
            chosen.append(by_name[name.lower()])
        return chosen
    gpus = [(p, n) for p, n, kind in devices if kind == "GPU"]
    return gpus or [(p, n) for p, n, kind in devices if kind == "CPU"][:1]


def is_loopback(host: str) -> bool:
    return host == "localhost" or host.startswith("127.")


def listening_sentence(host: str, port: int) -> str:
    """Where the worker listens and how the loading side names it."""
    if is_loopback(host):
        suffix = "" if port == DEFAULT_WORKER_PORT else f"/{port}"
        return (f"Listening on {host}:{port} (this computer only). From another computer, add "
                f"the remote device ssh://USER@THIS-COMPUTER{suffix} (an SSH tunnel); on this "
                f"computer, {host}:{port}.")
    where = "THIS-COMPUTER'S-ADDRESS" if host in ("0.0.0.0", "::") else host
    return (f"Listening on {host}:{port}. On the loading computer, add the remote device "
            f"{where}:{port}.")


def serve(host: str = LOOPBACK, port: int = DEFAULT_WORKER_PORT,
          devices: Optional[Sequence[str]] = None, threads: Optional[int] = None,
          cache_dir: Optional[Path] = None) -> None:
    """Run the RPC server in this process until a signal ends it (never returns normally).

    Prints the build id (to compare with the loading side's ``quantdesk doctor``), the
    devices and the address; for an address other than loopback, the warning sentence.

    Raises:
        QuantDeskError: No RPC backend in this build, or a device that does not exist.
    """
    start = _start_server_function()
    chosen = choose_devices(devices)
    threads = threads or max(1, (os.cpu_count() or 2) // 2)
    print(f"QuantDesk worker: {build_id().text()}", flush=True)
    print(f"Devices: {', '.join(name for _, name in chosen)}; "
          f"{threads} CPU thread{'s' if threads != 1 else ''}", flush=True)
    if not is_loopback(host):
        print(NETWORK_WARNING.format(host=host, port=port), file=sys.stderr, flush=True)
    print(listening_sentence(host, port), flush=True)
    # The server blocks inside C forever: Ctrl+C must end the process, not wait for Python.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    array = (ctypes.c_void_p * len(chosen))(*(pointer for pointer, _ in chosen))
    cache = None
    if cache_dir is not None:
        cache_dir.mkdir(parents=True, exist_ok=True)
        cache = str(cache_dir).encode()
    start(f"{host}:{port}".encode(), cache, threads, len(chosen), array)
    # start_server returns only when it could not listen (the port is taken...).
    raise QuantDeskError(f"The worker could not listen on {host}:{port}; llama.cpp's message "
                         "is above.", "Choose another port with --port, or stop the program "
                         "that uses this one.")
