"""Command-line options shared by the commands that load a model (``chat``, ``bench``,
and ``serve`` for its remote devices).

Not a command itself (it is not in ``COMMAND_MODULES``): it maps ``--threads``,
``--ctx``, ``--gpu-layers`` ... onto :class:`~models.engine.settings.LoadSettings`, so
both commands offer the same offload options with the same names.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from models.foundation.errors import QuantDeskError


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """Add MODEL and the load options (the GUI's offload sliders) to ``parser``."""
    parser.add_argument("model", type=Path, help="the GGUF model file")
    group = parser.add_argument_group("load settings")
    group.add_argument("--gpu-layers", type=int, default=-1,
                       help="layers on the GPU: -1 for all (default; 0 without a GPU)")
    group.add_argument("--main-gpu", type=int, default=0, help="index of the GPU to use")
    group.add_argument("--threads", type=int, default=None, help="threads for generating")
    group.add_argument("--batch-threads", type=int, default=None,
                       help="threads for reading the prompt")
    group.add_argument("--ctx", type=int, default=4096,
                       help="context length in tokens (0: the model's own)")
    group.add_argument("--batch-size", type=int, default=512)
    group.add_argument("--micro-batch-size", type=int, default=512)
    group.add_argument("--flash-attn", action="store_true", help="use flash attention")
    group.add_argument("--cache-type-k", default="f16", choices=["f16", "q8_0", "q4_0"])
    group.add_argument("--cache-type-v", default="f16", choices=["f16", "q8_0", "q4_0"],
                       help="quantized V cache needs --flash-attn")
    group.add_argument("--no-mmap", action="store_true", help="read the file instead of mapping it")
    group.add_argument("--mlock", action="store_true", help="lock the weights in RAM")
    group.add_argument("--draft-model", type=Path, default=None,
                       help="a small GGUF of the same family, for --speculative draft_model")
    group.add_argument("--mmproj", type=Path, default=None, metavar="FILE",
                       help="the model's vision encoder (an mmproj GGUF), so messages can carry "
                            "images; `chat` finds the one beside the model by itself")
    group.add_argument("--n-cpu-moe", type=int, default=0, metavar="N",
                       help="mixture-of-experts models: keep the experts of the first N layers "
                            "in RAM, on the CPU (-1: all), the rest of each layer on the GPU")
    add_remote_arguments(group)


def add_remote_arguments(group) -> None:
    """``--remote`` and ``--split``: other computers' devices (``quantdesk worker``)."""
    group.add_argument("--remote", default=None, metavar="HOST:PORT[,...]",
                       help="other computers' workers (`quantdesk worker`) that take part of the "
                            "layers: HOST:PORT, or ssh://USER@HOST to reach one through an SSH "
                            "tunnel; they count as GPUs for --gpu-layers")
    group.add_argument("--split", default=None, metavar="SHARE[,...]",
                       help="shares of the offloaded layers per device (the remote devices, "
                            "then this computer's GPUs), e.g. 1,1; default: by free memory")


def remote_settings_from_args(args: argparse.Namespace) -> dict:
    """``remote_devices`` and ``device_split`` of the options, for :class:`LoadSettings`."""
    from models.rpc.endpoints import parse_remote_devices

    remote = tuple(d.text for d in parse_remote_devices(args.remote or ""))
    try:
        split = tuple(float(v) for v in (args.split or "").split(",") if v.strip())
    except ValueError:
        raise QuantDeskError(f"--split {args.split} is not a list of numbers.",
                             "Give one share per device, e.g. --split 1,1.") from None
    return {"remote_devices": remote, "device_split": split}


def load_settings_from_args(args: argparse.Namespace):
    """The :class:`LoadSettings` the options describe (validated when the model loads)."""
    from models.engine.settings import LoadSettings

    if not args.model.is_file():
        raise QuantDeskError(f"The model file {args.model} does not exist.",
                             "Give the path of a GGUF file.")
    return LoadSettings(
        gpu_layers=args.gpu_layers, main_gpu=args.main_gpu, threads=args.threads,
        batch_threads=args.batch_threads, context_length=args.ctx, batch_size=args.batch_size,
        micro_batch_size=args.micro_batch_size, flash_attention=args.flash_attn,
        kv_cache_type_k=args.cache_type_k, kv_cache_type_v=args.cache_type_v,
        use_mmap=not args.no_mmap, use_mlock=args.mlock,
        draft_model=str(args.draft_model) if args.draft_model is not None else None,
        mmproj=str(args.mmproj) if getattr(args, "mmproj", None) is not None else None,
        cpu_moe_layers=args.n_cpu_moe, **remote_settings_from_args(args),
    )
