"""The engine client: a small thread-safe handle on the engine process.

:class:`EngineClient` starts the engine process on first use, sends it requests and turns
its events into return values, streamed text and exceptions. One request runs at a time
(a lock serialises them; :meth:`EngineClient.cancel` needs no lock, so a GUI thread can
cancel a reply another thread is streaming). When the process dies, the request in
flight raises :class:`EngineCrashed` — with the text streamed so far kept on the
exception — and the next request starts a fresh process and reloads the last model.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import multiprocessing.connection
import signal
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from app.core.errors import QuantDeskError
from app.core.jobs import Progress, ProgressCallback
from models.engine import fallback
from models.engine.cancel_flag import CancelFlag
from models.engine.gguf_info import GGUFModelInfo, read_model_info
from models.engine.llama_log import OffloadReport
from models.engine.options import ChatOptions, ChatStats, validate_messages, validate_options
from models.engine.sessions import DEFAULT_CAP_BYTES, SessionStore
from models.engine.settings import LoadSettings, gpu_device_count, validate_settings

log = logging.getLogger(__name__)


class EngineCrashed(QuantDeskError):
    """The engine process died during a request.

    Attributes:
        phase: What it was doing (``"load"``, ``"selftest"``, ``"chat"``...).
        partial_text: Text of the reply streamed before the crash.
    """

    def __init__(self, what: str, fix: str, phase: str, partial_text: str = "") -> None:
        super().__init__(what, fix)
        self.phase = phase
        self.partial_text = partial_text


@dataclass(frozen=True)
class LoadReport:
    """What a load did: the settings used, where the layers went, and how long it took."""

    path: Path
    model: GGUFModelInfo
    settings: LoadSettings
    offload: OffloadReport
    use_extra_bufts: bool
    load_seconds: float
    context_length: int
    template: str
    backends: list[str]
    safe_kernels_fallback: bool = False

    def summary(self) -> str:
        """A line for the user."""
        fallback_note = " (safe CPU kernels: this computer crashed with the fast ones)" \
            if not self.use_extra_bufts else ""
        if self.settings.draft_model:
            fallback_note += f"; draft model {Path(self.settings.draft_model).name}"
        return (f"{self.model.name}: {self.offload.summary()}; context {self.context_length}; "
                f"chat template: {self.template}; backends {', '.join(self.backends)}{fallback_note}")


def _exit_description(exitcode: Optional[int]) -> str:
    if exitcode is None:
        return "stopped responding"
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


class ChatReply:
    """A reply being streamed: iterate for text deltas; then read ``text`` and ``stats``.

    Iterating holds the client's request lock until the reply ends; leaving the loop
    early (``break``, an exception) cancels the reply and waits for the engine to stop.
    """

    def __init__(self, client: "EngineClient", messages: list[dict], options: ChatOptions,
                 conversation_id: Optional[str] = None) -> None:
        self._client = client
        self._messages = messages
        self._options = options
        self.conversation_id = conversation_id
        self.text = ""
        self.stats: Optional[ChatStats] = None
        self.started: Optional[float] = None
        self.first_delta_at: Optional[float] = None
        self.cancel_requested = False

    @property
    def stop_reason(self) -> str:
        """Why the reply ended (``stop``, ``length``, ``cancelled``...), "" while running."""
        return self.stats.stop_reason if self.stats else ""

    @property
    def value(self) -> Any:
        """A structured reply as a value: the parsed JSON (the grammar text for grammar
        mode), once the engine has validated it.

        Raises:
            QuantDeskError: The reply is not finished, is plain text, or failed
                validation (``stats.validation_error`` says how).
        """
        if self.stats is None:
            raise QuantDeskError("The reply is not finished yet.", "Wait for it to end.")
        if self.stats.valid is None:
            raise QuantDeskError("This reply was plain text, not structured output.",
                                 "Ask for JSON or a grammar in the chat options.")
        if not self.stats.valid:
            raise QuantDeskError(f"The reply is not valid structured output: "
                                 f"{self.stats.validation_error}",
                                 "Generate it again, perhaps with a larger token limit.")
        return self.text if self._options.response_format == "grammar" else json.loads(self.text)

    def cancel(self) -> None:
        """Stop the reply (even before it starts); the text generated so far is kept."""
        self.cancel_requested = True
        self._client.cancel()

    def __iter__(self) -> Iterator[str]:
        return self._client._stream(self)

    def wait(self, on_delta: Optional[Callable[[str], None]] = None) -> "ChatReply":
        """Consume the whole reply, calling ``on_delta`` for each piece; return ``self``."""
        for delta in self:
            if on_delta is not None:
                on_delta(delta)
        return self


class EngineClient:
    """Runs llama.cpp in a child process and talks to it.

    Args:
        start_timeout: Seconds to wait for a new engine process to answer a load.
        session_cap_bytes: Disk budget of the saved conversation states (``sessions``);
            the least recently used are deleted past it.
    """

    def __init__(self, start_timeout: float = 300.0,
                 session_cap_bytes: int = DEFAULT_CAP_BYTES) -> None:
        self.session_cap_bytes = session_cap_bytes
        self._mp = multiprocessing.get_context("spawn")
        self._lock = threading.Lock()
        self._cancel = CancelFlag(self._mp)
        self._process: Any = None
        self._conn: Any = None
        self._timeout = start_timeout
        self._loaded: Optional[tuple[GGUFModelInfo, LoadSettings]] = None
        self._model_file: Optional[Path] = None  # being loaded or loaded, for messages
        self.last_load: Optional[LoadReport] = None
        self.last_chat: Optional[ChatStats] = None
        self.processes_started = 0

    # -- process management ---------------------------------------------------------

    @property
    def pid(self) -> Optional[int]:
        """The engine process id, or ``None`` when none is running."""
        return self._process.pid if self._process is not None and self._process.is_alive() else None

    def _start_process(self) -> None:
        from models.engine.child import engine_main

        parent_end, child_end = self._mp.Pipe(duplex=True)
        process = self._mp.Process(target=engine_main, args=(child_end, self._cancel.shared),
                                   name="quantdesk-engine", daemon=True)
        process.start()
        child_end.close()  # so that the child's death closes the pipe for us
        self._process, self._conn = process, parent_end
        self.processes_started += 1
        log.info("engine process %d started", process.pid)

    def _forget_process(self, kill: bool = False) -> Optional[int]:
        process, self._process = self._process, None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if process is None:
            return None
        if kill and process.is_alive():
            process.kill()
        process.join(timeout=5)
        if process.is_alive():
            process.kill()
            process.join(timeout=5)
        return process.exitcode

    def _crashed(self, phase: str, partial: str = "") -> EngineCrashed:
        exitcode = self._forget_process()
        model = self._model_file.name if self._model_file else "the model"
        log.error("engine process %s during %s of %s", _exit_description(exitcode), phase, model)
        if phase in ("load", "selftest"):
            return EngineCrashed(
                f"The engine process (llama.cpp) {_exit_description(exitcode)} while loading "
                f"{model}.",
                "Try again with fewer GPU layers or a smaller context; if it keeps happening, "
                "the log file has llama.cpp's last words.", phase, partial)
        return EngineCrashed(
            f"The engine process (llama.cpp) {_exit_description(exitcode)} while working on "
            f"{model}. Your conversation is kept.",
            "Send the message again: QuantDesk starts a new engine and reloads the model. "
            "If it keeps happening, the log file has llama.cpp's last words.", phase, partial)

    def _send(self, request: dict, phase: str) -> None:
        if self._process is None or not self._process.is_alive():
            self._forget_process()
            self._start_process()
        try:
            self._conn.send(request)
        except (BrokenPipeError, OSError):
            raise self._crashed(phase) from None

    def _receive(self, phase: str, partial: str = "", timeout: Optional[float] = None) -> dict:
        ready = multiprocessing.connection.wait([self._conn, self._process.sentinel], timeout)
        if not ready:
            self._process.kill()
            raise self._crashed(phase, partial)
        if self._conn in ready or self._conn.poll():
            try:
                return self._conn.recv()
            except (EOFError, OSError):
                pass
        raise self._crashed(phase, partial)

    @staticmethod
    def _raise_error(event: dict) -> None:
        if event.get("event") == "error":
            raise QuantDeskError(event["what"], event.get("fix"))

    # -- loading --------------------------------------------------------------------

    def load(self, model_path: Path | str, settings: Optional[LoadSettings] = None,
             progress: Optional[ProgressCallback] = None) -> LoadReport:
        """Load a model (replacing the loaded one) and self-test a decode.

        ``progress`` gets :class:`~app.core.jobs.Progress` as llama.cpp reads the tensors
        (stage "Loading", done/total a fraction of 1), then stage "Testing" for the
        self-test decode.

        Raises:
            QuantDeskError: Invalid settings, an unreadable file, or llama.cpp refused.
        """
        info = read_model_info(model_path)
        resolved = validate_settings(settings or LoadSettings(), info, gpu_device_count())
        with self._lock:
            # The engine frees the loaded model before it loads the next one.
            self._loaded, self.last_load = None, None
            report = self._load_with_fallback(info, resolved, progress)
            self._loaded = (info, replace(resolved, use_extra_bufts=report.use_extra_bufts))
            self.last_load = report
            return report

    def _load_with_fallback(self, info: GGUFModelInfo, settings: LoadSettings,
                            progress: Optional[ProgressCallback] = None) -> LoadReport:
        if settings.use_extra_bufts and fallback.needs_safe_kernels():
            log.info("engine: loading with use_extra_bufts=False, as recorded for this computer")
            settings = replace(settings, use_extra_bufts=False)
        try:
            return self._load_once(info, settings, progress)
        except EngineCrashed as crash:
            if crash.phase != "selftest" or not settings.use_extra_bufts:
                raise
            reason = f"the first decode crashed: {crash.what}"
            log.warning("engine: %s; retrying without extra buffer types", reason)
            report = self._load_once(info, replace(settings, use_extra_bufts=False), progress)
            fallback.remember_safe_kernels(reason)
            return replace(report, safe_kernels_fallback=True)

    def _load_once(self, info: GGUFModelInfo, settings: LoadSettings,
                   progress: Optional[ProgressCallback] = None) -> LoadReport:
        self._model_file = info.path
        self._cancel.clear()
        self._send({"op": "load", "path": str(info.path), "settings": settings.to_dict()}, "load")
        phase = "load"
        try:
            while True:
                event = self._receive(phase, timeout=self._timeout)
                if event["event"] == "progress":
                    if progress is not None:
                        progress(Progress(event["fraction"], 1.0, "Loading", info.path.name))
                    continue
                if event["event"] != "phase":
                    break
                phase = event["phase"]
                if progress is not None and phase == "selftest":
                    progress(Progress(1.0, 1.0, "Testing", "a first decode"))
        except QuantDeskError:
            raise
        except BaseException:
            # Interrupted (Ctrl+C) mid-load: the engine's answer would be read as the
            # answer to the next request, so this engine is ended; the next starts clean.
            self._forget_process(kill=True)
            raise
        self._raise_error(event)
        values = event["report"]
        return LoadReport(
            path=info.path, model=info, settings=settings,
            offload=OffloadReport.from_dict(values["offload"]),
            use_extra_bufts=values["use_extra_bufts"], load_seconds=values["load_seconds"],
            context_length=values["context_length"], template=values["template"],
            backends=values["backends"])

    def _ensure_model(self) -> None:
        """After a crash, start a new engine and reload the last model."""
        if self._loaded is None:
            raise QuantDeskError("No model is loaded.", "Load a model first.")
        if self._process is not None and self._process.is_alive():
            return
        info, settings = self._loaded
        log.info("engine: reloading %s in a new engine process", info.path)
        self.last_load = self._load_with_fallback(info, settings)

    # -- chatting -------------------------------------------------------------------

    def chat(self, messages: Sequence[dict], options: Optional[ChatOptions] = None,
             conversation_id: Optional[str | int] = None) -> ChatReply:
        """Start a reply to ``messages``; iterate the result for text deltas.

        With a ``conversation_id``, the engine saves the conversation's KV state after the
        reply, and restores it when the conversation comes back to an engine whose cache
        holds something else; ``stats.session_restored`` and ``stats.session_notice`` say
        how that went.

        Raises:
            QuantDeskError: Invalid messages or options (at once), or later while
                iterating: the engine refused or crashed (:class:`EngineCrashed`).
        """
        clean = validate_messages(messages)
        options = options or ChatOptions()
        context = self.last_load.context_length if self.last_load else None
        validate_options(options, context)
        if options.speculative == "draft_model" and \
                not (self._loaded is not None and self._loaded[1].draft_model):
            raise QuantDeskError("Draft-model speculative decoding needs a draft model, and "
                                 "none is loaded with this model.",
                                 "Load the model again with a draft model, or choose prompt "
                                 "lookup or no speculative decoding.")
        return ChatReply(self, clean, options,
                         None if conversation_id is None else str(conversation_id))

    def _stream(self, reply: ChatReply) -> Iterator[str]:
        with self._lock:
            finished = False
            self._ensure_model()
            self._cancel.clear()
            if reply.cancel_requested:
                self._cancel.set()
            reply.started = time.perf_counter()
            self._send({"op": "chat", "messages": reply._messages,
                        "options": reply._options.to_dict(),
                        "conversation_id": reply.conversation_id,
                        "session_cap_bytes": self.session_cap_bytes}, "chat")
            try:
                while True:
                    event = self._receive("chat", reply.text)
                    if event["event"] == "delta":
                        if reply.first_delta_at is None:
                            reply.first_delta_at = time.perf_counter()
                        reply.text += event["text"]
                        yield event["text"]
                        continue
                    finished = True
                    self._raise_error(event)
                    reply.stats = self.last_chat = ChatStats(**event["stats"])
                    return
            finally:
                if not finished and self._process is not None:
                    # The caller left early: stop the engine and read up to its last event.
                    self._cancel.set()
                    try:
                        while self._receive("chat", reply.text)["event"] == "delta":
                            pass
                    except EngineCrashed:
                        pass  # already forgotten; the next request starts a new engine
                    except BaseException:
                        self._forget_process(kill=True)  # out of step: start clean next time
                        raise

    def cancel(self) -> None:
        """Stop the reply being generated (if any); llama.cpp stops mid-computation."""
        self._cancel.set()

    # -- the rest -------------------------------------------------------------------

    def unload(self) -> None:
        """Free the loaded model; the engine process keeps running for the next load."""
        with self._lock:
            self._loaded = None
            self.last_load = None
            if self._process is not None and self._process.is_alive():
                self._send({"op": "unload"}, "unload")
                self._raise_error(self._receive("unload", timeout=60))

    def delete_session(self, conversation_id: str | int) -> bool:
        """Delete a conversation's saved KV state (when the conversation is deleted).

        A running engine does it, so a save it is finishing cannot bring the file back.
        Returns False when there was no saved state.
        """
        with self._lock:
            if self._process is not None and self._process.is_alive():
                self._send({"op": "delete_session", "conversation_id": str(conversation_id)},
                           "delete_session")
                event = self._receive("delete_session", timeout=60)
                self._raise_error(event)
                return bool(event["deleted"])
            return SessionStore.default().delete(str(conversation_id))

    def stats(self) -> dict:
        """The engine's state: process, model, KV-cache fill and the last reply's stats.

        Does not wait for a reply in progress: then the KV-cache figures are missing.
        """
        values: dict = {
            "pid": self.pid, "processes_started": self.processes_started,
            "model": str(self._loaded[0].path) if self._loaded else None,
            "last_chat": self.last_chat.to_dict() if self.last_chat else None,
        }
        if self._lock.acquire(blocking=False):
            try:
                if self._process is not None and self._process.is_alive():
                    self._send({"op": "stats"}, "stats")
                    values.update(self._receive("stats", timeout=60)["stats"])
            finally:
                self._lock.release()
        return values

    def shutdown(self) -> None:
        """Stop the engine process (the client can start a new one later)."""
        self._cancel.set()
        with self._lock:
            if self._process is not None and self._process.is_alive():
                try:
                    self._conn.send({"op": "shutdown"})
                    self._receive("shutdown", timeout=10)
                except (EngineCrashed, OSError):
                    pass  # it is going away either way
            self._forget_process()

    def __enter__(self) -> "EngineClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
