"""Keep a mixture-of-experts model's experts in RAM while the rest goes to the GPU.

A MoE model's experts are most of its bytes (Qwen3-30B-A3B: 29 of 30.5 billion
parameters) but each token reads only a few of them, so they run acceptably from RAM on
the CPU, while attention, norms, routers and the KV cache, which every token reads,
belong on the GPU. llama.cpp does this with per-tensor buffer-type overrides: its
``--n-cpu-moe N`` adds, for each of the first N layers, the regular expression
``blk\\.i\\.ffn_(up|down|gate|gate_up)_(ch|)exps`` with the CPU buffer type to the model
params' NULL-terminated ``tensor_buft_overrides`` list (common/common.h,
``llm_add_n_cpu_ffn_overrides``). The model loader (``llama_model_loader``) then places a
matching tensor in host memory whatever ``n_gpu_layers`` says, and the scheduler runs the
expert matrix products on the CPU.

llama-cpp-python's ``Llama`` has no argument for the list (its params struct types the
field as a plain pointer), so :func:`keep_experts_on_cpu` fills it on the params struct
``Llama()`` is about to use. It runs in the engine's child process only (it opens
ggml's library).
"""

from __future__ import annotations

import ctypes
import re
from typing import Any

from models.gguf_header import EXPERT_TENSORS_REGEX

#: ``GGML_BACKEND_DEVICE_TYPE_CPU`` (ggml-backend.h).
_CPU_DEVICE = 0


def expert_layer_patterns(cpu_moe_layers: int) -> list[str]:
    """The override patterns of ``--n-cpu-moe cpu_moe_layers``: one per layer, from layer 0."""
    return [f"blk\\.{i}{EXPERT_TENSORS_REGEX}" for i in range(max(0, cpu_moe_layers))]


def is_expert_tensor_of(name: str, cpu_moe_layers: int) -> bool:
    """Whether llama.cpp keeps tensor ``name`` on the CPU under ``cpu_moe_layers`` (the same
    patterns, searched as ``std::regex_search`` does)."""
    return any(re.search(p, name) for p in expert_layer_patterns(cpu_moe_layers))


class _BufferTypeOverride(ctypes.Structure):
    """``struct llama_model_tensor_buft_override`` (llama.h)."""

    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


def cpu_buffer_type() -> int:
    """ggml's CPU buffer type (``ggml_backend_cpu_buffer_type()``), from the device registry."""
    from models.llama_lib import ggml_api

    ggml = ggml_api()
    device = ggml.ggml_backend_dev_by_type(_CPU_DEVICE)
    if not device:
        raise RuntimeError("ggml lists no CPU device")
    return ggml.ggml_backend_dev_buffer_type(device)


def keep_experts_on_cpu(params: Any, cpu_moe_layers: int) -> int:
    """Make the experts of the first ``cpu_moe_layers`` layers stay in RAM.

    Args:
        params: The ``llama_model_params`` struct ``Llama()`` passes to
            ``llama_model_load_from_file``.
        cpu_moe_layers: Layers whose experts stay on the CPU (0: none; a number at least
            the block count: all).

    Returns:
        The number of patterns set (0 leaves ``params`` unchanged).

    The pattern strings and the array are stored on ``params`` itself (as an attribute),
    so they live as long as the struct that points at them: ``Llama`` keeps its params
    for its whole life, and llama.cpp reads the list only while the model loads.
    """
    patterns = expert_layer_patterns(cpu_moe_layers)
    if not patterns:
        return 0
    buft = cpu_buffer_type()
    encoded = [p.encode() for p in patterns]
    entries = (_BufferTypeOverride * (len(encoded) + 1))()  # zeroed: the last is the NULL end
    for entry, pattern in zip(entries, encoded):
        entry.pattern = pattern
        entry.buft = buft
    params._quantdesk_expert_overrides = (encoded, entries)
    params.tensor_buft_overrides = ctypes.cast(entries, ctypes.c_void_p).value
    return len(encoded)
