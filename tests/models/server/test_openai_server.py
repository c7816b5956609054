"""The real OpenAI client against the real server and the real engine with SmolLM2."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import httpx
import openai
import pytest

from tests.models.server.conftest import MODEL_ID

pytestmark = [pytest.mark.smollm2, pytest.mark.slow]

ASK = [{"role": "user", "content": "Name three colours."}]
GREEDY = dict(model=MODEL_ID, messages=ASK, temperature=0, max_tokens=12)


def _engine(server):
    entry = server.engines.engines()[0]
    return entry


def _wait_for_log(server, count: int, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while len(server.entries) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(server.entries) >= count, server.entries
    return server.entries[count - 1]


@pytest.fixture(scope="module")
def greedy_text(server) -> str:
    """The greedy reply to GREEDY, made once for the module."""
    import openai as client_library

    client = client_library.OpenAI(base_url=f"{server.address}/v1", api_key="none",
                                   max_retries=0, timeout=600)
    return client.chat.completions.create(**GREEDY).choices[0].message.content


def _stream_chunks(client, **request):
    return list(client.chat.completions.create(stream=True, **request))


def test_models_lists_the_library_with_its_context_per_slot(client, server):
    models = client.models.list().data
    assert [m.id for m in models] == [MODEL_ID]
    model = models[0].model_dump()
    assert model["context_per_slot"] == 1024 and model["owned_by"] == "quantdesk"
    assert client.models.retrieve(MODEL_ID).id == MODEL_ID
    client.chat.completions.create(**dict(GREEDY, max_tokens=1))  # loads it
    status = server.models_status()
    assert [(s.id, s.loaded, s.context_per_slot, s.active_requests) for s in status] == \
        [(MODEL_ID, True, 1024, 0)]
    assert status[0].slots >= 1 and client.models.list().data[0].model_dump()["loaded"]


def test_chat_reply_equals_the_engine_client_reply_token_for_token(client, server, greedy_text):
    from models.engine import ChatOptions

    reply = client.chat.completions.create(**GREEDY)
    choice = reply.choices[0]
    assert reply.id.startswith("chatcmpl-") and reply.model == MODEL_ID
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    usage = reply.usage
    assert usage.prompt_tokens > 0 and 0 < usage.completion_tokens <= 12
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details.cached_tokens >= 0
    direct = _engine(server).client.chat(ASK, ChatOptions(temperature=0, max_tokens=12)).wait()
    assert choice.message.content == direct.text == greedy_text
    assert usage.completion_tokens == direct.stats.completion_tokens
    assert usage.prompt_tokens == direct.stats.prompt_tokens
    # The same conversation again reuses the prompt's KV cache, and says so.
    assert usage.prompt_tokens_details.cached_tokens > 0  # greedy_text asked it first
    entry = next(e for e in reversed(server.entries) if e.path == "/v1/chat/completions")
    assert entry.status == 200 and entry.model == MODEL_ID and entry.completion_tokens > 0


def test_a_stream_has_one_id_the_role_first_a_finish_reason_and_a_usage_chunk(client,
                                                                               greedy_text):
    whole = greedy_text
    chunks = _stream_chunks(client, stream_options={"include_usage": True}, **GREEDY)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert chunks[-2].choices[0].finish_reason in ("stop", "length")
    assert all(c.choices[0].finish_reason is None for c in chunks[:-2])
    text = "".join(c.choices[0].delta.content or "" for c in chunks[:-1])
    assert text == whole
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens > 0


def test_the_raw_stream_is_server_sent_events_ending_with_done(server):
    with httpx.stream("POST", f"{server.address}/v1/chat/completions", timeout=60,
                      json=dict(GREEDY, stream=True, max_tokens=4)) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    assert all(json.loads(e[6:])["object"] == "chat.completion.chunk" for e in events[:-1])


def test_stop_strings_and_max_tokens_set_the_finish_reason(client, greedy_text):
    whole = greedy_text
    words = whole.split()
    assert len(words) >= 3, whole
    stop = words[2]
    stopped = client.chat.completions.create(stop=[stop], **GREEDY).choices[0]
    assert stopped.finish_reason == "stop"
    assert stopped.message.content == whole[:whole.index(stop)]
    short = client.chat.completions.create(**dict(GREEDY, max_tokens=3))
    assert short.choices[0].finish_reason == "length" and short.usage.completion_tokens == 3


def test_json_schema_replies_parse_and_validate(client):
    import jsonschema

    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    reply = client.chat.completions.create(
        model=MODEL_ID, temperature=0, max_tokens=40,
        messages=[{"role": "user", "content": "Describe a person named Anna who is 34."}],
        response_format={"type": "json_schema",
                         "json_schema": {"name": "person", "schema": schema, "strict": True}})
    assert reply.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(reply.choices[0].message.content), schema)
    any_json = client.chat.completions.create(model=MODEL_ID, temperature=0, max_tokens=16,
                                              messages=ASK,
                                              response_format={"type": "json_object"})
    json.loads(any_json.choices[0].message.content)


def test_an_unenforceable_strict_schema_is_a_400_naming_the_keyword_and_where(client, server):
    started = len(server.entries)
    schema = {"type": "object", "properties": {"n": {"type": "integer", "not": {"const": 5}}}}
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(
                model=MODEL_ID, messages=ASK, stream=stream,
                response_format={"type": "json_schema",
                                 "json_schema": {"name": "n", "schema": schema, "strict": True}})
        assert "'not'" in caught.value.message
        assert "/properties/n/not" in caught.value.message
    entries = server.entries[started:]
    assert [e.status for e in entries] == [400, 400]
    assert all(e.completion_tokens == 0 for e in entries)  # refused before any token


def test_without_strict_the_reply_says_what_was_not_enforced_and_whether_it_held(client):
    schema = {"type": "object", "properties": {"n": {"type": "integer", "not": {"const": 5},
                                                     "multipleOf": 5, "title": "N"}},
              "required": ["n"], "additionalProperties": False}
    reply = client.chat.completions.create(
        model=MODEL_ID, temperature=0, max_tokens=20, messages=ASK,
        response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}})
    report = reply.to_dict()["structured_output"]
    assert report["enforced"] is False
    assert [p["pointer"] for p in report["not_enforced"]] == ["/properties/n/not"]
    value = json.loads(reply.choices[0].message.content)
    assert value["n"] % 5 == 0  # multipleOf is enforced by the grammar
    assert report["valid"] == (value["n"] != 5)
    enforced = client.chat.completions.create(
        model=MODEL_ID, temperature=0, max_tokens=20, messages=ASK,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "n", "schema": {"type": "integer",
                                                                 "multipleOf": 5},
                                         "strict": True}})
    assert "structured_output" not in enforced.to_dict()
    assert int(enforced.choices[0].message.content) % 5 == 0


def test_four_concurrent_streams_are_all_answered_correctly(client, greedy_text):
    whole = greedy_text
    results: list = [None] * 4

    def run(index: int) -> None:
        try:
            results[index] = _stream_chunks(client, stream_options={"include_usage": True},
                                            **GREEDY)
        except Exception as exc:  # reported below, on the test's thread
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)  # a generous bound: a loaded 2-core machine
    ids = set()
    for chunks in results:
        assert isinstance(chunks, list), chunks
        assert len({c.id for c in chunks}) == 1
        ids.add(chunks[0].id)
        assert chunks[0].choices[0].delta.role == "assistant"
        assert chunks[-1].usage.completion_tokens > 0
        # Greedy, the four decoded in one batch: they start as the reply alone (llama.cpp's
        # batched kernels round a little differently, so a near-tie later on may go
        # another way; tests/models/test_engine_batching.py compares the probabilities and
        # the server benchmark counts how often whole replies differ).
        text = "".join(c.choices[0].delta.content or "" for c in chunks[:-1])
        first = next(c.choices[0].delta.content for c in chunks if c.choices[0].delta.content)
        assert text.startswith(first) and whole.startswith(first)
    assert len(ids) == 4


def test_a_client_that_disconnects_frees_its_slot(client, server):
    started = len(server.entries)
    stream = client.chat.completions.create(model=MODEL_ID, messages=ASK, stream=True,
                                            max_tokens=1000, extra_body={"ignore_eos": True})
    for _, _chunk in zip(range(3), stream):
        pass
    stream.close()
    entry = _wait_for_log(server, started + 1)
    assert entry.status == 499 and entry.completion_tokens < 1000
    deadline = time.monotonic() + 10
    while _engine(server).active and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _engine(server).active == 0
    after = client.chat.completions.create(**dict(GREEDY, max_tokens=2))
    assert after.usage.completion_tokens == 2


def test_a_client_that_gives_up_on_a_whole_reply_stops_it(server):
    started = len(server.entries)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.address}/v1/chat/completions", timeout=httpx.Timeout(30, read=2),
                   json=dict(GREEDY, max_tokens=1000, ignore_eos=True))
    entry = _wait_for_log(server, started + 1)
    assert entry.status == 499 and entry.completion_tokens < 1000


def test_stopping_the_server_ends_a_stream_with_an_error(pool, library):
    from models.server.config import ServerConfig
    from models.server.controller import ServerController

    second = ServerController(ServerConfig(port=0), engines=pool, library=library)
    second.start()
    try:
        stream = openai.OpenAI(base_url=f"{second.address}/v1", api_key="none").chat \
            .completions.create(model=MODEL_ID, messages=ASK, stream=True, max_tokens=1000,
                                extra_body={"ignore_eos": True})
        with pytest.raises(openai.APIError, match="stopping"):
            for index, _chunk in enumerate(stream):
                if index == 2:
                    threading.Thread(target=second.stop).start()
    finally:
        second.stop()
    assert not second.running


def test_an_engine_killed_mid_stream_is_an_error_and_the_next_request_is_answered(client,
                                                                                  server):
    engine = _engine(server).client
    pid = engine.pid
    stream = client.chat.completions.create(model=MODEL_ID, messages=ASK, stream=True,
                                            max_tokens=500, extra_body={"ignore_eos": True})
    with pytest.raises(openai.APIError) as caught:
        for index, _chunk in enumerate(stream):
            if index == 2:
                os.kill(pid, signal.SIGKILL)
    assert "engine" in str(caught.value.message).lower()
    reply = client.chat.completions.create(**dict(GREEDY, max_tokens=2))
    assert reply.usage.completion_tokens == 2 and engine.pid not in (None, pid)


def test_a_prompt_longer_than_the_slot_is_a_400_naming_both_numbers(client):
    long = [{"role": "user", "content": "word " * 1500}]
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL_ID, messages=long, max_tokens=4)
    assert "1024" in caught.value.message


def test_an_unknown_model_is_a_404_saying_how_to_list_them(client):
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="no-such-model", messages=ASK)
    assert "/v1/models" in caught.value.message


@pytest.mark.parametrize("body, says", [
    (b'{"model": "x", "messages": [', "not valid JSON"),
    (b'{"model": "x", "messages": "\xff"}', "UTF-8"),
    (b'["not", "an", "object"]', "JSON object"),
    (json.dumps(dict(GREEDY, temperature="hot")).encode(), "temperature"),
    (json.dumps(dict(GREEDY, max_tokens=10**30)).encode(), "max_tokens"),
    (json.dumps(dict(GREEDY, n=2)).encode(), "one choice"),
    (json.dumps(dict(GREEDY, messages=[{"role": "robot", "content": "hi"}])).encode(), "role"),
    (json.dumps(dict(GREEDY, response_format={"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": 5}}})).encode(), "schema"),
    (b'{"model": "SmolLM2-135M-Instruct.Q4_1", "messages": [], "max_tokens": 1e400}', "messages"),
])
def test_malformed_bodies_are_400_with_a_sentence(server, body, says):
    response = httpx.post(f"{server.address}/v1/chat/completions", content=body, timeout=30,
                          headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert says in error["message"] and error["type"] == "invalid_request_error"
    assert "Traceback" not in response.text
    assert httpx.get(f"{server.address}/health").json() == {"status": "ok"}


def test_an_unknown_endpoint_or_method_is_an_openai_error(server):
    missing = httpx.post(f"{server.address}/v1/audio/speech", json={"input": "x"})
    assert missing.status_code == 404 and "/v1/chat/completions" in missing.json()["error"]["message"]
    assert "POST /v1/responses, POST /v1/embeddings" in missing.json()["error"]["message"]
    wrong = httpx.get(f"{server.address}/v1/chat/completions")
    assert wrong.status_code == 405 and "GET" in wrong.json()["error"]["message"]


def test_a_body_past_the_limit_is_413(server):
    response = httpx.post(f"{server.address}/v1/chat/completions", timeout=30,
                          content=b"{" + b" " * (9 << 20) + b"}")
    assert response.status_code == 413 and "bytes" in response.json()["error"]["message"]


def test_a_foreign_host_is_refused(server):
    url = f"{server.address}/v1/models"
    assert httpx.get(url, headers={"Host": "localhost"}).status_code == 200
    refused = httpx.get(url, headers={"Host": "attacker.example:8080"})
    assert refused.status_code == 403 and "DNS rebinding" in refused.json()["error"]["message"]


def test_no_key_on_a_network_address_is_refused(pool, library):
    from models.foundation.errors import QuantDeskError
    from models.server.config import ServerConfig
    from models.server.controller import ServerController

    with pytest.raises(QuantDeskError, match="needs an API key"):
        ServerController(ServerConfig(host="0.0.0.0", port=0), engines=pool,
                         library=library).start()


def test_the_key_is_required_when_set(pool, library):
    from models.server.config import ServerConfig
    from models.server.controller import ServerController

    key = "qd-test-key-0123456789"
    guarded = ServerController(ServerConfig(port=0, api_key=key), engines=pool, library=library)
    guarded.start()
    try:
        base = f"{guarded.address}/v1"
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=base, api_key="wrong", max_retries=0).models.list()
        assert httpx.get(f"{base}/models").status_code == 401
        assert openai.OpenAI(base_url=base, api_key=key).models.list().data[0].id == MODEL_ID
        assert httpx.get(f"{base}/models", headers={"x-api-key": key}).status_code == 200
        assert httpx.get(f"{guarded.address}/health").status_code == 200
    finally:
        guarded.stop()


def test_cors_is_off_unless_origins_are_listed(server, pool, library):
    from models.server.config import ServerConfig
    from models.server.controller import ServerController

    origin = {"Origin": "http://app.example"}
    plain = httpx.get(f"{server.address}/v1/models", headers=origin)
    assert "access-control-allow-origin" not in plain.headers
    open_to = ServerController(ServerConfig(port=0, cors_origins=("http://app.example",)),
                               engines=pool, library=library)
    open_to.start()
    try:
        preflight = httpx.options(f"{open_to.address}/v1/chat/completions", headers={
            **origin, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "http://app.example"
        other = httpx.get(f"{open_to.address}/v1/models", headers={"Origin": "http://evil.example"})
        assert "access-control-allow-origin" not in other.headers
    finally:
        open_to.stop()


def test_a_full_queue_is_429_with_retry_after(server, pool, library):
    from models.server.config import ServerConfig
    from models.server.controller import ServerController

    slots = _engine(server).slots
    busy = ServerController(ServerConfig(port=0, queue_limit=0), engines=pool, library=library)
    busy.start()
    streams = []
    try:
        for _ in range(slots):  # fill every slot with a long reply
            streams.append(openai.OpenAI(base_url=f"{server.address}/v1", api_key="none")
                           .chat.completions.create(model=MODEL_ID, messages=ASK, stream=True,
                                                    max_tokens=1000,
                                                    extra_body={"ignore_eos": True}))
            next(iter(streams[-1]))
        response = httpx.post(f"{busy.address}/v1/chat/completions", json=GREEDY, timeout=30)
        assert response.status_code == 429 and response.headers["retry-after"]
        assert "busy" in response.json()["error"]["message"]
    finally:
        for stream in streams:
            stream.close()
        busy.stop()


def test_completions_take_a_raw_prompt(client):
    reply = client.completions.create(model=MODEL_ID, prompt="The capital of France is",
                                      max_tokens=4, temperature=0)
    assert reply.choices[0].text and reply.choices[0].finish_reason == "length"
    chunks = list(client.completions.create(model=MODEL_ID, prompt="The capital of France is",
                                            max_tokens=4, temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == reply.choices[0].text


def test_logprobs_come_with_each_token(client):
    reply = client.chat.completions.create(logprobs=True, top_logprobs=2, **GREEDY)
    content = reply.choices[0].logprobs.content
    assert len(content) == reply.usage.completion_tokens
    assert "".join(t.token for t in content) == reply.choices[0].message.content
    assert all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in content)


def test_usage_and_the_log_count_drafted_and_accepted_tokens(client, server):
    """Prompt lookup is on by default: a reply that copies its prompt reports its drafts as
    OpenAI's predicted-output counts and in ``usage.speculative``; llama-server's
    ``speculative.n_max`` of 0 turns it off for a request, with the same reply."""
    copy = [{"role": "user", "content": "Repeat this sentence exactly: the quick brown fox "
             "jumps over the lazy dog near the river bank every morning."}]
    request = dict(model=MODEL_ID, messages=copy, temperature=0, max_tokens=30)
    fast = client.chat.completions.create(**request)
    usage = fast.model_dump()["usage"]
    drafted, accepted = usage["speculative"]["drafted_tokens"], usage["speculative"]["accepted_tokens"]
    assert drafted > 0 and 0 < accepted <= drafted
    details = usage["completion_tokens_details"]
    assert details["accepted_prediction_tokens"] == accepted
    assert details["rejected_prediction_tokens"] == drafted - accepted
    entry = next(e for e in reversed(server.entries) if e.path == "/v1/chat/completions")
    assert (entry.drafted_tokens, entry.accepted_tokens) == (drafted, accepted)
    assert f"drafted {drafted} (accepted {accepted})" in entry.line()
    plain = client.chat.completions.create(**request, extra_body={"speculative.n_max": 0})
    assert plain.model_dump()["usage"]["speculative"] == {"drafted_tokens": 0, "accepted_tokens": 0}
    assert plain.choices[0].message.content == fast.choices[0].message.content
