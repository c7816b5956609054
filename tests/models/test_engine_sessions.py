"""Saved KV-cache sessions with the real SmolLM2: restore, fallbacks, disk cap, delete.

"Reopening" a conversation is a new :class:`EngineClient` (a new engine process) chatting
with the same ``conversation_id``. Oracle for every reply: llama-cpp-python's own greedy
``create_chat_completion`` on the same history in a separate process — a fresh prefill.
"""

from __future__ import annotations

import shutil

import llama_cpp
import pytest

from models.engine import ChatOptions, EngineClient, LoadSettings
from models.engine.sessions import SessionStore, session_fingerprint
from tests.models.conftest import FAST_SETTINGS, raw_greedy_reply

pytestmark = pytest.mark.smollm2

OPTIONS = ChatOptions(temperature=0.0, max_tokens=16)
FIRST = [{"role": "user", "content": "Tell me one fact about the Moon."}]
HISTORY = FIRST + [{"role": "assistant", "content": "The Moon has no air."},
                   {"role": "user", "content": "And one fact about Mars?"}]


def _client(model, cap: int | None = None, **settings) -> EngineClient:
    client = EngineClient() if cap is None else EngineClient(session_cap_bytes=cap)
    client.load(model, LoadSettings(**{**FAST_SETTINGS, **settings}))
    return client


def test_restored_session_continues_exactly_like_a_fresh_prefill(smollm2_gguf):
    with _client(smollm2_gguf) as first:
        one = first.chat(FIRST, OPTIONS, conversation_id="moon").wait()
        assert not one.stats.session_restored and one.stats.session_notice == ""
    assert SessionStore.default().path_for("moon").is_file()
    history = FIRST + [{"role": "assistant", "content": one.text},
                       {"role": "user", "content": "And one fact about Mars?"}]
    with _client(smollm2_gguf) as reopened:
        two = reopened.chat(history, OPTIONS, conversation_id="moon").wait()
    s = two.stats
    assert s.session_restored and s.session_notice == ""
    # All of turn one came from disk; only the new turn was evaluated.
    assert s.prompt_tokens_reused >= one.stats.prompt_tokens + one.stats.completion_tokens - 1
    assert s.prompt_tokens_evaluated < s.prompt_tokens / 2
    # The restored state is the same KV data, but llama.cpp evaluates the new turn in one
    # batch where the fresh run reads the whole prompt in another split; on CPUs without
    # AVX-512 the two roundings can flip a greedy choice some tokens in (seen here after
    # 35 identical characters). The reply must start the same, not match to the end.
    fresh = raw_greedy_reply(smollm2_gguf, history, OPTIONS.max_tokens)["text"]
    assert two.text[:24] == fresh[:24], (two.text, fresh)


def test_unusable_states_fall_back_to_a_prefill_with_a_notice(smollm2_gguf, tmp_path):
    other_model = tmp_path / "other-model.gguf"
    shutil.copy(smollm2_gguf, other_model)  # same weights, another file: another model
    with _client(smollm2_gguf, flash_attention=True, kv_cache_type_k="q8_0",
                 kv_cache_type_v="q8_0") as saver:
        saver.chat(FIRST, OPTIONS, conversation_id="kv").wait()
        saver.load(other_model, LoadSettings(**FAST_SETTINGS))
        saver.chat(FIRST, OPTIONS, conversation_id="model").wait()
        saver.load(smollm2_gguf, LoadSettings(**FAST_SETTINGS))
        saver.chat(FIRST, OPTIONS, conversation_id="cut").wait()
    store = SessionStore.default()
    cut = store.path_for("cut")
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    current = session_fingerprint(str(smollm2_gguf), LoadSettings(**FAST_SETTINGS),
                                  llama_cpp.__version__)
    expected = raw_greedy_reply(smollm2_gguf, HISTORY, OPTIONS.max_tokens)["text"]
    notices = {"kv": "another K cache type (q8_0, now f16)",
               "model": "another model file (other-model.gguf)", "cut": "damaged"}
    for conversation, notice in notices.items():
        with _client(smollm2_gguf) as reopened:  # an empty cache: nothing else to reuse
            reply = reopened.chat(HISTORY, OPTIONS, conversation_id=conversation).wait()
        assert not reply.stats.session_restored, conversation
        assert notice in reply.stats.session_notice, reply.stats.session_notice
        assert reply.stats.prompt_tokens_reused == 0
        assert reply.text == expected, conversation
        # The fallback's own state replaced the unusable one: it matches these settings.
        assert store.open(conversation, current) is not None


def test_disk_cap_evicts_the_least_recently_used_and_delete_removes_a_state(smollm2_gguf):
    store = SessionStore.default()
    with _client(smollm2_gguf) as client:
        client.chat(FIRST, OPTIONS, conversation_id="a").wait()
        client.stats()  # waits for the save that follows the reply
        size = store.path_for("a").stat().st_size
        client.session_cap_bytes = int(2.5 * size)  # room for two states of this size
        client.chat(FIRST, OPTIONS, conversation_id="b").wait()
        client.chat(FIRST, OPTIONS, conversation_id="a").wait()  # "a" is used again
        client.chat(FIRST, OPTIONS, conversation_id="c").wait()
        client.stats()
        assert {p.stem for p in store.files()} == {"a", "c"}  # "b" was least recently used
        assert store.total_bytes() <= client.session_cap_bytes
        assert client.delete_session("a") is True and client.delete_session("a") is False
        assert not store.path_for("a").exists()
    # With no engine running, the client deletes the file itself.
    assert EngineClient().delete_session("c") is True and store.files() == []
    with _client(smollm2_gguf) as reopened:
        reply = reopened.chat(HISTORY, OPTIONS, conversation_id="a").wait()
    assert not reply.stats.session_restored
    assert "no saved state" in reply.stats.session_notice
