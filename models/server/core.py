"""The request core every API dialect shares: from a parsed request to engine events.

A dialect's router (``openai_api.py`` today) reads its own field names into a
:class:`~models.engine.ChatOptions` and messages or a prompt, then asks
:meth:`ServerCore.start` for a :class:`Generation`. The core does the rest the same way
for every dialect:

- **model resolution** — ``model`` is a Library id (:mod:`.catalog`); unknown is a 404
  saying how to list the names; the engine comes from the :class:`~.engine_pool.EnginePool`
  (loaded on demand, refused with memory_fit's sentence when it does not fit);
- **queue** — each model has as many slots as its engine decodes together; more requests
  wait in arrival order (:class:`SlotGate`), and past ``queue_limit`` waiting ones the
  answer is 429 with ``Retry-After``;
- **starting** — the engine's reply is read on the event loop, its events queued for the
  request (:class:`ReplyPump`: no thread per request); :meth:`ServerCore.start` returns
  only once the first event is in, so a refusal (a prompt longer than the slot's
  context, an engine error) is still an HTTP error and never a broken stream;
- **cancellation** — a client that goes away cancels its reply (``reply.cancel()``), and
  the slot is free when the engine stops;
- **reasoning** — a chat reply in free text is split into reasoning (``<think>…</think>``)
  and answer by :class:`~models.engine.reasoning.ReasoningSplitter`, the one the Chat page
  uses; events carry both, and :attr:`Generation.answer` / :attr:`Generation.reasoning`
  hold the whole of each (a constrained reply — tool calls, a schema — is not split, and
  is asked of the model with its thinking off unless the request chose);
- **faults** — the engine dying mid-reply is an :class:`~.errors.ApiError` event; the
  next request starts a fresh engine (``EngineClient`` does that);
- **the log** — one :class:`~.request_log.RequestLogEntry` per request.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any, AsyncIterator, Awaitable, Callable, Optional

from sse_starlette import EventSourceResponse
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from models.engine.reasoning import ReasoningSplitter, reply_opens_reasoning
from models.foundation.errors import QuantDeskError
from models.images import has_images
from models.server.catalog import ServedModel, find_model, input_modalities, template_of
from models.server.config import ServerConfig
from models.server.engine_pool import EnginePool, PooledEngine
from models.server.errors import ApiError, from_quantdesk_error, internal_error
from models.server.images import download_images
from models.server.request_log import STATUS_CLIENT_CLOSED, RequestLogEntry

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 2
PING_SECONDS = 15  # an SSE comment now and then keeps proxies from closing a slow stream
MAX_JSON_DEPTH = 64


# -- reading bodies -------------------------------------------------------------------


async def read_json_body(request: Request, limit: int) -> dict:
    """The request's body as a JSON object, or a 400/413 that says what is wrong.

    The body is read in pieces and refused as soon as it passes ``limit`` (a client that
    announces a smaller ``Content-Length`` cannot get past it).
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"The request body is {int(declared)} bytes, more than the "
                            f"{limit} bytes this server accepts.", code="body_too_large")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"The request body is more than the {limit} bytes this "
                                    "server accepts.", code="body_too_large")
            chunks.append(chunk)
    except ClientDisconnect:
        raise ApiError(400, "The client closed the connection before sending the whole "
                            "body.") from None
    return parse_json_object(b"".join(chunks))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json_object(raw: bytes) -> dict:
    """Parse a request body: UTF-8 JSON, an object, no NaN/Infinity, not absurdly deep."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(400, f"The request body is not valid UTF-8 (byte {exc.start} is "
                            "not part of a character); send JSON text.") from None
    if not text.strip():
        raise ApiError(400, "The request body is empty; send a JSON object.")
    depth = max_depth = 0
    for char in text:  # json.loads would recurse into deep nesting: refuse it first
        if char in "[{":
            depth += 1
            max_depth = max(max_depth, depth)
            if max_depth > MAX_JSON_DEPTH:
                raise ApiError(400, f"The request body nests JSON deeper than "
                                    f"{MAX_JSON_DEPTH} levels.")
        elif char in "]}":
            depth -= 1
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise ApiError(400, f"The request body is not valid JSON: {exc}.") from None
    if not isinstance(value, dict):
        raise ApiError(400, f"The request body must be a JSON object, not "
                            f"{type(value).__name__ if value is not None else 'null'}.")
    return value


# -- the queue ------------------------------------------------------------------------


class SlotGate:
    """A model's slots: requests past them wait in arrival order, up to ``queue_limit``."""

    def __init__(self, entry: PooledEngine, queue_limit: int) -> None:
        self.entry = entry
        self.slots = max(entry.slots, 1)
        self.queue_limit = queue_limit
        self._waiters: collections.deque[asyncio.Future] = collections.deque()

    async def acquire(self) -> None:
        """Take a slot, waiting for one; 429 when too many wait already."""
        if self.entry.active < self.slots and not self._waiters:
            self.entry.active += 1
            return
        if len(self._waiters) >= self.queue_limit:
            raise ApiError(429, f"The server is busy: {self.entry.active} request(s) are being "
                                f"answered and {len(self._waiters)} are waiting for "
                                f"{self.entry.path.name}. Try again in a moment.",
                           code="queue_full",
                           headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        self.entry.queued = len(self._waiters)
        try:
            await waiter  # release() hands its slot over: ``active`` is already counted
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot just as the client left: pass it on
            else:
                self._waiters.remove(waiter)
            raise
        finally:
            self.entry.queued = len(self._waiters)

    def release(self) -> None:
        """Give a slot back, to the longest-waiting request if any."""
        while self._waiters:
            waiter = self._waiters.popleft()
            self.entry.queued = len(self._waiters)
            if not waiter.done():
                waiter.set_result(None)
                return
        self.entry.active -= 1
        self.entry.touch()


# -- the reply in a thread ------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """What the engine said: ``delta`` or ``done`` (stats).

    A delta's ``text`` is answer text and ``reasoning`` the thinking it holds (a reply
    that is not split has all of it in ``text``); ``logprobs`` are its tokens'.
    """

    kind: str
    text: str = ""
    logprobs: tuple = ()
    stats: Any = None
    reasoning: str = ""


class ReplyPump:
    """Reads an engine reply on the event loop and queues its events for the request.

    ``async for`` on the reply: the engine client's reader thread hands each engine event
    straight to the loop (:meth:`~models.engine.client.ChatReply.__aiter__`), with no
    thread per request. With llama.cpp keeping every core busy, each thread woken per
    delta preempts one of its threads, so the hop this saves is decode speed.
    """

    def __init__(self, reply: Any) -> None:
        self.reply = reply
        self.queue: asyncio.Queue = asyncio.Queue()
        self.finished = False
        self.stopped = asyncio.Event()  # set once the engine has ended the reply
        self.task: Optional[asyncio.Future] = None  # held: the loop keeps tasks weakly

    def start(self) -> None:
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        from models.engine.client import EngineCrashed

        reply, seen, put = self.reply, 0, self.queue.put_nowait
        try:
            async for text in reply:
                logprobs = reply.logprobs
                fresh, seen = tuple(logprobs[seen:]), len(logprobs)
                put(Event("delta", text, fresh))
            put(Event("done", stats=reply.stats))
        except EngineCrashed as exc:
            put(ApiError(500, exc.user_message, code="engine_crashed"))
        except QuantDeskError as exc:
            put(from_quantdesk_error(exc))
        except asyncio.CancelledError:  # the loop is shutting down
            put(ApiError(503, "The server is stopping.", code="server_stopping"))
            raise
        except Exception:
            log.exception("server: the engine reply failed")
            put(internal_error())
        finally:
            self.finished = True
            self.stopped.set()

    async def next(self) -> Event:
        """The next event; raises the :class:`ApiError` that ended the reply."""
        item = await self.queue.get()
        if isinstance(item, ApiError):
            raise item
        return item


# -- one request ----------------------------------------------------------------------


FINISH_REASONS = {"stop": "stop", "stop_string": "stop", "length": "length",
                  "context_full": "length"}


class Generation:
    """One request's reply: its events, its slot and its log entry.

    Iterate :meth:`events` (the first is already received when :meth:`ServerCore.start`
    returns) or await :meth:`collect`; call :meth:`finish` exactly once at the end (it is
    idempotent, so ``finally`` clauses may call it again).
    """

    def __init__(self, core: "ServerCore", model: ServedModel, entry: PooledEngine,
                 gate: SlotGate, reply: Any, pump: ReplyPump, log_entry: dict,
                 parts: Optional[ReasoningSplitter] = None) -> None:
        self.core = core
        self.id = uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.model = model
        self.entry = entry
        self.reply = reply
        self._gate = gate
        self._pump = pump
        self._first: Optional[Event] = None
        self._log = log_entry
        self._finished = False
        self.text = ""  # the reply as the model wrote it, reasoning and tags included
        self.logprobs: list = []
        self.stats: Any = None
        self.parts = parts  # splits reasoning from answer; None: the reply is not split

    async def _first_event(self) -> None:
        self._first = await self._pump.next()
        self._log["ttft_seconds"] = time.perf_counter() - self._log["started"]

    async def events(self) -> AsyncIterator[Event]:
        """Every event of the reply, ending with ``done``; an engine fault raises ApiError."""
        event, self._first = self._first, None
        if event is None:
            event = await self._pump.next()
        while True:
            if event.kind == "delta":
                self.text += event.text
                self.logprobs.extend(event.logprobs)
                if self.parts is not None:
                    reasoning, answer = self.parts.feed(event.text)
                    event = Event("delta", answer, event.logprobs, reasoning=reasoning)
            else:
                if self.parts is not None:
                    reasoning, answer = self.parts.finish()
                    if reasoning or answer:
                        yield Event("delta", answer, reasoning=reasoning)
                self.stats = event.stats
                problem = self.validation_problem()
                if problem is not None:
                    raise problem
                if self.stats is not None and self.stats.stop_reason == "cancelled":
                    raise ApiError(503, "The server is stopping; this reply was cut short."
                                   if self.core.stopping else
                                   "This reply was stopped before it ended (cancelled in "
                                   "QuantDesk's window, which shares the model's engine).",
                                   code="cancelled")
                yield event
                return
            yield event
            event = await self._pump.next()

    async def collect(self, request: Request) -> None:
        """Wait for the whole reply, cancelling it if the client disconnects meanwhile.

        Raises:
            ApiError: The engine failed, or the client went away (status 499).
        """
        async def consume() -> None:
            async for _ in self.events():
                pass

        consumer = asyncio.ensure_future(consume())
        watcher = asyncio.ensure_future(wait_for_disconnect(request))
        try:
            done, _ = await asyncio.wait({consumer, watcher},
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
        if consumer in done:
            consumer.result()
            return
        self.cancel()
        consumer.cancel()
        raise ApiError(STATUS_CLIENT_CLOSED, "The client closed the connection.")

    async def complete(self, request: Request, build: Callable[["Generation"], Any]) -> Any:
        """Wait for the whole reply and make the response body with ``build``; the
        generation is finished whatever happens (an ApiError from ``build`` — a malformed
        tool call, say — is the request's answer)."""
        try:
            await self.collect(request)
            body = build(self)
        except ApiError as exc:
            self.finish(exc.status, exc.message)
            raise
        except BaseException:
            self.finish(STATUS_CLIENT_CLOSED, "The request was abandoned.")
            raise
        self.finish(200)
        return body

    @property
    def answer(self) -> str:
        """The reply without its reasoning (all of it when it is not split)."""
        return self.parts.answer if self.parts is not None else self.text

    @property
    def reasoning(self) -> str:
        """The reply's reasoning, without its tags; "" when it has none."""
        return self.parts.reasoning if self.parts is not None else ""

    def structured_report(self) -> Optional[dict]:
        """For a schema the grammar did not enforce exactly (a request without ``strict``):
        what it did not enforce, and whether the reply matched the whole schema; the
        response carries it as ``structured_output``. ``None`` otherwise."""
        stats = self.stats
        if stats is None or not getattr(stats, "not_enforced", None):
            return None
        return {"enforced": False, "not_enforced": stats.not_enforced,
                "valid": bool(stats.valid), "error": stats.validation_error}

    def validation_problem(self) -> Optional[ApiError]:
        """A structured reply that ended normally yet failed a schema the grammar enforced
        exactly, as an error (one generated without ``strict`` says so in its response)."""
        stats = self.stats
        if stats is None or getattr(stats, "valid", None) is not False \
                or getattr(stats, "not_enforced", None):
            return None
        if stats.stop_reason in ("length", "context_full", "cancelled"):
            return None  # cut short: finish_reason "length" tells the client
        return ApiError(500, f"The model's reply did not match the requested format: "
                             f"{stats.validation_error}", code="invalid_structured_output")

    @property
    def finish_reason(self) -> str:
        """OpenAI's ``finish_reason`` for the engine's stop reason."""
        reason = self.stats.stop_reason if self.stats is not None else ""
        return FINISH_REASONS.get(reason, "stop")

    def usage(self) -> dict:
        """Token counts of the reply, in OpenAI's ``usage`` shape. Speculative decoding's
        guesses are OpenAI's predicted-output counts (the drafted tokens the model
        confirmed, and those it did not), and, as an extra field, ``speculative``:
        ``{"drafted_tokens", "accepted_tokens"}``."""
        stats = self.stats
        prompt = stats.prompt_tokens if stats else 0
        completion = stats.completion_tokens if stats else 0
        cached = stats.prompt_tokens_reused if stats else 0
        drafted = stats.draft_tokens if stats else 0
        accepted = stats.accepted_tokens if stats else 0
        return {"prompt_tokens": prompt, "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached},
                "completion_tokens_details": {
                    "reasoning_tokens": stats.reasoning_tokens if stats else 0,
                    "accepted_prediction_tokens": accepted,
                    "rejected_prediction_tokens": drafted - accepted},
                "speculative": {"drafted_tokens": drafted, "accepted_tokens": accepted}}

    def cancel(self) -> None:
        """Stop the engine's work on this reply (the client left); the slot frees when it stops."""
        if not self._pump.finished:
            self.reply.cancel()

    def finish(self, status: int, error: str = "") -> None:
        """Free the slot (once the engine stops) and log the request."""
        if self._finished:
            return
        self._finished = True
        self.cancel()
        self.core._live.discard(self)
        stats = self.stats
        entry = dict(self._log, status=status, error=error)
        if stats is not None:
            entry.update(prompt_tokens=stats.prompt_tokens,
                         cached_tokens=stats.prompt_tokens_reused,
                         completion_tokens=stats.completion_tokens,
                         drafted_tokens=stats.draft_tokens,
                         accepted_tokens=stats.accepted_tokens,
                         tokens_per_second=stats.decode_tokens_per_second or None)
        self.core.log_request(entry)
        pump, gate = self._pump, self._gate
        if pump.finished:
            gate.release()
        else:  # the slot is the engine's until it has stopped this reply
            async def release_when_stopped() -> None:
                await pump.stopped.wait()
                gate.release()

            asyncio.ensure_future(release_when_stopped())


async def run_blocking(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` in a worker thread, so the event loop keeps serving meanwhile."""
    return await asyncio.get_running_loop().run_in_executor(None, function, *args)


def error_response(error: ApiError,
                   shape: Optional[Callable[[ApiError], dict]] = None) -> Response:
    """An error as the OpenAI API sends it (or in the dialect's ``shape``)."""
    body = shape(error) if shape is not None else error.body()
    return JSONResponse(body, status_code=error.status, headers=error.headers)


class GenerationStream(EventSourceResponse):
    """A streamed reply as server-sent events (``data: ...`` framing by sse-starlette,
    which also notices a client that disconnects and closes the event source).

    The generation is finished when the response ends, whatever happened: a client that
    left before the first event was even sent would otherwise keep its slot.
    """

    def __init__(self, generation: Generation, events: AsyncIterator[str]) -> None:
        super().__init__(events, sep="\n", ping=PING_SECONDS)
        self.generation = generation

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.generation.finish(STATUS_CLIENT_CLOSED, "The client closed the stream.")


async def wait_for_disconnect(request: Request) -> None:
    """Return when the client closes the connection (the body has been read already)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


# -- the core -------------------------------------------------------------------------


class ServerCore:
    """What the routers share: the library, the engines, the queues and the request log.

    Args:
        config: The server's settings.
        pool: The engines, one per model.
        library: The models offered (default: the app's Library).
        on_log: Called with each :class:`RequestLogEntry` (from the server's thread).
    """

    def __init__(self, config: ServerConfig, pool: EnginePool, library: Any = None,
                 on_log: Optional[Callable[[RequestLogEntry], None]] = None) -> None:
        if library is None:
            from models.library import Library

            library = Library()
        self.config = config
        self.pool = pool
        self.library = library
        self.on_log = on_log
        self.stopping = False
        self._gates: dict[Any, SlotGate] = {}
        self._live: set[Generation] = set()

    def resolve(self, model_id: Any) -> ServedModel:
        """The Library model a request names, or a 404 that says how to list them."""
        if not isinstance(model_id, str) or not model_id:
            raise ApiError(400, "The request names no model; set `model` to one of the ids "
                                "GET /v1/models lists.", param="model", code="missing_model")
        model = find_model(self.library, model_id)
        if model is None:
            raise ApiError(404, f"There is no model {model_id!r} in the QuantDesk library. "
                                "GET /v1/models lists the ids to use (or run `quantdesk list`).",
                           param="model", code="model_not_found")
        return model

    def input_modalities(self, model: ServedModel) -> list[str]:
        """What ``model`` reads (``/v1/models``, Ollama's capabilities): loaded, what its
        vision encoder reads, if it has one; not loaded, what the encoder it would load
        with reads (its load settings' mmproj, e.g. ``--mmproj``, else the one beside it)."""
        if model.embedding:
            return ["text"]
        entry = self.pool.peek(model.path)
        if entry is not None:
            return input_modalities(model.path, entry.projector) if entry.projector else ["text"]
        return input_modalities(model.path, getattr(self.pool.settings_for(model.path), "mmproj", None))

    async def engine(self, model: ServedModel) -> PooledEngine:
        """The model's engine, loading it when needed (in a thread: loads take seconds)."""
        return await run_blocking(self._engine_now, model)

    def _engine_now(self, model: ServedModel) -> PooledEngine:
        try:
            return self.pool.get(model.path)
        except QuantDeskError as exc:
            status = 400 if "would not fit" in exc.what else 500
            raise from_quantdesk_error(exc, status, code="model_load_failed",
                                       param="model") from None

    def _prepare(self, model_id: Any, options: Any, messages: Optional[list],
                 split_reasoning: bool, log_fields: dict) -> tuple:
        """What :meth:`start` does before the reply, in one worker-thread hop (each hop
        is a thread wake-up, which a busy machine makes a request wait for): the model,
        its engine (loaded if needed), the options for its slot, the reasoning split, and the
        messages with their web-address images downloaded (or refused)."""
        model = self.resolve(model_id)  # may rescan the library
        log_fields["model"] = model.id
        entry = self._engine_now(model)
        if entry.embedding:
            raise ApiError(400, f"{model.id} is an embedding model: it makes vectors "
                                "(POST /v1/embeddings, or /api/embed on the Ollama port), not "
                                "replies. Choose a chat model.", param="model",
                           code="embedding_model")
        if messages is not None:  # web-address images: downloaded here, if the server may
            messages = download_images(messages, self.config.image_urls)
        if messages is not None and has_images(messages) and not entry.reads_images:
            raise ApiError(400, f"{model.id} has no vision encoder loaded, so it cannot read "
                                "images. Send text only, or choose a model whose mmproj file "
                                "is beside it (GET /v1/models lists each model's input "
                                "modalities).", param="messages", code="images_unsupported")
        if callable(options):  # options that depend on the slot's context (max_tokens)
            options = options(entry.context_per_slot)
        parts = None
        if messages is not None:
            if options.response_format != "text" and options.thinking is None:
                options = replace(options, thinking=False)  # the grammar leaves no room
            elif options.response_format == "text" and split_reasoning:
                parts = ReasoningSplitter(self._opens_reasoning(model, messages, options.thinking))
        return model, entry, options, parts, messages

    def _gate(self, entry: PooledEngine) -> SlotGate:
        gate = self._gates.get(entry.path)
        if gate is None or gate.entry is not entry or gate.slots != max(entry.slots, 1):
            gate = self._gates[entry.path] = SlotGate(entry, self.config.queue_limit)
        return gate

    async def start(self, request: Request, model_id: Any, options: Any,
                    messages: Optional[list] = None, prompt: Optional[str] = None,
                    log_fields: Optional[dict] = None,
                    split_reasoning: bool = True) -> Generation:
        """Resolve, load, queue and start a reply; return once its first event is in.

        A chat reply (``messages``) in free text is split into reasoning and answer unless
        ``split_reasoning`` is off; a raw ``prompt`` never is.

        Raises:
            ApiError: Any refusal: unknown model, bad options, full queue, an engine error
                before the first token.
        """
        if self.stopping:
            raise ApiError(503, "The server is stopping.", code="server_stopping")
        log_fields = log_fields if log_fields is not None else {}
        model, entry, options, parts, messages = await run_blocking(
            self._prepare, model_id, options, messages, split_reasoning, log_fields)
        reply = self._reply(entry, options, messages, prompt)
        gate = self._gate(entry)
        await gate.acquire()
        try:
            pump = ReplyPump(reply)
            generation = Generation(self, model, entry, gate, reply, pump, dict(log_fields),
                                    parts)
            log_fields["logged"] = True  # from here on, the generation logs the request
            self._live.add(generation)
            pump.start()
        except BaseException:
            gate.release()
            raise
        try:
            await generation._first_event()
        except ApiError as exc:
            generation.finish(exc.status, exc.message)
            raise
        except BaseException:  # the client left while the first token was being made
            generation.finish(STATUS_CLIENT_CLOSED, "The client closed the connection.")
            raise
        return generation

    async def embed(self, model_id: Any, inputs: list,
                    log_fields: dict) -> tuple[ServedModel, Any, int]:
        """The embedding of each input by an embedding model, and the tokens read; queued
        for the model's slot like a reply.

        Raises:
            ApiError: An unknown model, a chat model, a refused input (400), a full queue.
        """
        if self.stopping:
            raise ApiError(503, "The server is stopping.", code="server_stopping")
        model = await run_blocking(self.resolve, model_id)
        log_fields["model"] = model.id
        entry = await self.engine(model)
        if not entry.embedding:
            raise ApiError(400, f"{model.id} is not an embedding model, so it makes replies, "
                                "not embeddings. Choose a model the Library marks as an "
                                "embedding model (GET /v1/models lists `embedding: true`).",
                           param="model", code="not_an_embedding_model")
        gate = self._gate(entry)
        await gate.acquire()
        try:
            vectors, tokens = await run_blocking(entry.client.embed, inputs)
        except QuantDeskError as exc:
            raise from_quantdesk_error(exc) from None
        finally:
            gate.release()
        log_fields["prompt_tokens"] = tokens
        return model, vectors, tokens

    @staticmethod
    def _opens_reasoning(model: ServedModel, messages: list, thinking: Optional[bool]) -> bool:
        """Whether the model's template ends the prompt inside ``<think>`` (DeepSeek-R1's
        does): its reply then starts in the reasoning."""
        return reply_opens_reasoning(template_of(model.path), messages, thinking)

    @staticmethod
    def _reply(entry: PooledEngine, options: Any, messages: Optional[list],
               prompt: Optional[str]) -> Any:
        """The engine reply (validated at once: a bad option or schema is a 400 here)."""
        try:
            if prompt is not None:
                return entry.client.chat(None, options, prompt=prompt)
            return entry.client.chat(messages, options)
        except QuantDeskError as exc:
            raise from_quantdesk_error(exc) from None

    def log_request(self, values: dict) -> None:
        """Make the log entry for a finished request and hand it to the listener."""
        values = dict(values)
        values.pop("logged", None)
        started = values.pop("started", None)
        if started is not None:
            values["seconds"] = time.perf_counter() - started
        entry = RequestLogEntry(**values)
        if self.config.log_requests:
            log.info("server: %s", entry.line())
        if self.on_log is not None:
            try:
                self.on_log(entry)
            except Exception:
                log.exception("server: a request-log listener failed")

    def cancel_all(self) -> None:
        """Stop every reply in progress (the server is stopping)."""
        self.stopping = True
        for generation in list(self._live):
            generation.cancel()

    def endpoint(self, handler: Callable[[Request, dict], Awaitable[Response]],
                 error_shape: Optional[Callable[[ApiError], dict]] = None
                 ) -> Callable[[Request], Awaitable[Response]]:
        """Wrap a router's handler: errors become error responses (OpenAI's shape, or
        ``error_shape``'s), and the request is logged once (by its generation when it has
        one, else here)."""
        async def run(request: Request) -> Response:
            fields = self.request_log_fields(request)
            try:
                response = await handler(request, fields)
            except ApiError as exc:
                response = error_response(exc, error_shape)
                error = exc.message
            except Exception:
                log.exception("server: %s %s failed", request.method, request.url.path)
                exc = internal_error()
                response, error = error_response(exc, error_shape), exc.message
            else:
                error = ""
            if not fields.get("logged"):
                self.log_request(dict(fields, status=response.status_code, error=error))
            return response
        return run

    def request_log_fields(self, request: Request) -> dict:
        """The fields of a request's log entry known when it arrives."""
        client = f"{request.client.host}:{request.client.port}" if request.client else ""
        return {"client": client, "method": request.method, "path": request.url.path,
                "started": time.perf_counter()}

