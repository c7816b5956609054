"""The OpenAI dialect: ``/v1/models``, ``/v1/chat/completions``, ``/v1/completions``,
``/v1/embeddings``.

Only translation lives here — OpenAI's field names into engine options and messages, and
engine events into OpenAI's response and stream-chunk shapes; everything else (models,
queue, cancellation, errors) is :mod:`.core`. Streams are what the official clients
parse: ``data: {json}`` events (framed by sse-starlette), one id for the whole stream, the
role in the first delta, a last chunk with ``finish_reason``, with
``stream_options.include_usage`` a usage chunk with empty ``choices``, then
``data: [DONE]``. A reasoning model's thinking is ``reasoning_content`` beside
``content`` (streamed as ``delta.reasoning_content``, as llama.cpp's server and DeepSeek's
API send it); the template's switch is ``chat_template_kwargs.enable_thinking``,
``enable_thinking`` or ``reasoning_effort`` (``"none"`` is off). An engine failure
mid-stream is an ``{"error": ...}`` event, then the stream ends (the clients raise it).
"""

from __future__ import annotations

import base64
import json
from typing import Any, AsyncIterator, Callable, Optional

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from models.engine.options import MAX_DRAFT_TOKENS, MAX_STOP_STRINGS
from models.engine.reasoning import REASONING_FIELD, SWITCH_NAMES
from models.server.catalog import served_models
from models.server.core import (Generation, GenerationStream, ServerCore, read_json_body,
                                run_blocking)
from models.server.errors import ApiError
from models.server.images import image_from_url, joined
from models.server.parameters import (MAX_INT, Fields, embedding_inputs, options_for_slot,
                                       structured_fields)
from models.server.request_log import STATUS_CLIENT_CLOSED
from models.server.tool_calls import CallStream, Tool, ToolChoice, ToolPlan, tool_request

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
         "tool": "tool"}
MAX_TOP_LOGPROBS = 20


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# -- requests -------------------------------------------------------------------------


def _message_content(content: Any, index: int) -> Any:
    """A message's content for the engine: a string, or text and ``image_url`` parts
    (images as data: URIs) joined as :func:`models.server.images.joined` joins them."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for number, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            if kind == "text" and isinstance(part.get("text"), str):
                parts.append({"type": "text", "text": part["text"]})
            elif kind == "image_url":
                url = part.get("image_url")
                url = url.get("url") if isinstance(url, dict) else url
                parts.append(image_from_url(url, f"messages[{index}].content[{number}].image_url"))
            else:
                raise ApiError(400, f"Message {index + 1} has a content part of type {kind!r}; "
                                    "this server reads text and image_url parts.",
                               param=f"messages[{index}].content", code="unsupported_content")
        return joined(parts)
    raise ApiError(400, f"Message {index + 1}'s content must be a string or a list of text "
                        "and image parts.", param=f"messages[{index}].content", code="invalid_value")


def _call_history(calls: Any, index: int) -> list[tuple[str, str, Any]]:
    """An assistant message's ``tool_calls`` as ``(id, name, arguments)``."""
    where = f"messages[{index}].tool_calls"
    if not isinstance(calls, list):
        raise ApiError(400, f"Message {index + 1}'s tool_calls must be a list.", param=where,
                       code="invalid_value")
    out = []
    for number, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            raise ApiError(400, f"Tool call {number + 1} of message {index + 1} needs "
                                "`function.name`.", param=f"{where}[{number}]",
                           code="invalid_value")
        arguments = function.get("arguments") or "{}"
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                raise ApiError(400, f"The arguments of tool call {number + 1} of message "
                                    f"{index + 1} are not JSON.",
                               param=f"{where}[{number}].function.arguments",
                               code="invalid_value") from None
        out.append((str(call.get("id") or f"call_{index}_{number}"), name, arguments))
    return out


def chat_messages(value: Any) -> list[dict]:
    """OpenAI messages as the engine's ``{"role", "content"}`` list; an assistant
    message's ``tool_calls`` become ``(id, name, arguments)`` and a tool message keeps
    its ``tool_call_id`` (:func:`models.server.tool_calls.prompt_messages` writes them
    for the model's template)."""
    if not isinstance(value, list) or not value:
        raise ApiError(400, "The field `messages` must be a non-empty list of messages.",
                       param="messages", code="invalid_value")
    messages = []
    for index, message in enumerate(value):
        if not isinstance(message, dict):
            raise ApiError(400, f"Message {index + 1} must be an object with a role and "
                                "content.", param=f"messages[{index}]", code="invalid_value")
        role = message.get("role")
        if role not in ROLES:
            raise ApiError(400, f"Message {index + 1} has the role {role!r}; use one of "
                                f"{', '.join(ROLES)}.", param=f"messages[{index}].role",
                           code="invalid_value")
        clean = {"role": ROLES[role], "content": _message_content(message.get("content"), index)}
        if role == "assistant" and message.get("tool_calls"):
            clean["tool_calls"] = _call_history(message["tool_calls"], index)
        if role == "tool":
            clean["tool_call_id"] = str(message.get("tool_call_id") or "")
        reasoning = message.get(REASONING_FIELD)
        if role == "assistant" and isinstance(reasoning, str) and reasoning:
            clean[REASONING_FIELD] = reasoning  # templates that keep past thinking read it
        messages.append(clean)
    return messages


REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


def thinking_choice(body: Fields) -> Optional[bool]:
    """Whether the request turns a reasoning model's thinking on or off (``None``: the
    template's default): ``chat_template_kwargs`` (``enable_thinking`` or ``thinking``,
    as vLLM and llama.cpp's server read them), a top-level ``enable_thinking``, or
    ``reasoning_effort`` (``"none"`` is off, any other effort on)."""
    kwargs = body.obj("chat_template_kwargs")
    if kwargs is not None:
        unknown = sorted(set(kwargs.values) - set(SWITCH_NAMES))
        if unknown:
            raise ApiError(400, f"chat_template_kwargs holds {', '.join(unknown)}; this server "
                                f"passes only the thinking switch ({' or '.join(SWITCH_NAMES)}) "
                                "to the template.", param="chat_template_kwargs",
                           code="invalid_value")
        for name in SWITCH_NAMES:
            if kwargs.get(name) is not None:
                return kwargs.boolean(name, True)
    if body.get("enable_thinking") is not None:
        return body.boolean("enable_thinking", True)
    return effort_thinking(body, "reasoning_effort")


def effort_thinking(body: Fields, name: str) -> Optional[bool]:
    """A reasoning effort field as the thinking switch: ``"none"`` off, another effort on,
    absent the template's default."""
    effort = body.string(name)
    if effort is None:
        return None
    if effort not in REASONING_EFFORTS:
        where = body.field_name(name)
        raise ApiError(400, f"{where} {effort!r} is unknown; use one of "
                            f"{', '.join(REASONING_EFFORTS)}.", param=where,
                       code="invalid_value")
    return effort != "none"


def splits_reasoning(body: Fields) -> bool:
    """llama.cpp's ``reasoning_format``: ``"none"`` leaves the thinking in ``content``."""
    kind = body.string("reasoning_format", "auto")
    if kind not in ("none", "auto", "deepseek"):
        raise ApiError(400, f"reasoning_format {kind!r} is unknown; use auto (thinking in "
                            "reasoning_content) or none (left in content).",
                       param="reasoning_format", code="invalid_value")
    return kind != "none"


def _sampling(body: Fields, chat: bool) -> dict:
    """The sampling fields both endpoints share (OpenAI's, then llama.cpp's extras)."""
    body.only_one("n")
    body.refuse("logit_bias", "this server does not bias tokens.")
    seed = body.integer("seed", None, -1, MAX_INT)
    values = dict(
        temperature=body.number("temperature", 1.0, 0.0, 2.0),
        top_p=body.number("top_p", 1.0, 0.0, 1.0),
        seed=None if seed is None or seed < 0 else seed % (2**32 - 1),
        stop=body.strings("stop", MAX_STOP_STRINGS),
        presence_penalty=body.number("presence_penalty", 0.0, -2.0, 2.0),
        frequency_penalty=body.number("frequency_penalty", 0.0, -2.0, 2.0),
        top_k=body.integer("top_k", 40, 0, 1 << 20),
        min_p=body.number("min_p", 0.05, 0.0, 0.999),
        repeat_penalty=body.number("repeat_penalty", 1.0, 0.01, 10.0),
        ignore_eos=body.boolean("ignore_eos", False),
    )
    # llama-server's field: the most tokens drafted at once; 0 turns speculation off.
    most = body.integer("speculative.n_max", None, 0, MAX_DRAFT_TOKENS)
    if most == 0:
        values["speculative"] = "off"
    elif most is not None:
        values["draft_tokens"] = most
    if values["top_p"] == 0:  # only the most likely token: greedy, in the engine's terms
        values.update(top_p=1.0, temperature=0.0)
    names = ("max_completion_tokens", "max_tokens") if chat else ("max_tokens",)
    values["max_tokens"] = next((body.integer(n, None, 1, MAX_INT) for n in names
                                 if body.get(n) is not None), None)
    return values


def output_format(body: Fields) -> dict:
    """``response_format`` (OpenAI) or a top-level ``schema`` (llama.cpp) as engine fields."""
    response_format = body.obj("response_format")
    if response_format is None:
        if body.get("schema") is not None:
            return structured_fields("json_schema", body.get("schema"))
        return {}
    kind = response_format.string("type", "text")
    if kind == "text":
        return {}
    if kind == "json_object":
        schema = response_format.get("schema")  # llama.cpp's json_object with a schema
        return structured_fields("json_schema", schema) if schema is not None \
            else structured_fields("json")
    if kind == "json_schema":
        spec = response_format.obj("json_schema")
        if spec is None or spec.get("schema") is None:
            raise ApiError(400, "response_format json_schema needs `json_schema.schema`, the "
                                "JSON Schema the reply must match.",
                           param="response_format.json_schema.schema", code="invalid_value")
        spec.string("name")
        return structured_fields("json_schema", spec.get("schema"),
                                 strict=spec.boolean("strict", False))
    raise ApiError(400, f"response_format type {kind!r} is unknown; use text, json_object or "
                        "json_schema.", param="response_format.type", code="invalid_value")


def function_tools(body: Fields) -> list[Tool]:
    """``tools``: functions with a name, a description and a JSON Schema for parameters."""
    value = body.get("tools")
    if value is None:
        return []
    if not isinstance(value, list):
        raise ApiError(400, "The field `tools` must be a list of functions.", param="tools",
                       code="invalid_value")
    tools = []
    for index, item in enumerate(value):
        where = f"tools[{index}]"
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(item, dict) or item.get("type", "function") != "function" \
                or not isinstance(function, dict):
            raise ApiError(400, f"Tool {index + 1} must be {{\"type\": \"function\", "
                                "\"function\": {...}}; this server offers function tools "
                                "only.", param=where, code="invalid_value")
        name = function.get("name")
        if not isinstance(name, str) or not name or len(name) > 64:
            raise ApiError(400, f"Tool {index + 1} needs a `function.name` of 1 to 64 "
                                "characters.", param=f"{where}.function.name",
                           code="invalid_value")
        if any(tool.name == name for tool in tools):
            raise ApiError(400, f"Two tools are called {name!r}; names must differ.",
                           param=f"{where}.function.name", code="invalid_value")
        parameters = function.get("parameters")
        if parameters is None:
            parameters = {"type": "object", "properties": {}}
        if not isinstance(parameters, dict):
            raise ApiError(400, f"The parameters of tool {name!r} must be a JSON Schema "
                                "object.", param=f"{where}.function.parameters",
                           code="invalid_schema")
        description = function.get("description") or ""
        tools.append(Tool(name, str(description), parameters,
                          strict=Fields(function, f"{where}.function.").boolean("strict", False)))
    return tools


def tool_choice_of(body: Fields, tools: list[Tool]) -> ToolChoice:
    """``tool_choice`` (``auto``, ``none``, ``required`` or a named function) and
    ``parallel_tool_calls``."""
    parallel = body.boolean("parallel_tool_calls", True)
    value = body.get("tool_choice")
    if value is None:
        return ToolChoice("auto" if tools else "none", parallel=parallel)
    if value in ("auto", "none", "required"):
        mode = value
    elif isinstance(value, dict) and isinstance(value.get("function"), dict) \
            and isinstance(value["function"].get("name"), str):
        name = value["function"]["name"]
        if not any(tool.name == name for tool in tools):
            raise ApiError(400, f"tool_choice names the function {name!r}, which `tools` "
                                "does not offer.", param="tool_choice", code="invalid_value")
        return ToolChoice("named", name, parallel)
    else:
        raise ApiError(400, "The field `tool_choice` must be \"auto\", \"none\", "
                            "\"required\" or {\"type\": \"function\", \"function\": "
                            "{\"name\": ...}}.", param="tool_choice", code="invalid_value")
    if mode != "none" and not tools:
        raise ApiError(400, f"tool_choice is {mode!r} but the request offers no `tools`.",
                       param="tool_choice", code="invalid_value")
    return ToolChoice(mode, parallel=parallel)


def _stream_flags(body: Fields) -> tuple[bool, bool]:
    stream = body.boolean("stream", False)
    stream_options = body.obj("stream_options")
    include_usage = stream_options.boolean("include_usage", False) if stream_options else False
    return stream, include_usage


# -- responses ------------------------------------------------------------------------


def _chat_logprobs(entries: list) -> dict:
    return {"content": [dict(entry) for entry in entries], "refusal": None}


def _completion_logprobs(entries: list, offset: int) -> dict:
    """The legacy completions shape: parallel lists of tokens, logprobs and top dicts."""
    tokens, logprobs, tops, offsets = [], [], [], []
    for entry in entries:
        tokens.append(entry["token"])
        logprobs.append(entry["logprob"])
        tops.append({top["token"]: top["logprob"] for top in entry.get("top_logprobs", [])})
        offsets.append(offset)
        offset += len(entry["token"])
    return {"tokens": tokens, "token_logprobs": logprobs, "top_logprobs": tops,
            "text_offset": offsets}


class _Dialect:
    """What differs between chat and completions responses."""

    def __init__(self, chat: bool, logprobs: Optional[int],
                 tools: Optional[ToolPlan] = None) -> None:
        self.chat = chat
        self.tools = tools
        self.logprobs = logprobs
        self.prefix = "chatcmpl-" if chat else "cmpl-"
        self.object = "chat.completion" if chat else "text_completion"
        self.chunk_object = "chat.completion.chunk" if chat else "text_completion"

    def logprobs_of(self, entries: list, offset: int) -> Optional[dict]:
        if self.logprobs is None:
            return None
        return _chat_logprobs(entries) if self.chat else _completion_logprobs(entries, offset)

    def full(self, gen: Generation) -> dict:
        logprobs = self.logprobs_of(gen.logprobs, 0)
        calls = self.tools.calls(gen) if self.tools is not None else None
        if calls:
            message = {"role": "assistant", "content": None, "refusal": None,
                       "tool_calls": [{"id": c.id, "type": "function",
                                       "function": {"name": c.name,
                                                    "arguments": c.arguments_text}}
                                      for c in calls]}
            finish = "length" if gen.finish_reason == "length" else "tool_calls"
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
        elif self.chat:
            message = {"role": "assistant", "content": gen.answer, "refusal": None}
            if gen.reasoning:
                message[REASONING_FIELD] = gen.reasoning
            choice = {"index": 0, "message": message, "logprobs": logprobs,
                      "finish_reason": gen.finish_reason}
        else:
            choice = {"index": 0, "text": gen.text, "logprobs": logprobs,
                      "finish_reason": gen.finish_reason}
        body = {"id": self.prefix + gen.id, "object": self.object, "created": gen.created,
                "model": gen.model.id, "choices": [choice], "usage": gen.usage()}
        report = self.tools.report if self.tools is not None else gen.structured_report()
        if report:
            body["structured_output"] = report
        return body

    def chunk(self, gen: Generation, choices: list, include_usage: bool) -> str:
        chunk = {"id": self.prefix + gen.id, "object": self.chunk_object,
                 "created": gen.created, "model": gen.model.id, "choices": choices}
        if include_usage:
            chunk["usage"] = None
        return _dumps(chunk)

    def call_choice(self, event: tuple) -> dict:
        """A stream chunk's choice for a :class:`CallStream` event."""
        if event[0] == "text":
            return self.choice(event[1], None, None)
        if event[0] == "call":
            call = {"index": event[1], "id": event[2], "type": "function",
                    "function": {"name": event[3], "arguments": ""}}
        else:
            call = {"index": event[1], "function": {"arguments": event[2]}}
        return {"index": 0, "delta": {"tool_calls": [call]}, "logprobs": None,
                "finish_reason": None}

    def choice(self, text: Optional[str], logprobs: Optional[dict], finish: Optional[str],
               role: bool = False, reasoning: str = "") -> dict:
        if self.chat:
            delta: dict = {}
            if role:
                delta["role"] = "assistant"
            if reasoning:
                delta[REASONING_FIELD] = reasoning
            if text is not None and (text or not reasoning):
                delta["content"] = text
            return {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        return {"index": 0, "text": text or "", "logprobs": logprobs, "finish_reason": finish}


async def _stream_events(gen: Generation, dialect: _Dialect,
                         include_usage: bool) -> AsyncIterator[str]:
    """The SSE ``data`` payloads of a streamed reply; finishes the generation."""
    status, error = STATUS_CLIENT_CLOSED, "The client closed the stream."
    try:
        if dialect.chat:
            yield dialect.chunk(gen, [dialect.choice("", None, None, role=True)], include_usage)
        offset = 0
        calls = CallStream(dialect.tools.fmt) if dialect.tools is not None else None
        finish = None
        try:
            async for event in gen.events():
                if event.kind == "delta" and calls is not None:
                    for call_event in calls.feed(event.text):
                        yield dialect.chunk(gen, [dialect.call_choice(call_event)],
                                            include_usage)
                elif event.kind == "delta" and (event.text or event.reasoning
                                                or event.logprobs):
                    logprobs = dialect.logprobs_of(list(event.logprobs), offset)
                    offset += len(event.text)
                    yield dialect.chunk(gen, [dialect.choice(event.text, logprobs, None,
                                                             reasoning=event.reasoning)],
                                        include_usage)
            if calls is not None:
                for call_event in calls.finish():
                    yield dialect.chunk(gen, [dialect.call_choice(call_event)], include_usage)
                if calls.ids and dialect.tools.calls(gen) and gen.finish_reason != "length":
                    finish = "tool_calls"
        except ApiError as exc:
            status, error = exc.status, exc.message
            yield _dumps(exc.body())
            return
        yield dialect.chunk(gen, [dialect.choice(None if dialect.chat else "", None,
                                                 finish or gen.finish_reason)], include_usage)
        if include_usage:
            yield _dumps({"id": dialect.prefix + gen.id, "object": dialect.chunk_object,
                          "created": gen.created, "model": gen.model.id, "choices": [],
                          "usage": gen.usage()})
        yield "[DONE]"
        status, error = 200, ""
    finally:
        gen.finish(status, error)


async def _respond(core: ServerCore, request: Request, body: Fields, dialect: _Dialect,
                   options: Callable[[int], Any], messages: Optional[list] = None,
                   prompt: Optional[str] = None, log_fields: Optional[dict] = None):
    stream, include_usage = _stream_flags(body)
    split = splits_reasoning(body) if dialect.chat else False
    gen = await core.start(request, body.get("model"), options, messages=messages,
                           prompt=prompt, log_fields=log_fields, split_reasoning=split)
    if stream:
        return GenerationStream(gen, _stream_events(gen, dialect, include_usage))
    reply = await gen.complete(request, dialect.full)
    return JSONResponse(reply)


def _encode_vector(vector: Any, encoding: str) -> Any:
    """A vector as JSON numbers, or base64 of its little-endian float32 bytes."""
    if encoding == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return [float(x) for x in vector]


# -- endpoints ------------------------------------------------------------------------


def routes(core: ServerCore) -> list[Route]:
    """The OpenAI endpoints, bound to ``core``."""

    def describe(model: Any) -> dict:
        entry = core.pool.peek(model.path)
        if entry is not None:
            slots, context = entry.slots, entry.context_per_slot
        else:
            slots = core.pool.parallel
            context = core.pool.settings_for(model.path).context_length or model.context_length
        return {"id": model.id, "object": "model", "created": model.created,
                "owned_by": "quantdesk", "loaded": entry is not None, "slots": slots,
                "embedding": model.embedding,
                "input_modalities": core.input_modalities(model),
                "context_per_slot": context, "context_length": context,
                "name": model.name, "path": str(model.path)}

    async def list_models(request: Request, log_fields: dict) -> JSONResponse:
        models = await run_blocking(served_models, core.library, True)
        described = await run_blocking(lambda: [describe(m) for m in models])
        return JSONResponse({"object": "list", "data": described})

    async def get_model(request: Request, log_fields: dict) -> JSONResponse:
        model = await run_blocking(core.resolve, request.path_params["model"])
        return JSONResponse(await run_blocking(describe, model))

    async def chat_completions(request: Request, log_fields: dict):
        body = Fields(await read_json_body(request, core.config.max_body_bytes))
        messages = chat_messages(body.get("messages"))
        body.refuse("audio", "this server makes text only.")
        logprobs = body.boolean("logprobs", False)
        top = body.integer("top_logprobs", None, 0, MAX_TOP_LOGPROBS)
        if top is not None and not logprobs:
            raise ApiError(400, "The field `top_logprobs` needs `logprobs` set to true.",
                           param="top_logprobs", code="invalid_value")
        values = dict(_sampling(body, chat=True), **output_format(body))
        values["logprobs"] = (top or 0) if logprobs else None
        values["thinking"] = thinking_choice(body)
        tools = function_tools(body)
        messages, plan = tool_request(core, body.get("model"), messages, tools,
                                      tool_choice_of(body, tools), values)
        if plan is not None:
            values["logprobs"] = None  # calls are grammar-made: no per-token alternatives
        return await _respond(core, request, body, _Dialect(True, values["logprobs"], plan),
                              options_for_slot(values), messages=messages,
                              log_fields=log_fields)

    async def completions(request: Request, log_fields: dict):
        body = Fields(await read_json_body(request, core.config.max_body_bytes))
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise ApiError(400, "The field `prompt` must be a string (one prompt per "
                                "request).", param="prompt", code="invalid_value")
        body.only_one("best_of")
        body.refuse("suffix", "this server does not fill in the middle.", unless="")
        body.refuse("echo", "this server does not echo the prompt.", unless=False)
        logprobs = body.integer("logprobs", None, 0, MAX_TOP_LOGPROBS)
        values = dict(_sampling(body, chat=False), **output_format(body))
        values["logprobs"] = logprobs
        return await _respond(core, request, body, _Dialect(False, logprobs),
                              options_for_slot(values), prompt=prompt, log_fields=log_fields)

    async def embeddings(request: Request, log_fields: dict):
        body = Fields(await read_json_body(request, core.config.max_body_bytes))
        inputs = embedding_inputs(body.get("input"))
        encoding = body.string("encoding_format", "float")
        if encoding not in ("float", "base64"):
            raise ApiError(400, f"encoding_format {encoding!r} is unknown; use float or base64.",
                           param="encoding_format", code="invalid_value")
        body.refuse("dimensions", "this server returns the model's whole vectors.")
        model, vectors, tokens = await core.embed(body.get("model"), inputs, log_fields)
        return JSONResponse({"object": "list", "model": model.id,
                             "data": [{"object": "embedding", "index": index,
                                       "embedding": _encode_vector(vector, encoding)}
                                      for index, vector in enumerate(vectors)],
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    return [
        Route("/v1/models", core.endpoint(list_models), methods=["GET"]),
        Route("/v1/embeddings", core.endpoint(embeddings), methods=["POST"]),
        Route("/v1/models/{model:path}", core.endpoint(get_model),
              methods=["GET"]),
        Route("/v1/chat/completions", core.endpoint(chat_completions), methods=["POST"]),
        Route("/v1/completions", core.endpoint(completions), methods=["POST"]),
    ]
