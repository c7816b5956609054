"""Embeddings from the engine with a real model (SmolLM2 with mean pooling): the vectors
are llama-cpp-python's own ``Llama.embed`` (the oracle, in a process of its own), unit
length, the same batched or alone, the same from text or its token ids; inputs the
engine cannot take are refused with a sentence; the Library marks the model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from models.foundation.errors import QuantDeskError
from tests.models.conftest import FAST_SETTINGS

pytestmark = [pytest.mark.smollm2, pytest.mark.slow]

TEXTS = ["The cat sat on the mat.", "A cat is sitting on a mat.",
         "Quarterly revenue grew by four percent.", "hello"]

ORACLE = r"""
import json, sys
import llama_cpp
llm = llama_cpp.Llama(model_path=sys.argv[1], embedding=True, pooling_type=1, n_ctx=512,
                      n_batch=512, n_ubatch=512, n_threads=2, verbose=False)
print(json.dumps(llm.embed(json.loads(sys.argv[2]), normalize=True)))
"""


@pytest.fixture(scope="module")
def engine(smollm2_embedding_gguf):
    from models.engine import EngineClient, LoadSettings

    client = EngineClient()
    client.load(smollm2_embedding_gguf, LoadSettings(**dict(FAST_SETTINGS, context_length=512),
                                                     embedding=True))
    yield client
    client.shutdown()


def test_vectors_match_llama_cpp_python_and_are_unit_length(engine, smollm2_embedding_gguf):
    vectors, tokens = engine.embed(TEXTS)
    assert vectors.shape == (len(TEXTS), 576) and tokens > len(TEXTS)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    result = subprocess.run([sys.executable, "-c", ORACLE, str(smollm2_embedding_gguf),
                             json.dumps(TEXTS)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    oracle = np.array(json.loads(result.stdout.strip().splitlines()[-1]), dtype=np.float32)
    assert np.abs(vectors - oracle).max() < 1e-3
    # Meaning: the two sentences about a cat are nearer each other than the third.
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]


def test_batched_alone_and_token_ids_agree(engine):
    together, _ = engine.embed(TEXTS)
    for index, text in enumerate(TEXTS):
        alone, _ = engine.embed([text])
        assert np.abs(alone[0] - together[index]).max() < 1e-4
    import llama_cpp

    vocab_only = llama_cpp.Llama(model_path=str(engine.last_load.path), vocab_only=True,
                                 verbose=False)
    ids = vocab_only.tokenize(TEXTS[2].encode(), add_bos=True, special=False)
    from_ids, count = engine.embed([ids])
    assert count == len(ids) and np.abs(from_ids[0] - together[2]).max() < 1e-4


@pytest.mark.parametrize("inputs, words", [
    ([""], "is empty"), ([[1, 2, 10**9]], "not in the model's vocabulary"),
    (["word " * 600], "more than the 512 tokens")])
def test_inputs_it_cannot_take_are_refused_with_a_sentence(engine, inputs, words):
    with pytest.raises(QuantDeskError, match=words):
        engine.embed(inputs)
    assert engine.embed(["still working"])[0].shape == (1, 576)


def test_an_embedding_model_does_not_chat(engine):
    with pytest.raises(QuantDeskError, match="loaded for embeddings"):
        list(engine.chat([{"role": "user", "content": "Hi"}]))


def test_the_library_marks_embedding_models(tmp_path, smollm2_gguf, smollm2_embedding_gguf):
    from models.library import Library

    library = Library(tmp_path / "models")
    library.import_path(smollm2_gguf)
    library.import_path(smollm2_embedding_gguf)
    marks = {Path(m.path).name: m.embedding for m in library.models()}
    assert marks == {smollm2_gguf.name: False, smollm2_embedding_gguf.name: True}



def test_quantdesk_list_says_which_is_an_embedding_model(
        tmp_path, smollm2_gguf, smollm2_embedding_gguf, capsys, monkeypatch):
    from app.commands import list as list_command
    from models.library import Library

    monkeypatch.setenv("QUANTDESK_HOME", str(tmp_path))
    library = Library()
    library.import_path(smollm2_gguf)
    library.import_path(smollm2_embedding_gguf)
    list_command.run(None)
    lines = capsys.readouterr().out.splitlines()
    assert [smollm2_embedding_gguf.name in line for line in lines
            if "(embedding model)" in line] == [True]
