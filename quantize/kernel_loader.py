"""Loading the compiled block quantizers on a thread of their own, while the model is being read.

Before its first tensor, a quantize job needs numba imported and its types' kernels
loaded from the disk cache: on a 2-core x86-64 VM (November 2026) about 0.6 s of CPU,
more than quantizing a 270 MB F16 model to Q8_0 takes. Started first thing (by
``quantdesk quantize`` before it imports anything else, and by
:func:`quantize.job.quantize_model`), this thread does it while the caller imports the
rest, reads the model's header, plans the outputs and maps the first tensors; the job
waits for it (:func:`wait`) only when it is about to encode. What the thread cannot do
(no compiled package in this build, a kernel that fails) is left for the job to do again
and report in its own words.

Importing this module imports nothing beyond the standard library.
"""

from __future__ import annotations

import threading
from typing import Iterable, Optional

_thread: Optional[threading.Thread] = None
_lock = threading.Lock()


def _load(type_names: list[str], imatrix: bool) -> None:
    try:
        import numpy as np

        from quantize.ftypes import FILE_TYPES, is_quantized_type

        qtypes = sorted({FILE_TYPES[name].default_type for name in type_names
                         if name in FILE_TYPES and is_quantized_type(FILE_TYPES[name].default_type)})
        from quantize.blocks import compile_kernels
        from quantize.blocks.widen import to_f32

        for stored in (np.float16, np.uint16):  # F16 and BF16 inputs are widened by a kernel too
            to_f32(np.zeros(1, stored))
        compile_kernels(qtypes, imatrix)
    except Exception:  # noqa: BLE001 - the job loads them again and reports what fails
        pass


def start(type_names: Iterable[str], imatrix: bool = False) -> None:
    """Start loading the kernels for these file types (``"Q8_0"``, ``"Q4_K_M"``) on a
    daemon thread, unless a load is running already. Unknown names are skipped (the job
    says what is wrong with them); the other tensor types a plan uses are loaded by the
    job itself."""
    global _thread
    with _lock:
        if _thread is not None and _thread.is_alive():
            return
        names = [name.strip().upper() for name in type_names if name.strip()]
        _thread = threading.Thread(target=_load, args=(names, imatrix), name="kernel-loader",
                                   daemon=True)
        _thread.start()


def wait(timeout: Optional[float] = None) -> bool:
    """Wait for a started load to end; True when none is running any more."""
    thread = _thread
    if thread is None:
        return True
    thread.join(timeout)
    return not thread.is_alive()
