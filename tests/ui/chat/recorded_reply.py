"""A recorded reasoning reply, replayed through the Chat page as the engine streams it.

:class:`RecordedClient` stands where :class:`~models.engine.EngineClient` stands for the
page's :class:`~app.ui.chat.engine.ChatEngine` (``use_client``): each ``chat`` call
records what the page sent (messages and options) and streams the recorded reply in
pieces of a chosen size, on the page's worker thread like the engine's deltas. The
prompt the engine would build from a recorded request is :func:`prompt_of` (the
engine's own rendering with the model's template).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

from models.engine.chat_template import render_chat
from models.engine.options import ChatStats

TEMPLATES = Path(__file__).resolve().parents[2] / "models" / "templates"
QWEN3_TEMPLATE = (TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text(encoding="utf-8")
R1_TEMPLATE = (TEMPLATES / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja").read_text(encoding="utf-8")

THOUGHT = ("The user wants 17 × 23. Split it: 17 × 20 = 340 and 17 × 3 = 51.\n\n"
           "340 + 51 = 391. Check with division: 391 / 17 = 23, right.\n\n"
           "```python\n# an unclosed fence in the thinking must not reach the answer\n")
ANSWER = ("17 × 23 = **391**.\n\n| step | value |\n|---|---|\n| 17 × 20 | 340 |\n| 17 × 3 | 51 |\n\n"
          "```python\nprint(17 * 23)\n```\n")
# As Qwen3 streams it: it opens <think> itself.
REPLY = f"<think>\n{THOUGHT}\n</think>\n\n{ANSWER}"


class RecordedReply:
    """One replayed reply: iterate for its deltas, then read ``text`` and ``stats``."""

    def __init__(self, text: str, size: int, gate: Optional[threading.Event],
                 pause_after: int) -> None:
        self._text, self._size, self._gate, self._pause_after = text, size, gate, pause_after
        self.text = ""
        self.stats: Optional[ChatStats] = None
        self.first_delta_at: Optional[float] = None
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True
        if self._gate is not None:
            self._gate.set()

    def __iter__(self):
        pieces = [self._text[i:i + self._size] for i in range(0, len(self._text), self._size)]
        for index, piece in enumerate(pieces):
            if self._cancelled:
                break
            if self._gate is not None and len(self.text) >= self._pause_after:
                self._gate.wait(30)  # the test looks at the page mid-reply, then lets it go on
            if self.first_delta_at is None:
                self.first_delta_at = time.perf_counter()
            self.text += piece
            yield piece
        self.stats = ChatStats(completion_tokens=len(pieces), decode_tokens_per_second=40.0,
                               stop_reason="cancelled" if self._cancelled else "stop")


class RecordedClient:
    """What the page's engine talks to: replays ``text`` for every ``chat`` call.

    Attributes:
        requests: ``(messages, options)`` of each call, in order.
        size: Characters per streamed piece.
        gate: When set to an Event, the reply waits for it once ``pause_after``
            characters have streamed.
    """

    pid = None

    def __init__(self, text: str = REPLY, size: int = 4) -> None:
        self.text, self.size = text, size
        self.requests: list[tuple[list[dict], object]] = []
        self.gate: Optional[threading.Event] = None
        self.pause_after = 0

    def chat(self, messages, options=None, conversation_id=None) -> RecordedReply:
        self.requests.append(([dict(m) for m in messages], options))
        return RecordedReply(self.text, self.size, self.gate, self.pause_after)

    def shutdown(self) -> None:
        pass


def use_recorded_model(page, client: RecordedClient, template: str = QWEN3_TEMPLATE) -> None:
    """Make ``page`` answer through ``client`` as if a model with ``template`` were loaded
    (what the page does when a load finishes: the thinking switch follows the template)."""
    page.engine.use_client(client)
    page.engine.report = SimpleNamespace(model=SimpleNamespace(chat_template=template))
    page.engine.model_path = Path("Qwen3-0.6B-Q4_K_M.gguf")
    page._show_thinking_switch(page._stored_thinking())


def prompt_of(template: str, request: tuple[list[dict], object]) -> str:
    """The prompt the engine renders for a recorded request."""
    messages, options = request
    return render_chat(template, messages, thinking=getattr(options, "thinking", None))
