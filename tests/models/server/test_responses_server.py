"""OpenAI's Responses API through the real ``openai`` client, the real server and SmolLM2:
text replies streamed (raw events and the client's own stream accumulator) and not,
instructions, forced function calls (``required`` and named) that validate, a call's
output sent back as ``input`` items, ``text.format`` json_schema and its 400, and a
``previous_response_id`` refused with a sentence."""

from __future__ import annotations

import json

import openai
import pytest

from models.structured import validation_errors
from tests.models.server.conftest import MODEL_ID
from tests.models.server.test_tool_calls_server import SCHEMAS, TODO, WEATHER

pytestmark = [pytest.mark.smollm2, pytest.mark.slow]

TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather forecast for a city.",
          "parameters": WEATHER, "strict": True},
         {"type": "function", "name": "add_todo", "description": "Add an item to the to-do list.",
          "parameters": TODO, "strict": True}]
QUESTION = "What is the weather in Paris?"
BASE = dict(model=MODEL_ID, temperature=0, max_output_tokens=40)


def test_text_reply_streamed_and_not(client, server):
    request = dict(BASE, input="Name a colour.", instructions="Answer in one word.")
    reply = client.responses.create(**request)
    assert reply.object == "response" and reply.id.startswith("resp_")
    assert reply.status in ("completed", "incomplete") and reply.output_text.strip()
    assert [item.type for item in reply.output] == ["message"]
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0
    assert reply.usage.total_tokens == reply.usage.input_tokens + reply.usage.output_tokens

    events = list(client.responses.create(**request, stream=True))
    kinds = [event.type for event in events]
    assert kinds[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == reply.output_text
    final = events[-1].response
    assert final.output_text == reply.output_text and final.usage.output_tokens > 0

    with client.responses.stream(**request) as stream:  # the client's own accumulator
        for _ in stream:
            pass
        accumulated = stream.get_final_response()
    assert accumulated.output_text == reply.output_text


def test_a_cut_reply_is_incomplete(client):
    reply = client.responses.create(**dict(BASE, max_output_tokens=3),
                                    input="Count from one to twenty.")
    assert reply.status == "incomplete"
    assert reply.incomplete_details.reason == "max_output_tokens"


@pytest.mark.parametrize("choice", ["required",
                                    {"type": "function", "name": "add_todo"}])
def test_forced_function_calls_validate_streamed_and_not(client, choice):
    request = dict(BASE, max_output_tokens=120, input=QUESTION, tools=TOOLS,
                   tool_choice=choice, parallel_tool_calls=False)
    reply = client.responses.create(**request)
    calls = [item for item in reply.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].call_id.startswith("call_")
    if isinstance(choice, dict):
        assert calls[0].name == "add_todo"
    assert validation_errors(json.loads(calls[0].arguments), SCHEMAS[calls[0].name]) == []

    with client.responses.stream(**request) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds.count("response.function_call_arguments.delta") > 1
    assert "response.function_call_arguments.done" in kinds
    streamed = [item for item in final.output if item.type == "function_call"]
    assert [(c.name, c.arguments) for c in streamed] == [(calls[0].name, calls[0].arguments)]


def test_a_function_output_sent_back_gets_a_text_answer(client):
    first = client.responses.create(**dict(BASE, max_output_tokens=120), input=QUESTION,
                                    tools=TOOLS, tool_choice="required",
                                    parallel_tool_calls=False)
    call = next(item for item in first.output if item.type == "function_call")
    history = [{"role": "user", "content": QUESTION},
               call.model_dump(exclude_none=True),
               {"type": "function_call_output", "call_id": call.call_id,
                "output": json.dumps({"temperature": 21, "sky": "sunny"})}]
    answer = client.responses.create(**BASE, input=history, tools=TOOLS, tool_choice="none")
    assert [item.type for item in answer.output] == ["message"]
    assert answer.output_text.strip()


def test_json_schema_format_validates_and_an_unenforceable_one_is_a_400(client, server):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                               "age": {"type": "integer", "minimum": 0,
                                                       "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    reply = client.responses.create(**dict(BASE, max_output_tokens=60),
                                    input="Describe a person as JSON.",
                                    text={"format": {"type": "json_schema", "name": "person",
                                                     "schema": schema, "strict": True}})
    assert validation_errors(json.loads(reply.output_text), schema) == []
    started = len(server.entries)
    bad = {"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 5}}}
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(**BASE, input="A number.",
                                text={"format": {"type": "json_schema", "name": "n",
                                                 "schema": bad}})
    assert "multipleOf" in caught.value.message
    assert [e.status for e in server.entries[started:]] == [400]


def test_previous_response_id_is_refused_with_a_sentence(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(**BASE, input="Hi", previous_response_id="resp_123")
    assert "does not keep responses" in caught.value.message
    assert "whole conversation" in caught.value.message


def test_input_images_are_checked_and_refused_by_a_model_without_vision(client):
    """SmolLM2 reads text only: a picture is a 400 that says so; a damaged one is a 400
    naming its field (tests/models/server/test_vision_server.py sends them to a model
    that reads them)."""
    import base64

    from tests.factory.images import png_bytes, sample_picture

    picture = "data:image/png;base64," + base64.b64encode(png_bytes(sample_picture(16))).decode()
    with pytest.raises(openai.BadRequestError, match="cannot read images"):
        client.responses.create(**BASE, input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": picture}, {"type": "input_text", "text": "What?"}]}])
    with pytest.raises(openai.BadRequestError, match=r"input\[0\]\.content\[0\]\.image_url"):
        client.responses.create(**BASE, input=[{"role": "user", "content": [
            {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}])
