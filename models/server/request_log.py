"""One record per request, for the Server page's live log and ``quantdesk serve``'s lines.

The API key and the request's text are never part of it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional

STATUS_CLIENT_CLOSED = 499  # the client went away before the reply ended (nginx's code)


@dataclass(frozen=True)
class RequestLogEntry:
    """What one request did.

    ``ttft_seconds`` runs from the request's arrival to its first token (so it includes
    waiting for a slot or a model load); ``tokens_per_second`` is the engine's decode speed;
    ``drafted_tokens`` and ``accepted_tokens`` are speculative decoding's guesses and those
    of them the model confirmed.
    """

    client: str
    method: str
    path: str
    status: int
    model: str = ""
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    ttft_seconds: Optional[float] = None
    tokens_per_second: Optional[float] = None
    seconds: float = 0.0
    error: str = ""
    time: float = field(default_factory=time.time)

    def line(self) -> str:
        """The entry as one log line."""
        parts = [self.client or "-", f"{self.method} {self.path}", str(self.status)]
        if self.model:
            parts.append(self.model)
            parts.append(f"prompt {self.prompt_tokens} (cached {self.cached_tokens}) "
                         f"generated {self.completion_tokens}")
            if self.drafted_tokens:
                parts.append(f"drafted {self.drafted_tokens} (accepted {self.accepted_tokens})")
            if self.ttft_seconds is not None:
                parts.append(f"TTFT {self.ttft_seconds * 1000:.0f} ms")
            if self.tokens_per_second:
                parts.append(f"{self.tokens_per_second:.1f} tok/s")
        parts.append(f"{self.seconds:.2f} s")
        if self.error:
            parts.append(self.error)
        return " | ".join(parts)
