"""Choosing a token under a llama.cpp grammar, the cheap way first.

Masking the whole vocabulary with the grammar (49 152 tokens for SmolLM2, each matched
against the grammar's stacks) costs more than the forward pass of a small model. Like
llama.cpp's own ``common_sampler_sample``, we first let the plain sampler chain choose,
then ask the grammar about that one token; only when it is rejected is the full mask
applied and the choice made again. Under greedy sampling both ways pick the same token
(the best allowed token is the best token when that is allowed); with temperature the
distribution differs slightly, as it does in llama.cpp.
"""

from __future__ import annotations

import ctypes
import math
from typing import Optional

import numpy as np


class GrammarSampler:
    """A llama.cpp sampler chain plus a separately driven grammar sampler.

    Args:
        llm: The loaded ``llama_cpp.Llama``.
        gbnf: Grammar text with a ``root`` rule, or ``None`` for no constraint.
        temperature, top_k, top_p, min_p, seed: The chain; temperature 0 is greedy.
        check_first: Try the unconstrained choice against the grammar before masking.
    """

    def __init__(self, llm, gbnf: Optional[str], temperature: float, top_k: int, top_p: float,
                 min_p: float, seed: int, check_first: bool = True) -> None:
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
        self.grammar = None
        if gbnf is not None:
            self.grammar = lib.llama_sampler_init_grammar(self.vocab, gbnf.encode("utf-8"), b"root")
            if not self.grammar:
                self.close()
                raise RuntimeError("llama.cpp refused a grammar that our parser accepted")
        dtype = np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)
        self._full = np.zeros(self.n_vocab, dtype=dtype)
        self._full["id"] = np.arange(self.n_vocab, dtype=np.intc)
        self._one = np.zeros(1, dtype=dtype)
        self.full_masks = 0

    def _array(self, data: np.ndarray):
        return self.lib.llama_token_data_array(
            data=data.ctypes.data_as(self.lib.llama_token_data_p), size=len(data), selected=-1,
            sorted=False)

    def allowed(self, token: int) -> bool:
        """Whether the grammar, in its current state, allows ``token`` next."""
        self._one[0] = (token, 0.0, 0.0)
        array = self._array(self._one)
        self.lib.llama_sampler_apply(self.grammar, ctypes.byref(array))
        return not math.isinf(float(self._one[0]["logit"]))

    def sample(self, index: int = -1) -> int:
        """Choose the next token from the logits of row ``index`` of the last batch (the
        last row by default; a batch of several replies has one row per reply)."""
        lib = self.lib
        if self.grammar is None:
            return lib.llama_sampler_sample(self.chain, self.llm.ctx, index)
        if self.check_first:
            token = lib.llama_sampler_sample(self.chain, self.llm.ctx, index)
            if self.allowed(token):
                lib.llama_sampler_accept(self.grammar, token)
                return token
        self.full_masks += 1
        logits = np.ctypeslib.as_array(lib.llama_get_logits_ith(self.llm.ctx, index),
                                       shape=(self.n_vocab,))
        self._full["logit"] = logits
        self._full["p"] = 0.0
        array = self._array(self._full)
        lib.llama_sampler_apply(self.grammar, ctypes.byref(array))
        lib.llama_sampler_apply(self.chain, ctypes.byref(array))
        token = int(self._full[array.selected]["id"])
        lib.llama_sampler_accept(self.grammar, token)
        return token

    def accept(self, token: int) -> None:
        """Tell the grammar about a token appended without sampling (fast-forward)."""
        if self.grammar is not None:
            self.lib.llama_sampler_accept(self.grammar, token)

    def is_end(self, token: int) -> bool:
        return bool(self.lib.llama_vocab_is_eog(self.vocab, token))

    def close(self) -> None:
        for smpl in (self.chain, self.grammar):
            if smpl:
                self.lib.llama_sampler_free(smpl)
        self.chain = self.grammar = None
