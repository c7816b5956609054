"""Speculative decoding by prompt lookup in the engine, with the real SmolLM2.

Oracle: the engine's own plain decoding. With temperature 0, prompt lookup must give the
very same reply token for token (a draft token is kept only when the model's own pick
equals it), and leave the KV cache and the saved session exactly as plain decoding does,
which the follow-up turns check by comparing with replies computed from scratch.

The engine here uses flash attention: llama.cpp's plain attention rounds differently for a
batch of positions than for one (logits differ by up to ~0.8 on SmolLM2, measured with raw
llama-cpp-python), so there a greedy reply may legitimately differ at a near-tie.
"""

from __future__ import annotations

import numpy as np
import pytest

from models.engine import ChatOptions, EngineClient, LoadSettings
from models.foundation.errors import QuantDeskError
from tests.models.conftest import FAST_SETTINGS

pytestmark = pytest.mark.smollm2

PARAGRAPH = ("Teh quick brown fox jumpd over the lazy dog near the rivr bank. Every mornign "
             "the fox ran along the path to the old mill, where the miller kept his grain in "
             "large wooden barels.")
EDIT = [{"role": "user", "content": "Fix the typos in this paragraph and return it:\n\n" + PARAGRAPH}]
FOLLOW_UP = {"role": "user", "content": "Now return the same paragraph again, unchanged."}
GREEDY = ChatOptions(temperature=0.0, max_tokens=64)
LOOKUP = ChatOptions(temperature=0.0, max_tokens=64, speculative="prompt_lookup")
# A chat that shares only the template's system prefix with the others: it evicts them
# (the engine's prompt cache is off in this module, so nothing brings them back).
EVICT = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def smollm2_engine(smollm2_gguf):
    """SmolLM2 in an engine with flash attention (batch-independent rounding) and no prompt
    cache (the tests compare against replies computed from scratch)."""
    client = EngineClient(prompt_cache_bytes=0)
    client.load(smollm2_gguf, LoadSettings(**FAST_SETTINGS, flash_attention=True))
    yield client
    client.shutdown()


def _brute_force_draft(history: list[int], max_ngram: int, max_tokens: int) -> list[int]:
    for size in range(min(max_ngram, len(history) - 1), 0, -1):
        tail = history[-size:]
        for start in range(len(history) - size - 1, -1, -1):
            if history[start: start + size] == tail:
                return history[start + size: start + size + max_tokens]
    return []


def test_find_draft_matches_a_brute_force_search():
    from models.engine.prompt_lookup import find_draft

    rng = np.random.default_rng(7)
    for _ in range(200):
        history = rng.integers(0, 6, size=int(rng.integers(1, 40))).tolist()
        ngram, limit = int(rng.integers(1, 5)), int(rng.integers(0, 9))
        expected = _brute_force_draft(history, ngram, limit) if limit else []
        assert find_draft(np.array(history, dtype=np.intc), ngram, limit) == expected, history


def test_greedy_reply_is_unchanged_and_drafts_are_accepted(smollm2_engine):
    plain = smollm2_engine.chat(EDIT, GREEDY).wait()
    assert plain.stats.draft_tokens == 0 and plain.stats.acceptance_rate == 0.0
    fast = smollm2_engine.chat(EDIT, LOOKUP).wait()
    assert fast.text == plain.text
    assert fast.stats.completion_tokens == plain.stats.completion_tokens
    assert fast.stop_reason == plain.stop_reason
    s = fast.stats
    assert s.draft_tokens > 0 and 0 < s.accepted_tokens <= s.draft_tokens
    assert s.acceptance_rate == pytest.approx(s.accepted_tokens / s.draft_tokens)
    assert s.decode_tokens_per_second > 0
    # Plain decoding runs the model once per token; lookup settles several per pass.
    assert 0.9 < plain.stats.tokens_per_pass <= 1.05
    assert s.tokens_per_pass > 1.1 and s.decode_passes < plain.stats.decode_passes
    # The cache holds what plain decoding leaves: every reply token but a cut-off last one.
    kv = smollm2_engine.stats()["kv_cache_tokens"]
    assert kv == s.prompt_tokens + s.completion_tokens - (1 if s.stop_reason == "length" else 0)


def test_follow_up_reuses_the_cache_and_the_saved_session(smollm2_engine):
    first = smollm2_engine.chat(EDIT, LOOKUP, conversation_id="lookup").wait()
    history = EDIT + [{"role": "assistant", "content": first.text}, FOLLOW_UP]
    # From scratch, plain: the reference for the follow-up.
    smollm2_engine.chat(EVICT, ChatOptions(temperature=0.0, max_tokens=4)).wait()
    reference = smollm2_engine.chat(history, GREEDY).wait()
    assert reference.stats.prompt_tokens_reused < first.stats.prompt_tokens / 2

    # The saved state of the speculative turn is restored and reused.
    smollm2_engine.chat(EVICT, ChatOptions(temperature=0.0, max_tokens=4)).wait()
    restored = smollm2_engine.chat(history, LOOKUP, conversation_id="lookup").wait()
    assert restored.stats.session_restored
    assert restored.text == reference.text
    assert restored.stats.prompt_tokens_reused >= \
        first.stats.prompt_tokens + first.stats.completion_tokens - 1

    # The live cache after a speculative turn is reused too.
    again = history + [{"role": "assistant", "content": restored.text}, FOLLOW_UP]
    live = smollm2_engine.chat(again, LOOKUP).wait()
    s = live.stats
    assert s.prompt_tokens_reused >= \
        restored.stats.prompt_tokens + restored.stats.completion_tokens - 1
    smollm2_engine.chat(EVICT, ChatOptions(temperature=0.0, max_tokens=4)).wait()
    assert live.text == smollm2_engine.chat(again, GREEDY).wait().text
    smollm2_engine.delete_session("lookup")


@pytest.mark.parametrize("options, words", [
    (ChatOptions(speculative="medusa"), "speculative decoding mode"),
    (ChatOptions(speculative="draft_model"), "needs a draft model"),
    (ChatOptions(speculative="prompt_lookup", draft_tokens=0), "draft tokens"),
    (ChatOptions(speculative="prompt_lookup", draft_tokens=65), "draft tokens"),
    (ChatOptions(speculative="prompt_lookup", ngram_size=9), "n-gram size"),
    (ChatOptions(speculative="prompt_lookup", ngram_size=True), "n-gram size"),
])
def test_invalid_speculative_options_are_refused_with_a_sentence(smollm2_engine, options, words):
    with pytest.raises(QuantDeskError) as info:
        smollm2_engine.chat(EDIT, options)
    assert words in info.value.what and info.value.fix
