"""A reasoning model's thinking through every dialect, with the real clients and engine.

The model is SmolLM2 with a thinking template written into a copy of its GGUF
(:data:`tests.models.gguf_copy.THINKING_TEMPLATE`: an ``enable_thinking`` switch, on by
default, whose generation prompt opens ``<think>``), so a reply starts inside its
reasoning as DeepSeek-R1's do. The oracle is the same request with the split turned off
(``reasoning_format: none``): the raw text, split by :func:`split_reasoning`, must be what
each dialect returned as thinking and answer; with the switch off, the prompt holds the
closed empty section (more prompt tokens) and the reply has no thinking.
"""

from __future__ import annotations

import anthropic
import ollama
import pytest

from models.engine.reasoning import split_reasoning
from tests.conftest import cached_models_dir
from tests.models.gguf_copy import THINKING_TEMPLATE, copy_gguf
from tests.models.server.conftest import MODEL_ID, library_of

pytestmark = [pytest.mark.smollm2, pytest.mark.slow]

THINKER = "SmolLM2-thinking"
ASK = [{"role": "user", "content": "What is 2 + 3?"}]
GREEDY = {"temperature": 0.0, "max_tokens": 24}


@pytest.fixture(scope="module")
def thinking_gguf(smollm2_gguf):
    return copy_gguf(smollm2_gguf, cached_models_dir() / f"{THINKER}.gguf",
                     chat_template=THINKING_TEMPLATE)


@pytest.fixture(scope="module")
def library(server_home, smollm2_gguf, thinking_gguf):
    return library_of(server_home, smollm2_gguf, thinking_gguf)


@pytest.fixture
def raw(client):
    """The thinking model's greedy reply to ASK, unsplit: ``(text, usage)``.

    Asked twice, and the second kept: the first evaluates the whole prompt, later ones
    find it in the slot and evaluate its last token alone, which rounds a near-tie the
    same way each time — so the requests compared with it take the same path.
    """
    for _ in range(2):
        reply = client.chat.completions.create(model=THINKER, messages=ASK, **GREEDY,
                                               extra_body={"reasoning_format": "none"})
    message = reply.choices[0].message
    assert getattr(message, "reasoning_content", None) is None
    return message.content, reply.usage


def test_chat_completions_returns_the_reasoning_apart(client, raw):
    text, usage = raw
    thought, answer = split_reasoning(text, opened=True)
    assert thought  # the prompt opened <think>: the reply starts inside it
    reply = client.chat.completions.create(model=THINKER, messages=ASK, **GREEDY)
    message = reply.choices[0].message
    assert message.reasoning_content == thought
    assert message.content == answer
    details = reply.usage.completion_tokens_details
    assert 0 < details.reasoning_tokens <= reply.usage.completion_tokens
    assert reply.usage.prompt_tokens == usage.prompt_tokens

    streamed = client.chat.completions.create(model=THINKER, messages=ASK, **GREEDY,
                                              stream=True)
    reasoning, content = [], []
    for chunk in streamed:
        if chunk.choices:
            delta = chunk.choices[0].delta
            reasoning.append(getattr(delta, "reasoning_content", None) or "")
            content.append(delta.content or "")
    assert "".join(reasoning).strip() == thought and "".join(content) == answer
    assert sum(1 for piece in reasoning if piece) > 1  # streamed, not sent at the end


@pytest.mark.parametrize("switch", [
    {"chat_template_kwargs": {"enable_thinking": False}}, {"enable_thinking": False},
    {"reasoning_effort": "none"}])
def test_chat_completions_switch_turns_thinking_off(client, switch):
    on = client.chat.completions.create(model=THINKER, messages=ASK, **GREEDY)
    reply = client.chat.completions.create(model=THINKER, messages=ASK, **GREEDY,
                                           extra_body=switch)
    message = reply.choices[0].message
    assert getattr(message, "reasoning_content", None) is None and message.content
    assert reply.usage.completion_tokens_details.reasoning_tokens == 0
    assert reply.usage.prompt_tokens > on.usage.prompt_tokens  # "<think>\n\n</think>\n\n"


def test_unknown_template_arguments_are_refused(client):
    import openai

    with pytest.raises(openai.BadRequestError, match="chat_template_kwargs holds tools_in"):
        client.chat.completions.create(model=THINKER, messages=ASK, **GREEDY,
                                       extra_body={"chat_template_kwargs": {"tools_in": 1}})


def test_a_model_without_thinking_is_unchanged(client):
    reply = client.chat.completions.create(model=MODEL_ID, messages=ASK, **GREEDY)
    assert getattr(reply.choices[0].message, "reasoning_content", None) is None
    assert reply.choices[0].message.content


def test_anthropic_thinking_blocks(server, raw):
    thought, answer = split_reasoning(raw[0], opened=True)
    claude = anthropic.Anthropic(base_url=server.address, api_key="none", max_retries=0,
                                 timeout=600)
    request = dict(model=THINKER, max_tokens=GREEDY["max_tokens"], messages=ASK,
                   extra_body={"temperature": 0})
    reply = claude.messages.create(**request)
    assert reply.content[0].type == "thinking" and reply.content[0].thinking == thought
    assert [b.text for b in reply.content[1:]] == [answer]
    with claude.messages.stream(**request) as stream:
        deltas = [event.delta.type for event in stream if event.type == "content_block_delta"]
        final = stream.get_final_message()
    assert deltas.count("thinking_delta") > 1
    assert final.content[0].type == "thinking" and final.content[0].thinking.strip() == thought
    off = claude.messages.create(**request, thinking={"type": "disabled"})
    assert [b.type for b in off.content] == ["text"] and off.content[0].text
    # Earlier thinking blocks are accepted back in the history.
    again = claude.messages.create(**dict(request, messages=ASK + [
        {"role": "assistant", "content": [b.model_dump() for b in reply.content]},
        {"role": "user", "content": "And 3 + 4?"}]))
    assert again.content


def test_ollama_thinking_field_and_think_switch(ollama_server, raw):
    thought, answer = split_reasoning(raw[0], opened=True)
    client = ollama.Client(host=f"http://127.0.0.1:{ollama_server.ollama_port}", timeout=600)
    options = {"temperature": 0, "num_predict": GREEDY["max_tokens"], "repeat_penalty": 1.0}
    whole = client.chat(model=THINKER, messages=ASK, options=options)
    assert whole.message.thinking == thought and whole.message.content == answer
    parts = list(client.chat(model=THINKER, messages=ASK, options=options, stream=True))
    assert "".join(p.message.thinking or "" for p in parts).strip() == thought
    assert sum(1 for p in parts if p.message.thinking) > 1
    off = client.chat(model=THINKER, messages=ASK, options=options, think=False)
    assert not off.message.thinking and off.message.content
    generated = client.generate(model=THINKER, prompt=ASK[0]["content"], options=options)
    assert generated.thinking == thought and generated.response == answer
    assert "thinking" in client.show(THINKER).capabilities
    assert "thinking" not in client.show(MODEL_ID).capabilities


def test_responses_reasoning_item(client, raw):
    thought, answer = split_reasoning(raw[0], opened=True)
    request = dict(model=THINKER, input=ASK[0]["content"], temperature=0,
                   max_output_tokens=GREEDY["max_tokens"])
    reply = client.responses.create(**request)
    kinds = [item.type for item in reply.output]
    assert kinds == ["reasoning", "message"]
    assert reply.output[0].content[0].text == thought and reply.output_text == answer
    assert reply.usage.output_tokens_details.reasoning_tokens > 0
    events = list(client.responses.create(**request, stream=True))
    deltas = [e.delta for e in events if e.type == "response.reasoning_text.delta"]
    assert len(deltas) > 1 and "".join(deltas).strip() == thought
    final = events[-1].response
    assert [item.type for item in final.output] == kinds
    off = client.responses.create(**request, reasoning={"effort": "none"})
    assert [item.type for item in off.output] == ["message"] and off.output_text
