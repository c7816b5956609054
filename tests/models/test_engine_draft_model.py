"""Speculative decoding with a draft model, in the engine, with real SmolLM2 weights.

The chat model is SmolLM2-135M-Instruct dequantized to F16 (real weights, a different
file and speed than the draft); the draft is the Q4_1 file itself: the same tokenizer, so
llama.cpp's compatibility rule holds. Oracle: the engine's own plain decoding of the F16
model. A draft token is kept only when the model's own pick equals it, so the reply must
be the same token for token (flash attention on, for batch-independent rounding, as in
test_engine_speculative.py), and the KV cache must end as plain decoding leaves it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from models.engine import ChatOptions, EngineClient, LoadSettings
from models.foundation.errors import QuantDeskError
from tests.conftest import REPO_ROOT
from tests.models.conftest import FAST_SETTINGS
from tests.quantize.model_files import TinyLlama, write_dequantized_f16, write_tiny_llama

pytestmark = pytest.mark.smollm2

STORY = [{"role": "user", "content": "Write a short story about a fox and a miller."}]
GREEDY = ChatOptions(temperature=0.0, max_tokens=60, speculative="off")
DRAFTED = ChatOptions(temperature=0.0, max_tokens=60, speculative="draft_model")


@pytest.fixture(scope="module")
def smollm2_f16(smollm2_gguf, tmp_path_factory):
    return write_dequantized_f16(smollm2_gguf, tmp_path_factory.mktemp("draft") / "smollm2-f16.gguf")


@pytest.fixture(scope="module")
def drafted_engine(smollm2_f16, smollm2_gguf):
    client = EngineClient()
    client.load(smollm2_f16, LoadSettings(**FAST_SETTINGS, flash_attention=True,
                                          draft_model=str(smollm2_gguf)))
    yield client
    client.shutdown()


def test_greedy_reply_is_unchanged_and_guesses_are_kept(drafted_engine, smollm2_gguf):
    assert f"It drafts with {smollm2_gguf.name}." in drafted_engine.last_load.summary()
    assert f"draft model {smollm2_gguf.name}" in drafted_engine.last_load.details()
    plain = drafted_engine.chat(STORY, GREEDY).wait()
    assert plain.stats.draft_tokens == 0 and plain.stats.draft_seconds == 0
    fast = drafted_engine.chat(STORY, DRAFTED).wait()
    assert fast.text == plain.text and fast.stop_reason == plain.stop_reason
    s = fast.stats
    assert s.completion_tokens == plain.stats.completion_tokens
    # A Q4_1 copy guesses its F16 original well: most guesses are kept.
    assert s.draft_tokens > 0 and s.accepted_tokens > 0.5 * s.draft_tokens
    assert s.acceptance_rate == pytest.approx(s.accepted_tokens / s.draft_tokens)
    assert 0 < s.draft_seconds < s.decode_seconds + s.prefill_seconds
    assert s.tokens_per_pass > 1.5 * plain.stats.tokens_per_pass
    kv = drafted_engine.stats()["kv_cache_tokens"]
    assert kv == s.prompt_tokens + s.completion_tokens - (1 if s.stop_reason == "length" else 0)


def test_sampled_reply_with_a_seed_is_unchanged(drafted_engine):
    sampled = dict(temperature=0.8, seed=11, max_tokens=40)
    plain = drafted_engine.chat(STORY, ChatOptions(**sampled, speculative="off")).wait()
    fast = drafted_engine.chat(STORY, ChatOptions(**sampled, speculative="draft_model")).wait()
    assert fast.text == plain.text
    assert fast.stats.draft_tokens > 0


def test_follow_up_turn_after_a_drafted_turn_equals_a_fresh_one(drafted_engine):
    first = drafted_engine.chat(STORY, DRAFTED).wait()
    history = STORY + [{"role": "assistant", "content": first.text},
                       {"role": "user", "content": "Give the story a title."}]
    live = drafted_engine.chat(history, DRAFTED).wait()
    assert live.stats.prompt_tokens_reused >= first.stats.prompt_tokens
    drafted_engine.chat([{"role": "user", "content": "Say hi."}], GREEDY).wait()  # evict
    assert live.text == drafted_engine.chat(history, GREEDY).wait().text


def test_a_draft_with_another_vocabulary_is_refused_at_load(smollm2_gguf, tmp_path):
    other = write_tiny_llama(tmp_path / "tiny.gguf", TinyLlama())
    with EngineClient() as client:
        with pytest.raises(QuantDeskError, match="cannot guess tokens for this model") as caught:
            client.load(smollm2_gguf, LoadSettings(**FAST_SETTINGS, draft_model=str(other)))
        assert "tokens" in caught.value.what and caught.value.fix
        # The engine is still usable: the same model loads without the draft.
        client.load(smollm2_gguf, LoadSettings(**FAST_SETTINGS))
        with pytest.raises(QuantDeskError, match="needs a draft model"):
            client.chat(STORY, DRAFTED)
        assert client.chat(STORY, ChatOptions(temperature=0.0, max_tokens=4)).wait().text


def test_a_missing_draft_file_is_refused_before_loading(smollm2_gguf, tmp_path):
    with EngineClient() as client:
        with pytest.raises(QuantDeskError, match="is not a file"):
            client.load(smollm2_gguf, LoadSettings(draft_model=str(tmp_path / "nope.gguf")))
        assert client.pid is None  # no engine was started for it
        (tmp_path / "bad.gguf").write_bytes(b"not a gguf at all")
        with pytest.raises(QuantDeskError):
            client.load(smollm2_gguf, LoadSettings(draft_model=str(tmp_path / "bad.gguf")))
        assert client.pid is None


def test_cli_chat_with_a_draft_model(smollm2_f16, smollm2_gguf):
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "chat", str(smollm2_f16), "--threads", "2",
         "--ctx", "1024", "--flash-attn", "--temperature", "0", "--max-tokens", "30",
         "--draft-model", str(smollm2_gguf), "--speculative", "draft_model"],
        input=STORY[0]["content"] + "\n", capture_output=True, text=True, timeout=300,
        cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "drafted tokens accepted" in result.stderr
    assert f"It drafts with {smollm2_gguf.name}." in result.stderr
