"""The OpenAI Responses dialect: ``POST /v1/responses``, stateless.

Only translation lives here, over the same pieces Chat Completions uses
(:mod:`.openai_api`'s readers of tools, tool choice and output formats; :mod:`.tool_calls`
for the call grammar; :mod:`.core` for everything else):

- **request** — ``input`` (a string, or items: messages with ``input_text`` /
  ``output_text`` parts, ``function_call`` and ``function_call_output`` items, earlier
  ``reasoning`` items), ``instructions`` (a system message first), flat function ``tools``
  and ``tool_choice``, ``text.format`` (``json_schema`` enforced by the grammar, the same
  400 for a schema it cannot enforce), ``max_output_tokens``, ``temperature``, ``top_p``,
  ``reasoning.effort`` (``"none"`` turns a reasoning model's thinking off, any other
  effort on). Nothing is stored: ``previous_response_id`` is refused with a sentence
  saying to send the whole conversation as ``input``;
- **response** — ``output`` items in order: a ``reasoning`` item (the thinking, as
  ``reasoning_text``) when the model thought, then either one assistant ``message`` with
  an ``output_text`` part or one ``function_call`` item per call; ``usage`` with input,
  output and reasoning tokens; ``status`` ``incomplete`` when ``max_output_tokens`` cut it;
- **stream** — the events the official clients parse, each with its ``sequence_number``:
  ``response.created``, ``response.in_progress``, per item ``response.output_item.added``
  … ``response.output_item.done`` (with ``content_part.added`` / ``output_text.delta`` /
  ``output_text.done`` / ``content_part.done`` for a message, ``reasoning_text.delta`` /
  ``.done`` for reasoning, ``function_call_arguments.delta`` / ``.done`` for a call), and
  ``response.completed`` (or ``response.incomplete``) with the whole response and usage;
  an engine failure is an ``error`` event.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, AsyncIterator, Optional

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from models.engine.reasoning import REASONING_FIELD
from models.server.core import Generation, GenerationStream, ServerCore, read_json_body
from models.server.errors import ApiError
from models.server.images import image_from_url, joined
from models.server.openai_api import (effort_thinking, function_tools, output_format,
                                      tool_choice_of)
from models.server.parameters import MAX_INT, Fields, options_for_slot
from models.server.request_log import STATUS_CLIENT_CLOSED
from models.server.tool_calls import CallStream, ToolPlan, tool_request

INPUT_ROLES = {"user": "user", "system": "system", "developer": "system",
               "assistant": "assistant"}
TEXT_PARTS = ("input_text", "output_text", "text")


def _item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


# -- the request ----------------------------------------------------------------------


def _content_text(content: Any, where: str, images: bool = False) -> Any:
    """A message's content (a string or text parts; with ``images``, ``input_image`` parts
    too) for the engine: text, or parts as :func:`models.server.images.joined` joins them."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(400, f"{where} must be a string or a list of content parts.", param=where,
                       code="invalid_value")
    parts = []
    for number, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else type(part).__name__
        if kind == "input_image" and images:
            parts.append(image_from_url(part.get("image_url"), f"{where}[{number}].image_url"))
            continue
        if kind not in TEXT_PARTS or not isinstance(part.get("text"), str):
            raise ApiError(400, f"{where} has a part of type {kind!r}; this server reads "
                                "input_text, output_text and (from the user) input_image parts.",
                           param=f"{where}[{number}]", code="unsupported_content")
        parts.append({"type": "text", "text": part["text"]})
    return joined(parts)


def _reasoning_text(item: dict) -> str:
    """The readable thinking of an earlier ``reasoning`` item (its content, else summary)."""
    parts = item.get("content") or item.get("summary") or []
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))


def input_messages(value: Any, instructions: Optional[str]) -> list[dict]:
    """``instructions`` and ``input`` as the engine's messages, in the tool-call history
    form :func:`~.tool_calls.prompt_messages` reads (calls next to each other become one
    assistant message; a reasoning item goes with the assistant turn after it)."""
    out: list[dict] = [{"role": "system", "content": instructions}] if instructions else []
    if isinstance(value, str):
        return out + [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise ApiError(400, "The field `input` must be a string or a non-empty list of items.",
                       param="input", code="invalid_value")
    reasoning = ""

    def assistant() -> dict:
        """The assistant message the next call or text joins (a new one after others)."""
        nonlocal reasoning
        last = out[-1] if out else None
        if last is None or last["role"] != "assistant":
            last = {"role": "assistant", "content": ""}
            out.append(last)
        if reasoning:
            last[REASONING_FIELD] = reasoning
            reasoning = ""
        return last

    for index, item in enumerate(value):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise ApiError(400, f"Input item {index + 1} must be an object.", param=where,
                           code="invalid_value")
        kind = item.get("type", "message")
        if kind == "message":
            role = INPUT_ROLES.get(item.get("role"))
            if role is None:
                raise ApiError(400, f"Input item {index + 1} has the role {item.get('role')!r}; "
                                    f"use one of {', '.join(INPUT_ROLES)}.",
                               param=f"{where}.role", code="invalid_value")
            text = _content_text(item.get("content"), f"{where}.content", images=role == "user")
            if role == "assistant":
                message = assistant()
                message["content"] += text
            else:
                out.append({"role": role, "content": text})
        elif kind == "function_call":
            name, call_id = item.get("name"), item.get("call_id") or item.get("id")
            if not isinstance(name, str) or not name or not isinstance(call_id, str):
                raise ApiError(400, f"Input item {index + 1} (a function_call) needs `name` and "
                                    "`call_id`.", param=where, code="invalid_value")
            try:
                arguments = json.loads(item.get("arguments") or "{}")
            except (TypeError, ValueError):
                raise ApiError(400, f"The arguments of input item {index + 1} are not JSON.",
                               param=f"{where}.arguments", code="invalid_value") from None
            message = assistant()
            message.setdefault("tool_calls", []).append((call_id, name, arguments))
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _content_text(output,
                                                                       f"{where}.output")
            out.append({"role": "tool", "content": text,
                        "tool_call_id": str(item.get("call_id") or "")})
        elif kind == "reasoning":
            reasoning = _reasoning_text(item)
        else:
            raise ApiError(400, f"Input item {index + 1} has the type {kind!r}; this server "
                                "reads message, function_call, function_call_output and "
                                "reasoning items.", param=f"{where}.type",
                           code="unsupported_content")
    return out


def _chat_shape(body: Fields) -> Fields:
    """The request's ``tools``, ``tool_choice`` and ``text.format`` in Chat Completions'
    shape, so the one reader of each serves both dialects."""
    tools = body.get("tools")
    if isinstance(tools, list):
        for index, tool in enumerate(tools):
            if isinstance(tool, dict) and tool.get("type", "function") != "function":
                raise ApiError(400, f"Tool {index + 1} is a {tool.get('type')!r} tool; this "
                                    "server offers function tools only.",
                               param=f"tools[{index}]", code="invalid_value")
        tools = [{"type": "function", "function": {k: v for k, v in tool.items()
                                                   if k != "type"}}
                 if isinstance(tool, dict) else tool for tool in tools]
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function" and "name" in choice:
        choice = {"type": "function", "function": {"name": choice["name"]}}
    text = body.obj("text")
    spec = text.obj("format") if text is not None else None
    response_format = None
    if spec is not None:
        kind = spec.string("type", "text")
        response_format = {"type": kind}
        if kind == "json_schema":
            response_format["json_schema"] = {
                key: spec.get(key) for key in ("name", "schema", "strict")
                if spec.get(key) is not None}
    return Fields({"tools": tools, "tool_choice": choice,
                   "parallel_tool_calls": body.get("parallel_tool_calls"),
                   "response_format": response_format})


def _thinking(body: Fields) -> Optional[bool]:
    reasoning = body.obj("reasoning")
    return effort_thinking(reasoning, "effort") if reasoning is not None else None


def _refusals(body: Fields) -> None:
    if body.get("previous_response_id"):
        raise ApiError(400, "This server does not keep responses, so previous_response_id "
                            "cannot be looked up; send the whole conversation as `input` "
                            "(earlier output items included) instead.",
                       param="previous_response_id", code="previous_response_not_found")
    body.refuse("conversation", "this server keeps no conversations; send the whole "
                                "conversation as `input`.")
    body.refuse("background", "this server answers while the request waits.", unless=False)
    body.refuse("prompt", "this server keeps no stored prompts.")
    body.refuse("top_logprobs", "the Responses API of this server has no logprobs; use "
                                "Chat Completions.", unless=0)


# -- the response ---------------------------------------------------------------------


class _Output:
    """A response's identity and the request fields it echoes."""

    def __init__(self, gen: Generation, plan: Optional[ToolPlan], echo: dict) -> None:
        self.gen = gen
        self.plan = plan
        self.id = "resp_" + gen.id
        self.echo = echo
        self.message_id = _item_id("msg")
        self.reasoning_id = _item_id("rs")

    def incomplete(self) -> bool:
        return self.gen.finish_reason == "length"

    def body(self, status: str, output: list, usage: Optional[dict]) -> dict:
        gen = self.gen
        return dict({"id": self.id, "object": "response", "created_at": gen.created,
                     "status": status, "model": gen.model.id, "output": output,
                     "error": None,
                     "incomplete_details": {"reason": "max_output_tokens"}
                     if status == "incomplete" else None,
                     "usage": usage}, **self.echo)

    def usage(self) -> dict:
        counts = self.gen.usage()
        return {"input_tokens": counts["prompt_tokens"],
                "input_tokens_details": {"cached_tokens":
                                         counts["prompt_tokens_details"]["cached_tokens"]},
                "output_tokens": counts["completion_tokens"],
                "output_tokens_details": {"reasoning_tokens":
                                          counts["completion_tokens_details"]
                                          ["reasoning_tokens"]},
                "total_tokens": counts["total_tokens"], "speculative": counts["speculative"]}

    def reasoning_item(self, text: str, status: str = "completed") -> dict:
        return {"type": "reasoning", "id": self.reasoning_id, "summary": [],
                "content": [{"type": "reasoning_text", "text": text}] if text else [],
                "status": status}

    def message_item(self, text: Optional[str], status: str = "completed") -> dict:
        content = [] if text is None else [self.text_part(text)]
        return {"type": "message", "id": self.message_id, "status": status,
                "role": "assistant", "content": content}

    @staticmethod
    def text_part(text: str) -> dict:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    @staticmethod
    def call_item(item_id: str, call_id: str, name: str, arguments: str,
                  status: str = "completed") -> dict:
        return {"type": "function_call", "id": item_id, "call_id": call_id, "name": name,
                "arguments": arguments, "status": status}

    def full(self, gen: Generation) -> dict:
        """The whole response once the reply is done."""
        output = [self.reasoning_item(gen.reasoning)] if gen.reasoning else []
        calls = self.plan.calls(gen) if self.plan is not None else None
        if calls:
            output += [self.call_item("fc_" + c.id[5:], c.id, c.name, c.arguments_text)
                       for c in calls]
        else:
            output.append(self.message_item(gen.answer))
        status = "incomplete" if self.incomplete() else "completed"
        return self.body(status, output, self.usage())


class _EventWriter:
    """Numbers the stream's events and keeps which output item is open."""

    def __init__(self, out: _Output) -> None:
        self.out = out
        self.sequence = 0
        self.items: list[dict] = []  # the finished output items, in order
        self.open: Optional[str] = None  # "reasoning", "message" or "call"
        self.text = ""  # the open item's text so far
        self.call: Optional[dict] = None

    def event(self, kind: str, **data: Any) -> dict:
        payload = dict(type=kind, sequence_number=self.sequence, **data)
        self.sequence += 1
        return {"event": kind, "data": json.dumps(payload, ensure_ascii=False)}

    @property
    def index(self) -> int:
        return len(self.items)

    def close(self) -> list[dict]:
        """The events that finish the open item."""
        out, kind, text = self.out, self.open, self.text
        if kind is None:
            return []
        self.open, self.text = None, ""
        if kind == "reasoning":
            item = out.reasoning_item(text)
            events = [self.event("response.reasoning_text.done", item_id=item["id"],
                                 output_index=self.index, content_index=0, text=text)]
        elif kind == "message":
            item = out.message_item(text)
            part = out.text_part(text)
            events = [self.event("response.output_text.done", item_id=item["id"],
                                 output_index=self.index, content_index=0, text=text,
                                 logprobs=[]),
                      self.event("response.content_part.done", item_id=item["id"],
                                 output_index=self.index, content_index=0, part=part)]
        else:
            call, self.call = self.call, None
            item = out.call_item(call["id"], call["call_id"], call["name"], text)
            events = [self.event("response.function_call_arguments.done", item_id=item["id"],
                                 output_index=self.index, name=call["name"], arguments=text)]
        events.append(self.event("response.output_item.done", output_index=self.index,
                                 item=item))
        self.items.append(item)
        return events

    def reasoning(self, delta: str) -> list[dict]:
        events = []
        if self.open != "reasoning":
            events = self.close()
            self.open = "reasoning"
            events.append(self.event("response.output_item.added", output_index=self.index,
                                     item=self.out.reasoning_item("", "in_progress")))
        self.text += delta
        return events + [self.event("response.reasoning_text.delta",
                                    item_id=self.out.reasoning_id, output_index=self.index,
                                    content_index=0, delta=delta)]

    def answer(self, delta: str) -> list[dict]:
        events = []
        if self.open != "message":
            events = self.close()
            self.open = "message"
            events += [self.event("response.output_item.added", output_index=self.index,
                                  item=self.out.message_item(None, "in_progress")),
                       self.event("response.content_part.added",
                                  item_id=self.out.message_id, output_index=self.index,
                                  content_index=0, part=self.out.text_part(""))]
        self.text += delta
        if not delta:
            return events
        return events + [self.event("response.output_text.delta", item_id=self.out.message_id,
                                    output_index=self.index, content_index=0, delta=delta,
                                    logprobs=[])]

    def call_event(self, event: tuple) -> list[dict]:
        """Events for a :class:`CallStream` event."""
        if event[0] == "text":
            return self.answer(event[1])
        if event[0] == "call":
            events = self.close()
            self.open = "call"
            self.call = {"id": "fc_" + event[2][5:], "call_id": event[2], "name": event[3]}
            return events + [self.event(
                "response.output_item.added", output_index=self.index,
                item=self.out.call_item(self.call["id"], event[2], event[3], "",
                                        "in_progress"))]
        self.text += event[2]
        return [self.event("response.function_call_arguments.delta", item_id=self.call["id"],
                           output_index=self.index, delta=event[2])]


async def _stream(gen: Generation, out: _Output) -> AsyncIterator[dict]:
    """The Responses stream's events; finishes the generation."""
    status, error = STATUS_CLIENT_CLOSED, "The client closed the stream."
    writer = _EventWriter(out)
    calls = CallStream(out.plan.fmt) if out.plan is not None else None
    try:
        started = out.body("in_progress", [], None)
        yield writer.event("response.created", response=started)
        yield writer.event("response.in_progress", response=started)
        try:
            async for event in gen.events():
                if event.kind != "delta":
                    continue
                pieces = writer.reasoning(event.reasoning) if event.reasoning else []
                if event.text:
                    pieces += sum((writer.call_event(e) for e in calls.feed(event.text)), []) \
                        if calls is not None else writer.answer(event.text)
                for item in pieces:
                    yield item
            tail = sum((writer.call_event(e) for e in calls.finish()), []) \
                if calls is not None else []
            if out.plan is not None:
                out.plan.calls(gen)  # checks the calls against their schemas
        except ApiError as exc:
            status, error = exc.status, exc.message
            yield writer.event("error", code=exc.code or "server_error", message=exc.message,
                               param=None, error=exc.body()["error"])
            return
        for item in tail:
            yield item
        if writer.open in (None, "reasoning") and \
                not any(i["type"] != "reasoning" for i in writer.items):
            for item in writer.answer(""):  # an empty answer is still a message
                yield item
        for item in writer.close():
            yield item
        final = "incomplete" if out.incomplete() else "completed"
        yield writer.event(f"response.{final}",
                           response=out.body(final, writer.items, out.usage()))
        status, error = 200, ""
    finally:
        gen.finish(status, error)


def routes(core: ServerCore) -> list[Route]:
    """The Responses endpoint, bound to ``core``."""

    async def responses(request: Request, log_fields: dict):
        body = Fields(await read_json_body(request, core.config.max_body_bytes))
        _refusals(body)
        instructions = body.string("instructions")
        messages = input_messages(body.get("input"), instructions)
        shaped = _chat_shape(body)
        values = dict(temperature=body.number("temperature", 1.0, 0.0, 2.0),
                      top_p=body.number("top_p", 1.0, 0.0, 1.0) or 1.0, top_k=40, min_p=0.05,
                      max_tokens=body.integer("max_output_tokens", None, 1, MAX_INT),
                      thinking=_thinking(body), **output_format(shaped))
        tools = function_tools(shaped)
        choice = tool_choice_of(shaped, tools)
        messages, plan = tool_request(core, body.get("model"), messages, tools, choice, values)
        text = body.obj("text")
        echo = {"instructions": instructions, "max_output_tokens": values["max_tokens"],
                "parallel_tool_calls": choice.parallel, "previous_response_id": None,
                "reasoning": {"effort": None, "summary": None}, "store": False,
                "temperature": values["temperature"], "top_p": values["top_p"],
                "text": {"format": text.get("format")} if text is not None and
                text.get("format") else {"format": {"type": "text"}},
                "tool_choice": body.get("tool_choice") or "auto",
                "tools": body.get("tools") or [], "truncation": "disabled",
                "metadata": body.get("metadata") or {}, "user": body.get("user")}
        gen = await core.start(request, body.get("model"), options_for_slot(values),
                               messages=messages, log_fields=log_fields)
        out = _Output(gen, plan, echo)
        if body.boolean("stream", False):
            return GenerationStream(gen, _stream(gen, out))
        return JSONResponse(await gen.complete(request, out.full))

    return [Route("/v1/responses", core.endpoint(responses), methods=["POST"])]
