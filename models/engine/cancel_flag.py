"""The cancel flag shared by the client and the engine, and llama.cpp's abort hook.

Cancel must stop a reply within 100 ms, but one llama.cpp call can take longer: a batch
of prompt tokens, or one decode step of a large model on a CPU. llama.cpp lets a context
check an *abort callback* between the nodes of its compute graph
(``llama_set_abort_callback``); it is called hundreds of times per token, so a Python
callback costs about 12 % of decode speed (measured on SmolLM2). Instead, the callback is
a native function: C's ``strlen`` on the flag's two bytes, ``[flag, 0]``. It returns 0
(do not abort) while the flag is 0 and 1 (abort) once it is 1 — exactly a
``bool (*)(void *)`` for that buffer, with no Python involved, so it costs nothing.

Several replies can run at once (continuous batching), and cancelling one must not stop
the others, so each request in flight has a *lane*: a byte of its own. Layout of the
shared memory (a :func:`multiprocessing.RawArray`, set by the client, read by the engine
and, for byte 0, by llama.cpp)::

    byte 0: 1 = abort the computation in progress, 0 = run on
    byte 1: always 0 (the terminator strlen stops at)
    byte 2 + lane: 1 = the request on that lane is cancelled

The client sets a lane's byte, then byte 0. llama.cpp aborts the batch in progress (all
the sequences in it); the engine clears byte 0, reads the lanes, ends the cancelled
requests and decodes the others again. A lane set after the engine read them comes with
byte 0 set again, so it is seen at the next batch.

After an abort llama.cpp removes the unfinished batch from the KV cache and
``llama_decode`` returns 2; the engine ends the cancelled replies as cancelled.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys
from typing import Any, Optional

log = logging.getLogger(__name__)


MAX_LANES = 256  # requests in flight at once per engine


class CancelFlag:
    """Cancel bytes in memory shared with the engine process: one abort byte and a lane
    per request in flight.

    Args:
        context: The multiprocessing context that starts the engine (``spawn``).
        lanes: How many requests can be in flight at once.
    """

    def __init__(self, context: Any, lanes: int = MAX_LANES) -> None:
        self.lanes = lanes
        self.shared = context.RawArray(ctypes.c_ubyte, 2 + lanes)  # zero-filled

    def set(self, lane: Optional[int] = None) -> None:
        """Cancel the request on ``lane`` (every lane when ``None``), stopping llama.cpp's
        computation in progress."""
        if lane is None:
            for index in range(self.lanes):
                self.shared[2 + index] = 1
        else:
            self.shared[2 + lane] = 1
        self.shared[0] = 1

    def clear(self, lane: int) -> None:
        """Before a new request on ``lane``: run on."""
        self.shared[2 + lane] = 0

    def is_set(self, lane: int) -> bool:
        """Whether the request on ``lane`` was cancelled."""
        return self.shared[2 + lane] != 0


def lane_cancelled(shared: Any, lane: int) -> bool:
    """In the engine: whether the request on ``lane`` was cancelled."""
    return shared[2 + lane] != 0


def take_abort(shared: Any) -> None:
    """In the engine, before reading the lanes: llama.cpp may run on."""
    shared[0] = 0


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
