"""Speculative decoding with a draft model (engine side).

A small model with the same vocabulary (SmolLM2-135M for SmolLM2-1.7B, a Q4 file of the
model for its F16 original) guesses the next few tokens one by one, cheaply; the loaded
model then checks the whole guess in one batch, exactly as it checks a prompt-lookup
guess (``runtime.LoadedModel._verify``): a guessed token counts only while the model's own
pick equals it, so the reply is what plain decoding gives, only faster when the draft
guesses well and costs much less than the model.

The draft keeps its own llama.cpp context and KV cache. Each proposal first brings that
cache in line with the conversation (the common prefix is kept; a rejected guess and the
newest tokens are evaluated again, usually one or two), then decodes greedily and stops
early when the draft is unsure of its next token (its probability under
:data:`MIN_DRAFT_PROBABILITY`): an unlikely guess costs a draft step and is rarely kept.

The draft's cache is not part of a saved session: after a conversation is restored, the
draft reads it once, at the first guess. The draft must see every token of the
conversation, so it pays off only when a draft step
costs well under a step of the model: a 135M draft for a 1.7B model (about 10x), not a Q4
copy of a 135M model for its F16 (0.8x: slower than plain decoding, measured).

llama-cpp-python has a ``draft_model`` hook on ``Llama``, but only for its own
``generate`` loop, which the engine does not use (it decodes token by token itself, for
cancel, sessions and timings) and whose only implementation is prompt lookup; so the
draft loop is written here, on the same llama.cpp calls.

Vocabulary compatibility is llama.cpp's own rule (``common_speculative_are_compatible``
in common/speculative.cpp): same tokenizer type, same BOS/EOS use and ids, vocabulary
sizes within 128, and identical token texts from id 5 on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import llama_cpp
import llama_cpp.llama_cpp as llama_low
import numpy as np

from models.foundation.errors import QuantDeskError

# Stop drafting when the draft gives its best next token less than this probability: such
# a guess is nearly always rejected. Measured with SmolLM2 Q4_1 as the draft (150-token
# story, greedy, 2 threads): for SmolLM2 F32, 0.3 gave x1.10 the plain speed, 0.1 x1.30
# (84% of guesses kept), 0 (llama.cpp's current default) x1.38, but 0 keeps drafting a full
# batch on tokens a weak draft cannot know; for SmolLM2 F16, 0.75 (llama-server's old
# --draft-p-min) drafted 44 of 150 tokens and ran at x0.68.
MIN_DRAFT_PROBABILITY = 0.1
# The most tokens a draft model guesses at once (llama-server's --draft-max default): each
# costs a decode of the draft model, and unlike prompt lookup's drafts their length is not
# planned against the step's cost.
MOST_DRAFT_MODEL_TOKENS = 16
# llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE and SPEC_VOCAB_CHECK_START_TOKEN_ID.
MAX_VOCAB_SIZE_DIFFERENCE = 128
FIRST_CHECKED_TOKEN = 5


def vocabulary_mismatch(target_vocab, draft_vocab) -> str:
    """Why two llama.cpp vocabularies cannot share speculation ("" when they can)."""
    if llama_low.llama_vocab_type(target_vocab) != llama_low.llama_vocab_type(draft_vocab):
        return "it uses another kind of tokenizer"
    for name, uses, token in (("beginning", llama_low.llama_vocab_get_add_bos, llama_low.llama_vocab_bos),
                              ("end", llama_low.llama_vocab_get_add_eos, llama_low.llama_vocab_eos)):
        if uses(target_vocab) != uses(draft_vocab) or \
                (uses(target_vocab) and token(target_vocab) != token(draft_vocab)):
            return f"its {name}-of-text token differs"
    n_target = llama_low.llama_vocab_n_tokens(target_vocab)
    n_draft = llama_low.llama_vocab_n_tokens(draft_vocab)
    if abs(n_target - n_draft) > MAX_VOCAB_SIZE_DIFFERENCE:
        return f"its vocabulary has {n_draft} tokens, the model's has {n_target}"
    for token in range(FIRST_CHECKED_TOKEN, min(n_target, n_draft)):
        if llama_low.llama_vocab_get_text(target_vocab, token) != \
                llama_low.llama_vocab_get_text(draft_vocab, token):
            return f"token {token} differs"
    return ""


class DraftModel:
    """A small model loaded beside the chat model, proposing tokens for it to check.

    Args:
        path: The draft GGUF file.
        target: The loaded chat model's ``llama_cpp.Llama`` (for its vocabulary).
        settings: The chat model's resolved load settings: the draft shares its context
            length, threads, batch size and flash attention; it goes on the GPU (all of
            it) when the chat model uses the GPU at all.

    Raises:
        QuantDeskError: llama.cpp cannot load the file, or its vocabulary is not the
            chat model's.
    """

    def __init__(self, path: str, target: llama_cpp.Llama, settings) -> None:
        self.path = path
        name = Path(path).name
        try:
            self.llm = llama_cpp.Llama(
                model_path=path, n_gpu_layers=-1 if settings.gpu_layers else 0,
                main_gpu=settings.main_gpu, n_threads=settings.threads,
                n_threads_batch=settings.batch_threads, n_ctx=settings.context_length,
                n_batch=settings.batch_size, n_ubatch=settings.micro_batch_size,
                flash_attn=settings.flash_attention, use_mmap=settings.use_mmap, verbose=False)
        except (ValueError, RuntimeError) as exc:
            raise QuantDeskError(f"llama.cpp could not load the draft model {name} ({exc}).",
                                 "Choose another draft model, or none.") from exc
        self.vocab = llama_low.llama_model_get_vocab(self.llm.model)
        mismatch = vocabulary_mismatch(llama_low.llama_model_get_vocab(target.model), self.vocab)
        if mismatch:
            self.close()
            raise QuantDeskError(
                f"The draft model {name} cannot guess tokens for this model: {mismatch}.",
                "Choose a smaller model of the same family (the same tokenizer), or no draft model.")
        self.n_vocab = llama_low.llama_vocab_n_tokens(self.vocab)
        self.n_ctx = self.llm.n_ctx()

    def _sync(self, history: np.ndarray, cancelled: Callable[[], bool]) -> bool:
        """Make the draft's cache hold ``history``; False when cancelled."""
        llm = self.llm
        cached = llm.input_ids[: llm.n_tokens]
        common = int(np.argmin(np.append(cached[: len(history)] == history[: len(cached)], False)))
        common = min(common, len(history) - 1)  # the last token must produce logits
        llm.n_tokens = common
        for start in range(common, len(history), llm.n_batch):
            if cancelled():
                return False
            llm.eval(history[start: start + llm.n_batch].tolist())
        return True

    def _best_next(self) -> tuple[int, float]:
        """The draft's most likely next token and its probability."""
        logits = np.ctypeslib.as_array(llama_low.llama_get_logits_ith(self.llm.ctx, -1),
                                       shape=(self.n_vocab,))
        best = int(np.argmax(logits))
        probability = 1.0 / float(np.exp(logits - logits[best]).sum())
        return best, probability

    def propose(self, history: np.ndarray, limit: int, cancelled: Callable[[], bool]) -> list[int]:
        """Up to ``limit`` tokens the draft expects after ``history`` (greedy).

        Args:
            history: The conversation's tokens so far, the newest picked one last.
            limit: The most tokens to propose (room left in the batch, context and reply).
            cancelled: Polled between draft steps.
        """
        if limit < 1 or len(history) + limit >= self.n_ctx or not self._sync(history, cancelled):
            return []
        draft: list[int] = []
        while True:
            token, probability = self._best_next()
            if probability < MIN_DRAFT_PROBABILITY or \
                    llama_low.llama_vocab_is_eog(self.vocab, token):
                break
            draft.append(token)
            if len(draft) == limit or cancelled():
                break
            self.llm.eval([token])
        return draft

    def close(self) -> None:
        """Free the draft model and its context."""
        self.llm.close()
