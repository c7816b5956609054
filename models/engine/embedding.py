"""Embeddings in the engine process: a model loaded with llama.cpp's embeddings on.

A model loaded with ``LoadSettings.embedding`` has a context whose output is one pooled
vector per sequence (``llama_get_embeddings_seq``) instead of logits. Its pooling is the
model's own (``{arch}.pooling_type``: mean, CLS or last token), or mean pooling for a
model whose header names none (a chat model asked for embeddings). Several inputs go
through one decode, each as its own sequence, as many as the batch holds; the KV cache
is cleared before each batch, so inputs never see each other. Vectors come back
L2-normalised (unit length), as OpenAI's and Ollama's APIs return them.

The batch is one whole context (``n_batch`` = ``n_ubatch`` = ``n_ctx``): an encoder
attends both ways, so an input must fit in one micro-batch; a longer input is refused
with a sentence rather than cut.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence, Union

import llama_cpp
import llama_cpp.llama_cpp as llama_low
import numpy as np

from models.engine.gguf_info import read_model_info
from models.foundation.errors import QuantDeskError
from models.gguf_header import MEAN_POOLING

if TYPE_CHECKING:
    from models.engine.runtime import LoadedModel

EmbeddingInput = Union[str, Sequence[int]]


def embedding_params(path: str, context_length: int) -> dict:
    """The extra ``Llama()`` arguments of an embedding load: embeddings on, the pooling,
    and a batch that holds a whole context."""
    pooling = read_model_info(path).pooling_type
    if pooling is None or pooling == llama_cpp.LLAMA_POOLING_TYPE_NONE:
        pooling = MEAN_POOLING
    return {"embedding": True, "pooling_type": pooling, "n_batch": context_length,
            "n_ubatch": context_length}


def _tokens_of(model: "LoadedModel", item: EmbeddingInput, index: int) -> list[int]:
    """An input's tokens: a string tokenized as the model's vocabulary wants (BOS, and the
    EOS/SEP an encoder appends), or token ids checked against the vocabulary."""
    if isinstance(item, str):
        if not item:
            raise QuantDeskError(f"Input {index + 1} is empty.", "Send some text to embed.")
        return model.llm.tokenize(item.encode("utf-8"), add_bos=True, special=False)
    tokens = list(item)
    n_vocab = model.llm.n_vocab()
    if not tokens:
        raise QuantDeskError(f"Input {index + 1} has no tokens.", "Send some tokens to embed.")
    bad = next((t for t in tokens if isinstance(t, bool) or not isinstance(t, int)
                or not 0 <= t < n_vocab), None)
    if bad is not None:
        raise QuantDeskError(f"Input {index + 1} holds the token {bad!r}, which is not in the "
                             f"model's vocabulary of {n_vocab} tokens.",
                             "Send token ids made by this model's tokenizer.")
    return tokens


def embed(model: "LoadedModel", inputs: Sequence[EmbeddingInput]) -> tuple[np.ndarray, int]:
    """The unit-length embedding of each input (rows of a float32 array) and the number of
    tokens read.

    Raises:
        QuantDeskError: An input is empty, longer than the context, or has token ids the
            vocabulary does not have; or llama.cpp could not decode a batch.
    """
    llm = model.llm
    n_ctx, n_embd = llm.n_ctx(), llm.n_embd()
    n_seq_max = max(1, int(llm.context_params.n_seq_max))
    token_lists = [_tokens_of(model, item, i) for i, item in enumerate(inputs)]
    for index, tokens in enumerate(token_lists):
        if len(tokens) > n_ctx:
            raise QuantDeskError(
                f"Input {index + 1} is {len(tokens)} tokens long, more than the {n_ctx} tokens "
                "the embedding model was loaded with.",
                "Split the text into shorter pieces, or load the model with a larger context.")
    vectors = np.zeros((len(token_lists), n_embd), dtype=np.float32)
    batch: list[int] = []  # indices of the inputs in the batch being filled

    def decode() -> None:
        llama_low.llama_memory_clear(llama_low.llama_get_memory(llm.ctx), True)
        llm._batch.reset()
        for seq, index in enumerate(batch):
            llm._batch.add_sequence(token_lists[index], seq, True)
        if llama_low.llama_decode(llm.ctx, llm._batch.batch) != 0:
            raise QuantDeskError("llama.cpp could not compute the embeddings of this batch.",
                                 "Try fewer or shorter inputs; the log has llama.cpp's report.")
        for seq, index in enumerate(batch):
            pointer = llama_low.llama_get_embeddings_seq(llm.ctx, seq)
            vectors[index] = np.ctypeslib.as_array(pointer, shape=(n_embd,))
        batch.clear()

    filled = 0
    for index, tokens in enumerate(token_lists):
        if batch and (filled + len(tokens) > n_ctx or len(batch) >= n_seq_max):
            decode()
            filled = 0
        batch.append(index)
        filled += len(tokens)
    if batch:
        decode()
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors /= np.where(norms > 0, norms, 1.0)
    return vectors, sum(len(t) for t in token_lists)


def check_embedding_model(model: Any) -> None:
    """Refuse chat on a model loaded for embeddings, with the sentence to act on."""
    if getattr(model, "settings", None) is not None and model.settings.embedding:
        raise QuantDeskError(f"{model.path} is loaded for embeddings, so it cannot chat.",
                             "Load it again without embedding mode to chat with it.")
