"""The chat page's handle on the engine: loads and replies run off the GUI thread.

Both go through :func:`~app.ui.worker.start_job` (the one way the GUI runs core work).
A reply's deltas are collected by the worker thread into a list. The first delta the GUI
has not been told about emits :attr:`ChatEngine.text_arrived`; the page then takes all
that has arrived with :meth:`ChatEngine.take_text`, at most 20 times a second. So the
GUI never handles one token at a time, text shows as soon as it arrives after a pause
(no timer phase to wait for), nothing wakes the GUI while no text comes (prefill, a
paused model), and the worker never waits for the GUI. A reasoning model's thinking is
told from its answer on the worker thread too (:class:`~models.engine.reasoning.
ReasoningSplitter`), into a buffer of its own. The engine itself is a child
process (:class:`~models.engine.EngineClient`): the GUI process does not load llama.cpp
to generate, and a crash of the engine ends one reply, not the window.

While the window's API server runs, the engine is lent to it (:attr:`ChatEngine.lender`,
the server's engine pool): a request for the model the chat has loaded uses this engine
instead of loading the model a second time. The lending follows the loads, on the load's
own worker thread and in order: the old model is taken back before another one loads, and
the new one is lent once it has loaded. A model the server has already loaded, with the
same load settings, is not loaded again either: the chat takes over the server's engine
(:meth:`~models.server.engine_pool.EnginePool.hand_over`) and the server goes on using it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from PySide6.QtCore import QObject, QThreadPool, Signal

from app.ui.worker import JobWorker, start_job
from models.engine.reasoning import (NO_THINKING, ReasoningSplitter, ThinkingTemplate,
                                     reply_opens_reasoning, thinking_template)
from models.foundation.errors import QuantDeskError

log = logging.getLogger(__name__)


@dataclass
class ReplyOutcome:
    """How a reply ended: ``reply`` (a :class:`~models.engine.client.ChatReply`) and, when
    it did not end normally, the error (``crashed`` when the engine process died).
    ``parts`` told its reasoning from its answer as it streamed."""

    reply: object
    error: Optional[QuantDeskError] = None
    crashed: bool = False
    finished_at: float = 0.0  # perf_counter when the worker received the last event
    parts: Optional[ReasoningSplitter] = None

    @property
    def text(self) -> str:
        """The answer (without the reasoning)."""
        if self.parts is not None and self.parts.finished:
            return self.parts.answer
        partial = getattr(self.error, "partial_text", "") if self.crashed else ""
        return self.reply.text or partial

    @property
    def reasoning(self) -> str:
        """The reasoning before the answer ("" for a reply without one)."""
        return self.parts.reasoning if self.parts is not None and self.parts.finished else ""

    def stats(self) -> dict:
        """The stats to store with the reply (a crash or error is marked), with the
        thinking's tokens and seconds when the engine did not count them."""
        if self.reply.stats is not None:
            stats = self.reply.stats.to_dict()
        else:
            stats = {"stop_reason": "crashed" if self.crashed else "error"}
        if self.reasoning and not stats.get("reasoning_tokens"):
            stats["reasoning_tokens"] = self.parts.reasoning_pieces
            stats["reasoning_seconds"] = round(self.parts.seconds or 0.0, 2)
        return stats


class ChatEngine(QObject):
    """Loads a model and streams replies; one of each at a time."""

    loaded = Signal(object)      # LoadReport
    load_progress = Signal(object)  # models.foundation.jobs.Progress: llama.cpp reading the tensors
    load_failed = Signal(str)
    reply_done = Signal(object)  # ReplyOutcome
    text_arrived = Signal()      # text is waiting for take_text (emitted from the worker)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._client = None
        self._buffer: list[str] = []  # answer deltas the GUI has not taken
        self._reasoning: list[str] = []  # reasoning deltas the GUI has not taken
        self.parts: Optional[ReasoningSplitter] = None  # the reply streaming now        self._told = False  # text_arrived was emitted and take_text has not run since
        self._load_job: Optional[JobWorker] = None
        self._reply_job: Optional[JobWorker] = None
        self._reply = None
        self.model_path: Optional[Path] = None
        self.settings = None  # the LoadSettings of the last successful load
        self.report = None
        self._owns_client = True
        #: The server's engine pool while the server runs (``release(path)`` and
        #: ``adopt(path, client)``), or ``None``: see the module docstring.
        self.lender = None
        # Its own pool: a reply holds a thread for as long as it streams, and must not
        # wait behind other pages' downloads or quantize jobs on the global pool.
        self._pool = QThreadPool(self)
        self._pool.setMaxThreadCount(2)

    def use_client(self, client) -> None:
        """Use an engine that someone else owns and stops (tests share one process)."""
        self._client, self._owns_client = client, False

    @property
    def client(self):
        """The :class:`EngineClient`, created on first use (no engine until a model)."""
        if self._client is None:
            from models.engine import EngineClient

            self._client = EngineClient()
        return self._client

    @property
    def chat_template(self) -> Optional[str]:
        """The loaded model's own Jinja chat template (``None``: none, or no model)."""
        return getattr(getattr(self.report, "model", None), "chat_template", None)

    @property
    def thinking(self) -> ThinkingTemplate:
        """What the loaded model's chat template does about reasoning (its switch,
        whether it reads past reasoning back); nothing for a model without one."""
        return thinking_template(self.chat_template) if self.chat_template else NO_THINKING

    @property
    def loading(self) -> bool:
        return self._load_job is not None

    @property
    def streaming(self) -> bool:
        return self._reply_job is not None

    @property
    def ready(self) -> bool:
        return self.report is not None and not self.loading

    # -- loading ------------------------------------------------------------------

    def load(self, path: Path, settings) -> None:
        """Load ``path`` with ``settings`` in the background; emits loaded/load_failed."""
        client = self.client
        previous = self.model_path if self.report is not None else None
        self.model_path = Path(path)
        self.report = None

        def job(report, token):
            if previous is not None:
                self._lend("release", previous)  # before the engine holds another model
            served = self._take_served(path, settings)
            if served is not None:
                return served
            loaded = client.load(path, settings, progress=report)
            self._lend("adopt", loaded.path, client)
            return loaded

        self._load_job = start_job(job, on_finished=lambda rep: self._load_finished(rep, settings),
                                   on_failed=self._load_error, on_progress=self.load_progress.emit,
                                   pool=self._pool, owner=self)

    def _take_served(self, path: Path, settings):
        """The load report of the server's engine for ``path`` once this chat has taken it
        over (its own engine, holding the previous model, is stopped); ``None`` when the
        server has not loaded this model with these settings."""
        lender = self.lender
        if lender is None or not self._owns_client:
            return None
        try:
            served = lender.hand_over(path, settings)
        except Exception:
            log.exception("the server's engine pool failed to hand over %s", path)
            return None
        if served is None or served.last_load is None:
            return None
        own, self._client = self._client, served
        if own is not None and own is not served:
            own.shutdown()
        log.info("chat: using the engine the server loaded for %s", Path(path).name)
        return served.last_load

    def _lend(self, action: str, *args) -> None:
        """``lender.release(path)`` or ``lender.adopt(path, client)`` when the engine is lent;
        a fault there is logged and never stops the chat's own load."""
        lender = self.lender
        if lender is None:
            return
        try:
            getattr(lender, action)(*args)
        except Exception:
            log.exception("the server's engine pool failed to %s %s", action, args[0])

    def _load_finished(self, report, settings) -> None:
        self._load_job = None
        self.report, self.settings = report, settings
        self.loaded.emit(report)

    def _load_error(self, message: str) -> None:
        self._load_job = None
        self.load_failed.emit(message)

    # -- replies ----------------------------------------------------------------------

    def start_reply(self, messages: list[dict], options, conversation_id: Optional[str]) -> None:
        """Start streaming a reply.

        Raises:
            QuantDeskError: At once, before anything is sent: no model, invalid options
                (a schema the grammar cannot enforce is listed here), a reply running.
        """
        if self.streaming:
            raise QuantDeskError("A reply is still being written.",
                                 "Wait for it, or press Esc to stop it.")
        if self.report is None:
            raise QuantDeskError("No model is loaded yet.",
                                 "Choose a model in the Model list (or drop a .gguf file here).")
        reply = self.client.chat(messages, options, conversation_id=conversation_id)
        buffer, thoughts = self._buffer, self._reasoning = [], []
        self._told = False
        template = self.chat_template
        # Structured output starts with its JSON at once, even after a prompt that opened
        # <think>; reading the prompt's end renders the template, so not on the GUI thread.
        free_text = getattr(options, "response_format", "text") == "text"
        parts = self.parts = ReasoningSplitter()

        def tell() -> None:
            # After the append: a take that cleared the flag before this check happens
            # after the append and gets the delta; otherwise tell the GUI.
            if not self._told:
                self._told = True
                try:
                    self.text_arrived.emit()
                except RuntimeError:  # the window closed meanwhile: keep reading
                    pass              # to the end, which its shutdown makes near

        def take_in(reasoning: str, answer: str) -> None:
            if reasoning:
                thoughts.append(reasoning)  # list.append is atomic; the GUI takes them
            if answer:
                buffer.append(answer)
            if reasoning or answer:
                tell()

        def job(report, token):
            from models.engine.client import EngineCrashed

            parts.opened = free_text and reply_opens_reasoning(template, messages, options.thinking)
            try:
                for delta in reply:
                    take_in(*parts.feed(delta))
            except EngineCrashed as exc:
                return ReplyOutcome(reply, exc, crashed=True, finished_at=time.perf_counter(),
                                    parts=self._finish(parts, take_in))
            except QuantDeskError as exc:
                return ReplyOutcome(reply, exc, finished_at=time.perf_counter(),
                                    parts=self._finish(parts, take_in))
            return ReplyOutcome(reply, finished_at=time.perf_counter(),
                                parts=self._finish(parts, take_in))

        self._reply = reply
        self._reply_job = start_job(
            job, on_finished=self._reply_finished,
            on_failed=lambda message: self._reply_finished(ReplyOutcome(
                reply, QuantDeskError(message), parts=self._finish(parts, take_in))),
            pool=self._pool, owner=self)

    @staticmethod
    def _finish(parts: ReasoningSplitter, take_in) -> ReasoningSplitter:
        take_in(*parts.finish())
        return parts

    def take_text(self) -> tuple[str, str]:
        """The reasoning and the answer streamed since the last call (the page calls it
        after text_arrived); either may be empty."""
        self._told = False  # before taking: a delta appended after this is told again
        return self._take(self._reasoning), self._take(self._buffer)

    @staticmethod
    def _take(buffer: list[str]) -> str:
        count = len(buffer)
        if not count:
            return ""
        text = "".join(buffer[:count])
        del buffer[:count]
        return text

    def _reply_finished(self, outcome: ReplyOutcome) -> None:
        self._reply_job = None
        self._reply = None
        self.reply_done.emit(outcome)

    def stop(self) -> None:
        """Stop the reply: llama.cpp stops mid-computation, the text so far is kept."""
        if self._reply is not None:
            self._reply.cancel()

    @property
    def running_client(self):
        """The EngineClient when a model is loaded (it deletes saved states itself)."""
        return self._client if self.ready else None

    @property
    def engine_pid(self) -> Optional[int]:
        """The engine process id, ``None`` when none runs."""
        return self._client.pid if self._client is not None else None

    def shutdown(self) -> None:
        """Stop any reply and the engine process (the window is closing)."""
        self.stop()
        if self.model_path is not None:
            self._lend("release", self.model_path)
        self.lender = None
        if self._client is not None and self._owns_client:
            self._client.shutdown()
