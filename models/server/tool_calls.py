"""Tool calls: the functions a request offers, the format a model writes its calls in,
the grammar that makes those calls well-formed, and the parsers that read them back.

Shared by every dialect (OpenAI Chat Completions today): a dialect reads its own field
names into :class:`Tool` and a :class:`ToolChoice`, and the rest is here.

**Call formats** (:data:`FORMATS`), chosen from the model's chat template:

- ``hermes`` — ``<tool_call>\\n{"name": …, "arguments": {…}}\\n</tool_call>``, one block
  per call (Qwen 2.5/3, Hermes, many others whose template mentions ``<tool_call>``);
- ``llama3`` — Llama 3.1's JSON call ``{"name": …, "parameters": {…}}``;
- ``mistral`` — ``[TOOL_CALLS][{"name": …, "arguments": {…}}, …]``;
- ``generic`` — for a template that does not read ``tools``: the ``hermes`` blocks,
  described to the model by a system message (:func:`generic_system_text`).

The first three get the functions through the template's own ``tools`` variable.

**Grammar** (:func:`call_grammar`): the calls are generated under an llguidance Lark
grammar (:mod:`models.structured`) that embeds one JSON Schema whose branches are the
offered functions (``{"name": const, "arguments": <the function's parameters>}``), so the
name is always one offered and the arguments always parse and match the parameters schema.
With ``tool_choice`` ``required`` or a named function the whole reply is calls; with
``auto`` it is either calls or text that does not begin with the call opener (``<``,
``{`` or ``[``), so a reply that starts as a call is a grammar-made call. Annotations
(``title``, ``default``, ``examples``…) are ignored; a parameters schema with keywords the
grammar cannot enforce is refused before generating when the function is ``strict``
(:class:`~models.foundation.errors.QuantDeskError`, which the dialect answers with a 400), and
otherwise generated under what is enforceable, each call validated after.

**Parsers**: :func:`parse_calls` reads a whole reply; :class:`CallStream` reads one in
pieces of any size and says, in order, each call's name (once it is complete) and then
its argument text as it grows, so a stream sends ``id`` and ``name`` first and then the
argument deltas, with one index per call. Both accept the looser text models write
without a grammar (spaces, arguments before the name, arguments as a JSON string).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

from models.foundation.errors import QuantDeskError
from models.server.catalog import template_of
from models.server.errors import ApiError

MAX_PARALLEL_CALLS = 4  # calls one reply may hold when parallel calls are allowed


@dataclass(frozen=True)
class Tool:
    """A function the model may call: its name, description and parameters schema."""

    name: str
    description: str = ""
    parameters: Any = field(default_factory=lambda: {"type": "object", "properties": {}})
    # OpenAI's function.strict: parameters the grammar cannot enforce exactly are a 400
    # instead of generated under what is enforceable and checked after.
    strict: bool = False

    def openai(self) -> dict:
        """OpenAI's ``{"type": "function", "function": {...}}`` shape (what templates read)."""
        return {"type": "function", "function": {"name": self.name,
                                                 "description": self.description,
                                                 "parameters": self.parameters}}


@dataclass(frozen=True)
class ToolChoice:
    """``mode`` is ``auto``, ``none``, ``required`` or ``named`` (then ``name``)."""

    mode: str = "auto"
    name: str = ""
    parallel: bool = True


@dataclass(frozen=True)
class CallFormat:
    """How a model family writes tool calls.

    Attributes:
        name: ``hermes``, ``llama3``, ``mistral`` or ``generic``.
        before: Text opening each call (``hermes``) or the list of calls (``mistral``).
        after: Text closing each call.
        separator: Text between two calls.
        args_key: The key holding the arguments (``arguments``; Llama 3.1 ``parameters``).
        in_list: The calls are the items of one JSON array (``mistral``).
        template_tools: The functions reach the model through the template's ``tools``.
    """

    name: str
    before: str
    after: str
    separator: str
    args_key: str = "arguments"
    in_list: bool = False
    template_tools: bool = True

    @property
    def opener(self) -> str:
        """The text a call reply begins with (after optional whitespace)."""
        return self.before or "{"


FORMATS = {
    "hermes": CallFormat("hermes", "<tool_call>\n", "\n</tool_call>", "\n"),
    "llama3": CallFormat("llama3", "", "", "\n", args_key="parameters"),
    "mistral": CallFormat("mistral", "[TOOL_CALLS]", "", "", in_list=True),
    "generic": CallFormat("generic", "<tool_call>\n", "\n</tool_call>", "\n",
                          template_tools=False),
}


def call_format(template: Optional[str]) -> CallFormat:
    """The call format for a chat template (``None``: the model has none, a preset)."""
    if not template:
        return FORMATS["generic"]
    from models.engine.chat_template import template_variables

    try:
        reads_tools = "tools" in template_variables(template)
    except QuantDeskError:
        reads_tools = False
    if not reads_tools:
        return FORMATS["generic"]
    if "[TOOL_CALLS]" in template:
        return FORMATS["mistral"]
    if "<tool_call>" in template:
        return FORMATS["hermes"]
    if "<|eot_id|>" in template or "ipython" in template:
        return FORMATS["llama3"]
    return FORMATS["generic"]


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


# -- the prompt -----------------------------------------------------------------------


def generic_system_text(tools: list[Tool]) -> str:
    """The system message that teaches a template without tool support the call format."""
    lines = [json.dumps(tool.openai()["function"], ensure_ascii=False) for tool in tools]
    return ("You can call these functions:\n" + "\n".join(lines) + "\n\n"
            "To call a function, reply with only\n<tool_call>\n"
            '{"name": "<function name>", "arguments": {<arguments as JSON>}}\n</tool_call>\n'
            "(one block per call). A function's result comes back in a <tool_response> "
            "block. Otherwise answer in plain text.")


def call_text(fmt: CallFormat, calls: list[tuple[str, Any]]) -> str:
    """Calls written the way the format writes them (for earlier turns of a history)."""
    objects = [{"name": name, fmt.args_key: arguments} for name, arguments in calls]
    if fmt.in_list:
        return fmt.before + json.dumps(objects, ensure_ascii=False)
    return fmt.separator.join(fmt.before + json.dumps(o, ensure_ascii=False) + fmt.after
                              for o in objects)


def prompt_messages(fmt: CallFormat, messages: list[dict], tools: list[Tool]) -> list[dict]:
    """The engine's messages for a history that may hold tool calls and results.

    ``messages`` are ``{"role", "content"}`` dicts, assistant ones possibly with
    ``tool_calls`` (``[(id, name, arguments)]``) and tool ones with ``tool_call_id``.
    For templates that read ``tools``, calls and results stay structured (the Hugging
    Face convention: ``tool_calls[].function.arguments`` as an object); for the generic
    format they become text, and a system message describes the functions.
    """
    names = {}
    out = []
    for message in messages:
        calls = message.get("tool_calls") or []
        for call_id, name, _ in calls:
            names[call_id] = name
        if message["role"] == "assistant" and calls:
            if fmt.template_tools:
                out.append({"role": "assistant", "content": message["content"],
                            "tool_calls": [{"id": i, "type": "function",
                                            "function": {"name": n, "arguments": a}}
                                           for i, n, a in calls]})
            else:
                text = call_text(fmt, [(n, a) for _, n, a in calls])
                content = message["content"]
                out.append({"role": "assistant",
                            "content": f"{content}\n{text}" if content else text})
        elif message["role"] == "tool":
            call_id = message.get("tool_call_id", "")
            if fmt.template_tools:
                out.append({"role": "tool", "content": message["content"],
                            "tool_call_id": call_id, "name": names.get(call_id, "")})
            else:
                out.append({"role": "user", "content": "<tool_response>\n"
                            f"{message['content']}\n</tool_response>"})
        else:
            out.append({"role": message["role"], "content": message["content"]})
    if tools and not fmt.template_tools:
        text = generic_system_text(tools)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + text}
        else:
            out.insert(0, {"role": "system", "content": text})
    return out


# -- the grammar ----------------------------------------------------------------------


def _literal(text: str) -> str:
    """A Lark string literal (JSON's escapes)."""
    return json.dumps(text, ensure_ascii=False)


def _rebase_refs(schema: Any, base: str) -> Any:
    """The schema with its local ``$ref`` pointers moved under ``base`` (the place it
    takes inside the combined schema)."""
    if isinstance(schema, dict):
        out = {}
        for key, value in schema.items():
            if key == "$ref" and isinstance(value, str) and value.startswith("#"):
                rest = value[1:]
                out[key] = "#" + base + rest if rest.startswith("/") or not rest else value
            else:
                out[key] = _rebase_refs(value, base)
        return out
    if isinstance(schema, list):
        return [_rebase_refs(v, base) for v in schema]
    return schema


def check_parameters(tool: Tool, strict: bool = False) -> None:
    """Refuse a parameters schema that is malformed, or (``strict``) that the grammar cannot
    enforce exactly, naming the function.

    Raises:
        QuantDeskError: The schema is malformed, or strict and not enforced exactly.
    """
    from models.structured import constraint_for_schema

    try:
        constraint_for_schema(tool.parameters, allow_unsupported=not strict)
    except QuantDeskError as exc:
        raise QuantDeskError(f"The parameters of function {tool.name!r} cannot be enforced "
                             f"as a grammar: {exc.what}", exc.fix) from None


def call_schema(tools: list[Tool], fmt: CallFormat, parallel: bool) -> dict:
    """One JSON Schema for the JSON part of a call reply (one call, or Mistral's list)."""
    prefix = "/items" if fmt.in_list else ""
    branches = []
    for index, tool in enumerate(tools):
        base = f"{prefix}/anyOf/{index}/properties/{fmt.args_key}"
        branches.append({"type": "object",
                         "properties": {"name": {"const": tool.name},
                                        fmt.args_key: _rebase_refs(tool.parameters, base)},
                         "required": ["name", fmt.args_key]})
    one = {"anyOf": branches}
    if fmt.in_list:
        return {"type": "array", "items": one, "minItems": 1,
                "maxItems": MAX_PARALLEL_CALLS if parallel else 1}
    return one


def call_grammar(tools: list[Tool], fmt: CallFormat, choice: ToolChoice,
                 strict: bool = False) -> str:
    """The grammar of a reply under ``choice`` (``auto``, ``required`` or ``named``): Lark
    text for llguidance (``%llguidance`` first, as llama.cpp's grammar field takes it),
    the calls' JSON as one embedded JSON Schema.

    Raises:
        QuantDeskError: A function's parameters are malformed, or cannot be enforced
            exactly and ``strict``.
    """
    from models.structured.guidance import LARK_HEADER, lark_json
    from models.structured.schema_policy import plan_schema

    offered = [t for t in tools if choice.mode != "named" or t.name == choice.name]
    for tool in offered:
        check_parameters(tool, strict or tool.strict)
    plan = plan_schema(call_schema(offered, fmt, choice.parallel))
    engine_schema = plan.engine_schema
    if fmt.in_list:
        calls = f"{_literal(fmt.before)} call"
    else:
        one = f"{_literal(fmt.before)} call {_literal(fmt.after)}"
        calls = one if not choice.parallel else \
            f"{one} ({_literal(fmt.separator)} {one}){{0,{MAX_PARALLEL_CALLS - 1}}}"
    rules = [LARK_HEADER + " {}",
             "start: tool_calls" if choice.mode != "auto" else "start: tool_calls | tool_text",
             f"tool_calls: {calls}",
             f"call: {lark_json(engine_schema)}"]
    if choice.mode == "auto":
        opener = json.dumps(fmt.opener[0])[1:-1].replace("/", "\\/").replace("[", "\\[")
        rules.append(f"tool_text: /[^{opener}](.|\\n)*/")
    return "\n".join(rules) + "\n"


# -- reading calls back ---------------------------------------------------------------


@dataclass
class ParsedCall:
    """A call read from a reply: name, the raw argument text, and the parsed arguments."""

    name: str
    arguments_text: str
    arguments: Any = None
    id: str = field(default_factory=new_call_id)


_WS = " \t\r\n"


def _skip(text: str, pos: int, chars: str = _WS) -> int:
    while pos < len(text) and text[pos] in chars:
        pos += 1
    return pos


def _value_end(text: str, pos: int) -> Optional[int]:
    """Where the JSON value starting at ``pos`` ends, or ``None`` if the text stops first."""
    if pos >= len(text):
        return None
    first = text[pos]
    if first == '"':
        i = pos + 1
        while i < len(text):
            if text[i] == "\\":
                i += 2
                continue
            if text[i] == '"':
                return i + 1
            i += 1
        return None
    if first in "[{":
        depth, i, in_string = 0, pos, False
        while i < len(text):
            c = text[i]
            if in_string:
                if c == "\\":
                    i += 1
                elif c == '"':
                    in_string = False
            elif c == '"':
                in_string = True
            elif c in "[{":
                depth += 1
            elif c in "]}":
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        return None
    i = pos
    while i < len(text) and text[i] not in ",}] \t\r\n":
        i += 1
    return i if i < len(text) else None


@dataclass
class _ObjectScan:
    """What a (possibly unfinished) call object says so far."""

    fields: dict  # key -> (start, end or None)
    end: Optional[int]  # after the closing brace, or None if the text stops first


def _scan_object(text: str, pos: int) -> _ObjectScan:
    fields: dict = {}
    pos = _skip(text, pos + 1)  # after "{"
    while pos < len(text):
        if text[pos] == "}":
            return _ObjectScan(fields, pos + 1)
        if text[pos] == ",":
            pos = _skip(text, pos + 1)
            continue
        key_end = _value_end(text, pos)
        if key_end is None or text[pos] != '"':
            break
        key = json.loads(text[pos:key_end])
        pos = _skip(text, key_end)
        if pos >= len(text) or text[pos] != ":":
            break
        start = _skip(text, pos + 1)
        if start >= len(text):
            break
        end = _value_end(text, start)
        fields[key] = (start, end)
        if end is None:
            break
        pos = _skip(text, end)
    return _ObjectScan(fields, None)


def _call_objects(text: str, fmt: CallFormat) -> list[tuple[int, _ObjectScan]]:
    """The call objects in a reply (the last one possibly unfinished)."""
    found = []
    pos = _skip(text, 0)
    if fmt.in_list:
        if text.startswith(fmt.before, pos):
            pos = _skip(text, pos + len(fmt.before))
        if pos >= len(text) or text[pos] != "[":
            return found
        pos = _skip(text, pos + 1)
    while pos < len(text):
        if fmt.before and not fmt.in_list:
            opener = fmt.before.strip()
            at = text.find(opener, pos)
            if at < 0:
                break
            pos = _skip(text, at + len(opener))
        if pos >= len(text) or text[pos] != "{":
            break
        scan = _scan_object(text, pos)
        found.append((pos, scan))
        if scan.end is None:
            break
        pos = _skip(text, scan.end, _WS + ",;")
    return found


def is_call_reply(text: str, fmt: CallFormat) -> Optional[bool]:
    """Whether a reply (so far) is calls: ``True``, ``False``, or ``None`` while its
    beginning could still be either."""
    stripped = text.lstrip(_WS)
    if not stripped:
        return None
    openers = [fmt.opener.strip()] + (["["] if fmt.in_list else [])
    for opener in openers:
        if stripped.startswith(opener):
            return True
    if any(opener.startswith(stripped) for opener in openers):
        return None
    return False


def parse_calls(text: str, fmt: CallFormat) -> Optional[list[ParsedCall]]:
    """The calls in a whole reply, or ``None`` when it is a text reply (or holds no
    complete call)."""
    if not is_call_reply(text, fmt):
        return None
    calls = []
    for _, scan in _call_objects(text, fmt):
        if scan.end is None:
            break
        name_span = scan.fields.get("name")
        args_span = scan.fields.get(fmt.args_key) or scan.fields.get("arguments") \
            or scan.fields.get("parameters")
        if name_span is None or name_span[1] is None:
            continue
        name = json.loads(text[name_span[0]:name_span[1]])
        raw = text[args_span[0]:args_span[1]] if args_span and args_span[1] else "{}"
        if raw.startswith('"'):  # the arguments as a JSON string: its text is the JSON
            raw = json.loads(raw)
        try:
            arguments = json.loads(raw)
        except ValueError:
            arguments = None
        calls.append(ParsedCall(str(name), raw, arguments))
    return calls or None


class CallStream:
    """Reads a reply in pieces and says what to send: text, or each call's header and
    then its argument deltas (the :meth:`feed` and :meth:`finish` events).

    Events: ``("text", str)``, ``("call", index, id, name)``, ``("arguments", index, str)``.
    """

    def __init__(self, fmt: CallFormat) -> None:
        self.fmt = fmt
        self.text = ""
        self.mode: Optional[bool] = None  # True: calls; False: text; None: undecided
        self.ids: list[str] = []
        self.sent_args: list[int] = []  # characters of each call's arguments sent

    def feed(self, piece: str) -> list[tuple]:
        self.text += piece
        if self.mode is None:
            self.mode = is_call_reply(self.text, self.fmt)
            if self.mode is False:
                return [("text", self.text)]
            if self.mode is None:
                return []
        elif self.mode is False:
            return [("text", piece)] if piece else []
        return self._call_events(final=False)

    def finish(self) -> list[tuple]:
        """Events for what is left when the reply ends (undecided text is text)."""
        if self.mode is None:
            self.mode = False
            return [("text", self.text)] if self.text else []
        if self.mode is False:
            return []
        return self._call_events(final=True)

    def _call_events(self, final: bool) -> list[tuple]:
        events = []
        text = self.text
        for index, (_, scan) in enumerate(_call_objects(text, self.fmt)):
            name_span = scan.fields.get("name")
            if name_span is None or name_span[1] is None:
                break
            args_span = scan.fields.get(self.fmt.args_key) or scan.fields.get("arguments") \
                or scan.fields.get("parameters")
            if index >= len(self.ids):
                self.ids.append(new_call_id())
                self.sent_args.append(0)
                events.append(("call", index, self.ids[index],
                               str(json.loads(text[name_span[0]:name_span[1]]))))
            if args_span is None:
                if scan.end is not None and self.sent_args[index] == 0:
                    self.sent_args[index] = 2
                    events.append(("arguments", index, "{}"))
                continue
            start, end = args_span
            if text[start] == '"':  # arguments as a JSON string: send it decoded, whole
                if end is not None and self.sent_args[index] == 0:
                    decoded = json.loads(text[start:end])
                    self.sent_args[index] = len(decoded) or 1
                    events.append(("arguments", index, decoded))
                continue
            stop = end if end is not None else len(text)
            if end is None:  # hold back trailing whitespace and what may be the closing text
                stop = len(text.rstrip(_WS))
            if stop - start > self.sent_args[index]:
                events.append(("arguments", index, text[start + self.sent_args[index]:stop]))
                self.sent_args[index] = stop - start
        return events


class ToolPlan:
    """A request's tools, the model's call format and what the reply's calls must match."""

    def __init__(self, fmt: CallFormat, tools: list[Tool]) -> None:
        from models.structured import schema_plan

        self.fmt = fmt
        self.tools = tools
        # What the grammar does not enforce of each (non-strict) function's parameters.
        self.not_enforced = [{**p.to_dict(), "function": tool.name} for tool in tools
                             for p in schema_plan(tool.parameters).problems]
        self.report: Optional[dict] = None

    def calls(self, gen: Any) -> Optional[list]:
        """The reply's calls, checked against the functions; ``None`` for a text reply.

        A call that breaks its parameters is a 500 where the grammar enforced them all
        (it cannot happen); where it did not (a function without ``strict``), the calls
        are returned and :attr:`report` says what was not enforced and what broke."""
        calls = parse_calls(gen.text, self.fmt)
        if calls is None:
            return None
        problem = validate_calls(calls, self.tools)
        if self.not_enforced:
            self.report = {"enforced": False, "not_enforced": self.not_enforced,
                           "valid": problem is None, "error": problem or ""}
        elif problem is not None and gen.finish_reason != "length":
            raise ApiError(500, f"The model's tool call is malformed: {problem}.",
                           code="invalid_tool_call")
        return calls


def tool_request(core: Any, model_id: Any, messages: list[dict], tools: list[Tool],
                 choice: ToolChoice, values: dict) -> tuple[list[dict], Optional[ToolPlan]]:
    """The engine messages and options for a request's tools, whatever its dialect
    (``values``, the engine option fields, gains the call grammar and the tools for the
    template); the plan is ``None`` when no call can be made.

    Raises:
        ApiError: 400 for a parameters schema the grammar cannot enforce, or tools
            together with a response format.
    """
    history = any("tool_calls" in m or m["role"] == "tool" for m in messages)
    if choice.mode == "none" and not history:
        return messages, None
    fmt = call_format(template_of(core.resolve(model_id).path))
    if choice.mode == "none":
        return prompt_messages(fmt, messages, []), None
    if values.get("response_format"):
        raise ApiError(400, "response_format cannot be combined with tools: the tool calls "
                            "already have their grammar. Send one or the other.",
                       param="response_format", code="invalid_value")
    try:
        values["grammar"] = call_grammar(tools, fmt, choice)
    except QuantDeskError as exc:
        raise ApiError(400, exc.user_message, param="tools", code="invalid_schema") from None
    values["response_format"] = "grammar"
    if fmt.template_tools:
        values["tools"] = [tool.openai() for tool in tools]
    return prompt_messages(fmt, messages, tools), ToolPlan(fmt, tools)


def validate_calls(calls: list[ParsedCall], tools: list[Tool]) -> Optional[str]:
    """Why the calls do not match the offered functions, or ``None`` when they do (each
    function's parameters read as JSON Schema 2020-12, older drafts rewritten)."""
    from models.structured import schema_plan
    from models.structured.validate import validation_errors

    by_name = {tool.name: tool for tool in tools}
    for call in calls:
        tool = by_name.get(call.name)
        if tool is None:
            return f"the model called {call.name!r}, which the request does not offer"
        if call.arguments is None:
            return f"the arguments of {call.name!r} are not JSON"
        errors = validation_errors(call.arguments, schema_plan(tool.parameters).schema)
        if errors:
            return f"the arguments of {call.name!r} do not match its parameters: {errors[0]}"
    return None
