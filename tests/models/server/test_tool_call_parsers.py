"""The call-format parsers on recorded outputs of each family's format, whole and streamed
in pieces of every size; the call grammars parse and accept the calls they are for."""

from __future__ import annotations

import json

import pytest

from models.server.tool_calls import (FORMATS, CallStream, Tool, ToolChoice, call_format,
                                      call_grammar, call_schema, parse_calls, prompt_messages,
                                      validate_calls)
from models.structured.guidance import gbnf_grammar, grammar_accepts

# Replies as models write them (Qwen2.5 / Hermes, Llama 3.1, Mistral), spacing included.
RECORDED = [
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", '
               '"unit": "celsius"}}\n</tool_call>',
     [("get_weather", {"city": "Paris", "unit": "celsius"})]),
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
               '</tool_call>\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": '
               '[2, {"c": "}"}]}}\n</tool_call>',
     [("get_weather", {"city": "Paris"}), ("add", {"a": 1, "b": [2, {"c": "}"}]})]),
    ("hermes", '<tool_call>\n{"arguments": {"city": "Oslo \\"N\\""}, "name": "get_weather"}'
               '\n</tool_call>', [("get_weather", {"city": 'Oslo "N"'})]),
    ("hermes", '<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Rome\\"}"}'
               '\n</tool_call>', [("get_weather", {"city": "Rome"})]),
    ("llama3", '{"name": "get_weather", "parameters": {"city": "Tokyo", "unit": "celsius"}}',
     [("get_weather", {"city": "Tokyo", "unit": "celsius"})]),
    ("llama3", '{"name":"add","parameters":{"a":1,"b":2}}; {"name":"add","parameters":{}}',
     [("add", {"a": 1, "b": 2}), ("add", {})]),
    ("mistral", '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Lyon"}}, '
                '{"name": "add", "arguments": {"a": 2}}]',
     [("get_weather", {"city": "Lyon"}), ("add", {"a": 2})]),
    ("mistral", '[{"name": "add", "arguments": {"a": 3}}]', [("add", {"a": 3})]),
    ("generic", ' <tool_call>\n{"name": "add", "arguments": {"a": -1.5e3}}\n</tool_call>',
     [("add", {"a": -1500.0})]),
]
TEXT = [("hermes", "The weather is nice."), ("llama3", "Sure: it is 21 degrees."),
        ("mistral", "No tool is needed {here}."), ("generic", "<b>bold</b> text")]
TOOLS = [Tool("get_weather", "", {"type": "object", "properties": {
             "city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
             "required": ["city"]}),
         Tool("add", "", {"type": "object", "properties": {"a": {"type": "number"},
                                                            "b": {}}})]


def _streamed(text: str, fmt, size: int) -> list[tuple]:
    stream = CallStream(fmt)
    events = []
    for start in range(0, len(text), size):
        events += stream.feed(text[start:start + size])
    return events + stream.finish()


@pytest.mark.parametrize("family,text,expected", RECORDED)
def test_whole_replies_parse(family, text, expected):
    calls = parse_calls(text, FORMATS[family])
    assert [(c.name, c.arguments) for c in calls] == expected
    assert [json.loads(c.arguments_text) for c in calls] == [a for _, a in expected]
    assert validate_calls(calls, TOOLS) is None
    assert len({c.id for c in calls}) == len(calls)


@pytest.mark.parametrize("family,text,expected", RECORDED)
def test_streamed_in_pieces_of_every_size_gives_the_same_calls(family, text, expected):
    fmt = FORMATS[family]
    for size in range(1, len(text) + 1):
        events = _streamed(text, fmt, size)
        names, arguments, seen = [], {}, set()
        for event in events:
            assert event[0] != "text"
            if event[0] == "call":
                assert event[1] == len(names)  # indexes in order, each once
                names.append(event[3])
                arguments[event[1]] = ""
            else:
                assert event[1] in arguments  # never arguments before their call's name
                arguments[event[1]] += event[2]
            seen.add(event[0])
        assert names == [n for n, _ in expected], size
        assert [json.loads(arguments[i]) for i in range(len(names))] == \
            [a for _, a in expected], size


@pytest.mark.parametrize("family,text", TEXT)
def test_text_replies_stay_text_in_every_piece_size(family, text):
    fmt = FORMATS[family]
    assert parse_calls(text, fmt) is None
    for size in range(1, len(text) + 1):
        events = _streamed(text, fmt, size)
        assert all(e[0] == "text" for e in events)
        assert "".join(e[1] for e in events) == text


def test_a_wrong_argument_is_named():
    calls = parse_calls('<tool_call>\n{"name": "get_weather", "arguments": {"unit": "kelvin"}}'
                        '\n</tool_call>', FORMATS["hermes"])
    assert "get_weather" in validate_calls(calls, TOOLS)
    calls = parse_calls('<tool_call>{"name": "nope", "arguments": {}}</tool_call>',
                        FORMATS["hermes"])
    assert "nope" in validate_calls(calls, TOOLS)


def _accepts(grammar: str, text: str) -> bool:
    return grammar_accepts(gbnf_grammar(grammar), text)


@pytest.mark.parametrize("family", sorted(FORMATS))
def test_grammars_accept_compact_calls_and_refuse_other_names(family):
    fmt = FORMATS[family]
    required = call_grammar(TOOLS, fmt, ToolChoice("required"))
    auto = call_grammar(TOOLS, fmt, ToolChoice("auto"))
    named = call_grammar(TOOLS, fmt, ToolChoice("named", "add"))
    call = {"name": "add", fmt.args_key: {"a": 2}}
    compact = json.dumps(call, separators=(",", ":"))
    text = fmt.before + (f"[{compact}]" if fmt.in_list else compact) + fmt.after
    assert _accepts(required, text) and _accepts(auto, text) and _accepts(named, text)
    other = text.replace('"add"', '"get_weather"').replace('{"a":2}', '{"city":"X"}')
    assert _accepts(required, other) and not _accepts(named, other)
    assert not _accepts(required, text.replace('"add"', '"sub"'))
    assert _accepts(auto, "Plain words.") and not _accepts(required, "Plain words.")


def test_local_refs_are_rebased_into_the_combined_schema():
    tool = Tool("f", "", {"type": "object", "properties": {"x": {"$ref": "#/$defs/n"}},
                          "$defs": {"n": {"type": "integer"}}})
    schema = call_schema([tool], FORMATS["hermes"], True)
    assert schema["anyOf"][0]["properties"]["arguments"]["properties"]["x"]["$ref"] == \
        "#/anyOf/0/properties/arguments/$defs/n"
    grammar = call_grammar([tool], FORMATS["hermes"], ToolChoice("required"))
    assert _accepts(grammar, '<tool_call>\n{"name":"f","arguments":{"x":3}}\n</tool_call>')
    assert not _accepts(grammar, '<tool_call>\n{"name":"f","arguments":{"x":"3"}}\n</tool_call>')


def test_formats_follow_the_template():
    assert call_format(None).name == "generic"
    assert call_format("{{ messages }}").name == "generic"  # reads no tools
    assert call_format("{% if tools %}<tool_call>{% endif %}").name == "hermes"
    assert call_format("{% if tools %}[TOOL_CALLS]{% endif %}").name == "mistral"
    assert call_format("{{ tools }}<|eot_id|>").name == "llama3"


def test_generic_history_becomes_text_and_a_system_message_lists_the_tools():
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "",
                 "tool_calls": [("c1", "get_weather", {"city": "Paris"})]},
                {"role": "tool", "content": "sunny", "tool_call_id": "c1"}]
    out = prompt_messages(FORMATS["generic"], messages, TOOLS)
    assert out[0]["role"] == "system" and '"get_weather"' in out[0]["content"]
    assert parse_calls(out[2]["content"], FORMATS["generic"])[0].arguments == {"city": "Paris"}
    assert out[3] == {"role": "user", "content": "<tool_response>\nsunny\n</tool_response>"}
    hermes = prompt_messages(FORMATS["hermes"], messages, TOOLS)
    assert hermes[1]["tool_calls"][0]["function"] == {"name": "get_weather",
                                                      "arguments": {"city": "Paris"}}
    assert hermes[2] == {"role": "tool", "content": "sunny", "tool_call_id": "c1",
                         "name": "get_weather"}
