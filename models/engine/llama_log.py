"""llama.cpp's own log, captured in the engine process (``llama_log_set``).

llama.cpp prints what it did while loading — how many layers went to the GPU, the size
of each backend buffer — and why it refused something ("quantized V cache requires
flash_attn"). :class:`LlamaLogCapture` receives those lines through the log callback,
writes them to the app log (``llama.cpp`` logger; details at DEBUG, warnings and errors
at their level), keeps the recent ones for error messages, and
:func:`parse_offload_report` turns the load lines into an :class:`OffloadReport`.

The callback receives text in pieces (level ``CONT`` continues the previous line), so
lines are assembled before they are logged.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import re
from dataclasses import dataclass, field
from typing import Iterable, Optional

log = logging.getLogger("llama.cpp")

# enum ggml_log_level (ggml.h: NONE, DEBUG, INFO, WARN, ERROR, CONT) → logging level;
# CONT continues the previous line. (llama-cpp-python's _logger.py has an older order.)
_LEVELS = {0: logging.DEBUG, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING,
           4: logging.ERROR}
_CONT = 5

_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
# "load_tensors: layer  12 assigned to device RPC0, is_swa = 0" (a DEBUG line, one per
# block and one for the output layer): where each layer went, remote devices included.
_ASSIGNED = re.compile(r"layer\s+(\d+) assigned to device ([^,\s]+)")
# e.g. "load_tensors:   CPU_Mapped model buffer size =    87.71 MiB"
#      "llama_kv_cache:        CPU KV buffer size =    45.00 MiB"
_BUFFER = re.compile(r"(\S+)\s+(model|KV|compute|output)\s+buffer size\s*=\s*([\d.]+) MiB")


@dataclass
class OffloadReport:
    """Where the model ended up after a load, as llama.cpp reported it.

    Attributes:
        layers_on_gpu: Layers llama.cpp put on a GPU.
        layers_total: Layers that could have gone (blocks + output layer).
        buffers: ``(kind, buffer name) → MiB``, e.g. ``("model", "CPU_Mapped") → 87.7``,
            ``("KV", "CUDA0")``, ``("compute", "CPU")``, ``("model", "RPC0[127.0.0.1:50052]")``.
        layers_by_device: Device name (``CPU``, ``CUDA0``, ``RPC0``...) → the layers it
            holds, the output layer counted, in order of first layer.
        device_labels: Device name → what the user knows it by (a remote device's entry).
    """

    layers_on_gpu: int = 0
    layers_total: int = 0
    buffers: dict[tuple[str, str], float] = field(default_factory=dict)
    layers_by_device: dict[str, int] = field(default_factory=dict)
    device_labels: dict[str, str] = field(default_factory=dict)

    @property
    def layers_on_cpu(self) -> int:
        """Layers left on the CPU."""
        return max(self.layers_total - self.layers_on_gpu, 0)

    def where(self) -> str:
        """Where the model runs, in words: ``"on the CPU"``, ``"on the GPU (CUDA0)"``,
        ``"on the GPU (CUDA0) for 20 of 31 layers, the rest on the CPU"``, or the layers
        per device when they went to other computers or several GPUs (remote devices
        named by their entries)."""
        gpus_used = [name for name in self.layers_by_device if name != "CPU"]
        if self.device_labels or len(gpus_used) > 1:
            return "with its layers split: " + self.placement()
        if self.layers_on_gpu == 0:
            return "on the CPU"
        gpus = sorted({name for _, name in self.buffers if _memory_place(name) == "GPU"})
        gpu = f"the GPU ({', '.join(gpus)})" if gpus else "the GPU"
        if self.layers_on_gpu >= self.layers_total:
            return f"on {gpu}"
        return f"on {gpu} for {self.layers_on_gpu} of {self.layers_total} layers, the rest on the CPU"

    def memory_mib(self) -> dict[str, float]:
        """MiB of the model's, KV cache's, compute and output buffers by where they live:
        ``"RAM"`` (the CPU's buffers, a file mapped from disk, a GPU backend's host
        buffers), ``"GPU"`` and ``"remote"`` (RPC devices on other computers)."""
        places: dict[str, float] = {}
        for (_, name), mib in self.buffers.items():
            place = _memory_place(name)
            places[place] = places.get(place, 0.0) + mib
        return places

    def memory_words(self) -> str:
        """The memory it takes, e.g. ``"282 MiB of memory"``, ``"1.3 GiB of GPU memory and
        120 MiB of RAM"``; empty when llama.cpp reported no buffers."""
        places = self.memory_mib()
        if set(places) <= {"RAM"}:
            return f"{_mib_words(places['RAM'])} of memory" if places else ""
        words = {"GPU": "of GPU memory", "remote": "on other computers", "RAM": "of RAM"}
        parts = [f"{_mib_words(places[p])} {w}" for p, w in words.items() if places.get(p)]
        return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]

    def summary(self) -> str:
        """One line for the log and the details: layers and buffer sizes."""
        parts = [f"{self.layers_on_gpu}/{self.layers_total} layers on GPU, "
                 f"{self.layers_on_cpu} on CPU"]
        if len(self.layers_by_device) > 1 or self.device_labels:
            parts.append("layers by device: " + self.placement())
        for (kind, name), mib in sorted(self.buffers.items()):
            parts.append(f"{kind} {name} {mib:.1f} MiB")
        return "; ".join(parts)

    def placement(self) -> str:
        """Where the layers went, e.g. ``CPU 11, RPC0 (ssh://me@box) 10, RPC1 (…) 10``."""
        return ", ".join(
            f"{name}{f' ({self.device_labels[name]})' if name in self.device_labels else ''} {count}"
            for name, count in self.layers_by_device.items())

    def to_dict(self) -> dict:
        """Plain values for the pipe (tuple keys become ``"kind:name"``)."""
        return {"layers_on_gpu": self.layers_on_gpu, "layers_total": self.layers_total,
                "buffers": {f"{k}:{n}": v for (k, n), v in self.buffers.items()},
                "layers_by_device": dict(self.layers_by_device),
                "device_labels": dict(self.device_labels)}

    @classmethod
    def from_dict(cls, values: dict) -> "OffloadReport":
        """The inverse of :meth:`to_dict`."""
        buffers = {tuple(key.split(":", 1)): mib for key, mib in values["buffers"].items()}
        return cls(values["layers_on_gpu"], values["layers_total"], buffers,  # type: ignore[arg-type]
                   dict(values.get("layers_by_device", {})), dict(values.get("device_labels", {})))


def _memory_place(buffer: str) -> str:
    """``"RAM"``, ``"GPU"`` or ``"remote"`` for a buffer name (``CPU``, ``CPU_Mapped``,
    ``CUDA_Host``, ``CUDA0``, ``Metal``, ``Vulkan0``, ``RPC0[host:port]``)."""
    if buffer.startswith("RPC"):
        return "remote"
    if buffer.startswith("CPU") or buffer.endswith("_Host"):
        return "RAM"
    return "GPU"


def _mib_words(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib:.0f} MiB"


def parse_offload_report(lines: Iterable[str]) -> OffloadReport:
    """Read the layer split and buffer sizes from llama.cpp's load log lines."""
    report = OffloadReport()
    device_of_layer: dict[int, str] = {}
    for line in lines:
        if match := _ASSIGNED.search(line):
            device_of_layer[int(match[1])] = match[2]
        elif match := _OFFLOADED.search(line):
            report.layers_on_gpu, report.layers_total = int(match[1]), int(match[2])
        elif match := _BUFFER.search(line):
            key = (match[2], match[1])
            report.buffers[key] = report.buffers.get(key, 0.0) + float(match[3])
    for layer in sorted(device_of_layer):
        name = device_of_layer[layer]
        report.layers_by_device[name] = report.layers_by_device.get(name, 0) + 1
    return report


def _set_mtmd_log(callback, user_data) -> None:
    """libmtmd (images) logs through callbacks of its own, set apart from llama.cpp's."""
    try:
        from llama_cpp import mtmd_cpp
    except (ImportError, OSError, RuntimeError):  # a build without libmtmd: nothing logs there
        return
    mtmd_cpp.mtmd_log_set(callback, user_data)
    mtmd_cpp.mtmd_helper_log_set(callback, user_data)


class LlamaLogCapture:
    """Receives llama.cpp's log in this process. Create one; it stays installed until
    :meth:`close` (the engine process keeps its one to the end).

    Args:
        keep: How many recent lines to remember for reports and error messages.
    """

    def __init__(self, keep: int = 2000) -> None:
        self.recent: collections.deque[str] = collections.deque(maxlen=keep)
        self._partial = ""
        self._level = logging.DEBUG
        self._total = 0  # lines ever received, so marks survive the deque dropping old ones
        import llama_cpp

        # What was installed before (llama-cpp-python's own printer), for close().
        self._previous = llama_cpp.llama_log_callback()
        self._previous_data = ctypes.c_void_p()
        llama_cpp.llama_log_get(ctypes.byref(self._previous), ctypes.byref(self._previous_data))
        # The ctypes callback object must outlive the registration: keep a reference.
        self._callback = llama_cpp.llama_log_callback(self._on_log)
        llama_cpp.llama_log_set(self._callback, ctypes.c_void_p(0))
        _set_mtmd_log(self._callback, ctypes.c_void_p(0))  # the vision encoder's lines too

    def _on_log(self, level: int, text: Optional[bytes], _user_data: object) -> None:
        if level != _CONT:
            self._level = _LEVELS.get(level, logging.DEBUG)
        self._partial += (text or b"").decode("utf-8", errors="replace")
        while "\n" in self._partial:
            line, self._partial = self._partial.split("\n", 1)
            if not line.strip():
                continue
            # A load logs thousands of DEBUG lines (one per tensor): they go to the log
            # file only, so the lines kept for reports are the INFO ones and worse, and
            # the one line per layer that says which device holds it.
            log.log(self._level, "%s", line)
            if self._level > logging.DEBUG or "assigned to device" in line:
                self.recent.append(line)
                self._total += 1

    def close(self) -> None:
        """Put back the log callback that was installed before this one. llama.cpp's log
        callback is one for the whole process and calls into this object: a capture that
        is dropped without ``close`` (a model loaded for a while in a process that goes
        on, as a test does) leaves llama.cpp calling freed memory at its next line."""
        import llama_cpp

        llama_cpp.llama_log_set(self._previous, self._previous_data)
        _set_mtmd_log(self._previous, self._previous_data)

    def mark(self) -> int:
        """A position in the log; pass it to :meth:`lines_since`."""
        return self._total

    def lines_since(self, mark: int) -> list[str]:
        """Lines logged after :meth:`mark` returned ``mark`` (as many as were kept)."""
        new = min(self._total - mark, len(self.recent))
        return list(self.recent)[-new:] if new > 0 else []

    def first_error(self, since: int = 0) -> Optional[str]:
        """The first error line since ``since`` (the cause; later lines are consequences),
        without llama.cpp's ``function_name:`` prefix; ``None`` if there is none."""
        lines = self.lines_since(since)
        for words in (("error", "requires", "not within"), ("failed",)):
            for line in lines:
                if any(w in line.lower() for w in words):
                    return re.sub(r"^\w+:\s*", "", line.strip())
        return None
