"""The engine process's main loop: requests in, events out (see :mod:`models.engine`).

This module runs in the child process started by
:class:`~models.engine.client.EngineClient`. It owns at most one
:class:`~models.engine.runtime.LoadedModel` and its
:class:`~models.engine.batching.BatchScheduler`. ``chat`` requests (each with an ``id``
its events carry back) go to the scheduler, which generates several at once; while it has
work, the loop reads new requests between its steps without waiting, so requests join and
cancels land between two tokens. Other requests (load, unload, stats...) are answered at
once, one at a time, with events that carry no ``id``. Every failure it can catch is an
``error`` event; the ones it cannot catch (a segfault or ``GGML_ASSERT`` abort in
llama.cpp) end the process, which the client notices.
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import signal
from typing import Any, Callable, Optional

from models.foundation.errors import QuantDeskError

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
        "parallel": model.parallel,
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


def _close_model(state: dict) -> None:
    scheduler = state.pop("scheduler", None)
    if scheduler is not None:
        scheduler.close()
    model = state.get("model")
    if model is not None:
        model.close()
        state["model"] = None


def _handle(request: dict, state: dict, conn: Any) -> Optional[dict]:
    """Serve one request; return its final event (``None`` for a queued chat, whose
    events the scheduler sends)."""
    from models.engine.batching import BatchScheduler
    from models.engine.cancel_flag import install_abort_hook
    from models.engine.embedding import check_embedding_model, embed
    from models.engine.runtime import LoadedModel
    from models.engine.sessions import DEFAULT_CAP_BYTES, SessionStore
    from models.engine.settings import LoadSettings
    from models.images import has_images

    op = request["op"]
    model: Optional[LoadedModel] = state.get("model")
    if op == "chat":
        scheduler = state.get("scheduler")
        if scheduler is None:
            check_embedding_model(model)
            raise QuantDeskError("No model is loaded in the engine.", "Load a model first.")
        scheduler.submit(request)
        return None
    if op == "load":
        _close_model(state)
        settings = LoadSettings.from_dict(request["settings"])
        model = LoadedModel(request["path"], settings, state["log_capture"],
                            on_progress=_progress_sender(conn),
                            endpoints=tuple(request.get("rpc_endpoints") or ()))
        # Tell the client the load worked and the self-test starts: if the process dies
        # now, the client knows a kernel crashed and can retry without extra buffers.
        conn.send({"event": "phase", "phase": "selftest"})
        model.self_test()
        model.abort_hook = install_abort_hook(model.llm.ctx, state["cancel"])
        state["model"] = model
        if settings.embedding:  # no replies: embed requests are answered one by one
            return {"event": "loaded", "report": _load_report(model)}
        store = SessionStore.default(request.get("session_cap_bytes", DEFAULT_CAP_BYTES))
        state["scheduler"] = BatchScheduler(
            model, state["cancel"], _event_sender(conn),
            cache_ram_bytes=request.get("prompt_cache_bytes", 1 << 30), session_store=store)
        report = _load_report(model)
        log.info("loaded %s: %s", model.path, model.offload.summary())
        return {"event": "loaded", "report": report}
    if op == "embed":
        if model is None or not model.settings.embedding:
            raise QuantDeskError("No model is loaded for embeddings in the engine.",
                                 "Load an embedding model (embedding mode) first.")
        vectors, tokens = embed(model, request["inputs"])
        return {"event": "embeddings", "vectors": vectors, "tokens": tokens}
    if op == "count_tokens":
        if model is None:
            raise QuantDeskError("No model is loaded in the engine.", "Load a model first.")
        prompt = request.get("prompt")
        if prompt is None and has_images(request["messages"]):  # images count as their tokens
            images, _ = model.prompt_with_images(request["messages"])
            images.close()
            return {"event": "count", "tokens": len(images.tokens)}
        text = prompt if prompt is not None else model.render(request["messages"])
        return {"event": "count", "tokens": len(model.tokenize_prompt(text))}
    if op == "delete_session":
        scheduler = state.get("scheduler")
        for slot in scheduler.slots if scheduler is not None else ():
            if slot.conversation_id == request["conversation_id"]:
                slot.conversation_id = None  # the cache no longer stands for a saved state
        if model is not None and model.conversation_id == request["conversation_id"]:
            model.conversation_id = None
        deleted = SessionStore.default().delete(request["conversation_id"])
        return {"event": "ok", "deleted": deleted}
    if op == "unload":
        _close_model(state)
        return {"event": "ok"}
    if op == "stats":
        if model is None:
            return {"event": "stats", "stats": {"loaded": False, "pid": os.getpid()}}
        scheduler = state.get("scheduler")
        if scheduler is None:
            return {"event": "stats", "stats": {"loaded": True, "pid": os.getpid(),
                                                "path": model.path, "embedding": True}}
        return {"event": "stats", "stats": {
            "loaded": True, "pid": os.getpid(), "path": model.path,
            "kv_cache_tokens": sum(len(s.tokens) for s in scheduler.slots),
            "context_length": model.n_ctx, "parallel": model.parallel,
            "active_slots": sum(s.reply is not None for s in scheduler.slots),
            "waiting": len(scheduler.waiting), "prompt_cache_entries": len(scheduler.cache),
            "prompt_cache_hits": scheduler.cache.hits,
        }}
    if op == "shutdown":
        return {"event": "ok"}
    raise ValueError(f"unknown engine request {op!r}")


def _serve(request: dict, state: dict, conn: Any) -> bool:
    """Handle one request and send its answer; False when the loop must end."""
    try:
        reply = _handle(request, state, conn)
    except QuantDeskError as exc:
        log.info("engine request %s refused: %s", request.get("op"), exc.user_message)
        reply = {"event": "error", "what": exc.what, "fix": exc.fix}
    except Exception as exc:  # a bug: report it to the client, keep serving
        log.exception("engine request %s failed", request.get("op"))
        reply = {"event": "error", "what": f"The engine failed: {exc!r}.",
                 "fix": "The log file has the details; please report it."}
    if reply is None:
        return True
    if "id" in request:
        reply["id"] = request["id"]
    conn.send(reply)
    return request.get("op") != "shutdown"


def _step(state: dict) -> None:
    """One batch of the scheduler; a failure ends the requests in it, not the engine."""
    scheduler = state["scheduler"]
    try:
        scheduler.step()
    except Exception as exc:  # a bug: every reply in flight gets the sentence
        log.exception("engine: a batching step failed")
        scheduler.fail_all(f"The engine failed: {exc!r}.",
                           "The log file has the details; please report it.")
    scheduler.run_after_reply()


def _event_sender(conn: Any) -> Callable[[dict], None]:
    """``conn.send`` for the events of streaming replies, without its per-call set-up.

    ``Connection.send`` builds a ``ForkingPickler`` and a buffer for every message, which
    between two tokens (after a ``llama_decode`` has pushed Python's own data out of the
    CPU caches) costs tens of microseconds; the C pickler's ``dumps`` is one call, and
    the client's ``recv`` reads its bytes the same way. The events are plain values.
    """
    send_bytes, dumps, protocol = conn.send_bytes, pickle.dumps, pickle.HIGHEST_PROTOCOL
    return lambda event: send_bytes(dumps(event, protocol))


def _arrival_check(conn: Any) -> Callable[[], bool]:
    """A function that says, without waiting, whether a request has arrived on ``conn``.

    It runs between every two tokens while replies stream. ``Connection.poll`` builds and
    tears down a selector on each call, tens of microseconds of Python per token; one
    ``select.poll`` object kept for the process asks the pipe the same question with one
    system call.
    """
    try:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
    except (AttributeError, OSError):  # no poll() on this platform (Windows)
        return conn.poll
    return lambda: bool(poller.poll(0))


def engine_main(conn: Any, cancel_flag: Any) -> None:
    """Entry point of the engine process (the target of the spawned Process).

    Args:
        conn: This end of the duplex pipe to the client.
        cancel_flag: The shared bytes of :class:`~models.engine.cancel_flag.CancelFlag`.
    """
    # Ctrl+C in a terminal reaches the whole process group; the CLI turns it into a
    # cancel, so the engine must not die of it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from models.engine.llama_log import LlamaLogCapture
    from models.foundation.logs import setup_logging

    setup_logging()
    log.info("engine process %d started", os.getpid())
    state: dict = {"model": None, "log_capture": LlamaLogCapture(), "cancel": cancel_flag}
    arrived = _arrival_check(conn)
    running = True
    while running:
        try:
            scheduler = state.get("scheduler")
            if scheduler is not None and scheduler.busy():
                # Work to do: take what has arrived, then one step.
                while running and arrived():
                    running = _serve(conn.recv(), state, conn)
                if running and state.get("scheduler") is not None:
                    _step(state)
                continue
            running = _serve(conn.recv(), state, conn)
        except (EOFError, OSError):
            log.info("engine process %d: the client went away", os.getpid())
            break
    _close_model(state)
    log.info("engine process %d stopped", os.getpid())
