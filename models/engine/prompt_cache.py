"""The engine's prompt cache: KV prefixes of earlier prompts, kept for the next request.

Chat clients send the whole conversation with every turn. A slot keeps the KV cache of its
last request, so the same client's next turn reuses it — until another client takes that
slot. Then the slot's state is not thrown away: it is copied out
(``llama_state_seq_get_data``, about 23 KB a token for SmolLM2-135M) into this cache, and a
later request whose prompt starts with the same tokens has it copied back into a slot
(``llama_state_seq_set_data``) instead of evaluating those tokens again. Restoring 2,000
tokens takes milliseconds; evaluating them takes seconds on a CPU.

Entries are kept in RAM up to ``ram_bytes``, least recently used first out; an entry
pushed out of RAM is written to the saved-session store on disk (``sessions.py``, the
folder the Chat page's conversations use, under its disk cap) and read back from there
when it is the best match. Entries whose tokens are a prefix of a newer entry are
dropped: the newer one serves every prompt the older one could.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Optional

from models.engine.sessions import SessionStore, SessionUnusable

log = logging.getLogger(__name__)

DEFAULT_RAM_BYTES = 1 << 30
MIN_TOKENS = 32  # shorter prefixes are cheaper to evaluate than to keep


@dataclass
class CachedPrefix:
    """One cached KV prefix: its tokens and llama.cpp's state of them."""

    key: str
    tokens: list[int]
    payload: Optional[bytes]  # None once spilled to disk
    size: int


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share."""
    count = 0
    for x, y in zip(a, b):
        if x != y:
            break
        count += 1
    return count


class PromptCache:
    """KV prefixes in RAM, spilling to a :class:`SessionStore` (see the module docstring).

    Args:
        ram_bytes: RAM budget for the states kept in memory.
        store: Where entries pushed out of RAM go; ``None`` drops them.
        fingerprint: The loaded model's session fingerprint (a state is only valid for it).
    """

    def __init__(self, ram_bytes: int = DEFAULT_RAM_BYTES, store: Optional[SessionStore] = None,
                 fingerprint: Optional[dict] = None) -> None:
        self.ram_bytes = ram_bytes
        self.store = store
        self.fingerprint = fingerprint or {}
        self._entries: "OrderedDict[str, CachedPrefix]" = OrderedDict()  # LRU first
        self.hits = 0

    @staticmethod
    def _key(tokens: list[int]) -> str:
        digest = hashlib.sha1(b"".join(t.to_bytes(4, "little", signed=True) for t in tokens))
        return f"prefix-{digest.hexdigest()[:32]}"

    @property
    def ram_used(self) -> int:
        """Bytes of state held in RAM."""
        return sum(e.size for e in self._entries.values() if e.payload is not None)

    def __len__(self) -> int:
        return len(self._entries)

    def best_match(self, tokens: list[int]) -> tuple[Optional[CachedPrefix], int]:
        """The entry sharing the longest prefix with ``tokens``, and that length."""
        best, length = None, 0
        for entry in self._entries.values():
            shared = common_prefix(entry.tokens, tokens)
            if shared > length:
                best, length = entry, shared
        return best, length

    def payload(self, entry: CachedPrefix) -> Optional[bytes]:
        """The state bytes of ``entry`` (read back from disk if spilled); marks it used.
        ``None`` when a spilled file is gone or damaged (the entry is then forgotten)."""
        self._entries.move_to_end(entry.key)
        if entry.payload is not None:
            self.hits += 1
            return entry.payload
        try:
            saved = self.store.open(entry.key, self.fingerprint) if self.store else None
            data = bytes(saved.read_payload()) if saved is not None else None
        except SessionUnusable as exc:
            log.info("prompt cache: %s unusable: %s", entry.key, exc.notice)
            data = None
        if data is None:
            self._entries.pop(entry.key, None)
            return None
        self.hits += 1
        self.store.touch(entry.key)
        return data

    def add(self, tokens: list[int], payload: bytes) -> None:
        """Keep ``payload`` (the state of ``tokens``), dropping entries it makes useless.
        A RAM budget of 0 turns the cache off."""
        if len(tokens) < MIN_TOKENS or self.ram_bytes <= 0:
            return
        key = self._key(tokens)
        for other in list(self._entries.values()):
            if len(other.tokens) <= len(tokens) and common_prefix(other.tokens, tokens) == len(other.tokens):
                self._forget(other)
        self._entries[key] = CachedPrefix(key, list(tokens), payload, len(payload))
        self._fit()

    def _forget(self, entry: CachedPrefix) -> None:
        self._entries.pop(entry.key, None)
        if entry.payload is None and self.store is not None:
            self.store.delete(entry.key)

    def _fit(self) -> None:
        """Spill the least recently used entries to disk until RAM fits the budget."""
        used = self.ram_used
        for entry in list(self._entries.values()):
            if used <= self.ram_bytes:
                break
            if entry.payload is None:
                continue
            used -= entry.size
            if self.store is None:
                self._entries.pop(entry.key)
                continue
            started = time.perf_counter()
            try:
                self.store.save(entry.key, self.fingerprint, entry.tokens, entry.payload)
                entry.payload = None
                log.info("prompt cache: %d tokens spilled to disk in %.3f s", len(entry.tokens),
                         time.perf_counter() - started)
            except OSError as exc:
                log.warning("prompt cache: could not spill to disk (%s); dropped", exc)
                self._entries.pop(entry.key)

    def clear(self) -> None:
        """Forget every entry (a new model was loaded); spilled files are deleted."""
        for entry in list(self._entries.values()):
            self._forget(entry)
