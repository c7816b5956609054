"""The cancel flag shared by the client and the engine, and llama.cpp's abort hook.

Cancel must stop a reply within 100 ms, but one llama.cpp call can take longer: a batch
of prompt tokens, or one decode step of a large model on a CPU. llama.cpp lets a context
check an *abort callback* between the nodes of its compute graph
(``llama_set_abort_callback``); it is called hundreds of times per token, so a Python
callback costs about 12 % of decode speed (measured on SmolLM2). Instead, the callback is
a native function: C's ``strlen`` on the flag's two bytes, ``[flag, 0]``. It returns 0
(do not abort) while the flag is 0 and 1 (abort) once it is 1 — exactly a
``bool (*)(void *)`` for that buffer, with no Python involved, so it costs nothing.

Layout of the shared memory (a :func:`multiprocessing.RawArray`, set by the client, read
by the engine and by llama.cpp)::

    byte 0: 1 = cancel requested, 0 = run on
    byte 1: always 0 (the terminator strlen stops at)

After an abort llama.cpp removes the unfinished batch from the KV cache and
``llama_decode`` returns 2; the engine ends the reply as cancelled.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys
from typing import Any, Optional

log = logging.getLogger(__name__)


class CancelFlag:
    """A one-byte flag in memory shared with the engine process.

    Args:
        context: The multiprocessing context that starts the engine (``spawn``).
    """

    def __init__(self, context: Any) -> None:
        self.shared = context.RawArray(ctypes.c_ubyte, 2)  # zero-filled: not cancelled

    def set(self) -> None:
        """Ask the engine to stop the current reply."""
        self.shared[0] = 1

    def clear(self) -> None:
        """Before a new request: run on."""
        self.shared[0] = 0

    def is_set(self) -> bool:
        """Whether cancel was asked for."""
        return self.shared[0] != 0


def _native_strlen() -> Optional[int]:
    """The address of the C library's ``strlen``, or ``None`` where it cannot be found."""
    try:
        if sys.platform == "win32":
            libc = ctypes.cdll.msvcrt
        else:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        return ctypes.cast(libc.strlen, ctypes.c_void_p).value
    except (OSError, AttributeError) as exc:
        log.warning("no native strlen (%s): cancel waits for the current llama.cpp call", exc)
        return None


def install_abort_hook(llama_ctx: Any, shared: Any) -> Any:
    """Make llama.cpp stop its current computation when ``shared[0]`` becomes 1.

    Runs in the engine process. Returns the callback object, which must be kept alive as
    long as the context (ctypes would free it otherwise); ``None`` when unavailable.
    """
    import llama_cpp

    address = _native_strlen()
    if address is None:
        return None
    callback = llama_cpp.ggml_abort_callback(address)
    llama_cpp.llama_set_abort_callback(llama_ctx, callback,
                                       ctypes.c_void_p(ctypes.addressof(shared)))
    return callback
