"""Load settings (the GUI's "offload sliders") and the rules llama.cpp puts on them.

:class:`LoadSettings` is what a user chooses; :func:`validate_settings` checks it against
the model (read from its GGUF header) and the devices this llama.cpp build can use, and
either returns the settings with "auto" values resolved or raises
:class:`~models.foundation.errors.QuantDeskError` with a sentence that explains the rule. The rules
mirror the checks in ``llama_init_from_model`` (``src/llama-context.cpp``), so a bad
combination is refused here with an explanation instead of failing inside the engine:

- a quantized V cache (``q8_0``, ``q4_0``) needs flash attention, because only the
  flash-attention kernel reads V in blocks; the ordinary path multiplies by V transposed,
  which ggml cannot do on quantized rows;
- a quantized K cache needs the attention head size to be a multiple of the block size
  (32 values per ``q8_0``/``q4_0`` block);
- GPU layers need a GPU backend in this build and a GPU it can see;
- "expert layers kept on the CPU" (llama.cpp's ``--n-cpu-moe``) applies to
  mixture-of-experts models only, and counts layers from the first;
- remote devices (other computers' workers, :mod:`models.rpc`) count as GPUs for "GPU
  layers", as llama.cpp treats them; a split gives one share per device.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Optional, Sequence

from models.foundation.errors import QuantDeskError

if TYPE_CHECKING:  # reading GGUF files imports gguf and numpy: only where a file is read
    from models.engine.gguf_info import GGUFModelInfo

# ggml_type values (ggml.h) of the KV-cache types we offer, and their block sizes.
KV_CACHE_TYPES: dict[str, int] = {"f16": 1, "q8_0": 8, "q4_0": 2}
_KV_BLOCK_SIZE = {"f16": 1, "q8_0": 32, "q4_0": 32}

# For the GUI's tooltip next to the KV-cache choices: the rules in words.
KV_CACHE_HELP = (
    "The KV cache holds what the model remembers of the conversation. f16 is exact; q8_0 "
    "halves its memory with almost no loss; q4_0 quarters it and costs some quality. A "
    "quantized V cache needs flash attention (llama.cpp reads it only in that kernel), "
    "and a quantized K cache needs attention heads whose size is a multiple of 32."
)

ALL_LAYERS = -1
MIN_CONTEXT = 64
MAX_PARALLEL = 64


@dataclass(frozen=True)
class LoadSettings:
    """How to load a model. Defaults suit a CPU-only computer.

    Attributes:
        gpu_layers: Layers to put on the GPU: ``-1`` for all (0 when there is no GPU),
            otherwise 0 up to the model's block count + 1 (the output layer).
        main_gpu: Index of the GPU that holds the model (and scratch buffers).
        threads: CPU threads for generating tokens; ``None`` picks half the cores.
        batch_threads: CPU threads for reading the prompt; ``None`` picks all cores.
        context_length: Tokens the conversation can hold; 0 means the model's own.
        batch_size: Most prompt tokens handed to llama.cpp in one call (``n_batch``).
        micro_batch_size: Tokens computed at once inside a batch (``n_ubatch``).
        flash_attention: Use the flash-attention kernels.
        kv_cache_type_k: Storage type of cached keys: ``f16``, ``q8_0`` or ``q4_0``.
        kv_cache_type_v: Storage type of cached values (quantized needs flash attention).
        use_mmap: Map the file instead of reading it into memory.
        use_mlock: Lock the weights in RAM so the OS cannot swap them out.
        use_extra_bufts: Let llama.cpp repack weights for special CPU kernels (AMX...).
            The engine turns it off by itself when the first decode crashes with it.
        draft_model: A small GGUF with the same tokenizer, loaded beside the model for
            speculative decoding (``ChatOptions.speculative="draft_model"``); ``None``
            for none. It shares the context length, threads and batch sizes.
        parallel: Slots: how many replies the engine generates at once, as one batch
            (continuous batching, for the API server). Each slot has the whole
            ``context_length``: the engine allocates ``context_length * parallel``
            cells of KV cache rather than dividing one context between slots.
        cpu_moe_layers: For a mixture-of-experts model, the layers (from the first) whose
            experts stay in RAM and run on the CPU while the rest of those layers goes to
            the GPU (llama.cpp's ``--n-cpu-moe``): 0 for none, ``-1`` for all. Experts are
            most of such a model's bytes but each token reads few of them, so this lets a
            30B MoE run with a small GPU. Ignored (0) for dense models.
        remote_devices: Other computers' workers (``quantdesk worker``) whose devices take
            part of the layers: ``host:port`` or ``ssh://user@host`` entries
            (:mod:`models.rpc.endpoints`). They count as GPUs for ``gpu_layers``; the
            layers not offloaded stay on this computer's CPU.
        device_split: Shares of the offloaded layers per device, in llama.cpp's order
            (the remote devices, then this computer's GPUs), e.g. ``(1, 1)``; empty: in
            proportion to each device's free memory (llama.cpp's default).
        mmproj: The model's vision encoder (llama.cpp's mmproj GGUF), loaded beside it so
            messages can carry images; ``None`` for text only. Its header fixes how many
            tokens an image can take, and the batch sizes grow to hold one whole image.
        embedding: Load for embeddings rather than chat: llama.cpp's context makes one
            pooled vector per input (the model's own pooling, mean pooling when its
            header names none) and the engine answers ``embed`` requests, not ``chat``.
            One slot; a batch holds a whole context of inputs.
    """

    gpu_layers: int = ALL_LAYERS
    main_gpu: int = 0
    threads: Optional[int] = None
    batch_threads: Optional[int] = None
    context_length: int = 4096
    batch_size: int = 512
    micro_batch_size: int = 512
    flash_attention: bool = False
    kv_cache_type_k: str = "f16"
    kv_cache_type_v: str = "f16"
    use_mmap: bool = True
    use_mlock: bool = False
    use_extra_bufts: bool = True
    draft_model: Optional[str] = None
    parallel: int = 1
    cpu_moe_layers: int = 0
    remote_devices: tuple[str, ...] = ()
    device_split: tuple[float, ...] = ()
    embedding: bool = False
    mmproj: Optional[str] = None

    def to_dict(self) -> dict:
        """Plain values, for the pipe to the engine and for settings files."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "LoadSettings":
        """The inverse of :meth:`to_dict`; unknown keys are ignored."""
        known = {k: v for k, v in values.items() if k in cls.__dataclass_fields__}
        for name in ("remote_devices", "device_split"):  # lists after JSON or the pipe
            if name in known and known[name] is not None:
                known[name] = tuple(known[name])
        return cls(**known)


def _require_int(name: str, value: object, low: int, high: int, meaning: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise QuantDeskError(f"The setting {name} must be a whole number, not {value!r}.",
                             f"Choose {meaning}.")
    if not low <= value <= high:
        raise QuantDeskError(f"The setting {name} is {value}, outside {low}…{high}.",
                             f"Choose {meaning}.")
    return value


def validate_settings(
    settings: LoadSettings,
    model: GGUFModelInfo,
    gpu_count: int,
    cpu_count: Optional[int] = None,
) -> LoadSettings:
    """Check ``settings`` for ``model`` on this computer; return them with auto values set.

    Args:
        settings: What the user chose.
        model: The model's header facts.
        gpu_count: GPUs this llama.cpp build can use (see :func:`gpu_device_count`).
        cpu_count: Logical CPUs (defaults to ``os.cpu_count()``).

    Raises:
        QuantDeskError: A value is out of range or the combination cannot work.
    """
    cpus = cpu_count or os.cpu_count() or 1
    remote = _remote_devices(settings)
    max_layers = model.max_gpu_layers
    gpu_layers = settings.gpu_layers
    if gpu_layers == ALL_LAYERS:
        gpu_layers = max_layers if gpu_count or remote else 0
    _require_int("GPU layers", gpu_layers, 0, max_layers,
                 f"0 (all on the CPU) up to {max_layers} (all {model.block_count} blocks of "
                 f"{model.name} and its output layer), or -1 for all")
    if gpu_layers > 0 and gpu_count == 0 and not remote:
        raise QuantDeskError(
            f"{gpu_layers} GPU layers were asked for, but this llama.cpp build sees no GPU "
            "(it has no CUDA, Metal or Vulkan backend, or no driver found a device).",
            "Set GPU layers to 0, or reinstall QuantDesk with GPU support "
            "(`quantdesk doctor` lists the backends and devices).",
        )
    main_gpu = _require_int("main GPU", settings.main_gpu, 0, max(gpu_count - 1, 0),
                            f"a GPU index from 0 to {max(gpu_count - 1, 0)}")
    threads = max(cpus // 2, 1) if settings.threads is None else settings.threads
    batch_threads = cpus if settings.batch_threads is None else settings.batch_threads
    _require_int("threads", threads, 1, 4 * cpus, f"between 1 and {4 * cpus}; "
                 f"this computer has {cpus} logical CPUs")
    _require_int("batch threads", batch_threads, 1, 4 * cpus, f"between 1 and {4 * cpus}; "
                 f"this computer has {cpus} logical CPUs")
    trained = model.context_length or 1 << 20
    context = settings.context_length or trained
    _require_int("context length", context, MIN_CONTEXT, trained,
                 f"between {MIN_CONTEXT} and {trained} tokens ({model.name} was trained "
                 f"for {trained}), or 0 for the model's own length")
    batch = _require_int("batch size", settings.batch_size, 1, 1 << 16,
                         "a batch size such as 512")
    micro = _require_int("micro-batch size", settings.micro_batch_size, 1, 1 << 16,
                         "a micro-batch size such as 512")
    if micro > batch:
        raise QuantDeskError(
            f"The micro-batch size ({micro}) is larger than the batch size ({batch}); "
            "llama.cpp splits each batch into micro-batches, so it cannot be.",
            "Make the micro-batch size at most the batch size.",
        )
    _require_int("parallel slots", settings.parallel, 1, MAX_PARALLEL,
                 f"from 1 to {MAX_PARALLEL} replies generated at once")
    for which, kv_type in (("K", settings.kv_cache_type_k), ("V", settings.kv_cache_type_v)):
        if kv_type not in KV_CACHE_TYPES:
            raise QuantDeskError(f"The {which} cache type {kv_type!r} is not one QuantDesk offers.",
                                 f"Choose one of {', '.join(KV_CACHE_TYPES)}.")
    if settings.kv_cache_type_v != "f16" and not settings.flash_attention:
        raise QuantDeskError(
            f"A {settings.kv_cache_type_v} V cache needs flash attention: llama.cpp reads a "
            "quantized V cache only in its flash-attention kernel.",
            "Turn flash attention on, or keep the V cache at f16.",
        )
    block = _KV_BLOCK_SIZE[settings.kv_cache_type_k]
    if block > 1 and model.head_size_k % block:
        raise QuantDeskError(
            f"A {settings.kv_cache_type_k} K cache stores keys in blocks of {block} values, "
            f"but {model.name} has attention heads of {model.head_size_k} values.",
            "Keep the K cache at f16 for this model.",
        )
    for name in ("flash_attention", "use_mmap", "use_mlock", "use_extra_bufts"):
        if not isinstance(getattr(settings, name), bool):
            raise QuantDeskError(f"The setting {name} must be on or off, not "
                                 f"{getattr(settings, name)!r}.", "Choose on or off.")
    draft = settings.draft_model
    if draft is not None:
        if not isinstance(draft, (str, os.PathLike)) or not os.path.isfile(draft):
            raise QuantDeskError(f"The draft model {draft} is not a file.",
                                 "Choose a GGUF file of a small model of the same family, or none.")
        from models.engine.gguf_info import read_model_info

        read_model_info(draft)  # a file that is not a GGUF model is refused with a sentence
        draft = os.path.abspath(draft)
    cpu_moe_layers = _expert_layers(settings.cpu_moe_layers, model)
    mmproj = settings.mmproj
    if mmproj is not None:
        from models.engine.gguf_info import read_projector_info

        projector = read_projector_info(mmproj, model)
        mmproj = str(projector.path)
        # llama.cpp reads a non-causal image in one micro-batch or aborts the process.
        batch, micro = max(batch, projector.max_image_tokens), max(micro, projector.max_image_tokens)
    return replace(settings, gpu_layers=gpu_layers, main_gpu=main_gpu, threads=threads,
                   batch_threads=batch_threads, context_length=context, draft_model=draft,
                   mmproj=mmproj, batch_size=batch, micro_batch_size=micro,
                   cpu_moe_layers=cpu_moe_layers, remote_devices=remote,
                   device_split=_device_split(settings.device_split, remote, gpu_count))


def _remote_devices(settings: LoadSettings) -> tuple[str, ...]:
    """The remote device entries, checked for form (reaching them is the client's job)."""
    from models.rpc.endpoints import parse_remote_devices

    return tuple(d.text for d in parse_remote_devices(settings.remote_devices or ()))


def _device_split(split: Sequence[float], remote: Sequence[str], gpu_count: int) -> tuple[float, ...]:
    """A split checked for form: non-negative shares, not all zero, at most one per device
    llama.cpp can take. (How many devices the workers offer is known once they answer;
    the engine client checks the length then.)"""
    shares = tuple(split or ())
    if not shares:
        return ()
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 for v in shares) \
            or not any(shares):
        raise QuantDeskError(f"The device split {', '.join(map(str, shares))} is not a list of "
                             "shares.", "Give one non-negative number per device, e.g. 1,1, or "
                             "leave it empty to split by free memory.")
    if not remote and gpu_count < 2:
        raise QuantDeskError("A device split needs at least two devices to split between.",
                             "Add remote devices, or leave the split empty.")
    from models.rpc.endpoints import MAX_REMOTE_DEVICES

    if len(shares) > MAX_REMOTE_DEVICES:
        raise QuantDeskError(f"The device split has {len(shares)} shares; llama.cpp takes at "
                             f"most {MAX_REMOTE_DEVICES}.", "Give one share per device.")
    return tuple(float(v) for v in shares)


def _expert_layers(value: object, model: GGUFModelInfo) -> int:
    """``cpu_moe_layers`` resolved: 0 for a dense model (it has no experts to keep; the
    setting may come from defaults shared by every model), ``-1`` → every block."""
    if not model.is_moe:
        return 0
    layers = model.block_count
    if value == ALL_LAYERS:
        return layers
    return _require_int("expert layers kept on the CPU", value, 0, layers,
                        f"0 (experts go where their layer goes) up to {layers} (the experts of "
                        f"every block of {model.name} stay in RAM), or -1 for all")


def gpu_device_count(devices: Optional[Sequence] = None) -> int:
    """GPUs among ggml's devices (``models.hardware.devices()``): anything but the CPU."""
    if devices is None:
        from models.hardware import devices as list_devices

        devices = list_devices()
    return sum(1 for d in devices if d.kind in ("GPU", "integrated GPU"))
