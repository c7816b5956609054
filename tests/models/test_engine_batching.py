"""Continuous batching in the engine with the real SmolLM2: several replies at once from one
engine process, each cancellable alone, prompts reused across clients.

The oracle for a reply is the same request alone (nothing else in the batch). Alone, the
reply is the same token for token whatever the number of slots. Batched with others,
llama.cpp multiplies several rows at once and rounds a little differently, so a greedy
reply can take another path at a near-tie after a few tokens: the tests compare the
log-probabilities of the first token (equal to a few thousandths when the batch rows are
right; a mixed-up row would be off by whole units), and
``tests/benchmarks/bench_server.py`` counts how often whole replies differ.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest

from models.engine import ChatOptions, EngineClient, EngineCrashed, LoadSettings
from models.foundation.errors import QuantDeskError
from tests.models.conftest import FAST_SETTINGS, smollm2_engine  # noqa: F401 (a fixture)

pytestmark = pytest.mark.smollm2

GREEDY = ChatOptions(temperature=0.0, max_tokens=24, logprobs=0)
QUESTIONS = ["Name a fruit that is red.", "What colour is the sky on a clear day?",
             "Say hello in French.", "What is two plus two?"]


@pytest.fixture(scope="module")
def batched_engine(smollm2_gguf):
    client = EngineClient()
    client.load(smollm2_gguf, LoadSettings(**{**FAST_SETTINGS, "parallel": 4}))
    yield client
    client.shutdown()


def _ask(question: str) -> list[dict]:
    return [{"role": "user", "content": question}]


def _run_together(client: EngineClient, requests: list) -> list:
    """Stream every (messages, options) at once, one thread each; the replies, in order."""
    replies = [client.chat(m, o) for m, o in requests]
    errors: list = []
    start = threading.Barrier(len(replies))

    def consume(reply):
        try:
            start.wait()
            reply.wait()
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=consume, args=(r,)) for r in replies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    return replies


def test_load_report_states_slots_and_context_per_slot(batched_engine):
    report = batched_engine.last_load
    assert report.parallel == 4
    assert report.context_length == FAST_SETTINGS["context_length"]  # each slot's, not divided
    stats = batched_engine.stats()
    assert stats["parallel"] == 4 and stats["context_length"] == FAST_SETTINGS["context_length"]


def _same_start(batched, single) -> None:
    """Batched and alone, a reply starts with the same token at the same probability."""
    assert batched.stats.stop_reason in ("stop", "length")
    first, expected = batched.logprobs[0], single.logprobs[0]
    assert first["token"] == expected["token"]
    assert abs(first["logprob"] - expected["logprob"]) < 0.02


def test_one_reply_is_the_same_with_four_slots_as_with_one(batched_engine, smollm2_engine):
    for question in QUESTIONS[:2]:
        four = batched_engine.chat(_ask(question), GREEDY).wait()
        one = smollm2_engine.chat(_ask(question), GREEDY).wait()
        assert four.text == one.text
        assert [e["token"] for e in four.logprobs] == [e["token"] for e in one.logprobs]


def test_four_replies_at_once_start_as_each_alone(batched_engine):
    alone = [batched_engine.chat(_ask(q), GREEDY).wait() for q in QUESTIONS]
    together = _run_together(batched_engine, [(_ask(q), GREEDY) for q in QUESTIONS])
    for single, batched in zip(alone, together):
        _same_start(batched, single)
        assert batched.stats.completion_tokens > 0


def test_more_requests_than_slots_wait_and_all_finish(batched_engine):
    requests = [(_ask(f"Count from 1 to {n}."), ChatOptions(temperature=0.0, max_tokens=12))
                for n in range(3, 9)]
    replies = _run_together(batched_engine, requests)
    assert all(r.stats.completion_tokens > 0 for r in replies)
    assert all(r.stats.stop_reason in ("stop", "length") for r in replies)


def test_cancelling_one_reply_leaves_the_others_untouched(batched_engine):
    long = ChatOptions(temperature=0.0, max_tokens=200, ignore_eos=True)
    keep_alone = batched_engine.chat(_ask(QUESTIONS[0]), GREEDY).wait()
    doomed = batched_engine.chat(_ask("Write a long story about a cat."), long)
    kept = batched_engine.chat(_ask(QUESTIONS[0]), GREEDY)
    seen = threading.Event()
    results: dict = {}

    def run_doomed():
        for _ in doomed:
            seen.set()
        results["doomed"] = doomed

    thread = threading.Thread(target=run_doomed)
    thread.start()
    assert seen.wait(120)
    other = threading.Thread(target=lambda: results.setdefault("kept", kept.wait()))
    other.start()
    doomed.cancel()
    thread.join(120)
    other.join(120)
    assert doomed.stop_reason == "cancelled"
    assert doomed.stats.completion_tokens < 200
    _same_start(kept, keep_alone)
    assert kept.stats.completion_tokens > 0


def test_leaving_the_loop_early_frees_the_slot(batched_engine):
    options = ChatOptions(temperature=0.0, max_tokens=300, ignore_eos=True)
    replies = [batched_engine.chat(_ask(f"Tell me about the number {n}."), options)
               for n in range(4)]
    for reply in replies:  # each of the four slots: start, read one delta, walk away
        next(iter(reply))
    for reply in replies:
        reply.close()
    # All four slots are free again: four new replies run (no wait forever).
    together = _run_together(batched_engine, [(_ask(q), GREEDY) for q in QUESTIONS])
    assert all(r.stats.completion_tokens > 0 for r in together)


def test_prompt_cache_serves_clients_taking_turns(smollm2_gguf):
    """Three conversations on ONE slot: each comes back to find its prefix in the cache."""
    client = EngineClient()
    try:
        client.load(smollm2_gguf, LoadSettings(**FAST_SETTINGS))
        conversations = [[{"role": "system", "content": f"You are assistant number {n}. " * 12},
                          {"role": "user", "content": "Say a word."}] for n in range(3)]
        first = [client.chat(c, GREEDY).wait() for c in conversations]
        assert all(r.stats.prompt_tokens_reused < 16 for r in first)  # template start only
        for conversation, reply in zip(conversations, first):
            again = conversation + [{"role": "assistant", "content": reply.text},
                                    {"role": "user", "content": "Another one."}]
            second = client.chat(again, GREEDY).wait()
            # The slot held another conversation; the prefix came back from the cache.
            assert second.stats.prompt_tokens_reused >= reply.stats.prompt_tokens - 1
        assert client.stats()["prompt_cache_hits"] >= 2
    finally:
        client.shutdown()


def test_raw_prompt_and_logprobs(batched_engine):
    options = ChatOptions(temperature=0.0, max_tokens=6, logprobs=3)
    reply = batched_engine.chat(None, options, prompt="The capital of France is").wait()
    assert reply.text and reply.stats.completion_tokens == len(reply.logprobs)
    for entry in reply.logprobs:
        assert entry["logprob"] <= 0.0
        top = entry["top_logprobs"]
        assert len(top) == 3
        assert [t["logprob"] for t in top] == sorted((t["logprob"] for t in top), reverse=True)
        # Greedy: the picked token is the likeliest.
        assert top[0]["token"] == entry["token"]
        assert abs(top[0]["logprob"] - entry["logprob"]) < 1e-6
    assert "".join(e["token"] for e in reply.logprobs) == reply.text
    assert batched_engine.count_tokens(prompt="The capital of France is") == \
        reply.stats.prompt_tokens


def test_prompt_longer_than_a_slot_is_refused_with_both_numbers(batched_engine):
    reply = batched_engine.chat(None, GREEDY, prompt="word " * 1500)
    with pytest.raises(QuantDeskError) as info:
        reply.wait()
    assert "1024-token context" in info.value.what
    assert str(batched_engine.count_tokens(prompt="word " * 1500)) in info.value.what


def test_engine_killed_mid_batch_fails_every_reply_then_recovers(smollm2_gguf):
    client = EngineClient()
    try:
        client.load(smollm2_gguf, LoadSettings(**{**FAST_SETTINGS, "parallel": 2}))
        options = ChatOptions(temperature=0.0, max_tokens=400, ignore_eos=True)
        replies = [client.chat(_ask(q), options) for q in QUESTIONS[:2]]
        errors: list = []
        started = threading.Barrier(3)

        def consume(reply):
            iterator = iter(reply)
            try:
                next(iterator)
                started.wait()
                for _ in iterator:
                    pass
            except EngineCrashed as exc:
                errors.append(exc)

        threads = [threading.Thread(target=consume, args=(r,)) for r in replies]
        for t in threads:
            t.start()
        started.wait(120)
        os.kill(client.pid, signal.SIGKILL)
        for t in threads:
            t.join(120)
        assert len(errors) == 2
        assert all(e.partial_text for e in errors)  # what was streamed is kept
        after = client.chat(_ask(QUESTIONS[3]), GREEDY).wait()  # a new engine, reloaded
        assert after.stats.completion_tokens > 0 and after.stop_reason in ("stop", "length")
        assert client.processes_started == 2
    finally:
        client.shutdown()


def test_structured_replies_are_decoded_in_the_batch_beside_plain_ones(batched_engine):
    """A JSON Schema reply joins the running batch instead of waiting for the engine to
    itself: it is finished, valid, while a long plain reply is still being written (had it
    waited, the plain reply would have run to its 400 tokens first). Its forced runs enter
    the batch as several tokens of its sequence."""
    import json

    from models.structured.validate import validation_errors

    schema = {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 20},
        "colour": {"enum": ["red", "green", "blue"]},
        "count": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["name", "colour", "count"], "additionalProperties": False}
    long = ChatOptions(temperature=0.0, max_tokens=400, ignore_eos=True)
    structured = ChatOptions(temperature=0.0, max_tokens=60, response_format="json_schema",
                             schema=schema)
    alone = batched_engine.chat(_ask("Describe a red ball as JSON."), structured).wait()
    writer = batched_engine.chat(_ask("Write a long story about a cat."), long)
    stream = iter(writer)
    next(stream)  # the plain reply is generating
    together = batched_engine.chat(_ask("Describe a red ball as JSON."), structured).wait()
    writer.cancel()
    for _ in stream:
        pass
    assert writer.stats.completion_tokens < 400 and writer.stop_reason == "cancelled"
    for reply in (alone, together):
        assert reply.stats.valid is True, reply.stats.validation_error
        assert validation_errors(json.loads(reply.text), schema) == []
        assert reply.stats.forced_tokens > 0 and reply.stop_reason == "stop"


def test_the_deltas_of_one_step_travel_in_one_message(smollm2_gguf):
    """The engine's scheduler, in this process, with the events it sends kept: replies
    decoded in one batch send a step's text in one ``deltas`` message, each reply once in
    it; a reply alone sends plain ``delta`` events. Every token the scheduler counted for
    a reply comes in that reply's events (their log-probabilities name them), the text
    they carry is those tokens' text, and each reply starts as it does alone."""
    import multiprocessing

    from models.engine.batching import BatchScheduler
    from models.engine.cancel_flag import CancelFlag
    from models.engine.llama_log import LlamaLogCapture
    from models.engine.runtime import LoadedModel

    settings = LoadSettings(**{**FAST_SETTINGS, "parallel": 2})
    log_capture = LlamaLogCapture()
    model = LoadedModel(str(smollm2_gguf), settings, log_capture)
    sent: list[dict] = []
    scheduler = BatchScheduler(model, CancelFlag(multiprocessing.get_context("spawn")).shared,
                               sent.append, cache_ram_bytes=0)

    def run(questions: list[str]) -> dict:
        """The replies to ``questions`` made together: per request id, its events."""
        first = len(sent)
        for k, question in enumerate(questions):
            scheduler.submit({"id": k, "lane": k, "messages": _ask(question),
                              "options": GREEDY.to_dict()})
        while scheduler.busy():
            scheduler.step()
            scheduler.run_after_reply()
        events: dict = {k: [] for k in range(len(questions))}
        for message in sent[first:]:
            if message["event"] == "deltas":
                ids = [event["id"] for event in message["events"]]
                assert len(ids) > 1 and len(set(ids)) == len(ids)
            for event in message.get("events", [message]):
                events[event["id"]].append(event)
        return events

    def tokens(events: list[dict]) -> list[str]:
        """A reply's tokens, checked: every token the scheduler counted came in an event,
        in order, and the text of its deltas and its end is theirs."""
        assert [e["event"] for e in events].count("done") == 1 and events[-1]["event"] == "done"
        entries = [entry for e in events for entry in e.get("logprobs", [])]
        assert len(entries) == events[-1]["stats"]["completion_tokens"] > 2
        text = "".join(e.get("text", "") for e in events)
        assert text == b"".join(bytes(entry["bytes"]) for entry in entries).decode("utf-8")
        return [entry["token"] for entry in entries]

    try:
        alone = [run([question])[0] for question in QUESTIONS[:2]]
        assert not any(m["event"] == "deltas" for m in sent)
        together = run(QUESTIONS[:2])
        assert any(m["event"] == "deltas" for m in sent)
        for single, batched in zip(alone, together.values()):
            assert tokens(batched)[0] == tokens(single)[0]
            assert abs(batched[0]["logprobs"][0]["logprob"]
                       - single[0]["logprobs"][0]["logprob"]) < 0.02
    finally:
        scheduler.close()
        model.close()
        log_capture.close()
