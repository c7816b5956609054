"""Tool calls through the real OpenAI client, the real server and SmolLM2: forced calls
(``required`` and a named function) parse and validate, streamed and not, and a tool
result sent back gets a text answer."""

from __future__ import annotations

import json

import openai
import pytest

from models.structured import validation_errors
from tests.models.server.conftest import MODEL_ID

pytestmark = [pytest.mark.smollm2, pytest.mark.slow]

WEATHER = {"type": "object",
           "properties": {"city": {"type": "string", "maxLength": 20},
                          "unit": {"enum": ["celsius", "fahrenheit"]},
                          "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["city", "unit"]}
TODO = {"type": "object",
        "properties": {"title": {"type": "string", "maxLength": 30},
                       "tags": {"type": "array", "items": {"type": "string", "maxLength": 10},
                                "maxItems": 3},
                       "due": {"type": "object",
                               "properties": {"day": {"type": "integer", "minimum": 1,
                                                      "maximum": 31},
                                              "month": {"type": "integer", "minimum": 1,
                                                        "maximum": 12}},
                               "required": ["day", "month"]}},
        "required": ["title", "due"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather",
                                           "description": "Weather forecast for a city.",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "add_todo",
                                           "description": "Add an item to the to-do list.",
                                           "parameters": TODO}}]
SCHEMAS = {"get_weather": WEATHER, "add_todo": TODO}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
BASE = dict(model=MODEL_ID, messages=ASK, tools=TOOLS, temperature=0, max_tokens=120)


def _valid(name: str, arguments: str) -> None:
    assert validation_errors(json.loads(arguments), SCHEMAS[name]) == []


def test_required_tool_choice_gives_a_valid_call(client):
    reply = client.chat.completions.create(tool_choice="required", **BASE)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    calls = choice.message.tool_calls
    assert calls and all(c.id.startswith("call_") and c.type == "function" for c in calls)
    for call in calls:
        _valid(call.function.name, call.function.arguments)


def test_named_tool_choice_calls_that_function(client):
    reply = client.chat.completions.create(
        tool_choice={"type": "function", "function": {"name": "add_todo"}},
        parallel_tool_calls=False, **BASE)
    calls = reply.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["add_todo"]
    _valid("add_todo", calls[0].function.arguments)


def test_streamed_calls_send_id_and_name_first_then_argument_deltas(client):
    chunks = list(client.chat.completions.create(
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, stream=True,
        **BASE))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [tc for d in deltas for tc in (d.tool_calls or [])]
    by_index: dict = {}
    for tc in calls:
        if tc.index not in by_index:  # a call's first delta: its id and name
            assert tc.id and tc.function.name == "get_weather"
            by_index[tc.index] = ""
        else:
            assert tc.id is None and tc.function.name is None
        by_index[tc.index] += tc.function.arguments or ""
    assert len(calls) > 2 * len(by_index)  # the arguments came in several deltas
    assert list(by_index) == list(range(len(by_index)))
    for text in by_index.values():
        _valid("get_weather", text)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    whole = client.chat.completions.create(
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, **BASE)
    assert whole.choices[0].message.tool_calls[0].function.arguments == by_index[0]


def test_a_tool_result_sent_back_gets_a_text_answer(client):
    first = client.chat.completions.create(tool_choice="required", parallel_tool_calls=False,
                                           **BASE)
    call = first.choices[0].message.tool_calls[0]
    history = ASK + [first.choices[0].message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id,
                      "content": json.dumps({"temperature": 21, "sky": "sunny"})}]
    answer = client.chat.completions.create(
        **dict(BASE, messages=history, tool_choice="none", max_tokens=30))
    assert answer.choices[0].message.tool_calls is None
    assert answer.choices[0].message.content.strip()
    auto = client.chat.completions.create(**dict(BASE, messages=history, max_tokens=30))
    message = auto.choices[0].message  # auto: text, or calls that validate
    assert message.content or message.tool_calls
    for tc in message.tool_calls or []:
        _valid(tc.function.name, tc.function.arguments)


def test_an_unenforceable_strict_parameters_schema_is_a_400_before_generating(client, server):
    parameters = {"type": "object", "properties": {"n": {"type": "number", "not": {"const": 3}}},
                  "required": ["n"]}
    bad = [{"type": "function", "function": {"name": "pick", "parameters": parameters,
                                             "strict": True}}]
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(**dict(BASE, tools=bad, tool_choice="required"))
    assert "/properties/n/not" in str(caught.value) and "pick" in str(caught.value)
    # Without strict the call is generated under what is enforceable and checked after.
    loose = [{"type": "function", "function": {"name": "pick", "parameters": parameters}}]
    reply = client.chat.completions.create(**dict(BASE, tools=loose, tool_choice="required"))
    call = reply.choices[0].message.tool_calls[0]
    report = reply.to_dict()["structured_output"]
    assert [p["pointer"] for p in report["not_enforced"]] == ["/properties/n/not"]
    assert report["valid"] == (json.loads(call.function.arguments)["n"] != 3)


def test_tool_choice_naming_an_unknown_function_is_a_400(client):
    with pytest.raises(openai.BadRequestError, match="does not offer"):
        client.chat.completions.create(
            tool_choice={"type": "function", "function": {"name": "nope"}}, **BASE)
