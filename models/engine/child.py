"""The engine process's main loop: requests in, events out (see :mod:`models.engine`).

This module runs in the child process started by
:class:`~models.engine.client.EngineClient`. It owns at most one
:class:`~models.engine.runtime.LoadedModel`, answers one request at a time, and reports
every failure it can catch as an ``error`` event; the ones it cannot catch (a segfault or
``GGML_ASSERT`` abort in llama.cpp) end the process, which the client notices.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Any, Optional

from app.core.errors import QuantDeskError

log = logging.getLogger("models.engine.child")


def _load_report(model: Any) -> dict:
    from models.hardware import backend_names

    llm = model.llm
    return {
        "path": model.path,
        "settings": model.settings.to_dict(),
        "use_extra_bufts": bool(llm.model_params.use_extra_bufts),
        "offload": model.offload.to_dict(),
        "load_seconds": model.load_seconds,
        "context_length": model.n_ctx,
        "template": model.template_name,
        "backends": backend_names(),
        "pid": os.getpid(),
    }


def _progress_sender(conn: Any):
    """llama.cpp's load progress as ``progress`` events, one per percent at most (it
    calls back for every tensor, thousands of times for a large model)."""
    sent = [-1]

    def send(fraction: float) -> None:
        percent = int(fraction * 100)
        if percent > sent[0]:
            sent[0] = percent
            conn.send({"event": "progress", "fraction": min(1.0, max(0.0, fraction))})

    return send


def _handle(request: dict, state: dict, conn: Any) -> dict:
    """Serve one request; return the final event (deltas are sent as they come)."""
    from models.engine.cancel_flag import install_abort_hook
    from models.engine.options import ChatOptions
    from models.engine.runtime import LoadedModel
    from models.engine.sessions import DEFAULT_CAP_BYTES, SessionStore
    from models.engine.settings import LoadSettings

    op = request["op"]
    model: Optional[LoadedModel] = state.get("model")
    if op == "load":
        if model is not None:
            model.close()
            state["model"] = None
        settings = LoadSettings.from_dict(request["settings"])
        model = LoadedModel(request["path"], settings, state["log_capture"],
                            on_progress=_progress_sender(conn))
        # Tell the client the load worked and the self-test starts: if the process dies
        # now, the client knows a kernel crashed and can retry without extra buffers.
        conn.send({"event": "phase", "phase": "selftest"})
        model.self_test()
        model.abort_hook = install_abort_hook(model.llm.ctx, state["cancel"])
        state["model"] = model
        report = _load_report(model)
        log.info("loaded %s: %s", model.path, model.offload.summary())
        return {"event": "loaded", "report": report}
    if op == "chat":
        if model is None:
            raise QuantDeskError("No model is loaded in the engine.", "Load a model first.")
        conversation_id = request.get("conversation_id")
        store = SessionStore.default(request.get("session_cap_bytes", DEFAULT_CAP_BYTES)) \
            if conversation_id is not None else None
        stats = model.chat(
            request["messages"], ChatOptions.from_dict(request["options"]),
            cancelled=lambda: state["cancel"][0] != 0,
            emit=lambda text: conn.send({"event": "delta", "text": text}),
            conversation_id=conversation_id, store=store,
        )
        if store is not None:
            # Saved once the reply is sent, so the save never delays the reply.
            state["after_reply"] = lambda: model.save_session(store, conversation_id)
        return {"event": "done", "stats": stats.to_dict()}
    if op == "delete_session":
        if model is not None and model.conversation_id == request["conversation_id"]:
            model.conversation_id = None  # the cache no longer stands for a saved state
        deleted = SessionStore.default().delete(request["conversation_id"])
        return {"event": "ok", "deleted": deleted}
    if op == "unload":
        if model is not None:
            model.close()
            state["model"] = None
        return {"event": "ok"}
    if op == "stats":
        if model is None:
            return {"event": "stats", "stats": {"loaded": False, "pid": os.getpid()}}
        return {"event": "stats", "stats": {
            "loaded": True, "pid": os.getpid(), "path": model.path,
            "kv_cache_tokens": model.llm.n_tokens, "context_length": model.n_ctx,
        }}
    if op == "shutdown":
        return {"event": "ok"}
    raise ValueError(f"unknown engine request {op!r}")


def engine_main(conn: Any, cancel_flag: Any) -> None:
    """Entry point of the engine process (the target of the spawned Process).

    Args:
        conn: This end of the duplex pipe to the client.
        cancel_flag: The shared bytes of :class:`~models.engine.cancel_flag.CancelFlag`.
    """
    # Ctrl+C in a terminal reaches the whole process group; the CLI turns it into a
    # cancel, so the engine must not die of it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from app.core.logs import setup_logging
    from models.engine.llama_log import LlamaLogCapture

    setup_logging()
    log.info("engine process %d started", os.getpid())
    state: dict = {"model": None, "log_capture": LlamaLogCapture(), "cancel": cancel_flag}
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            log.info("engine process %d: the client went away", os.getpid())
            break
        try:
            reply = _handle(request, state, conn)
        except QuantDeskError as exc:
            log.info("engine request %s refused: %s", request.get("op"), exc.user_message)
            reply = {"event": "error", "what": exc.what, "fix": exc.fix}
        except Exception as exc:  # a bug: report it to the client, keep serving
            log.exception("engine request %s failed", request.get("op"))
            reply = {"event": "error", "what": f"The engine failed: {exc!r}.",
                     "fix": "The log file has the details; please report it."}
        try:
            conn.send(reply)
        except (BrokenPipeError, OSError):
            break
        after_reply = state.pop("after_reply", None)
        if after_reply is not None:
            try:
                after_reply()
            except Exception:  # a failed save only costs a prefill next time
                log.exception("engine: saving the conversation's state failed")
        if request.get("op") == "shutdown":
            break
    model = state.get("model")
    if model is not None:
        model.close()
    log.info("engine process %d stopped", os.getpid())
