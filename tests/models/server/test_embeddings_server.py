"""Embeddings through the real ``openai`` and ``ollama`` clients and the real server: an
embedding model (SmolLM2 with mean pooling, the Library's mark) gives the engine's
vectors — float and base64, one input or a batch, text or token ids, with usage — and a
chat model asked for embeddings, or an embedding model asked for a reply, is a 400 that
says which is which."""

from __future__ import annotations

import httpx
import numpy as np
import ollama
import openai
import pytest

from tests.models.server.conftest import MODEL_ID, library_of

pytestmark = [pytest.mark.smollm2, pytest.mark.slow]

EMBEDDER = "SmolLM2-embed"
TEXTS = ["The cat sat on the mat.", "A cat is sitting on a mat.",
         "Quarterly revenue grew by four percent."]


@pytest.fixture(scope="module")
def library(server_home, smollm2_gguf, smollm2_embedding_gguf):
    return library_of(server_home, smollm2_gguf, smollm2_embedding_gguf)


def _engine_vectors(pool, library, texts):
    from models.server.catalog import find_model

    return pool.get(find_model(library, EMBEDDER).path).client.embed(texts)


def test_openai_embeddings_float_and_base64(client, pool, library):
    listed = {m.id: m for m in client.models.list().data}
    assert listed[EMBEDDER].model_extra["embedding"] is True
    assert listed[MODEL_ID].model_extra["embedding"] is False
    reply = client.embeddings.create(model=EMBEDDER, input=TEXTS)  # the client asks base64
    vectors = np.array([d.embedding for d in reply.data], dtype=np.float32)
    assert [d.index for d in reply.data] == [0, 1, 2] and reply.model == EMBEDDER
    expected, tokens = _engine_vectors(pool, library, TEXTS)
    assert np.abs(vectors - expected).max() < 1e-6  # float32 bytes, exact
    assert reply.usage.prompt_tokens == reply.usage.total_tokens == tokens
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    floats = client.embeddings.create(model=EMBEDDER, input=TEXTS[0], encoding_format="float")
    assert np.abs(np.array(floats.data[0].embedding) - expected[0]).max() < 1e-6


def test_openai_embeddings_of_token_ids(client, pool, library):
    import llama_cpp

    from models.server.catalog import find_model

    vocab = llama_cpp.Llama(model_path=str(find_model(library, EMBEDDER).path),
                            vocab_only=True, verbose=False)
    ids = vocab.tokenize(TEXTS[1].encode(), add_bos=True, special=False)
    one = client.embeddings.create(model=EMBEDDER, input=ids, encoding_format="float")
    many = client.embeddings.create(model=EMBEDDER, input=[ids, ids], encoding_format="float")
    expected, _ = _engine_vectors(pool, library, [TEXTS[1]])
    assert np.abs(np.array(one.data[0].embedding) - expected[0]).max() < 1e-4
    assert len(many.data) == 2 and one.usage.prompt_tokens == len(ids)


def test_the_wrong_kind_of_model_is_a_400_that_says_so(client):
    with pytest.raises(openai.BadRequestError, match="not an embedding model"):
        client.embeddings.create(model=MODEL_ID, input="hello")
    with pytest.raises(openai.BadRequestError, match="is an embedding model"):
        client.chat.completions.create(model=EMBEDDER, max_tokens=5,
                                       messages=[{"role": "user", "content": "Hi"}])
    with pytest.raises(openai.BadRequestError, match="empty"):
        client.embeddings.create(model=EMBEDDER, input=["ok", ""])
    with pytest.raises(openai.BadRequestError, match="dimensions"):
        client.embeddings.create(model=EMBEDDER, input="ok", dimensions=64)


def test_ollama_embed_and_the_older_embeddings(ollama_server, pool, library):
    client = ollama.Client(host=f"http://127.0.0.1:{ollama_server.ollama_port}", timeout=600)
    reply = client.embed(model=EMBEDDER + ":latest", input=TEXTS)
    expected, tokens = _engine_vectors(pool, library, TEXTS)
    assert np.abs(np.array(reply.embeddings) - expected).max() < 1e-6
    assert reply.prompt_eval_count == tokens
    single = client.embed(model=EMBEDDER, input=TEXTS[0])
    assert len(single.embeddings) == 1
    older = client.embeddings(model=EMBEDDER, prompt=TEXTS[0])
    assert np.abs(np.array(older.embedding) - expected[0]).max() < 1e-6
    assert client.show(EMBEDDER).capabilities == ["embedding"]
    with pytest.raises(ollama.ResponseError, match="not an embedding model"):
        client.embed(model=MODEL_ID, input="hello")
    raw = httpx.post(f"http://127.0.0.1:{ollama_server.ollama_port}/api/embed",
                     json={"model": EMBEDDER, "input": []}, timeout=60)
    assert raw.status_code == 400 and "input" in raw.json()["error"]
