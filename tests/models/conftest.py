"""Engine test helpers: one engine process with SmolLM2 loaded per test module, and the
oracle reply of llama-cpp-python's own ``create_chat_completion``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# Small and fast: two threads (CI has two cores), a context that holds any test chat.
# QUANTDESK_TEST_THREADS=1 suits a machine busy with other work: llama.cpp's threads wait
# for each other at every step, so two threads on two shared cores can be 10x slower.
TEST_THREADS = int(os.environ.get("QUANTDESK_TEST_THREADS", "2"))
FAST_SETTINGS = dict(threads=TEST_THREADS, batch_threads=TEST_THREADS, context_length=1024)


@pytest.fixture(scope="module")
def smollm2_engine(smollm2_gguf):
    """An :class:`EngineClient` with SmolLM2 loaded; shut down after the module."""
    from models.engine import EngineClient, LoadSettings

    client = EngineClient()
    client.load(smollm2_gguf, LoadSettings(**FAST_SETTINGS))
    yield client
    client.shutdown()


RAW_GREEDY = r"""
import json, sys
import llama_cpp
import numpy as np
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=1024, n_threads=2, verbose=False)
processors = None
if len(sys.argv) > 4:  # an llguidance grammar: its whole-vocabulary mask on every token
    from llguidance import LLMatcher
    from llguidance.llamacpp import lltokenizer_from_vocab
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    ends = [t for t in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, t)]
    matcher = LLMatcher(lltokenizer_from_vocab(vocab, eos_token=ends), sys.argv[4])
    seen = []
    def mask(input_ids, scores):
        if seen:
            assert matcher.consume_tokens([int(t) for t in input_ids[seen[0]:]])
        seen[:] = [len(input_ids)]
        bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8),
                             bitorder="little")[:len(scores)].astype(bool)
        return np.where(bits, scores, -np.inf)
    processors = llama_cpp.LogitsProcessorList([mask])
out = llm.create_chat_completion(messages=json.loads(sys.argv[2]), max_tokens=int(sys.argv[3]),
                                 temperature=0.0, logits_processor=processors)
print(json.dumps({"text": out["choices"][0]["message"]["content"],
                  "completion_tokens": out["usage"]["completion_tokens"],
                  "prompt_tokens": out["usage"]["prompt_tokens"]}))
"""


def raw_greedy_reply(model, messages, max_tokens, grammar=None) -> dict:
    """llama-cpp-python's greedy chat reply (text and token counts), in a separate process;
    with ``grammar`` (an llguidance grammar), constrained by a logits processor that applies
    llguidance's whole-vocabulary mask to every token (no check-first, no fast-forward)."""
    extra = [grammar] if grammar is not None else []
    result = subprocess.run([sys.executable, "-c", RAW_GREEDY, str(model), json.dumps(messages),
                             str(max_tokens), *extra], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])

