"""Remote devices handed to llama.cpp as the model's devices (engine process only).

llama-cpp-python's ``rpc_servers`` argument has been ignored since 2025: llama.cpp now
takes remote devices from its backend registry. ``ggml_backend_reg_by_name("RPC")`` gives
the RPC backend, whose ``ggml_backend_rpc_add_server(endpoint)`` (found with
``ggml_backend_reg_get_proc_address``) connects to a worker and returns a registry entry
with one device per device the worker offers (``RPC0``, ``RPC1``... described by their
endpoint). llama.cpp's own ``--rpc`` then *registers* that entry globally; QuantDesk does
not, so a later load without remote devices in the same process cannot pick them up.
Instead :func:`use_remote_devices` writes the NULL-terminated ``devices`` list of the
model params ``Llama()`` is about to use: the remote devices first, then this computer's
GPUs — llama.cpp's own order (``llama_prepare_model_devices``): the last layers and the
output layer stay local, so the logits never cross the network. The CPU is not a member
of the list: llama.cpp keeps the layers not offloaded (``n_gpu_layers``) on it anyway.

``add_server`` aborts the process when the worker cannot be reached or speaks another
protocol version; :mod:`models.rpc.probe` has checked both from the app's process first.
"""

from __future__ import annotations

import ctypes
from typing import Any, Sequence

from models.llama_lib import ggml_api

#: ``GGML_BACKEND_DEVICE_TYPE_GPU`` and ``_IGPU`` (ggml-backend.h).
_GPU_TYPES = (1, 2)


def ggml_registry():
    """ggml's backend registry and device functions (typed, from the libraries exporting them)."""
    return ggml_api()


def rpc_available() -> bool:
    """Whether this llama.cpp build has the RPC backend (built with ``GGML_RPC=ON``)."""
    try:
        return bool(ggml_registry().ggml_backend_reg_by_name(b"RPC"))
    except Exception:  # no llama.cpp at all: doctor reports that elsewhere
        return False


def add_servers(endpoints: Sequence[str]) -> list[tuple[int, str]]:
    """Connect to each worker; its devices as ``(device pointer, "RPC0 (endpoint)")``.

    Raises:
        RuntimeError: This build has no RPC backend.
    """
    ggml = ggml_registry()
    rpc = ggml.ggml_backend_reg_by_name(b"RPC")
    if not rpc:
        raise RuntimeError("this llama.cpp build has no RPC backend (GGML_RPC=OFF)")
    address = ggml.ggml_backend_reg_get_proc_address(rpc, b"ggml_backend_rpc_add_server")
    add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(address)
    found = []
    for endpoint in endpoints:
        reg = add_server(endpoint.encode())
        if not reg:
            raise RuntimeError(f"the worker at {endpoint} offers no devices")
        for index in range(ggml.ggml_backend_reg_dev_count(reg)):
            device = ggml.ggml_backend_reg_dev_get(reg, index)
            name = (ggml.ggml_backend_dev_name(device) or b"").decode()
            found.append((device, f"{name} ({endpoint})"))
    return found


def local_devices() -> list[tuple[int, str, str]]:
    """This computer's devices as ``(pointer, name, "CPU" | "GPU" | "other")``, the RPC
    backend's devices left out."""
    ggml = ggml_registry()
    found = []
    for index in range(ggml.ggml_backend_dev_count()):
        device = ggml.ggml_backend_dev_get(index)
        reg = ggml.ggml_backend_dev_backend_reg(device)
        if reg and (ggml.ggml_backend_reg_name(reg) or b"").decode().startswith("RPC"):
            continue
        kind = ggml.ggml_backend_dev_type(device)
        found.append((device, (ggml.ggml_backend_dev_name(device) or b"").decode(),
                      "CPU" if kind == 0 else "GPU" if kind in _GPU_TYPES else "other"))
    return found


def local_gpus() -> list[int]:
    """This computer's GPU devices (CUDA, Metal, Vulkan...)."""
    return [device for device, _, kind in local_devices() if kind == "GPU"]


def use_remote_devices(params: Any, endpoints: Sequence[str]) -> list[str]:
    """Set ``params.devices`` to the workers' devices and this computer's GPUs.

    Args:
        params: The ``llama_model_params`` ``Llama()`` passes to
            ``llama_model_load_from_file``.
        endpoints: ``host:port`` of each worker, already probed.

    Returns:
        The names of the devices, in llama.cpp's order (remote ones first); empty when
        there are no endpoints (``params`` is left as it is: llama.cpp's own choice).

    The array is kept on ``params`` (as an attribute), which ``Llama`` keeps for its life.
    """
    if not endpoints:
        return []
    remote = add_servers(endpoints)
    devices = [device for device, _ in remote] + local_gpus()
    array = (ctypes.c_void_p * (len(devices) + 1))(*devices)  # zeroed last entry: the NULL end
    params._quantdesk_devices = array
    params.devices = ctypes.cast(array, ctypes.c_void_p).value
    return [name for _, name in remote] + [f"local GPU {i}" for i in range(len(devices) - len(remote))]
