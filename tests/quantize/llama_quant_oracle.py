"""llama.cpp's own quantizer as the oracle for QuantDesk's: whole files and type plans.

* :func:`llama_quantize` runs ``llama_model_quantize`` (libllama, through
  llama-cpp-python's ctypes bindings) with ``llama_model_quantize_default_params`` plus
  the options a test sets — including an importance matrix, which the C API takes as a
  plain array of ``{name, data, size}`` structs (``llama_model_imatrix_data``), and the
  ``quantize.imatrix.*`` key overrides that the ``llama-quantize`` tool adds.
* :func:`llama_plan_types` asks libllama's exported test hooks
  (``llama_quant_model_from_metadata`` / ``llama_quant_init`` /
  ``llama_quant_compute_types``, C++ symbols of ``src/llama-ext.h``) for the per-tensor
  types of a *synthetic* model — only names and shapes, no weights — so plans of 70B,
  MoE or Falcon layouts are checked in milliseconds.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from gguf import GGMLQuantizationType as T, GGUFValueType

from models.llama_lib import open_lib


def _llama_cpp():
    import llama_cpp.llama_cpp as bindings

    bindings.llama_backend_init()
    return bindings


def _kv_override(key: str, value, vtype: GGUFValueType):
    L = _llama_cpp()
    o = L.llama_model_kv_override()
    o.key = key.encode()
    if vtype == GGUFValueType.STRING:
        o.tag = L.LLAMA_KV_OVERRIDE_TYPE_STR
        o.value.val_str = value.encode()[:127]
    else:
        o.tag = L.LLAMA_KV_OVERRIDE_TYPE_INT
        o.value.val_i64 = int(value)
    return o


def llama_quantize(src: Path, dst: Path, ftype: int, nthread: int = 2, pure: bool = False,
                   output_tensor_type: Optional[T] = None, token_embedding_type: Optional[T] = None,
                   imatrix: Optional[dict[str, np.ndarray]] = None,
                   kv_overrides: Sequence[tuple[str, object, GGUFValueType]] = ()) -> int:
    """Run ``llama_model_quantize``; returns its status (0 = success)."""
    L = _llama_cpp()
    params = L.llama_model_quantize_default_params()
    params.nthread = nthread
    params.ftype = ftype
    params.pure = pure
    if output_tensor_type is not None:
        params.output_tensor_type = int(output_tensor_type)
    if token_embedding_type is not None:
        params.token_embedding_type = int(token_embedding_type)
    keep_alive = []
    if imatrix:
        entries = (L.llama_model_imatrix_data * (len(imatrix) + 1))()
        for i, (name, vector) in enumerate(imatrix.items()):
            vector = np.ascontiguousarray(vector, dtype=np.float32).reshape(-1)
            keep_alive += [vector, name.encode()]
            entries[i].name = keep_alive[-1]
            entries[i].data = vector.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            entries[i].size = vector.size
        params.imatrix = ctypes.cast(entries, ctypes.POINTER(L.llama_model_imatrix_data))
        keep_alive.append(entries)
    if kv_overrides:
        overrides = (L.llama_model_kv_override * (len(kv_overrides) + 1))()
        for i, (key, value, vtype) in enumerate(kv_overrides):
            overrides[i] = _kv_override(key, value, vtype)
        params.kv_overrides = ctypes.cast(overrides, ctypes.POINTER(L.llama_model_kv_override))
        keep_alive.append(overrides)
    return L.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p), ("no_alloc", ctypes.c_bool)]


class _ModelDesc(ctypes.Structure):
    """``llama_quant_model_desc`` of ``src/llama-ext.h``."""

    _fields_ = [("architecture", ctypes.c_char_p)] + [(n, ctypes.c_uint32) for n in (
        "n_embd", "n_ff", "n_layer", "n_head", "n_head_kv", "n_expert", "n_embd_head_k", "n_embd_head_v")]


@lru_cache(maxsize=None)
def _hooks():
    L = _llama_cpp()
    base, llama = open_lib("libggml-base"), open_lib("libllama")
    base.ggml_init.restype, base.ggml_init.argtypes = ctypes.c_void_p, [_InitParams]
    base.ggml_new_tensor.restype = ctypes.c_void_p
    base.ggml_new_tensor.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int64)]
    base.ggml_set_name.restype, base.ggml_set_name.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]
    base.ggml_free.restype, base.ggml_free.argtypes = None, [ctypes.c_void_p]
    model = getattr(llama, "_Z31llama_quant_model_from_metadataPK22llama_quant_model_desc")
    model.restype, model.argtypes = ctypes.c_void_p, [ctypes.POINTER(_ModelDesc)]
    init = getattr(llama, "_Z16llama_quant_initPK11llama_modelPK27llama_model_quantize_params")
    init.restype = ctypes.c_void_p
    init.argtypes = [ctypes.c_void_p, ctypes.POINTER(L.llama_model_quantize_params)]
    types = getattr(llama, "_Z25llama_quant_compute_typesP19quantize_state_impl11llama_ftypePP11ggml_tensorP9ggml_typem")
    types.restype = None
    types.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
                      ctypes.POINTER(ctypes.c_int), ctypes.c_size_t]
    free = getattr(llama, "_Z16llama_quant_freeP19quantize_state_impl")
    free.restype, free.argtypes = None, [ctypes.c_void_p]
    return base, model, init, types, free


def llama_plan_types(arch: str, n_embd: int, n_ff: int, n_layer: int, n_head: int, n_head_kv: int,
                     n_expert: int, tensors: Sequence[tuple[str, tuple[int, ...], T]], ftype: int,
                     pure: bool = False, output_tensor_type: Optional[T] = None,
                     token_embedding_type: Optional[T] = None) -> list[T]:
    """llama.cpp's type for each ``(name, numpy shape, stored type)``, given in llama's order."""
    L = _llama_cpp()
    base, new_model, init, compute, free = _hooks()
    head_dim = n_embd // max(1, n_head)
    desc = _ModelDesc(arch.encode(), n_embd, n_ff, n_layer, n_head, n_head_kv, n_expert, head_dim, head_dim)
    model = new_model(ctypes.byref(desc))
    params = L.llama_model_quantize_default_params()
    params.pure = pure
    if output_tensor_type is not None:
        params.output_tensor_type = int(output_tensor_type)
    if token_embedding_type is not None:
        params.token_embedding_type = int(token_embedding_type)
    state = init(model, ctypes.byref(params))
    ctx = base.ggml_init(_InitParams(1 << 24, None, True))
    try:
        handles = []
        for name, shape, stored in tensors:
            ne = (ctypes.c_int64 * len(shape))(*reversed(shape))
            handle = base.ggml_new_tensor(ctx, int(stored), len(shape), ne)
            base.ggml_set_name(handle, name.encode())
            handles.append(handle)
        result = (ctypes.c_int * len(handles))()
        compute(state, ftype, (ctypes.c_void_p * len(handles))(*handles), result, len(handles))
        return [T(v) for v in result]
    finally:
        base.ggml_free(ctx)
        free(state)
        L.llama_model_free(ctypes.c_void_p(model))
