"""The RAM llama.cpp gives a model's weights: which CPU buffer each tensor lands in, and its size.

llama.cpp does not simply copy the file's tensors into RAM. For each weight kept on the
CPU it walks a list of buffer types and takes the first one whose kernels can run the
tensor's operation (``make_cpu_buft_list`` and ``select_weight_buft`` in
``src/llama-model.cpp`` / ``llama-model-loader.cpp``)::

    [GPU host buffer (CUDA_Host…, only when a GPU backend is present)]
    [extra CPU buffer types: AMX, CPU_REPACK (only with use_extra_bufts)]
    CPU

- A **GPU host buffer** takes every matrix the GPU can multiply; with ``use_mmap`` it is
  swapped for the plain CPU buffer (pinned memory is not mapped), so on a computer with a
  GPU, weights on the CPU are never repacked.
- **CPU_REPACK** (ggml-cpu/repack.cpp) takes 2-D ``MUL_MAT`` and 3-D ``MUL_MAT_ID`` (expert)
  weights of the types its interleaved kernels cover on this CPU (x86 with AVX2: Q4_0,
  Q4_K, IQ4_NL, MXFP4; AVX-512: Q2_K; ARM: more), if the rows divide by the interleave.
  The repacked copy is as big as the original; it lives in its own allocation.
- **AMX** (ggml-cpu/amx) takes 2-D matrices of Q4_0/Q4_1/Q8_0/Q4_K/Q5_K/Q6_K/IQ4_XS/F16
  whose shapes fit its tiles, re-laid-out with per-block extras.
- **CPU**: with ``use_mmap`` the file itself is the buffer (``CPU_Mapped``), and its size
  is the *span* of the file from the first to the last tensor byte of the tensors placed
  there — tensors that went elsewhere in between (repacked, on the GPU) count too, which
  is why a model with repacked or offloaded weights logs more than its weights' bytes.
  Without mmap, each buffer is the sum of its tensors padded to 32 bytes.

A tensor kept on the CPU by an expert override (``--n-cpu-moe``) takes the same path.
Which extra buffer types exist is asked of the ggml library llama.cpp runs with
(:func:`this_cpu_backend`): it depends on how it was built and on the CPU.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Optional

from quantize.ggml_types import GGML_QUANT_SIZES, GGMLQuantizationType as T

from models.gguf_header import TensorInfo, is_expert_tensor

log = logging.getLogger(__name__)

MAPPED = "CPU_Mapped"
CPU = "CPU"
HOST = "GPU host"
REPACK = "CPU_REPACK"
AMX = "AMX"
TENSOR_ALIGNMENT = 32  # ggml-impl.h; the CPU, CPU_REPACK, AMX and CUDA_Host buffers' alignment

#: Embedding tables, looked up by row (``GET_ROWS``), never multiplied on the CPU side.
_LOOKUP_TABLES = ("token_embd", "pos_embd", "token_types", "per_layer_token_embd")

#: CPU_REPACK's choice per type (ggml_repack_get_optimal_repack_type, this llama.cpp): the
#: first candidate whose CPU features are all present and whose rows divide wins.
_REPACK_RULES: dict[int, tuple[tuple[frozenset, int], ...]] = {
    T.Q4_0: ((frozenset({"AVX2"}), 8), (frozenset({"NEON", "MATMUL_INT8"}), 4), (frozenset({"NEON", "DOTPROD"}), 4)),
    T.Q4_K: ((frozenset({"AVX2"}), 8), (frozenset({"NEON", "MATMUL_INT8"}), 8), (frozenset({"NEON", "DOTPROD"}), 8)),
    T.Q5_K: ((frozenset({"NEON", "MATMUL_INT8"}), 8), (frozenset({"NEON", "DOTPROD"}), 8)),
    T.Q6_K: ((frozenset({"NEON", "MATMUL_INT8"}), 8), (frozenset({"NEON", "DOTPROD"}), 8)),
    T.Q2_K: ((frozenset({"AVX512"}), 8),),
    T.IQ4_NL: ((frozenset({"AVX2"}), 8), (frozenset({"NEON", "DOTPROD"}), 4)),
    T.MXFP4: ((frozenset({"AVX2"}), 8), (frozenset({"NEON", "DOTPROD"}), 4)),
    T.Q8_0: ((frozenset({"NEON", "MATMUL_INT8"}), 4), (frozenset({"NEON", "DOTPROD"}), 4)),
}

#: AMX (ggml-cpu/amx): per type, the column multiple its tiles need and the bytes it adds
#: per block (Q8_0's int32 compensation, the K-quants' unpacked scales).
_AMX_RULES: dict[int, tuple[int, int]] = {
    T.Q4_0: (32, 0), T.Q4_1: (32, 0), T.Q8_0: (32, 4),
    T.Q4_K: (256, 4), T.Q5_K: (256, 4), T.Q6_K: (256, 0), T.IQ4_XS: (256, 2), T.F16: (16, 0),
}


@dataclass(frozen=True)
class CpuBackend:
    """What the ggml library offers for weights kept on the CPU.

    Attributes:
        extra_buffers: llama.cpp's extra CPU buffer types in the order it tries them
            (``("CPU_REPACK",)`` on a usual x86 build).
        features: The CPU features the kernels were built for and found (``AVX2``…).
        gpu_host_buffer: A GPU backend with a host buffer type (CUDA, …) is present.
    """

    extra_buffers: tuple[str, ...] = ()
    features: frozenset = frozenset()
    gpu_host_buffer: bool = False


def _pad(n: int, to: int = TENSOR_ALIGNMENT) -> int:
    return -(-n // to) * to


def operation_of(tensor: TensorInfo) -> str:
    """llama.cpp's operation on a weight: ``MUL_MAT``, ``MUL_MAT_ID``, ``GET_ROWS`` or ``OTHER``."""
    base = tensor.name.rsplit(".", 1)[0] if tensor.name.endswith((".weight", ".bias")) else tensor.name
    if tensor.name.endswith(".bias"):
        return "OTHER"
    if base.split(".")[-1] in _LOOKUP_TABLES:
        return "GET_ROWS"
    if len(tensor.shape) == 3 and is_expert_tensor(tensor.name):
        return "MUL_MAT_ID"
    if len(tensor.shape) == 2:
        return "MUL_MAT"
    return "OTHER"


def repacked_bytes(tensor: TensorInfo, op: str, buffer: str, features: frozenset) -> Optional[int]:
    """Bytes ``tensor`` takes in extra buffer type ``buffer``, or ``None`` if it cannot go there."""
    ne0, ne1 = tensor.shape[-1], tensor.shape[-2] if len(tensor.shape) > 1 else 1
    if buffer == REPACK:
        if (op, len(tensor.shape)) not in (("MUL_MAT", 2), ("MUL_MAT_ID", 3)):
            return None
        for needs, rows in _REPACK_RULES.get(tensor.ggml_type, ()):
            if needs <= features and ne1 % rows == 0:
                return tensor.n_bytes
        return None
    if buffer == AMX:
        rule = _AMX_RULES.get(tensor.ggml_type)
        if op != "MUL_MAT" or len(tensor.shape) != 2 or rule is None or ne0 % rule[0] or ne1 % 32:
            return None
        if tensor.ggml_type == T.F16:
            return tensor.n_bytes
        block, size = GGML_QUANT_SIZES[T(tensor.ggml_type)]
        return ne1 * (ne0 // block) * (size + rule[1])
    return None


def buffer_of(tensor: TensorInfo, op: str, backend: CpuBackend, use_mmap: bool,
              use_extra_bufts: bool) -> tuple[str, int]:
    """The CPU-side buffer llama.cpp puts ``tensor`` in (used as ``op``), and its bytes there."""
    if backend.gpu_host_buffer and op in ("MUL_MAT", "MUL_MAT_ID"):  # the GPU runs it from host memory
        return (MAPPED if use_mmap else HOST), tensor.n_bytes
    if use_extra_bufts:
        for buffer in backend.extra_buffers:
            size = repacked_bytes(tensor, op, buffer, backend.features)
            if size is not None:
                return buffer, size
    return (MAPPED if use_mmap else CPU), tensor.n_bytes


def cpu_weight_buffers(tensors: Iterable[TensorInfo], backend: CpuBackend, use_mmap: bool = True,
                       use_extra_bufts: bool = True, tied_output: bool = False) -> dict[str, int]:
    """The model buffers llama.cpp allocates on the CPU side for ``tensors``, by name.

    Args:
        tensors: The weights kept on the CPU, with their file offsets.
        backend: The CPU backend's extra buffer types and features.
        use_mmap, use_extra_bufts: llama.cpp's model params of those names.
        tied_output: The model has no ``output.weight`` and its output layer is on the CPU:
            llama.cpp then uses ``token_embd.weight`` a second time as the output matrix
            (``TENSOR_DUPLICATED``), placed like any output matrix; it costs memory only
            where that puts it in another buffer type than the table.

    Returns:
        ``{"CPU_Mapped": bytes, "CPU_REPACK": bytes, ...}`` as llama.cpp logs them.
    """
    sizes: dict[str, int] = {}
    mapped: list[TensorInfo] = []
    placed = [(t, *buffer_of(t, operation_of(t), backend, use_mmap, use_extra_bufts)) for t in tensors]
    if tied_output:  # a second tensor only where its buffer type differs from the table's
        placed += [(t, *output) for t, buffer, _ in list(placed) if t.name == "token_embd.weight"
                   and (output := buffer_of(t, "MUL_MAT", backend, use_mmap, use_extra_bufts))[0] != buffer]
    for tensor, buffer, size in placed:
        if buffer == MAPPED:
            mapped.append(tensor)
        else:
            sizes[buffer] = sizes.get(buffer, 0) + _pad(size)
    if mapped:  # the mapped range of the file, from its first to its last byte
        sizes[MAPPED] = max(t.offset + t.n_bytes for t in mapped) - min(t.offset for t in mapped)
    return sizes


@lru_cache(maxsize=1)
def this_cpu_backend() -> CpuBackend:
    """The CPU backend of the ggml library llama-cpp-python runs with, asked of ggml itself
    (``ggml_backend_dev_get_extra_bufts`` and ``ggml_backend_get_features`` of the CPU
    backend, ``ggml_backend_dev_host_buffer_type`` of each GPU). A library that cannot be
    opened gives the plain CPU backend (no repacking) and a log line."""
    try:
        from models.llama_lib import ggml_api

        ggml = ggml_api()

        cpu = ggml.ggml_backend_dev_by_type(0)  # GGML_BACKEND_DEVICE_TYPE_CPU
        reg = ggml.ggml_backend_dev_backend_reg(cpu) if cpu else None
        extras: list[str] = []
        features: set[str] = set()
        if reg:
            address = ggml.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_dev_get_extra_bufts")
            if address:
                bufts = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(address)(cpu)
                i = 0
                while bufts and bufts[i]:
                    extras.append((ggml.ggml_backend_buft_name(bufts[i]) or b"").decode())
                    i += 1

            class _Feature(ctypes.Structure):
                _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_char_p)]

            address = ggml.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_get_features")
            if address:
                found = ctypes.CFUNCTYPE(ctypes.POINTER(_Feature), ctypes.c_void_p)(address)(reg)
                i = 0
                while found and found[i].name:
                    if (found[i].value or b"") not in (b"", b"0"):
                        features.add(found[i].name.decode())
                    i += 1
        host = any(ggml.ggml_backend_dev_type(dev) in (1, 2) and ggml.ggml_backend_dev_host_buffer_type(dev)
                   for dev in (ggml.ggml_backend_dev_get(i) for i in range(ggml.ggml_backend_dev_count())))
        return CpuBackend(tuple(extras), frozenset(features), bool(host))
    except Exception as exc:  # no llama.cpp here: predict plain CPU buffers
        log.info("memory fit: ggml's CPU backend could not be asked (%s); assuming no repacking", exc)
        return CpuBackend()
