"""The real Anthropic client against the real server and SmolLM2: messages, the
streaming event sequence, tool_use blocks (forced, valid), count_tokens, x-api-key."""

from __future__ import annotations

import anthropic
import pytest

from models.structured import validation_errors
from tests.models.server.conftest import MODEL_ID

pytestmark = [pytest.mark.smollm2, pytest.mark.slow]

WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["city", "unit"]}
TOOLS = [{"name": "get_weather", "description": "Weather for a city.", "input_schema": WEATHER}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
GREEDY = {"temperature": 0}  # sent as a body field: this client version has no argument


@pytest.fixture
def claude(server):
    return anthropic.Anthropic(base_url=server.address, api_key="none", max_retries=0,
                               timeout=600)


def test_a_message_and_its_stream_say_the_same(claude):
    request = dict(model=MODEL_ID, max_tokens=12, extra_body=GREEDY, system="Be brief.",
                   messages=[{"role": "user", "content": [{"type": "text",
                                                           "text": "Name a colour."}]}])
    reply = claude.messages.create(**request)
    assert reply.type == "message" and reply.role == "assistant"
    assert reply.content[0].type == "text" and reply.content[0].text
    assert reply.stop_reason in ("end_turn", "max_tokens") and reply.usage.output_tokens > 0
    with claude.messages.stream(**request) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_start" in kinds and "content_block_stop" in kinds
    assert "message_delta" in kinds
    assert final.content[0].text == reply.content[0].text
    assert final.stop_reason == reply.stop_reason


def test_forced_tool_use_is_valid_streamed_and_not(claude):
    request = dict(model=MODEL_ID, max_tokens=80, extra_body=GREEDY, messages=ASK, tools=TOOLS,
                   tool_choice={"type": "tool", "name": "get_weather",
                                "disable_parallel_tool_use": True})
    reply = claude.messages.create(**request)
    assert reply.stop_reason == "tool_use"
    block = reply.content[0]
    assert block.type == "tool_use" and block.name == "get_weather"
    assert block.id.startswith("toolu_") and validation_errors(block.input, WEATHER) == []
    with claude.messages.stream(**request) as stream:
        final = stream.get_final_message()
    assert final.content[0].input == block.input and final.stop_reason == "tool_use"
    history = ASK + [{"role": "assistant", "content": [block.model_dump()]},
                     {"role": "user", "content": [{"type": "tool_result",
                                                   "tool_use_id": block.id,
                                                   "content": "21 degrees, sunny"}]}]
    answer = claude.messages.create(model=MODEL_ID, max_tokens=20, extra_body=GREEDY,
                                    messages=history, tools=TOOLS,
                                    tool_choice={"type": "none"})
    assert answer.content[0].type == "text" and answer.content[0].text


def test_count_tokens_and_the_api_key_header(claude, server):
    count = claude.messages.count_tokens(model=MODEL_ID, messages=ASK)
    assert count.input_tokens > 5
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(model=MODEL_ID, max_tokens=5, messages=[
            {"role": "system", "content": "no"}])
