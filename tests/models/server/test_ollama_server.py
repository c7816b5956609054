"""The real Ollama client against the server's Ollama port and SmolLM2: chat and generate
(streamed as NDJSON and not), format json and a schema, options, tags, show, ps, version;
the port is off unless asked for."""

from __future__ import annotations

import json

import httpx
import ollama
import pytest

from models.structured import validation_errors
from tests.models.server.conftest import MODEL_ID

pytestmark = [pytest.mark.smollm2, pytest.mark.slow]

GREEDY = {"temperature": 0, "num_predict": 12, "repeat_penalty": 1.0}


@pytest.fixture
def client(ollama_server):
    return ollama.Client(host=f"http://127.0.0.1:{ollama_server.ollama_port}", timeout=600)


def test_chat_streamed_and_not(client):
    messages = [{"role": "user", "content": "Name a colour."}]
    whole = client.chat(model=MODEL_ID, messages=messages, options=GREEDY)
    assert whole.done and whole.message.role == "assistant" and whole.message.content
    assert whole.eval_count > 0 and whole.done_reason in ("stop", "length")
    parts = list(client.chat(model=MODEL_ID + ":latest", messages=messages, options=GREEDY,
                             stream=True, keep_alive="5m"))
    assert parts[-1].done and not any(p.done for p in parts[:-1])
    # (not compared with the first reply: its prompt was evaluated whole, this one's
    # reuses the cached prefix, and llama.cpp may round a near-tie differently)
    assert "".join(p.message.content for p in parts).strip()
    assert parts[-1].eval_count > 0 and parts[-1].done_reason in ("stop", "length")


def test_generate_and_format_schema(client):
    reply = client.generate(model=MODEL_ID, prompt="Say hello.", options=GREEDY)
    assert reply.done and reply.response
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer", "minimum": 0,
                                                       "maximum": 120}},
              "required": ["name", "age"]}
    person = client.chat(model=MODEL_ID, format=schema, options={"temperature": 0,
                                                                 "num_predict": 60},
                         messages=[{"role": "user", "content": "Give a person as JSON."}])
    assert validation_errors(json.loads(person.message.content), schema) == []
    any_json = client.generate(model=MODEL_ID, prompt="A list as JSON.", format="json",
                               options={"temperature": 0, "num_predict": 40})
    json.loads(any_json.response)


def test_tags_show_ps_version(client, ollama_server):
    assert [m.model for m in client.list().models] == [MODEL_ID]
    assert client.show(MODEL_ID).details.format == "gguf"
    client.generate(model=MODEL_ID, prompt="Hi", options={"num_predict": 1})
    assert [m.model for m in client.ps().models] == [MODEL_ID]
    version = httpx.get(f"http://127.0.0.1:{ollama_server.ollama_port}/api/version").json()
    assert version["version"]
    main = httpx.get(f"{ollama_server.address}/api/tags")
    assert main.status_code == 404  # Ollama's API only on its own port


def test_the_ollama_port_is_off_by_default():
    from models.server.config import ServerConfig

    assert ServerConfig().ollama_port is None
