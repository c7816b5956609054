"""The engine client: a small thread-safe handle on the engine process.

:class:`EngineClient` starts the engine process on first use, sends it requests and turns
its events into return values, streamed text and exceptions. Replies can be streamed by
several threads at once: each has a request id, and a reader thread hands the engine's
events to the reply they belong to, while the engine generates them together
(``batching.py``). Loads, unloads and the other requests are serialised by a lock.
:meth:`ChatReply.cancel` stops one reply and :meth:`EngineClient.cancel` all of them,
without the lock, so a GUI thread can cancel a reply another thread is streaming. When
the process dies, every request in flight raises :class:`EngineCrashed` — with the text
streamed so far kept on the exception — and the next request starts a fresh process and
reloads the last model.

A model on other computers' devices (``LoadSettings.remote_devices``) holds a
:class:`~models.rpc.session.RemoteSession` here: its SSH tunnels and checked workers. It
opens before the load, and it closes — with the engine process, whose RPC connections
llama.cpp keeps for the process's life — when the model unloads or another one loads.
When the engine dies under such a model, the workers are asked again and the sentence
names the one that stopped answering (llama.cpp's RPC client aborts the process when a
worker goes away, so only this side can say it).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import multiprocessing
import queue
import signal
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator, Optional, Sequence

from models.engine import fallback
from models.engine.cancel_flag import CancelFlag
from models.engine.gguf_info import GGUFModelInfo, read_model_info
from models.engine.llama_log import OffloadReport
from models.engine.options import ChatOptions, ChatStats, validate_messages, validate_options
from models.engine.sessions import DEFAULT_CAP_BYTES, SessionStore
from models.engine.settings import LoadSettings, gpu_device_count, validate_settings
from models.foundation.errors import QuantDeskError
from models.foundation.jobs import Progress, ProgressCallback
from models.rpc.session import RemoteSession

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
    parallel: int = 1
    #: Each remote worker's entry → the llama.cpp build it reported (RPC protocol).
    remote_workers: tuple[tuple[str, str], ...] = ()

    def summary(self) -> str:
        """What a person wants to know, in sentences: which model, where it runs, how much
        memory it takes and how long its context is (the buffers are in :meth:`details`)."""
        memory = self.offload.memory_words()
        text = f"{Path(self.path).name} runs {self.offload.where()}" + \
            (f" and uses {memory}" if memory else "") + \
            f"; its context holds {self.context_length:,} tokens."
        if not self.use_extra_bufts:
            text += " It uses the safe CPU kernels: this computer crashed with the fast ones."
        if self.settings.draft_model:
            text += f" It drafts with {Path(self.settings.draft_model).name}."
        return text

    def details(self) -> str:
        """Everything about the load on one line, buffer by buffer (the log, the details)."""
        fallback_note = " (safe CPU kernels: this computer crashed with the fast ones)" \
            if not self.use_extra_bufts else ""
        if self.settings.draft_model:
            fallback_note += f"; draft model {Path(self.settings.draft_model).name}"
        return (f"{self.model.name}: {self.offload.summary()}; context {self.context_length}; "
                f"chat template: {self.template}; backends {', '.join(self.backends)}{fallback_note}")


#: Windows' exit codes for a process that crashed (NTSTATUS values), as a person would
#: read them; Windows has no signals, so a crash is a status like 0xC0000005.
_WINDOWS_CRASHES = {
    0xC0000005: "an access violation",
    0xC000001D: "an instruction this CPU does not have",
    0xC0000094: "a division by zero",
    0xC00000FD: "a stack overflow",
    0xC0000409: "a failed safety check (abort)",
    0xC0000017: "running out of memory",
}


def _exit_description(exitcode: Optional[int]) -> str:
    if exitcode is None:
        return "stopped responding"
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    if exitcode in _WINDOWS_CRASHES:
        return f"crashed with {_WINDOWS_CRASHES[exitcode]} (0x{exitcode:08X})"
    return f"exited with status {exitcode}"


class ChatReply:
    """A reply being streamed: iterate for text deltas; then read ``text`` and ``stats``.

    Several replies can be iterated at once, from different threads. Leaving the loop
    early (``break``, an exception) cancels the reply; the engine stops it at its next
    step and frees its slot.
    """

    def __init__(self, client: "EngineClient", messages: Optional[list[dict]],
                 options: ChatOptions, conversation_id: Optional[str] = None,
                 prompt: Optional[str] = None) -> None:
        self._client = client
        self._messages = messages
        self._options = options
        self._prompt = prompt
        self.conversation_id = conversation_id
        self.text = ""
        self.logprobs: list[dict] = []
        self.stats: Optional[ChatStats] = None
        self.started: Optional[float] = None
        self.first_delta_at: Optional[float] = None
        self.cancel_requested = False
        self._lane: Optional[int] = None

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

    def logprobs_since(self, index: int) -> list[dict]:
        """Per-token log-probabilities that arrived after the first ``index`` ones."""
        return self.logprobs[index:]

    def cancel(self) -> None:
        """Stop this reply (even before it starts); the text generated so far is kept."""
        self.cancel_requested = True
        lane = self._lane
        if lane is not None:
            self._client._cancel.set(lane)

    def close(self) -> None:
        """Stop the reply when the caller no longer reads it (as leaving the loop does)."""
        if self.stats is None:
            self.cancel()

    def __iter__(self) -> Iterator[str]:
        return self._client._stream(self)

    def __aiter__(self) -> AsyncIterator[str]:
        """The deltas for ``async for`` on an event loop, which the engine's reader thread
        wakes directly (no thread per reply); otherwise as iterating."""
        return self._client._astream(self)

    def wait(self, on_delta: Optional[Callable[[str], None]] = None) -> "ChatReply":
        """Consume the whole reply, calling ``on_delta`` for each piece; return ``self``."""
        for delta in self:
            if on_delta is not None:
                on_delta(delta)
        return self


_CRASHED = {"event": "_crashed"}  # put in every waiting queue when the engine process dies


class _LoopInbox:
    """Where the engine's reader thread puts a reply's events for an asyncio reader: each
    goes straight to the event loop, with no thread of the reply's own in between."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._events: asyncio.Queue = asyncio.Queue()

    def put(self, event: dict) -> None:
        try:
            self._loop.call_soon_threadsafe(self._events.put_nowait, event)
        except RuntimeError:
            pass  # the loop is closed: nobody reads the reply any more

    async def get(self) -> dict:
        return await self._events.get()


class _ReplyStream:
    """One reply's exchange with the engine process, for both ways of reading it
    (:meth:`EngineClient._stream` in a thread, :meth:`EngineClient._astream` on an event
    loop): made, it has sent the request; :meth:`take` turns each event of ``inbox``
    into the text to hand on; :meth:`close` (always, at the end) frees the lane, or
    cancels the reply when its reader left before the end."""

    def __init__(self, client: "EngineClient", reply: ChatReply, inbox: Any) -> None:
        self.client, self.reply, self.inbox = client, reply, inbox
        self.ended = False
        self.engine = engine = client._ensure_model()
        self.lane = lane = client._take_lane()
        self.request_id = next(client._ids)
        engine.register(self.request_id, inbox)
        reply._lane = lane
        if reply.cancel_requested:
            client._cancel.set(lane)
        reply.started = time.perf_counter()
        try:
            engine.send({"op": "chat", "id": self.request_id, "lane": lane,
                         "messages": reply._messages, "prompt": reply._prompt,
                         "options": reply._options.to_dict(),
                         "conversation_id": reply.conversation_id,
                         "session_cap_bytes": client.session_cap_bytes})
        except (BrokenPipeError, OSError):
            self.ended = True
            self.close()
            raise client._crashed("chat", engine=engine) from None

    def take(self, event: dict) -> str:
        """Apply one event to the reply; return its new text ("" for none).

        Raises:
            EngineCrashed: The engine process died.
            QuantDeskError: The engine refused or failed the request.
        """
        reply = self.reply
        delta = event["event"] == "delta"
        if not delta:
            self.ended = True
            if event is _CRASHED:
                raise self.client._crashed("chat", reply.text, engine=self.engine)
            self.client._raise_error(event)
        text = event.get("text", "")  # the end carries the reply's last text, if any
        if "logprobs" in event:
            reply.logprobs.extend(event["logprobs"])
        if reply.first_delta_at is None and (delta or text):
            reply.first_delta_at = time.perf_counter()
        reply.text += text
        if not delta:
            reply.stats = self.client.last_chat = ChatStats(**event["stats"])
        return text

    def close(self) -> None:
        """The reader is done: free the lane, or stop a reply it left before its end
        (its lane is freed when the engine ends it)."""
        if self.lane is None:
            return
        lane, self.lane = self.lane, None
        self.reply._lane = None
        if self.ended:
            self.engine.forget(self.request_id)
            self.client._free_lane(lane)
        else:
            self.client._cancel.set(lane)
            self.engine.forget(self.request_id, lane)


class _EngineProcess:
    """One engine process, its pipe, and the reader thread that routes its events.

    Events with an ``id`` go to that request's queue, others to the ``control`` queue.
    When the pipe ends (the process died), every queue gets ``_CRASHED``.
    """

    def __init__(self, mp: Any, cancel_shared: Any) -> None:
        from models.engine.child import engine_main

        parent_end, child_end = mp.Pipe(duplex=True)
        self.process = mp.Process(target=engine_main, args=(child_end, cancel_shared),
                                  name="quantdesk-engine", daemon=True)
        self.process.start()
        child_end.close()  # so that the child's death closes the pipe for us
        self.conn = parent_end
        self.control: "queue.Queue[dict]" = queue.Queue()
        self.requests: dict[int, Any] = {}  # request id -> where its events go
        self.abandoned: dict[int, int] = {}  # request id -> lane, freed at its final event
        self.free_lane: Callable[[int], None] = lambda lane: None
        self.dead = False
        self.exitcode: Optional[int] = None
        self._routes = threading.Lock()
        self._send = threading.Lock()
        self._stopping = threading.Lock()
        self.stopped = False
        self.reader = threading.Thread(target=self._read, name="quantdesk-engine-reader",
                                       daemon=True)
        self.reader.start()

    def alive(self) -> bool:
        return not self.dead and self.process.is_alive()

    def send(self, request: dict) -> None:
        with self._send:
            self.conn.send(request)

    def register(self, request_id: int, events: Any) -> None:
        """Route the events of ``request_id`` to ``events`` (anything with ``put``)."""
        with self._routes:
            if self.dead:
                events.put(_CRASHED)
            self.requests[request_id] = events

    def forget(self, request_id: int, lane: Optional[int] = None) -> None:
        """The reader drops this request's later events; ``lane`` is freed at its last."""
        with self._routes:
            self.requests.pop(request_id, None)
            if lane is not None:
                if self.dead:
                    self.free_lane(lane)
                else:
                    self.abandoned[request_id] = lane

    def _read(self) -> None:
        while True:
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                break
            # The deltas of several replies made in one step come in one message.
            for event in message["events"] if message["event"] == "deltas" else (message,):
                self._route(event)
        with self._routes:
            self.dead = True
            for events in list(self.requests.values()) + [self.control]:
                events.put(_CRASHED)
            for lane in self.abandoned.values():
                self.free_lane(lane)
            self.abandoned.clear()

    def _route(self, event: dict) -> None:
        """Hand one event to its request's destination (or the control queue)."""
        request_id = event.get("id")
        with self._routes:
            if request_id is None:
                target = self.control
            else:
                target = self.requests.get(request_id)
                if target is None and event["event"] != "delta":
                    lane = self.abandoned.pop(request_id, None)
                    if lane is not None:
                        self.free_lane(lane)
        if target is not None:
            target.put(event)

    def stop(self, kill: bool = False) -> Optional[int]:
        """End the process (killed when ``kill``); returns its exit code. Several threads
        may call it when the process dies under their replies: the first stops it, the
        others wait for that and get the same exit code."""
        with self._stopping:
            if self.stopped:
                return self.exitcode
            if kill and self.process.is_alive():
                self.process.kill()
            self.process.join(timeout=5)
            if self.process.is_alive():
                self.process.kill()
                self.process.join(timeout=5)
            self.conn.close()
            self.exitcode = self.process.exitcode
            self.stopped = True
            return self.exitcode


class EngineClient:
    """Runs llama.cpp in a child process and talks to it.

    Args:
        start_timeout: Seconds to wait for a new engine process to answer a load.
        session_cap_bytes: Disk budget of the saved conversation states (``sessions``);
            the least recently used are deleted past it.
        prompt_cache_bytes: RAM budget of the engine's prompt cache (``prompt_cache``);
            0 turns it off.
    """

    def __init__(self, start_timeout: float = 300.0,
                 session_cap_bytes: int = DEFAULT_CAP_BYTES,
                 prompt_cache_bytes: int = 1 << 30) -> None:
        self.session_cap_bytes = session_cap_bytes
        self.prompt_cache_bytes = prompt_cache_bytes
        self._mp = multiprocessing.get_context("spawn")
        self._lock = threading.RLock()  # loads, unloads and other one-at-a-time requests
        self._cancel = CancelFlag(self._mp)
        self._lanes = list(range(self._cancel.lanes))
        self._lanes_lock = threading.Condition()
        self._ids = itertools.count(1)
        self._engine: Optional[_EngineProcess] = None
        self._timeout = start_timeout
        self._loaded: Optional[tuple[GGUFModelInfo, LoadSettings]] = None
        self._model_file: Optional[Path] = None  # being loaded or loaded, for messages
        self.last_load: Optional[LoadReport] = None
        self.last_chat: Optional[ChatStats] = None
        self.processes_started = 0
        self._remote: Optional[RemoteSession] = None  # the loaded model's remote devices

    @property
    def remote_endpoints(self) -> list[str]:
        """``host:port`` llama.cpp uses for each worker of the loaded model (a tunnel's
        local end for ``ssh://`` entries); empty without remote devices."""
        remote = self._remote
        return remote.endpoints if remote is not None else []

    # -- process management ---------------------------------------------------------

    @property
    def pid(self) -> Optional[int]:
        """The engine process id, or ``None`` when none is running."""
        engine = self._engine
        return engine.process.pid if engine is not None and engine.alive() else None

    def _start_process(self) -> _EngineProcess:
        engine = _EngineProcess(self._mp, self._cancel.shared)
        engine.free_lane = self._free_lane
        self._engine = engine
        self.processes_started += 1
        log.info("engine process %d started", engine.process.pid)
        return engine

    def _forget_process(self, kill: bool = False,
                        engine: Optional[_EngineProcess] = None) -> Optional[int]:
        """Stop and forget the engine process (``engine``: only if it is still that one)."""
        with self._lanes_lock:
            current = self._engine
            if engine is not None and current is not engine:
                return engine.stop()  # another thread forgot it already: its exit code
            self._engine = None
        if current is None:
            return None
        return current.stop(kill)

    def _crashed(self, phase: str, partial: str = "",
                 engine: Optional[_EngineProcess] = None) -> EngineCrashed:
        exitcode = self._forget_process(engine=engine)
        model = self._model_file.name if self._model_file else "the model"
        log.error("engine process %s during %s of %s", _exit_description(exitcode), phase, model)
        if self._remote is not None:
            return self._remote_crash(phase, partial, exitcode, model)
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

    def _remote_crash(self, phase: str, partial: str, exitcode: Optional[int],
                      model: str) -> EngineCrashed:
        """The crash sentence for a model on remote devices: which worker went away."""
        remote, self._remote = self._remote, None
        assert remote is not None
        cause = remote.diagnose()
        remote.close()
        how = f"stopped: {cause}" if cause else \
            f"(llama.cpp) {_exit_description(exitcode)}; every worker still answers"
        if phase in ("load", "selftest"):
            return EngineCrashed(
                f"The engine {how} while loading {model} on remote devices.",
                "Start the worker again and load again, or load the model without that remote "
                "device.", phase, partial)
        return EngineCrashed(
            f"The engine {how} while working on {model}. The reply so far and your "
            "conversation are kept.",
            "Start the worker again and send the message again (QuantDesk reloads the model), "
            "or load the model without that remote device.", phase, partial)

    def _release_remote(self) -> None:
        """Close the remote devices of the model that was loaded, and the engine process
        that held their connections (the next load starts a fresh one)."""
        remote, self._remote = self._remote, None
        if remote is None:
            return
        self.shutdown()
        remote.close()

    def _open_remote(self, settings: LoadSettings) -> None:
        """Open tunnels to and check the workers of ``settings`` (none: nothing to do).

        Raises:
            QuantDeskError: A worker cannot be reached, is of another build, or the
                device split has more shares than there are devices.
        """
        if not settings.remote_devices or self._remote is not None:
            return
        remote = RemoteSession(settings.remote_devices)
        devices = remote.device_count + gpu_device_count()
        if len(settings.device_split) > devices:
            remote.close()
            raise QuantDeskError(
                f"The device split has {len(settings.device_split)} shares, but there are "
                f"{devices} devices to split between (the workers' and this computer's GPUs).",
                "Give one share per device, or leave the split empty.")
        self._remote = remote

    def _running_engine(self) -> _EngineProcess:
        engine = self._engine
        if engine is None or not engine.alive():
            if engine is not None:
                self._forget_process(engine=engine)
            engine = self._start_process()
        return engine

    def _send(self, request: dict, phase: str) -> _EngineProcess:
        engine = self._running_engine()
        try:
            engine.send(request)
        except (BrokenPipeError, OSError):
            raise self._crashed(phase, engine=engine) from None
        return engine

    def _receive(self, phase: str, timeout: Optional[float] = None,
                 engine: Optional[_EngineProcess] = None) -> dict:
        """The next event without a request id (answers to loads, stats...)."""
        engine = engine or self._engine
        try:
            event = engine.control.get(timeout=timeout)
        except queue.Empty:
            engine.process.kill()
            raise self._crashed(phase, engine=engine) from None
        if event is _CRASHED:
            raise self._crashed(phase, engine=engine)
        return event

    @staticmethod
    def _raise_error(event: dict) -> None:
        if event.get("event") == "error":
            raise QuantDeskError(event["what"], event.get("fix"))

    def _take_lane(self) -> int:
        with self._lanes_lock:
            while not self._lanes:
                self._lanes_lock.wait()
            lane = self._lanes.pop()
        self._cancel.clear(lane)
        return lane

    def _free_lane(self, lane: int) -> None:
        with self._lanes_lock:
            self._lanes.append(lane)
            self._lanes_lock.notify()

    # -- loading --------------------------------------------------------------------

    def load(self, model_path: Path | str, settings: Optional[LoadSettings] = None,
             progress: Optional[ProgressCallback] = None) -> LoadReport:
        """Load a model (replacing the loaded one) and self-test a decode.

        ``progress`` gets :class:`~models.foundation.jobs.Progress` as llama.cpp reads the tensors
        (stage "Loading", done/total a fraction of 1), then stage "Testing" for the
        self-test decode. Replies still running on the old model end with an error.

        Raises:
            QuantDeskError: Invalid settings, an unreadable file, or llama.cpp refused.
        """
        info = read_model_info(model_path)
        resolved = validate_settings(settings or LoadSettings(), info, gpu_device_count())
        with self._lock:
            # The engine frees the loaded model before it loads the next one.
            self._loaded, self.last_load = None, None
            self._release_remote()
            try:
                report = self._load_with_fallback(info, resolved, progress)
            except BaseException:
                self._release_remote()
                raise
            self._loaded = (info, replace(resolved, use_extra_bufts=report.use_extra_bufts))
            self.last_load = report
            return report

    def _load_with_fallback(self, info: GGUFModelInfo, settings: LoadSettings,
                            progress: Optional[ProgressCallback] = None) -> LoadReport:
        if settings.use_extra_bufts and fallback.needs_safe_kernels():
            log.info("engine: loading with use_extra_bufts=False, as recorded for this computer")
            settings = replace(settings, use_extra_bufts=False)
        self._open_remote(settings)
        try:
            return self._load_once(info, settings, progress)
        except EngineCrashed as crash:
            if crash.phase != "selftest" or not settings.use_extra_bufts:
                raise
            reason = f"the first decode crashed: {crash.what}"
            log.warning("engine: %s; retrying without extra buffer types", reason)
            self._open_remote(settings)  # a crash closed them
            report = self._load_once(info, replace(settings, use_extra_bufts=False), progress)
            fallback.remember_safe_kernels(reason)
            return replace(report, safe_kernels_fallback=True)

    def _load_once(self, info: GGUFModelInfo, settings: LoadSettings,
                   progress: Optional[ProgressCallback] = None) -> LoadReport:
        self._model_file = info.path
        remote = self._remote
        engine = self._send({"op": "load", "path": str(info.path), "settings": settings.to_dict(),
                             "rpc_endpoints": remote.endpoints if remote else [],
                             "session_cap_bytes": self.session_cap_bytes,
                             "prompt_cache_bytes": self.prompt_cache_bytes}, "load")
        phase = "load"
        try:
            while True:
                event = self._receive(phase, timeout=self._timeout, engine=engine)
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
            self._forget_process(kill=True, engine=engine)
            raise
        self._raise_error(event)
        values = event["report"]
        offload = OffloadReport.from_dict(values["offload"])
        if remote is not None:  # "RPC0" → the entry the user wrote, not the tunnel's port
            offload.device_labels = {device: remote.name_of(endpoint)
                                     for device, endpoint in offload.device_labels.items()}
        return LoadReport(
            path=info.path, model=info, settings=settings, offload=offload,
            remote_workers=tuple((w.device.text, f"RPC protocol {w.info.version_text}")
                                 for w in remote.workers) if remote else (),
            use_extra_bufts=values["use_extra_bufts"], load_seconds=values["load_seconds"],
            context_length=values["context_length"], template=values["template"],
            backends=values["backends"], parallel=values.get("parallel", 1))

    def _ensure_model(self) -> _EngineProcess:
        """The engine with the model loaded; after a crash, a new one that reloaded it."""
        with self._lock:
            if self._loaded is None:
                raise QuantDeskError("No model is loaded.", "Load a model first.")
            engine = self._engine
            if engine is not None and engine.alive():
                return engine
            info, settings = self._loaded
            log.info("engine: reloading %s in a new engine process", info.path)
            self.last_load = self._load_with_fallback(info, settings)
            return self._engine

    # -- chatting -------------------------------------------------------------------

    def chat(self, messages: Optional[Sequence[dict]], options: Optional[ChatOptions] = None,
             conversation_id: Optional[str | int] = None,
             prompt: Optional[str] = None) -> ChatReply:
        """Start a reply to ``messages`` (or to a raw ``prompt``, with no chat template);
        iterate the result for text deltas. Several replies may stream at once.

        With a ``conversation_id``, the engine saves the conversation's KV state after the
        reply, and restores it when the conversation comes back to an engine whose cache
        holds something else; ``stats.session_restored`` and ``stats.session_notice`` say
        how that went.

        Raises:
            QuantDeskError: Invalid messages or options (at once), or later while
                iterating: the engine refused or crashed (:class:`EngineCrashed`).
        """
        if self._loaded is not None and self._loaded[1].embedding:
            raise QuantDeskError(f"{self._loaded[0].path.name} is loaded for embeddings, so "
                                 "it cannot chat.",
                                 "Load it again without embedding mode to chat with it.")
        if prompt is not None:
            if not isinstance(prompt, str) or not prompt:
                raise QuantDeskError("The prompt is empty.", "Send some text to complete.")
            clean = None
        else:
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
                         None if conversation_id is None else str(conversation_id), prompt)

    def _stream(self, reply: ChatReply) -> Iterator[str]:
        stream = _ReplyStream(self, reply, queue.Queue())
        try:
            while not stream.ended:
                text = stream.take(stream.inbox.get())
                if text:
                    yield text
        finally:
            stream.close()

    async def _astream(self, reply: ChatReply) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        inbox = _LoopInbox(loop)
        # Starting may load the model again (after a crash) or wait for a lane: not on
        # the loop. A stream started after its reader left is closed (so cancelled) at once.
        starting = loop.run_in_executor(None, _ReplyStream, self, reply, inbox)
        try:
            stream = await asyncio.shield(starting)
        except asyncio.CancelledError:
            starting.add_done_callback(
                lambda done: done.cancelled() or done.exception() or done.result().close())
            raise
        try:
            while not stream.ended:
                event = await inbox.get()
                # A crash raises, and saying why may ask remote workers: not on the loop.
                text = await loop.run_in_executor(None, stream.take, event) \
                    if event is _CRASHED else stream.take(event)
                if text:
                    yield text
        finally:
            stream.close()

    def cancel(self) -> None:
        """Stop every reply being generated (if any); llama.cpp stops mid-computation."""
        self._cancel.set()

    # -- the rest -------------------------------------------------------------------

    def count_tokens(self, messages: Optional[Sequence[dict]] = None,
                     prompt: Optional[str] = None) -> int:
        """How many tokens the prompt for ``messages`` (or a raw ``prompt``) is."""
        clean = validate_messages(messages) if prompt is None else None
        with self._lock:
            engine = self._ensure_model()
            self._send({"op": "count_tokens", "messages": clean, "prompt": prompt}, "count")
            event = self._receive("count", timeout=60, engine=engine)
            self._raise_error(event)
            return int(event["tokens"])

    def embed(self, inputs: Sequence[str | Sequence[int]]) -> tuple[Any, int]:
        """The unit-length embedding of each input (texts, or lists of token ids) as rows
        of a float32 array, and the number of tokens read; the model must be loaded with
        ``LoadSettings.embedding`` (:mod:`models.engine.embedding`).

        Raises:
            QuantDeskError: No embedding model is loaded, or an input is refused (empty,
                longer than the context, token ids outside the vocabulary).
        """
        if not isinstance(inputs, (list, tuple)) or not inputs:
            raise QuantDeskError("There is nothing to embed.", "Send at least one text.")
        with self._lock:
            engine = self._ensure_model()
            self._send({"op": "embed", "inputs": list(inputs)}, "embed")
            event = self._receive("embed", timeout=self._timeout, engine=engine)
            self._raise_error(event)
            return event["vectors"], int(event["tokens"])

    def unload(self) -> None:
        """Free the loaded model; the engine process keeps running for the next load."""
        with self._lock:
            self._loaded = None
            self.last_load = None
            if self._remote is not None:
                self._release_remote()
                return
            engine = self._engine
            if engine is not None and engine.alive():
                self._send({"op": "unload"}, "unload")
                self._raise_error(self._receive("unload", timeout=60, engine=engine))

    def delete_session(self, conversation_id: str | int) -> bool:
        """Delete a conversation's saved KV state (when the conversation is deleted).

        A running engine does it, so a save it is finishing cannot bring the file back.
        Returns False when there was no saved state.
        """
        with self._lock:
            engine = self._engine
            if engine is not None and engine.alive():
                self._send({"op": "delete_session", "conversation_id": str(conversation_id)},
                           "delete_session")
                event = self._receive("delete_session", timeout=60, engine=engine)
                self._raise_error(event)
                return bool(event["deleted"])
            return SessionStore.default().delete(str(conversation_id))

    def stats(self) -> dict:
        """The engine's state: process, model, slots, KV-cache fill and the last reply's
        stats. Does not wait for a load in progress: then the engine's figures are missing.
        """
        values: dict = {
            "pid": self.pid, "processes_started": self.processes_started,
            "model": str(self._loaded[0].path) if self._loaded else None,
            "last_chat": self.last_chat.to_dict() if self.last_chat else None,
        }
        if self._lock.acquire(blocking=False):
            try:
                engine = self._engine
                if engine is not None and engine.alive():
                    self._send({"op": "stats"}, "stats")
                    values.update(self._receive("stats", timeout=60, engine=engine)["stats"])
            finally:
                self._lock.release()
        return values

    def shutdown(self) -> None:
        """Stop the engine process (the client can start a new one later)."""
        self._cancel.set()
        with self._lock:
            engine = self._engine
            if engine is not None and engine.alive():
                try:
                    engine.send({"op": "shutdown"})
                    self._receive("shutdown", timeout=10, engine=engine)
                except (EngineCrashed, OSError):
                    pass  # it is going away either way
            self._forget_process()
            remote, self._remote = self._remote, None
            if remote is not None:
                remote.close()

    def __enter__(self) -> "EngineClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
