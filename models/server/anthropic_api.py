"""The Anthropic Messages dialect: ``POST /v1/messages`` and ``/v1/messages/count_tokens``.

Only translation lives here, as in :mod:`.openai_api`: ``system``, content blocks
(``text``, ``tool_use``, ``tool_result``), ``tools`` with ``input_schema`` and
``tool_choice`` (``auto``, ``any``, ``tool``, ``none``) become the engine's messages and
options; the reply becomes a message with ``text`` and ``tool_use`` blocks, or the
streamed event sequence (``message_start``; per block ``content_block_start`` /
``content_block_delta`` / ``content_block_stop``; ``message_delta`` with
``stop_reason`` and usage; ``message_stop``). Tool calls are made and checked by
:mod:`.tool_calls`, so a ``tool_use`` block's ``input`` always matches its schema. The key
may come as ``x-api-key`` (the Anthropic clients) or Bearer (:mod:`.app`'s guard).
A reasoning model's thinking is a ``thinking`` block before the text (streamed as
``thinking_delta``); ``thinking: {"type": "enabled" | "disabled"}`` is the template's
switch, and thinking blocks of earlier turns go back as the template's past reasoning.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator, Optional

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from models.engine.options import MAX_STOP_STRINGS
from models.engine.reasoning import REASONING_FIELD
from models.server.core import Generation, GenerationStream, ServerCore, read_json_body
from models.server.errors import ApiError
from models.server.images import image_from_base64, image_from_url, joined
from models.server.parameters import MAX_INT, Fields, build_options
from models.server.request_log import STATUS_CLIENT_CLOSED
from models.server.tool_calls import CallStream, Tool, ToolChoice, ToolPlan, tool_request

STOP_REASONS = {"stop": "end_turn", "stop_string": "stop_sequence", "length": "max_tokens",
                "context_full": "max_tokens", "cancelled": "end_turn"}


def _text_of(content: Any, where: str) -> str:
    """A string, or a list of ``text`` blocks, as text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for block in content:
            if not isinstance(block, dict) or block.get("type") != "text":
                kind = block.get("type") if isinstance(block, dict) else type(block).__name__
                raise ApiError(400, f"{where} has a block of type {kind!r}; only text blocks "
                                    "are read there.", param=where, code="unsupported_content")
            texts.append(str(block.get("text", "")))
        return "".join(texts)
    if content is None:
        return ""
    raise ApiError(400, f"{where} must be a string or a list of blocks.", param=where,
                   code="invalid_value")


def _image_block(block: dict, where: str) -> dict:
    """An ``image`` block (``source`` of type ``base64``, or ``url``) as an image content part."""
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if kind == "url":
        return image_from_url(source.get("url"), f"{where}.source.url")
    if kind != "base64":
        raise ApiError(400, f"{where} has an image source of type {kind!r}; this server reads "
                            "base64 and url sources.", param=f"{where}.source", code="unsupported_content")
    return image_from_base64(source.get("data"), f"{where}.source.data")


def messages_of(body: Fields) -> list[dict]:
    """``system`` and ``messages`` as the engine's messages (tool_use and tool_result
    blocks as the tool-call history :func:`~.tool_calls.prompt_messages` reads)."""
    out = []
    system = body.get("system")
    if system:
        out.append({"role": "system", "content": _text_of(system, "system")})
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "The field `messages` must be a non-empty list of messages.",
                       param="messages", code="invalid_value")
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            raise ApiError(400, f"Message {index + 1} has the role {role!r}; use user or "
                                "assistant (the system prompt goes in `system`).",
                           param=f"{where}.role", code="invalid_value")
        content = message.get("content")
        if not isinstance(content, list):
            out.append({"role": role, "content": _text_of(content, f"{where}.content")})
            continue
        texts, calls, thoughts = [], [], []
        for number, block in enumerate(content):
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text":
                texts.append({"type": "text", "text": str(block.get("text", ""))})
            elif kind == "image" and role == "user":
                texts.append(_image_block(block, f"{where}.content[{number}]"))
            elif kind == "tool_use" and role == "assistant":
                calls.append((str(block.get("id", "")), str(block.get("name", "")),
                              block.get("input") or {}))
            elif kind == "tool_result" and role == "user":
                if texts:
                    out.append({"role": "user", "content": joined(texts)})
                    texts = []
                result = _text_of(block.get("content"), f"{where}.content[{number}].content")
                if block.get("is_error"):
                    result = f"Error: {result}"
                out.append({"role": "tool", "content": result,
                            "tool_call_id": str(block.get("tool_use_id", ""))})
            elif kind == "thinking" and role == "assistant":
                thoughts.append(str(block.get("thinking", "")))
            elif kind == "redacted_thinking":
                continue  # nothing readable to send back
            else:
                raise ApiError(400, f"Message {index + 1} has a content block of type "
                                    f"{kind!r}; this server reads text, image, tool_use and "
                                    "tool_result blocks.", param=f"{where}.content[{number}]",
                               code="unsupported_content")
        if calls:
            out.append({"role": "assistant", "content": joined(texts), "tool_calls": calls})
        elif texts or role == "assistant":
            out.append({"role": role, "content": joined(texts)})
        if role == "assistant" and "".join(thoughts):
            out[-1][REASONING_FIELD] = "".join(thoughts)  # templates that keep it read it
    return out


def thinking_of(body: Fields) -> Optional[bool]:
    """``thinking``: ``{"type": "enabled", "budget_tokens": n}`` turns the template's
    thinking switch on, ``{"type": "disabled"}`` off; absent, the template's default."""
    thinking = body.obj("thinking")
    if thinking is None:
        return None
    kind = thinking.string("type", "enabled")
    thinking.integer("budget_tokens", None, 0, MAX_INT)  # the reply's max_tokens bounds it
    if kind not in ("enabled", "disabled", "adaptive"):
        raise ApiError(400, f"thinking type {kind!r} is unknown; use enabled or disabled.",
                       param="thinking.type", code="invalid_value")
    return None if kind == "adaptive" else kind == "enabled"


def tools_of(body: Fields) -> tuple[list[Tool], ToolChoice]:
    """``tools`` (name, description, input_schema) and ``tool_choice``."""
    value = body.get("tools") or []
    if not isinstance(value, list):
        raise ApiError(400, "The field `tools` must be a list.", param="tools",
                       code="invalid_value")
    tools = []
    for index, item in enumerate(value):
        name = item.get("name") if isinstance(item, dict) else None
        schema = item.get("input_schema", {"type": "object"}) if isinstance(item, dict) else None
        if not isinstance(name, str) or not name or not isinstance(schema, dict):
            raise ApiError(400, f"Tool {index + 1} needs a `name` and an `input_schema` "
                                "object.", param=f"tools[{index}]", code="invalid_value")
        tools.append(Tool(name, str(item.get("description") or ""), schema))
    choice = body.obj("tool_choice")
    kind = choice.string("type", "auto") if choice is not None else "auto"
    parallel = not (choice.boolean("disable_parallel_tool_use", False) if choice else False)
    if not tools:
        return tools, ToolChoice("none")
    if kind == "tool":
        name = choice.string("name", "")
        if not any(tool.name == name for tool in tools):
            raise ApiError(400, f"tool_choice names the tool {name!r}, which `tools` does not "
                                "offer.", param="tool_choice.name", code="invalid_value")
        return tools, ToolChoice("named", name, parallel)
    modes = {"auto": "auto", "any": "required", "none": "none"}
    if kind not in modes:
        raise ApiError(400, f"tool_choice type {kind!r} is unknown; use auto, any, tool or "
                            "none.", param="tool_choice.type", code="invalid_value")
    return tools, ToolChoice(modes[kind], parallel=parallel)


def _options(body: Fields, values: dict):
    def make(context_per_slot: int) -> Any:
        return build_options(**values)
    return make


def _sampling(body: Fields) -> dict:
    max_tokens = body.integer("max_tokens", None, 1, MAX_INT)
    if max_tokens is None:
        raise ApiError(400, "The field `max_tokens` is required.", param="max_tokens",
                       code="invalid_value")
    return dict(max_tokens=max_tokens,
                temperature=body.number("temperature", 1.0, 0.0, 1.0),
                top_p=body.number("top_p", 1.0, 0.0, 1.0) or 1.0,
                top_k=body.integer("top_k", 40, 0, 1 << 20),
                stop=body.strings("stop_sequences", MAX_STOP_STRINGS),
                thinking=thinking_of(body))


def _blocks(gen: Generation, plan: Optional[ToolPlan]) -> tuple[list[dict], str]:
    """The reply's content blocks and stop reason."""
    stop = STOP_REASONS.get(gen.stats.stop_reason if gen.stats else "", "end_turn")
    calls = plan.calls(gen) if plan is not None else None
    if calls:
        return ([{"type": "tool_use", "id": "toolu_" + c.id[5:], "name": c.name,
                  "input": c.arguments} for c in calls],
                "max_tokens" if stop == "max_tokens" else "tool_use")
    thinking = [{"type": "thinking", "thinking": gen.reasoning, "signature": ""}] \
        if gen.reasoning else []
    return thinking + [{"type": "text", "text": gen.answer}], stop


def _usage(gen: Generation) -> dict:
    stats = gen.stats
    return {"input_tokens": stats.prompt_tokens if stats else 0,
            "output_tokens": stats.completion_tokens if stats else 0,
            "cache_read_input_tokens": stats.prompt_tokens_reused if stats else 0,
            "speculative": gen.usage()["speculative"]}


def _message(gen: Generation, content: list, stop: Optional[str]) -> dict:
    return {"id": "msg_" + gen.id, "type": "message", "role": "assistant",
            "model": gen.model.id, "content": content, "stop_reason": stop,
            "stop_sequence": None, "usage": _usage(gen)}


def _event(name: str, data: dict) -> dict:
    return {"event": name, "data": json.dumps(dict(type=name, **data), ensure_ascii=False)}


async def _stream(gen: Generation, plan: Optional[ToolPlan]) -> AsyncIterator[dict]:
    """The Messages stream's events; finishes the generation."""
    status, error = STATUS_CLIENT_CLOSED, "The client closed the stream."
    start = _message(gen, [], None)
    start["usage"] = {"input_tokens": 0, "output_tokens": 0}
    calls = CallStream(plan.fmt) if plan is not None else None
    state = {"index": -1, "open": None}

    def open_block(block: dict) -> list[dict]:
        events = close_block()
        state["index"] += 1
        state["open"] = block["type"]
        return events + [_event("content_block_start",
                                {"index": state["index"], "content_block": block})]

    def close_block() -> list[dict]:
        if state["open"] is None:
            return []
        state["open"] = None
        return [_event("content_block_stop", {"index": state["index"]})]

    def thinking_events(text: str) -> list[dict]:
        events = [] if state["open"] == "thinking" else open_block(
            {"type": "thinking", "thinking": "", "signature": ""})
        return events + [_event("content_block_delta", {"index": state["index"], "delta": {
            "type": "thinking_delta", "thinking": text}})]

    def text_events(text: str) -> list[dict]:
        events = [] if state["open"] == "text" else open_block({"type": "text", "text": ""})
        return events + [_event("content_block_delta", {"index": state["index"], "delta": {
            "type": "text_delta", "text": text}})]

    def call_events(event: tuple) -> list[dict]:
        if event[0] == "text":
            return text_events(event[1])
        if event[0] == "call":
            return open_block({"type": "tool_use", "id": "toolu_" + event[2][5:],
                               "name": event[3], "input": {}})
        return [_event("content_block_delta", {"index": state["index"], "delta": {
            "type": "input_json_delta", "partial_json": event[2]}})]

    try:
        yield _event("message_start", {"message": start})
        try:
            async for event in gen.events():
                if event.kind == "delta" and event.reasoning:
                    for item in thinking_events(event.reasoning):
                        yield item
                if event.kind != "delta" or not event.text:
                    continue
                for item in (sum((call_events(e) for e in calls.feed(event.text)), [])
                             if calls is not None else text_events(event.text)):
                    yield item
            if calls is not None:
                for item in sum((call_events(e) for e in calls.finish()), []):
                    yield item
            _, stop = _blocks(gen, plan)
        except ApiError as exc:
            status, error = exc.status, exc.message
            yield _event("error", {"error": {"type": "api_error", "message": exc.message}})
            return
        if state["index"] < 0:
            for item in open_block({"type": "text", "text": ""}):
                yield item
        for item in close_block():
            yield item
        yield _event("message_delta", {"delta": {"stop_reason": stop, "stop_sequence": None},
                                       "usage": {"output_tokens": _usage(gen)["output_tokens"]}})
        yield _event("message_stop", {})
        status, error = 200, ""
    finally:
        gen.finish(status, error)


def routes(core: ServerCore) -> list[Route]:
    """The Anthropic endpoints, bound to ``core``."""

    def prepare(body: Fields, values: dict) -> tuple[list[dict], Optional[ToolPlan]]:
        tools, choice = tools_of(body)
        return tool_request(core, body.get("model"), messages_of(body), tools, choice, values)

    async def messages(request: Request, log_fields: dict):
        body = Fields(await read_json_body(request, core.config.max_body_bytes))
        values = _sampling(body)
        engine_messages, plan = prepare(body, values)
        gen = await core.start(request, body.get("model"), _options(body, values),
                               messages=engine_messages, log_fields=log_fields)
        if body.boolean("stream", False):
            return GenerationStream(gen, _stream(gen, plan))
        content, stop = await gen.complete(request, lambda done: _blocks(done, plan))
        return JSONResponse(_message(gen, content, stop))

    async def count_tokens(request: Request, log_fields: dict):
        body = Fields(await read_json_body(request, core.config.max_body_bytes))
        values: dict = {}
        engine_messages, _ = prepare(body, values)
        model = core.resolve(body.get("model"))
        entry = await core.engine(model)
        count = await asyncio.get_running_loop().run_in_executor(
            None, entry.client.count_tokens, engine_messages)
        return JSONResponse({"input_tokens": count})

    return [Route("/v1/messages", core.endpoint(messages), methods=["POST"]),
            Route("/v1/messages/count_tokens", core.endpoint(count_tokens), methods=["POST"])]
