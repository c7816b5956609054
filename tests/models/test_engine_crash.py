"""Crash isolation: the engine process dies, the client and the conversation survive.

Nothing is mocked: the real engine process is killed with real signals while it
generates, and the AMX fallback is driven by making the real self-test abort (the test
hook ``QUANTDESK_ENGINE_TEST_CRASH``, honoured only by the engine's self-test).
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from models.engine import ChatOptions, EngineClient, EngineCrashed, LoadSettings
from models.engine import fallback
from models.engine.runtime import TEST_CRASH_ENV
from models.foundation.errors import QuantDeskError

pytestmark = pytest.mark.smollm2

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
SETTINGS = LoadSettings(threads=2, batch_threads=2, context_length=512)
# Killed, segfaulted, aborted (GGML_ASSERT), terminated: every way an engine can die.
SIGNALS = [signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT, signal.SIGTERM]


@pytest.mark.slow
def test_killing_the_engine_mid_reply_ten_times(smollm2_gguf):
    with EngineClient() as client:
        client.load(smollm2_gguf, SETTINGS)
        long_reply = ChatOptions(temperature=0.8, max_tokens=400, ignore_eos=True)
        for attempt in range(10):
            pid = client.pid
            reply = client.chat(QUESTION, long_reply)
            streamed = []
            with pytest.raises(EngineCrashed) as info:
                for delta in reply:
                    streamed.append(delta)
                    if len(streamed) == 3:
                        os.kill(pid, SIGNALS[attempt % len(SIGNALS)])
            crash = info.value
            assert crash.phase == "chat"
            assert crash.partial_text == "".join(streamed) == reply.text  # nothing is lost
            assert SIGNALS[attempt % len(SIGNALS)].name in crash.user_message
            assert "conversation is kept" in crash.user_message
            assert client.pid is None
            # The next request starts a new engine, reloads the model and answers.
            answer = client.chat(QUESTION, ChatOptions(temperature=0.0, max_tokens=12)).wait()
            assert "Paris" in answer.text
            assert client.pid not in (None, pid)
        assert client.processes_started == 11


def test_self_test_crash_falls_back_to_safe_kernels_and_remembers(smollm2_gguf, monkeypatch):
    monkeypatch.setenv(TEST_CRASH_ENV, "selftest-extra-bufts")
    record = fallback.fallback_file()
    assert not record.exists()
    with EngineClient() as client:
        report = client.load(smollm2_gguf, SETTINGS)
        assert client.processes_started == 2  # the first engine aborted in its self-test
        assert report.safe_kernels_fallback and report.use_extra_bufts is False
        assert "Paris" in client.chat(QUESTION, ChatOptions(temperature=0.0,
                                                           max_tokens=12)).wait().text
    saved = json.loads(record.read_text())
    assert saved[fallback.machine_key()]["use_extra_bufts"] is False
    assert "SIGABRT" in saved[fallback.machine_key()]["reason"]
    # A later launch goes straight to the setting that works: one engine, no crash.
    with EngineClient() as client:
        report = client.load(smollm2_gguf, SETTINGS)
        assert client.processes_started == 1
        assert report.use_extra_bufts is False and not report.safe_kernels_fallback


def test_without_the_record_the_fast_kernels_are_used(smollm2_gguf):
    with EngineClient() as client:
        report = client.load(smollm2_gguf, SETTINGS)
        assert report.use_extra_bufts is True and client.processes_started == 1
    assert not fallback.fallback_file().exists()


def write_model_without_vocabulary(path):
    """A GGUF whose header is fine but which llama.cpp refuses: no tokenizer, no weights."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(128)
    writer.add_embedding_length(64)
    writer.add_feed_forward_length(128)
    writer.add_head_count(4)
    writer.add_head_count_kv(4)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tensor("output_norm.weight", np.ones(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_files_llama_cpp_refuses_are_a_sentence_and_the_engine_goes_on(smollm2_gguf, tmp_path):
    broken = tmp_path / "no-vocab.gguf"
    write_model_without_vocabulary(broken)
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(smollm2_gguf.read_bytes()[: 4 << 20])
    with EngineClient() as client:
        with pytest.raises(QuantDeskError) as info:
            client.load(broken, LoadSettings(threads=2, batch_threads=2, context_length=128))
        assert not isinstance(info.value, EngineCrashed)
        # llama.cpp's own reason, from its log, in the sentence:
        assert "no-vocab.gguf" in info.value.what and "tokenizer.ggml.model" in info.value.what
        with pytest.raises(QuantDeskError, match="truncated.gguf"):
            client.load(truncated, SETTINGS)
        client.load(smollm2_gguf, SETTINGS)  # the same engine process loads a good file
        assert client.processes_started == 1
        assert "Paris" in client.chat(QUESTION, ChatOptions(temperature=0.0,
                                                           max_tokens=12)).wait().text
