"""Ollama's API, served on its own port when the user turns it on (``quantdesk serve
--ollama-port 11434``): ``/api/chat``, ``/api/generate``, ``/api/tags``, ``/api/show``,
``/api/ps``, ``/api/version``, ``/api/embed`` (and the older ``/api/embeddings``).

Only translation lives here, as in :mod:`.openai_api`: Ollama's ``options``
(``temperature``, ``top_p``, ``top_k``, ``min_p``, ``num_predict``, ``stop``, ``seed``,
``repeat_penalty``, ``presence_penalty``, ``frequency_penalty``), ``format`` (``"json"`` or
a JSON Schema, enforced by the grammar like ``response_format``), ``tools`` (calls made by
:mod:`.tool_calls`, arguments as objects) and ``keep_alive`` (accepted; the server's idle
unload applies) become engine options; replies stream as NDJSON, one object per line,
the last with ``done: true``, ``done_reason`` and the counts and durations (nanoseconds).
Model names are the Library ids; a ``:latest`` tag is ignored. Errors are Ollama's
``{"error": "sentence"}``. A reasoning model's
thinking comes apart from the answer as ``thinking`` (in ``message`` for chat, beside
``response`` for generate); ``think`` (``true``/``false``, or an effort such as ``"high"``,
which is on) is the template's switch.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from typing import Any, AsyncIterator, Optional

from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from models.engine.options import MAX_STOP_STRINGS
from models.engine.reasoning import REASONING_FIELD
from models.server.catalog import served_models, template_of
from models.server.core import Generation, ServerCore, read_json_body
from models.server.errors import ApiError
from models.server.images import image_from_base64, joined
from models.server.parameters import (MAX_INT, Fields, embedding_inputs, options_for_slot,
                                       structured_fields)
from models.server.request_log import STATUS_CLIENT_CLOSED
from models.server.tool_calls import Tool, ToolChoice, ToolPlan, tool_request

VERSION = "0.6.0"  # the Ollama API version whose shapes these are
DONE_REASONS = {"stop": "stop", "stop_string": "stop", "length": "length",
                "context_full": "length", "cancelled": "stop"}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _model_id(value: Any) -> Any:
    if isinstance(value, str) and value.endswith(":latest"):
        return value[: -len(":latest")]
    return value


def _options(body: Fields) -> dict:
    """Ollama's ``options`` and ``format`` as engine option fields."""
    options = body.obj("options") or Fields({}, "options")
    values = dict(
        temperature=options.number("temperature", 0.8, 0.0, 2.0),
        top_p=options.number("top_p", 0.9, 0.0, 1.0) or 1.0,
        top_k=options.integer("top_k", 40, 0, 1 << 20),
        min_p=options.number("min_p", 0.0, 0.0, 0.999),
        repeat_penalty=options.number("repeat_penalty", 1.1, 0.01, 10.0),
        presence_penalty=options.number("presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=options.number("frequency_penalty", 0.0, -2.0, 2.0),
        stop=options.strings("stop", MAX_STOP_STRINGS),
    )
    seed = options.integer("seed", None, -1, MAX_INT)
    values["seed"] = None if seed is None or seed < 0 else seed % (2**32 - 1)
    predict = options.integer("num_predict", None, -2, MAX_INT)
    values["max_tokens"] = predict if predict and predict > 0 else None
    think = body.get("think")
    if isinstance(think, str) and think in ("high", "medium", "low"):
        think = True
    if think is not None and not isinstance(think, bool):
        raise ApiError(400, "The field `think` must be true, false, \"high\", \"medium\" "
                            "or \"low\".", param="think", code="invalid_value")
    values["thinking"] = think
    kind = body.get("format")
    if kind == "json":
        values.update(structured_fields("json"))
    elif isinstance(kind, dict):
        values.update(structured_fields("json_schema", kind))
    elif kind not in (None, ""):
        raise ApiError(400, "The field `format` must be \"json\" or a JSON Schema object.",
                       param="format", code="invalid_value")
    return values


def _content(text: Any, images: Any, where: str) -> Any:
    """A message's (or /api/generate's) text and its ``images`` (base64; ``where`` names
    the field), the images first, as Ollama puts a message's images before its text."""
    text = str(text or "")
    if not images:
        return text
    if not isinstance(images, list):
        raise ApiError(400, f"{where} must be a list of base64 strings.", param=where, code="invalid_value")
    parts = [image_from_base64(data, f"{where}[{n}]") for n, data in enumerate(images)]
    return joined(parts + [{"type": "text", "text": text}])


def _messages(value: Any) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise ApiError(400, "The field `messages` must be a non-empty list.", param="messages",
                       code="invalid_value")
    out = []
    for index, message in enumerate(value):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("system", "user", "assistant", "tool"):
            raise ApiError(400, f"Message {index + 1} has the role {role!r}; use system, "
                                "user, assistant or tool.", param=f"messages[{index}].role",
                           code="invalid_value")
        clean = {"role": role, "content": _content(message.get("content"), message.get("images"),
                                                   f"messages[{index}].images")}
        calls = message.get("tool_calls") or []
        if role == "assistant" and calls:
            clean["tool_calls"] = [(f"call_{index}_{n}", c["function"]["name"],
                                    c["function"].get("arguments") or {})
                                   for n, c in enumerate(calls)]
        if role == "tool":
            clean["tool_call_id"] = ""
        if role == "assistant" and message.get("thinking"):
            clean[REASONING_FIELD] = str(message["thinking"])
        out.append(clean)
    return out


def _tools(body: Fields) -> tuple[list[Tool], ToolChoice]:
    value = body.get("tools") or []
    tools = []
    for index, item in enumerate(value if isinstance(value, list) else []):
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ApiError(400, f"Tool {index + 1} needs a `function` with a `name`.",
                           param=f"tools[{index}]", code="invalid_value")
        tools.append(Tool(function["name"], str(function.get("description") or ""),
                          function.get("parameters") or {"type": "object", "properties": {}}))
    return tools, ToolChoice("auto" if tools else "none")


def _final(gen: Generation, started: float) -> dict:
    stats = gen.stats
    total = int((time.perf_counter() - started) * 1e9)
    return {"done": True,
            "done_reason": DONE_REASONS.get(stats.stop_reason if stats else "", "stop"),
            "total_duration": total, "load_duration": 0,
            "prompt_eval_count": stats.prompt_tokens if stats else 0,
            "prompt_eval_duration": int((stats.prefill_seconds if stats else 0) * 1e9),
            "eval_count": stats.completion_tokens if stats else 0,
            "eval_duration": int((stats.decode_seconds if stats else 0) * 1e9)}


def _message(content: str, thinking: str) -> dict:
    """A chat message of the reply (``thinking`` only when there is some)."""
    message = {"role": "assistant", "content": content}
    if thinking:
        message["thinking"] = thinking
    return message


def _generated(response: str, thinking: str) -> dict:
    """A generate reply's text fields."""
    return {"response": response, "thinking": thinking} if thinking else {"response": response}


def _calls_of(gen: Generation, plan: Optional[ToolPlan]) -> Optional[list[dict]]:
    calls = plan.calls(gen) if plan is not None else None
    if not calls:
        return None
    return [{"function": {"name": c.name, "arguments": c.arguments}} for c in calls]


async def _ndjson(gen: Generation, chat: bool, plan: Optional[ToolPlan],
                  started: float) -> AsyncIterator[str]:
    """The NDJSON lines of a streamed reply; finishes the generation."""
    status, error = STATUS_CLIENT_CLOSED, "The client closed the stream."
    head = {"model": gen.model.id}
    try:
        try:
            async for event in gen.events():
                if event.kind != "delta" or not (event.text or event.reasoning) \
                        or plan is not None:
                    continue  # tool replies are sent whole at the end: calls, or text
                piece = {"message": _message(event.text, event.reasoning)} if chat \
                    else _generated(event.text, event.reasoning)
                yield json.dumps(dict(head, created_at=_now(), done=False, **piece)) + "\n"
            calls = _calls_of(gen, plan)
        except ApiError as exc:
            status, error = exc.status, exc.message
            yield json.dumps({"error": exc.message}) + "\n"
            return
        last: dict = dict(head, created_at=_now(), **_final(gen, started))
        if chat:
            content = gen.text if plan is not None and not calls else ""
            last["message"] = {"role": "assistant", "content": content}
            if calls:
                last["message"]["tool_calls"] = calls
        else:
            last["response"] = ""
        yield json.dumps(last) + "\n"
        status, error = 200, ""
    finally:
        gen.finish(status, error)


class _NdjsonStream(StreamingResponse):
    """A streamed reply whose generation is finished however the response ends."""

    def __init__(self, gen: Generation, lines: AsyncIterator[str]) -> None:
        super().__init__(lines, media_type="application/x-ndjson")
        self.generation = gen

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.generation.finish(STATUS_CLIENT_CLOSED, "The client closed the stream.")


def routes(core: ServerCore) -> list[Route]:
    """The Ollama endpoints, bound to ``core``."""

    def details(model: Any) -> dict:
        return {"format": "gguf", "family": "", "families": None, "parameter_size": "",
                "quantization_level": model.id.rsplit(".", 1)[-1] if "." in model.id else ""}

    def capabilities(model: Any) -> list[str]:
        if model.embedding:
            return ["embedding"]
        template = template_of(model.path) or ""
        vision = ["vision"] if "image" in core.input_modalities(model) else []
        return ["completion", "tools"] + (["thinking"] if "<think>" in template else []) + vision

    def describe(model: Any) -> dict:
        stat = model.path.stat()
        modified = datetime.fromtimestamp(stat.st_mtime, timezone.utc).isoformat()
        return {"name": model.id, "model": model.id, "modified_at": modified,
                "size": stat.st_size, "digest": "", "details": details(model)}

    async def reply(request: Request, log_fields: dict, body: Fields, chat: bool):
        started = time.perf_counter()
        values = _options(body)
        model_id = _model_id(body.get("model"))
        if chat:
            tools, choice = _tools(body)
            messages, plan = tool_request(core, model_id, _messages(body.get("messages")),
                                          tools, choice, values)
            prompt = None
        else:
            plan = None
            text = body.get("prompt")
            if not isinstance(text, str) or not text:
                raise ApiError(400, "The field `prompt` must be a non-empty string.",
                               param="prompt", code="invalid_value")
            if body.boolean("raw", False):
                if body.get("images"):
                    raise ApiError(400, "A raw prompt cannot carry images: the model's template places "
                                        "them. Leave out `raw`.", param="images", code="unsupported_content")
                messages, prompt = None, text
            else:
                system = body.string("system")
                messages = ([{"role": "system", "content": system}] if system else []) + \
                    [{"role": "user", "content": _content(text, body.get("images"), "images")}]
                prompt = None
        gen = await core.start(request, model_id, options_for_slot(values), messages=messages,
                               prompt=prompt, log_fields=log_fields)
        if body.boolean("stream", True):
            return _NdjsonStream(gen, _ndjson(gen, chat, plan, started))
        calls = await gen.complete(request, lambda done: _calls_of(done, plan))
        out: dict = dict(model=gen.model.id, created_at=_now(), **_final(gen, started))
        if chat:
            out["message"] = _message("" if calls else gen.answer, gen.reasoning)
            if calls:
                out["message"]["tool_calls"] = calls
        else:
            out.update(_generated(gen.answer, gen.reasoning))
        return JSONResponse(out)

    async def chat(request: Request, log_fields: dict):
        body = Fields(await read_json_body(request, core.config.max_body_bytes))
        body.get("keep_alive")  # accepted: the server unloads idle models itself
        return await reply(request, log_fields, body, chat=True)

    async def generate(request: Request, log_fields: dict):
        body = Fields(await read_json_body(request, core.config.max_body_bytes))
        return await reply(request, log_fields, body, chat=False)

    async def tags(request: Request, log_fields: dict):
        return JSONResponse({"models": [describe(m) for m in
                                        served_models(core.library, rescan=True)]})

    async def show(request: Request, log_fields: dict):
        body = Fields(await read_json_body(request, core.config.max_body_bytes))
        model = core.resolve(_model_id(body.get("model") or body.get("name")))
        return JSONResponse({"modelfile": "", "parameters": "",
                             "template": template_of(model.path) or "",
                             "details": details(model),
                             "model_info": {"general.context_length": model.context_length},
                             "capabilities": capabilities(model),
                             "modified_at": describe(model)["modified_at"]})

    async def ps(request: Request, log_fields: dict):
        loaded = []
        for model in served_models(core.library):
            entry = core.pool.peek(model.path)
            if entry is not None:
                expires = datetime.now(timezone.utc) + timedelta(
                    seconds=core.pool.idle_unload_seconds or 365 * 86400)
                loaded.append(dict(describe(model), expires_at=expires.isoformat(),
                                   size_vram=0, context_length=entry.context_per_slot))
        return JSONResponse({"models": loaded})

    async def embed(request: Request, log_fields: dict):
        started = time.perf_counter()
        body = Fields(await read_json_body(request, core.config.max_body_bytes))
        body.get("keep_alive")  # accepted: the server unloads idle models itself
        body.refuse("dimensions", "this server returns the model's whole vectors.")
        inputs = embedding_inputs(body.get("input"))
        model, vectors, tokens = await core.embed(_model_id(body.get("model")), inputs,
                                                  log_fields)
        return JSONResponse({"model": model.id,
                             "embeddings": [[float(x) for x in v] for v in vectors],
                             "total_duration": int((time.perf_counter() - started) * 1e9),
                             "load_duration": 0, "prompt_eval_count": tokens})

    async def embeddings(request: Request, log_fields: dict):
        """The older single-prompt endpoint: ``prompt`` in, ``embedding`` out."""
        body = Fields(await read_json_body(request, core.config.max_body_bytes))
        prompt = body.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            raise ApiError(400, "The field `prompt` must be a non-empty string.",
                           param="prompt", code="invalid_value")
        _, vectors, _ = await core.embed(_model_id(body.get("model")), [prompt], log_fields)
        return JSONResponse({"embedding": [float(x) for x in vectors[0]]})

    async def version(request: Request, log_fields: dict):
        return JSONResponse({"version": VERSION})

    async def root(request: Request, log_fields: dict):
        return JSONResponse("Ollama is running")

    def endpoint(handler: Any) -> Any:
        return core.endpoint(handler, error_shape=lambda error: {"error": error.message})

    return [Route("/api/chat", endpoint(chat), methods=["POST"]),
            Route("/api/generate", endpoint(generate), methods=["POST"]),
            Route("/api/tags", endpoint(tags), methods=["GET"]),
            Route("/api/show", endpoint(show), methods=["POST"]),
            Route("/api/ps", endpoint(ps), methods=["GET"]),
            Route("/api/version", endpoint(version), methods=["GET"]),
            Route("/api/embed", endpoint(embed), methods=["POST"]),
            Route("/api/embeddings", endpoint(embeddings), methods=["POST"]),
            Route("/", endpoint(root), methods=["GET", "HEAD"])]
