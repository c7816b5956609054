"""Will this model fit? RAM and VRAM that llama.cpp will allocate, before loading it.

llama.cpp allocates three things (its log names them: ``model buffer``, ``KV buffer``,
``compute buffer``, plus a small ``output buffer``):

- **Weights**: every tensor's bytes, read from the GGUF header. With ``n_gpu_layers = g``
  the *last* ``g`` of the ``L + 1`` layers go to the GPUs, where layer ``L`` is the output
  layer: so the output matrix goes first, then the last ``g - 1`` blocks (``i >= L + 1 -
  g``; llama.cpp's ``load_tensors`` since 2025, measured through RPC devices in
  tests/models/test_rpc_split.py). A model without its own output matrix (tied
  embeddings) gets a copy of the token embedding there. The token embedding itself always
  stays on the CPU. Several devices (GPUs, other computers' workers) share the offloaded
  layers in proportion to their free memory or the user's split (:func:`layer_devices`,
  :func:`device_shares`). A mixture-of-experts model's expert tensors (``ffn_*_exps``) of
  the first ``cpu_moe_layers`` blocks stay on the CPU whatever ``g`` says (llama.cpp's
  ``--n-cpu-moe``: a buffer-type override). On a GPU a weight takes its bytes; on the CPU
  it lands in the mapped file, a repacked copy (CPU_REPACK, AMX) or a plain buffer, by the
  rules of :mod:`models.weight_buffers`: the mapped buffer counts the file's whole span
  from the first to the last tensor kept there.
- **KV cache**: per layer, ``n_ctx`` cells of K and V rows. ``n_ctx`` is padded up to a
  multiple of 256; a row is ``n_head_kv × head_dim`` values stored as the KV type (f16 =
  2 bytes; q8_0 = 34 bytes per 32 values; q4_0 = 18 per 32).
- **Compute buffer**: the graph allocator's peak for one micro-batch of ``n_ubatch``
  tokens (``min(n_ubatch, n_batch, n_ctx)``, as llama-cpp-python clamps it). The peak is
  the largest of three phases (E = ``n_ubatch × n_embd × 4`` bytes):

  * logits: ``n_ubatch × n_vocab × 4`` + 3E
  * attention without flash attention: KQ scores ``n_ubatch × n_ctx × n_head × 4`` +
    mask ``n_ubatch × n_ctx × 4`` + 6E; with flash attention: f16 mask + 6E
  * feed-forward: ``2 × n_ubatch × n_ff × 4`` + 3E; for a mixture of experts, each token's
    ``k`` routed experts hold gate, up and their SwiGLU product at once:
    ``3 × n_ubatch × k × n_ff_exp × 4`` + ``n_ubatch × k × n_embd × 4`` + 2E, beside the
    attention mask (a graph input, alive throughout); Qwen2-MoE's shared expert runs after
    them, in the memory they free (measured on a converted Qwen3-MoE at n_ctx 512 to 4096,
    with and without flash attention: tests/models/test_moe_models.py)

  With layers on a GPU the GPU's buffer has that peak, and the host's holds the graph
  inputs (the attention mask among them: ggml's scheduler allocates inputs on the CPU)
  and the embeddings, ``mask + 3E``, or the logits phase when the output layer stays on
  the CPU. Routed experts kept on the CPU do not add to it for micro-batches of 32 tokens
  or more: the scheduler runs their products on the GPU (op offload); measured on an H100
  with a Qwen3-MoE whose experts were all on the CPU (5.51 MiB logged, ``mask + 3E`` =
  5.50 MiB at n_ctx 2048).

These formulas were checked against llama.cpp's own log on SmolLM2 at several context
lengths and KV types (tests/models/test_memory_fit.py), on a converted Qwen3-MoE
(tests/models/test_moe_models.py), and each CPU weight buffer by name, repacked or mapped,
with and without mmap (tests/models/test_weight_buffers.py, which also keeps the figures
tests/benchmarks/moe_offload_probe.py measured on an H100: GPU weights and KV within
0.2 %, CPU weights and compute to the hundredth of a MiB). Partial offload (some blocks on
the CPU, the rest on a GPU) has not been measured.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from quantize.ggml_types import GGML_QUANT_SIZES, GGMLQuantizationType

from models.foundation.errors import QuantDeskError
from models.gguf_header import GGUFHeader, is_expert_tensor, parameters_text, read_gguf_header
from models.weight_buffers import CpuBackend, cpu_weight_buffers, this_cpu_backend

KV_TYPES = {name: GGMLQuantizationType[name.upper()] for name in
            ("f32", "f16", "bf16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl")}
CTX_PAD = 256
OP_OFFLOAD_MIN_BATCH = 32  # GPU backends run host-weight products of batches this big themselves
FIT_SHARE = 0.8  # use at most this share of free memory and still call it a comfortable fit


@dataclass(frozen=True)
class FitSettings:
    """The load settings that change memory use."""

    n_ctx: int = 4096
    kv_type: str = "f16"
    n_gpu_layers: int = 0
    n_batch: int = 512
    n_ubatch: int = 512
    flash_attn: Optional[bool] = None  # None: on when the KV cache is quantized (llama.cpp needs it)
    cpu_moe_layers: int = 0  # MoE: blocks (from the first) whose experts stay on the CPU; -1 all
    use_mmap: bool = True  # the weights on the CPU are the mapped file
    use_extra_bufts: bool = True  # llama.cpp may repack CPU weights for its faster kernels
    projector_bytes: int = 0  # the vision encoder (mmproj) loaded beside: on the GPU with layers there


@dataclass(frozen=True)
class MemoryPrediction:
    """Bytes llama.cpp will allocate, on the CPU side (RAM) and the GPU (VRAM)."""

    weights_cpu: int
    weights_gpu: int
    kv_cpu: int
    kv_gpu: int
    compute_cpu: int
    compute_gpu: int
    output: int
    n_ctx: int
    parameters: int = 0
    active_parameters: int = 0
    cpu_weight_buffers: tuple[tuple[str, int], ...] = ()  # (llama.cpp's buffer name, bytes)

    @property
    def parameters_text(self) -> str:
        """``"30.5B total, 3.3B active"`` for a mixture of experts, ``"1.7B"`` otherwise."""
        return parameters_text(self.parameters, self.active_parameters)

    @property
    def ram(self) -> int:
        return self.weights_cpu + self.kv_cpu + self.compute_cpu + self.output

    @property
    def vram(self) -> int:
        return self.weights_gpu + self.kv_gpu + self.compute_gpu


@dataclass(frozen=True)
class FitVerdict:
    """``fits``, ``tight`` or ``won't fit``, with the numbers behind it."""

    verdict: str
    prediction: MemoryPrediction
    ram_available: int
    vram_available: Optional[int]
    reason: str


def _layer_of(name: str) -> Optional[int]:
    if name.startswith("blk."):
        return int(name.split(".")[1])
    return None


def _per_layer(value: Union[int, list, None], n_layer: int, default: int) -> list[int]:
    """A per-layer hyper-parameter that GGUF stores as one number or an array."""
    if isinstance(value, list):
        return [int(v) for v in value]
    return [int(value if value is not None else default)] * n_layer


def predict_memory(model: Union[Path, GGUFHeader], settings: FitSettings = FitSettings(),
                   backend: Optional[CpuBackend] = None) -> MemoryPrediction:
    """Predict llama.cpp's allocations for ``model`` loaded with ``settings``.

    ``backend`` is the CPU backend whose buffer types decide where CPU weights go
    (default: the one llama.cpp runs with on this computer, :func:`this_cpu_backend`).
    """
    header = model if isinstance(model, GGUFHeader) else read_gguf_header(Path(model))
    n_layer = int(header.arch_value("block_count", 0))
    n_embd = int(header.arch_value("embedding_length", 0))
    if not n_layer or not n_embd:
        raise QuantDeskError(f"The model's header has no block_count/embedding_length for "
                             f"'{header.architecture}', so its memory cannot be predicted.")
    if settings.kv_type not in KV_TYPES:
        raise QuantDeskError(f"Unknown KV cache type '{settings.kv_type}'.", f"Use one of: {', '.join(KV_TYPES)}.")
    n_head = _per_layer(header.arch_value("attention.head_count"), n_layer, 1)
    n_head_kv = _per_layer(header.arch_value("attention.head_count_kv"), n_layer, n_head[0])
    n_ff = max(_per_layer(header.arch_value("feed_forward_length"), n_layer, 4 * n_embd))
    head_k = int(header.arch_value("attention.key_length", n_embd // max(n_head[0], 1)))
    head_v = int(header.arch_value("attention.value_length", head_k))
    n_vocab = int(header.arch_value("vocab_size") or len(header.metadata.get("tokenizer.ggml.tokens") or ()))

    # llama.cpp: i_gpu_start = L + 1 - g; layer L (the output layer) is the first to go
    gpu_layers = max(0, min(settings.n_gpu_layers if settings.n_gpu_layers >= 0 else n_layer + 1, n_layer + 1))
    first_gpu_layer = n_layer + 1 - gpu_layers
    output_on_gpu = gpu_layers >= 1
    cpu_moe = n_layer if settings.cpu_moe_layers < 0 else settings.cpu_moe_layers
    tied_output = not any(t.name == "output.weight" for t in header.tensors)

    weights_gpu = 0
    on_cpu = []
    for tensor, layer, copy in _tensors_by_layer(header, n_layer):
        on_gpu = layer >= first_gpu_layer
        if copy and not on_gpu:
            continue  # on the CPU the output matrix is the embedding itself (see below)
        if on_gpu and layer < cpu_moe and is_expert_tensor(tensor.name):
            on_gpu = False  # the expert override wins over the layer's device
        if on_gpu:
            weights_gpu += tensor.n_bytes
        else:
            on_cpu.append(tensor)
    buffers = cpu_weight_buffers(on_cpu, backend or this_cpu_backend(), settings.use_mmap,
                                 settings.use_extra_bufts, tied_output and not output_on_gpu)
    weights_cpu = sum(buffers.values())
    if gpu_layers:  # libmtmd puts the vision encoder on the GPU when the model uses one
        weights_gpu += settings.projector_bytes
    else:
        weights_cpu += settings.projector_bytes

    n_ctx = -(-settings.n_ctx // CTX_PAD) * CTX_PAD
    block, type_size = GGML_QUANT_SIZES[KV_TYPES[settings.kv_type]]
    kv_cpu = kv_gpu = 0
    for layer in range(n_layer):
        row = (n_head_kv[layer] * head_k + n_head_kv[layer] * head_v) // block * type_size
        if layer >= first_gpu_layer:
            kv_gpu += n_ctx * row
        else:
            kv_cpu += n_ctx * row

    flash = settings.flash_attn if settings.flash_attn is not None else settings.kv_type not in ("f16", "f32")
    n_ub = min(settings.n_ubatch, settings.n_batch, settings.n_ctx)
    act = n_ub * n_embd * 4
    logits = n_ub * n_vocab * 4 + 3 * act
    mask = n_ub * n_ctx * (2 if flash else 4)
    if flash:
        attention = mask + 6 * act
    else:
        attention = n_ub * n_ctx * max(n_head) * 4 + mask + 6 * act
    ffn = 2 * n_ub * n_ff * 4 + 3 * act
    routed = 0
    if header.expert_count:
        n_used = header.expert_used_count or 1
        n_ff_exp = int(header.arch_value("expert_feed_forward_length") or n_ff)
        n_ff_shexp = int(header.arch_value("expert_shared_feed_forward_length") or 0)
        routed = 3 * n_ub * n_used * n_ff_exp * 4 + n_ub * n_used * n_embd * 4 + 2 * act
        ffn = mask + max(routed, 3 * n_ub * n_ff_shexp * 4 + 3 * act)
    compute = max(logits, attention, ffn)
    if gpu_layers == 0:
        compute_cpu, compute_gpu = compute, 0
    else:  # the GPU runs the offloaded graph; the host keeps its inputs (the mask) and embeddings
        compute_gpu = compute
        compute_cpu = mask + 3 * act  # (the output layer is the first to go to the GPU)
        if cpu_moe > 0 and n_ub < OP_OFFLOAD_MIN_BATCH:  # experts kept on the CPU run there
            compute_cpu = max(compute_cpu, routed)
    return MemoryPrediction(weights_cpu, weights_gpu, kv_cpu, kv_gpu, compute_cpu, compute_gpu,
                            output=n_vocab * 4, n_ctx=n_ctx, parameters=header.parameter_count,
                            active_parameters=header.active_parameter_count,
                            cpu_weight_buffers=tuple(sorted(buffers.items())))


def _tensors_by_layer(header: GGUFHeader, n_layer: int):
    """Each weight as ``(tensor, layer, copy)``: the layer whose device holds it (its
    block, ``n_layer`` for the output layer, ``-1`` for what always stays on the CPU).
    A model that ties its output to the token embedding yields that tensor a second time
    for the output layer with ``copy`` set: llama.cpp loads a copy onto an offload device,
    while on the CPU both are views of the same mapped file."""
    names = {t.name for t in header.tensors}
    for tensor in header.tensors:
        layer = _layer_of(tensor.name)
        if layer is not None:
            yield tensor, layer, False
        elif tensor.name.startswith("output"):
            yield tensor, n_layer, False
        else:
            yield tensor, -1, False
            if tensor.name == "token_embd.weight" and "output.weight" not in names:
                yield tensor, n_layer, True


def layer_devices(n_layer: int, n_gpu_layers: int, shares: Sequence[float]) -> list[int]:
    """Which device holds each layer, as llama.cpp's ``load_tensors`` assigns them.

    Args:
        n_layer: The model's blocks.
        n_gpu_layers: Layers offloaded (``-1``: all); the output layer counts, and goes first.
        shares: One number per offload device, in llama.cpp's order (remote devices, then
            this computer's GPUs): their free memory, or the user's split.

    Returns:
        ``n_layer + 1`` device indexes (blocks, then the output layer); ``-1`` is the CPU.
        Each device gets a contiguous run of the offloaded layers, the run's length in
        proportion to its share (the cumulative shares, normalised, are the split points).
    """
    layers = n_layer + 1
    offloaded = layers if n_gpu_layers < 0 else min(n_gpu_layers, layers)
    if not shares or offloaded <= 0 or sum(shares) <= 0:
        return [-1] * layers
    total, points = float(sum(shares)), []
    running = 0.0
    for share in shares:
        running += share
        points.append(running / total)
    start = layers - offloaded
    return [-1 if layer < start else
            min(bisect.bisect_right(points, (layer - start) / offloaded), len(shares) - 1)
            for layer in range(layers)]


@dataclass(frozen=True)
class DeviceShare:
    """What one device holds of a model: its layers, weights and KV cache."""

    name: str
    layers: int
    weights: int
    kv: int

    @property
    def total(self) -> int:
        return self.weights + self.kv


def device_shares(model: Union[Path, GGUFHeader], settings: FitSettings,
                  devices: Sequence[tuple[str, float]]) -> list[DeviceShare]:
    """Each device's share of the weights and KV cache: this computer's CPU first (the
    token embedding and the layers not offloaded), then each offload device.

    Args:
        model: The GGUF file or its header.
        settings: Context, KV type and ``n_gpu_layers`` (offload devices count as GPUs).
        devices: ``(name, share)`` per offload device in llama.cpp's order: remote devices,
            then this computer's GPUs; the share is free memory or the user's split.
    """
    header = model if isinstance(model, GGUFHeader) else read_gguf_header(Path(model))
    n_layer = int(header.arch_value("block_count", 0))
    placement = layer_devices(n_layer, settings.n_gpu_layers, [share for _, share in devices])
    n_ctx = -(-settings.n_ctx // CTX_PAD) * CTX_PAD
    n_head = _per_layer(header.arch_value("attention.head_count"), n_layer, 1)
    n_head_kv = _per_layer(header.arch_value("attention.head_count_kv"), n_layer, n_head[0])
    n_embd = int(header.arch_value("embedding_length", 0))
    head_k = int(header.arch_value("attention.key_length", n_embd // max(n_head[0], 1)))
    head_v = int(header.arch_value("attention.value_length", head_k))
    block, type_size = GGML_QUANT_SIZES[KV_TYPES[settings.kv_type]]
    weights = [0] * (len(devices) + 1)
    kv = [0] * (len(devices) + 1)
    layers = [0] * (len(devices) + 1)
    for tensor, layer, copy in _tensors_by_layer(header, n_layer):
        device = placement[layer] if layer >= 0 else -1
        if not (copy and device < 0):
            weights[device + 1] += tensor.n_bytes
    for layer, device in enumerate(placement):
        layers[device + 1] += 1
        if layer < n_layer:
            row = (n_head_kv[layer] * head_k + n_head_kv[layer] * head_v) // block * type_size
            kv[device + 1] += n_ctx * row
    names = ["this computer's CPU"] + [name for name, _ in devices]
    return [DeviceShare(name, layers[i], weights[i], kv[i]) for i, name in enumerate(names)]


def format_device_shares(shares: Sequence[DeviceShare]) -> str:
    """One line per device: layers, weights and KV cache in MiB."""
    return "\n".join(f"{s.name}: {s.layers} layers, {s.weights / 2**20:.1f} MiB of weights, "
                     f"{s.kv / 2**20:.1f} MiB of KV cache" for s in shares)


def judge_fit(prediction: MemoryPrediction, ram_available: int,
              vram_available: Optional[int]) -> FitVerdict:
    """Compare a prediction with free memory: ``fits`` (≤ 80 %), ``tight`` (≤ 100 %), ``won't fit``."""
    if prediction.vram and not vram_available:
        return FitVerdict("won't fit", prediction, ram_available, vram_available,
                          "GPU layers were asked for but no GPU with free memory was detected; "
                          "set GPU layers to 0.")
    shares = [("RAM", prediction.ram, ram_available)]
    if prediction.vram:
        shares.append(("VRAM", prediction.vram, vram_available or 0))
    worst = max(shares, key=lambda s: s[1] / max(s[2], 1))
    name, need, have = worst
    ratio = need / max(have, 1)
    verdict = "fits" if ratio <= FIT_SHARE else "tight" if ratio <= 1.0 else "won't fit"
    reason = f"needs {need / 2**30:.2f} GiB of {have / 2**30:.2f} GiB free {name}"
    return FitVerdict(verdict, prediction, ram_available, vram_available, reason)


def fit_on_this_machine(model: Union[Path, GGUFHeader], settings: FitSettings = FitSettings()) -> FitVerdict:
    """:func:`predict_memory` judged against this computer's free RAM and detected VRAM."""
    prediction = predict_memory(model, settings)
    return judge_fit(prediction, *free_memory())


def free_memory() -> tuple[int, Optional[int]]:
    """This computer's available RAM and the largest free VRAM of a detected GPU (or ``None``)."""
    from models import hardware

    gpus = [d for d in hardware.devices() if d.kind in ("GPU", "integrated GPU")]
    vram = max((d.memory_free for d in gpus), default=None) if gpus else None
    return hardware.memory_info().available, vram


def fit_of_file_size(n_bytes: int, settings: FitSettings = FitSettings(),
                     judge: Optional[Callable[[MemoryPrediction], FitVerdict]] = None) -> FitVerdict:
    """A Hub file's fit judged from its size alone (its header is not on this computer yet).

    The weights are the file's bytes, on the GPU when layers are offloaded, otherwise in
    RAM; the KV cache and compute buffers are unknown, so the reason says "weights only"
    and a ``tight`` verdict deserves a look after downloading (the Library then knows).
    """
    on_gpu = settings.n_gpu_layers != 0
    prediction = MemoryPrediction(0 if on_gpu else n_bytes, n_bytes if on_gpu else 0, 0, 0, 0, 0, 0,
                                  settings.n_ctx)
    verdict = judge(prediction) if judge is not None else judge_fit(prediction, *free_memory())
    return FitVerdict(verdict.verdict, prediction, verdict.ram_available, verdict.vram_available,
                      f"{verdict.reason} (weights only)")
