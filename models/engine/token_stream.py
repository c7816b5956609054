"""From sampled tokens to the text deltas a user sees (engine side).

Two things stand between a token and a delta:

- A token is a piece of UTF-8 *bytes*, and a character can be split across tokens
  (emoji, CJK, byte-fallback vocabularies). :class:`TokenTextDecoder` feeds the bytes to
  an incremental decoder, which holds back an incomplete character until it is whole.
- A stop string can arrive split across tokens too ("<|im" + "_end|>"). :class:`StopFilter`
  holds back the tail of the text that could still become a stop string, and releases it
  once it cannot; when a stop string completes, the text before it is the end of the reply.

Also here: :class:`Sampler`, llama.cpp's sampler chain built from
:class:`~models.engine.options.ChatOptions` through the C API that llama-cpp-python
exposes, so the engine drives sampling token by token itself.
"""

from __future__ import annotations

import codecs
import ctypes
import random
from typing import Optional, Sequence

import llama_cpp
import llama_cpp.llama_cpp as llama_low
import numpy as np

from models.engine.options import ChatOptions


class TokenTextDecoder:
    """Turns token ids into text, never splitting a UTF-8 character.

    Args:
        vocab: The model's llama.cpp vocabulary.
        pieces: A token → bytes cache to share between the replies of one model (a
            token's bytes never change), so each token costs a dict lookup instead of a
            call into llama.cpp.
    """

    def __init__(self, vocab, pieces: Optional[dict[int, bytes]] = None) -> None:
        self._vocab = vocab
        self._pieces = pieces if pieces is not None else {}
        self._buffer = ctypes.create_string_buffer(256)
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def piece(self, token: int) -> bytes:
        """The bytes of one token as it appears in text (special tokens render empty)."""
        known = self._pieces.get(token)
        if known is not None:
            return known
        n = llama_cpp.llama_token_to_piece(self._vocab, token, self._buffer,
                                           len(self._buffer), 0, False)
        if n < 0:  # buffer too small: grow to the size llama.cpp asked for
            self._buffer = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, self._buffer,
                                               len(self._buffer), 0, False)
        piece = self._pieces[token] = self._buffer.raw[:n]
        return piece

    def feed(self, token: int) -> str:
        """The text this token completes (possibly empty while a character is split)."""
        return self._utf8.decode(self.piece(token))

    def flush(self) -> str:
        """Whatever is held back at the end of a reply (a broken character becomes U+FFFD)."""
        return self._utf8.decode(b"", final=True)


class StopFilter:
    """Holds back text that may be the start of a stop string.

    Args:
        stops: The stop strings; an empty list passes text straight through.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = [s for s in stops if s]
        self._pending = ""
        self.stopped = False

    def push(self, text: str) -> str:
        """Add generated text; return the part that is certainly in the reply."""
        if self.stopped:
            return ""
        if not self._stops:
            return text
        self._pending += text
        cut = min((i for i in (self._pending.find(s) for s in self._stops) if i >= 0), default=-1)
        if cut >= 0:
            self.stopped = True
            released, self._pending = self._pending[:cut], ""
            return released
        hold = 0  # the longest tail that is a proper prefix of some stop string
        for stop in self._stops:
            for length in range(min(len(stop) - 1, len(self._pending)), hold, -1):
                if self._pending.endswith(stop[:length]):
                    hold = length
                    break
        released = self._pending[: len(self._pending) - hold]
        self._pending = self._pending[len(self._pending) - hold:]
        return released

    def flush(self) -> str:
        """At the end of the reply, held-back text that never became a stop string."""
        released, self._pending = ("" if self.stopped else self._pending), ""
        return released


class _GreedyPick:
    """The argmax of a row of logits, for greedy sampling with nothing before it.

    numpy finds it in about 5 us where ``llama_sampler_sample``, which first copies every
    logit into a candidate array, takes about 100 us — 1 % of a token at 100 tok/s, more on
    a GPU. Both take the first of equal maxima. The row's address comes from a function
    pointer that returns it as a plain integer, and the numpy view of a row is kept per
    address (llama.cpp reuses its logits buffer from token to token): after a decode has
    pushed Python's data out of the CPU caches, each object built per token costs tens of
    microseconds.
    """

    _get_row = None  # llama_get_logits_ith returning the address as an int (shared)

    def __init__(self, n_vocab: int) -> None:
        if _GreedyPick._get_row is None:
            prototype = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32)
            _GreedyPick._get_row = prototype(("llama_get_logits_ith", llama_low._lib))
        self._row_type = ctypes.c_float * n_vocab
        self._views: dict[int, np.ndarray] = {}

    def __call__(self, ctx, index: int) -> Optional[int]:
        """The token, or None when the row has no logits (llama.cpp's sampler says why)."""
        address = self._get_row(ctx, index)
        if not address:
            return None
        view = self._views.get(address)
        if view is None:
            if len(self._views) >= 64:  # the buffer moved (more rows): old views go
                self._views.clear()
            view = self._views[address] = np.frombuffer(self._row_type.from_address(address),
                                                        dtype=np.float32)
        return int(view.argmax())


class Sampler:
    """llama.cpp's sampler chain for one reply (penalties, top-k, top-p, min-p, temperature).

    The chain keeps the recent-token history for the repeat penalty, so one instance
    serves one reply. Call :meth:`close` (or use ``with``) to free it.
    """

    def __init__(self, options: ChatOptions, n_vocab: int) -> None:
        params = llama_cpp.llama_sampler_chain_default_params()
        self._chain = llama_cpp.llama_sampler_chain_init(params)
        self.seed = options.seed if options.seed is not None else random.randrange(2**32 - 1)
        penalties = bool(options.repeat_penalty != 1.0 or options.presence_penalty
                         or options.frequency_penalty)
        self._greedy = _GreedyPick(n_vocab) if options.temperature == 0 \
            and not penalties else None
        add = lambda s: llama_cpp.llama_sampler_chain_add(self._chain, s)  # noqa: E731
        if penalties:
            add(llama_cpp.llama_sampler_init_penalties(
                n_vocab, options.repeat_last_n, options.repeat_penalty,
                options.frequency_penalty, options.presence_penalty))
        if options.temperature == 0:
            add(llama_cpp.llama_sampler_init_greedy())
            return
        if options.top_k > 0:
            add(llama_cpp.llama_sampler_init_top_k(options.top_k))
        if options.top_p < 1.0:
            add(llama_cpp.llama_sampler_init_top_p(options.top_p, 1))
        if options.min_p > 0.0:
            add(llama_cpp.llama_sampler_init_min_p(options.min_p, 1))
        add(llama_cpp.llama_sampler_init_temp(options.temperature))
        add(llama_cpp.llama_sampler_init_dist(self.seed))

    def sample(self, ctx, index: int = -1) -> int:
        """Pick the next token from the logits of position ``index`` of the last batch
        (the last position by default; others need a batch that asked for their logits)."""
        if self._greedy is not None:
            token = self._greedy(ctx, index)
            if token is not None:
                return token
        return llama_cpp.llama_sampler_sample(self._chain, ctx, index)

    def close(self) -> None:
        """Free the native chain (and every sampler in it)."""
        if self._chain is not None:
            llama_cpp.llama_sampler_free(self._chain)
            self._chain = None

    def __enter__(self) -> "Sampler":
        return self

    def __exit__(self, *exc: object) -> Optional[bool]:
        self.close()
        return None
