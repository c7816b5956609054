"""Choosing a token under an llguidance grammar, the cheap way first.

llguidance computes a whole-vocabulary mask in well under a millisecond, yet most sampled
tokens need none: like llama.cpp's ``common_sampler_sample``, the plain sampler chain
chooses first, then the grammar is asked about that one token
(``LLMatcher.validate_tokens``); only when it is rejected is the full mask applied
(disallowed logits set to minus infinity) and the choice made again. Under greedy sampling
both ways pick the same token (the best allowed token is the best token when that is
allowed); with temperature the distribution differs slightly, as it does in llama.cpp.
"""

from __future__ import annotations

import ctypes
from typing import Optional

import numpy as np

from models.structured.guidance import matcher_for


class GrammarSampler:
    """A llama.cpp sampler chain plus an llguidance matcher for one reply.

    Args:
        llm: The loaded ``llama_cpp.Llama``.
        grammar: An llguidance grammar (:mod:`.guidance`), or ``None`` for no constraint.
        temperature, top_k, top_p, min_p, seed: The chain; temperature 0 is greedy.
        check_first: Try the unconstrained choice against the grammar before masking.
    """

    def __init__(self, llm, grammar: Optional[str], temperature: float, top_k: int,
                 top_p: float, min_p: float, seed: int, check_first: bool = True) -> None:
        import llama_cpp as lib

        self.lib, self.llm, self.check_first = lib, llm, check_first
        self.vocab = lib.llama_model_get_vocab(llm.model)
        self.n_vocab = lib.llama_vocab_n_tokens(self.vocab)
        self.chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        if temperature <= 0:
            lib.llama_sampler_chain_add(self.chain, lib.llama_sampler_init_greedy())
        else:
            for smpl in (lib.llama_sampler_init_top_k(top_k), lib.llama_sampler_init_top_p(top_p, 1),
                         lib.llama_sampler_init_min_p(min_p, 1), lib.llama_sampler_init_temp(temperature),
                         lib.llama_sampler_init_dist(seed)):
                lib.llama_sampler_chain_add(self.chain, smpl)
        self.matcher = matcher_for(llm, grammar) if grammar is not None else None
        dtype = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)
        self._full = np.zeros(self.n_vocab, dtype=dtype)
        self._ids = np.arange(self.n_vocab, dtype=np.intc)
        self._mask = np.zeros((self.n_vocab + 31) // 32, dtype=np.int32)
        self.full_masks = 0

    def allowed(self, token: int) -> bool:
        """Whether the grammar, in its current state, allows ``token`` next."""
        return self.matcher.validate_tokens([token]) == 1

    def allowed_mask(self) -> np.ndarray:
        """One boolean per vocabulary token: may it come next (the whole-vocabulary mask)."""
        self.full_masks += 1
        self.matcher.unsafe_compute_mask_ptr(self._mask.ctypes.data, self._mask.nbytes)
        bits = np.unpackbits(self._mask.view(np.uint8), bitorder="little")
        return bits[:self.n_vocab].astype(bool)

    def sample(self, index: int = -1, allowed: Optional[np.ndarray] = None) -> int:
        """Choose the next token from the logits of row ``index`` of the last batch (the
        last row by default; a batch of several replies has one row per reply).

        Args:
            index: The logits row.
            allowed: A mask to sample under instead of the grammar's (closing a reply at
                its budget narrows the grammar's own mask).
        """
        lib = self.lib
        if self.matcher is None:
            return lib.llama_sampler_sample(self.chain, self.llm.ctx, index)
        if self.check_first and allowed is None:
            token = lib.llama_sampler_sample(self.chain, self.llm.ctx, index)
            if self.allowed(token):
                self.matcher.consume_token(token)
                return token
        if allowed is None:
            allowed = self.allowed_mask()
        logits = np.ctypeslib.as_array(lib.llama_get_logits_ith(self.llm.ctx, index),
                                       shape=(self.n_vocab,))
        # Row i is token i again: the chain's top-k sorted the rows of the last call.
        self._full["id"] = self._ids
        self._full["logit"] = np.where(allowed, logits, -np.inf)
        self._full["p"] = 0.0
        array = lib.llama_token_data_array(
            data=self._full.ctypes.data_as(lib.llama_token_data_p), size=self.n_vocab,
            selected=-1, sorted=False)
        lib.llama_sampler_apply(self.chain, ctypes.byref(array))
        token = int(self._full[array.selected]["id"])
        self.matcher.consume_token(token)
        return token

    def accept(self, tokens: list[int]) -> None:
        """Tell the grammar about tokens appended without sampling (fast-forward)."""
        if self.matcher is not None and tokens and not self.matcher.consume_tokens(tokens):
            raise RuntimeError(f"llguidance refused forced tokens: {self.matcher.get_error()}")

    def forced_tokens(self, whole: bool = False) -> list[int]:
        """The tokens of the text the grammar allows as the only continuation: without its
        last token when that could still grow into a longer one (llguidance's
        ``compute_ff_tokens``), or, ``whole``, the canonical tokens of all of it."""
        if self.matcher is None:
            return []
        if not whole:
            return list(self.matcher.compute_ff_tokens())
        forced = self.matcher.compute_ff_bytes()
        if not forced:
            return []
        tokens = self.llm.tokenize(forced, add_bos=False, special=False)
        return tokens[:self.matcher.validate_tokens(tokens)]

    @property
    def accepting(self) -> bool:
        """The reply may end here (the grammar is complete; more may still follow)."""
        return self.matcher is not None and self.matcher.is_accepting()

    @property
    def must_end(self) -> bool:
        """The grammar is complete and allows nothing more (but the end of the reply)."""
        return self.matcher is not None and self.matcher.is_stopped()

    def is_end(self, token: int) -> bool:
        return bool(self.lib.llama_vocab_is_eog(self.vocab, token))

    def close(self) -> None:
        if self.chain:
            self.lib.llama_sampler_free(self.chain)
        self.chain = None
        self.matcher = None
