"""Telling a reasoning model's thinking from its answer, and what its template says about it.

Reasoning models (Qwen3, DeepSeek-R1 and its distills, Phi-4-reasoning, SmolLM3, GLM…)
write their thinking between ``<think>`` and ``</think>`` before the answer. This module is
the one place that knows how to take that apart, for every consumer of a reply (the Chat
page, the API server), and it imports neither Qt nor llama.cpp:

- :class:`ReasoningSplitter` is fed the reply's text deltas as they stream and returns,
  for each, the part that is reasoning and the part that is answer. Tags may arrive split
  across deltas of any size ("<th" + "ink>"): the few characters that could still become a
  tag are held back until they cannot. The opening tag may be written by the template
  rather than the model (DeepSeek-R1's template ends the generation prompt with
  ``<think>\\n``): such a reply starts inside the reasoning (``opened=True``, see
  :func:`prompt_opens_reasoning`). A reply cut off before ``</think>`` is all reasoning. A
  reply that does not start with ``<think>`` is answer, byte for byte — models that never
  reason are unchanged.
- :func:`split_reasoning` does the same for a whole text at once.
- :func:`thinking_template` reads a Jinja chat template once: whether it has a thinking
  switch (``enable_thinking``, passed to the template like ``apply_chat_template``'s
  keyword arguments), whether thinking is on when the switch is not given, and whether the
  template reads past reasoning back (``reasoning_content`` on assistant messages — the
  template then decides which turns keep it; Qwen3's keeps it only after the last user
  message). Templates that do not read it never get past reasoning: it is not part of a
  message's ``content``.

The format follows llama.cpp's server (``reasoning_format``: ``<think>`` at the start of
the reply, or forced open by a prompt that ends with it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Optional, Sequence

OPEN_TAG = "<think>"
CLOSE_TAG = "</think>"
# Template variables that turn thinking on or off, as model families name them
# (Qwen3, SmolLM3, GLM-4.5: enable_thinking; DeepSeek-V3.1, Granite: thinking).
SWITCH_NAMES = ("enable_thinking", "thinking")
# The message field templates read past reasoning from (transformers' and llama.cpp's name).
REASONING_FIELD = "reasoning_content"

_START, _REASONING, _ANSWER = "start", "reasoning", "answer"


def _held_prefix(text: str, tag: str) -> int:
    """The length of the longest tail of ``text`` that is a proper prefix of ``tag``."""
    for length in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:length]):
            return length
    return 0


class ReasoningSplitter:
    """Splits one streamed reply into reasoning and answer, delta by delta.

    Feed every delta to :meth:`feed`, then call :meth:`finish` once; the parts each call
    returns, concatenated, are the reply's reasoning and answer. Afterwards
    :attr:`reasoning` and :attr:`answer` are the final texts (reasoning without the
    whitespace around it; the answer without the blank line after ``</think>``).

    Args:
        opened: The prompt already opened the reasoning (it ended with ``<think>``, see
            :func:`prompt_opens_reasoning`): the reply starts inside it.
        clock: Seconds, for :attr:`seconds` (``time.perf_counter`` by default).

    Attributes:
        reasoning_pieces: How many fed deltas held reasoning or its tags. The engine emits
            one delta per generated token (pieces held back by a stop string or a split
            character arrive merged), so fed per delta this counts the thinking tokens.
    """

    def __init__(self, opened: bool = False, clock: Callable[[], float] = time.perf_counter) -> None:
        self.opened = opened
        self._clock = clock
        self._state = _START
        self._pending = ""  # text held back: a tag may still be completing
        self._reasoning: list[str] = []
        self._answer: list[str] = []
        self._strip_answer = False  # drop whitespace between </think> and the answer
        self._strip_reasoning = True  # drop newlines between <think> and the reasoning
        self.reasoning_pieces = 0
        self.started_at: Optional[float] = None
        self.ended_at: Optional[float] = None
        self.finished = False

    # -- streaming -------------------------------------------------------------------

    @property
    def thinking(self) -> bool:
        """Whether the reply is inside its reasoning now."""
        return self._state == _REASONING

    @property
    def in_answer(self) -> bool:
        """Whether the reply is past its reasoning (or had none): later deltas are answer."""
        return self._state == _ANSWER

    @property
    def had_reasoning(self) -> bool:
        """Whether the reply has (or had) a reasoning section."""
        return self._state == _REASONING or self.ended_at is not None

    @property
    def seconds(self) -> Optional[float]:
        """How long the model thought: from the first delta to ``</think>`` (to the end of
        the reply when it never closed); ``None`` while thinking or without reasoning."""
        if self.started_at is None or self.ended_at is None:
            return None
        return self.ended_at - self.started_at

    def feed(self, delta: str) -> tuple[str, str]:
        """Add the next delta; return ``(reasoning, answer)``: the new text of each that is
        certain now (either may be empty)."""
        if self.finished:
            raise ValueError("the reply has finished; use a new ReasoningSplitter")
        if self.started_at is None:
            self.started_at = self._clock()
        was, closed = self._state, self.ended_at
        reasoning, answer = self._push(delta)
        if _REASONING in (was, self._state) or self.ended_at != closed:
            self.reasoning_pieces += 1
        return self._keep(reasoning, answer)

    def finish(self) -> tuple[str, str]:
        """The reply has ended: release what was held back; return its ``(reasoning,
        answer)`` parts. A reasoning section that never closed ends here."""
        if self.finished:
            return "", ""
        pending, self._pending = self._pending, ""
        reasoning = answer = ""
        if self._state == _START and not self.opened:  # whitespace, or an unfinished "<thi"
            answer = pending
        elif self._state != _ANSWER:  # the reasoning never closed: it ends with the reply
            reasoning = pending
            if self.started_at is not None:
                self.ended_at = self._clock()
        else:
            answer = pending
        self.finished = True
        return self._keep(reasoning, answer)

    @property
    def reasoning(self) -> str:
        """The reasoning so far (final once finished), without surrounding whitespace."""
        return "".join(self._reasoning).strip()

    @property
    def answer(self) -> str:
        """The answer so far (final once finished)."""
        return "".join(self._answer)

    def _keep(self, reasoning: str, answer: str) -> tuple[str, str]:
        if reasoning:
            self._reasoning.append(reasoning)
        if answer:
            self._answer.append(answer)
        return reasoning, answer

    def _push(self, delta: str) -> tuple[str, str]:
        text = self._pending + delta
        self._pending = ""
        if self._state == _START:
            lead = text.lstrip()
            if not lead or (len(lead) < len(OPEN_TAG) and OPEN_TAG.startswith(lead)):
                self._pending = text  # whitespace, or what may still become <think>
                return "", ""
            if lead.startswith(OPEN_TAG):
                self._state = _REASONING
                text = lead[len(OPEN_TAG):]
            elif self.opened:
                self._state = _REASONING
            else:
                self._state = _ANSWER
                return "", text  # not a reasoning reply: its text, unchanged
        if self._state == _REASONING:
            if self._strip_reasoning:
                text = text.lstrip("\n")
                if not text:
                    return "", ""
                self._strip_reasoning = False
            end = text.find(CLOSE_TAG)
            if end < 0:
                hold = _held_prefix(text, CLOSE_TAG)
                self._pending = text[len(text) - hold:]
                return text[:len(text) - hold], ""
            self._state = _ANSWER
            self.ended_at = self._clock()
            self._strip_answer = True
            reasoning, text = text[:end], text[end + len(CLOSE_TAG):]
            return reasoning, self._answer_text(text)
        return "", self._answer_text(text)

    def _answer_text(self, text: str) -> str:
        if self._strip_answer:
            text = text.lstrip()
            if not text:
                return ""
            self._strip_answer = False
        return text


def split_reasoning(text: str, opened: bool = False) -> tuple[str, str]:
    """``(reasoning, answer)`` of a whole reply, as :class:`ReasoningSplitter` splits it
    streamed (``reasoning`` is "" for a reply that does not reason)."""
    splitter = ReasoningSplitter(opened)
    splitter.feed(text)
    splitter.finish()
    return splitter.reasoning, splitter.answer


def thought_for(seconds: Optional[float]) -> str:
    """The folded reasoning's title once it has ended: "Thought for 12 s" ("Thought for
    a moment" under a second, "Thinking" when the time is not known)."""
    if not seconds:
        return "Thinking"
    if seconds < 1:
        return "Thought for a moment"
    if seconds < 90:
        return f"Thought for {seconds:.0f} s"
    return f"Thought for {seconds / 60:.0f} min"


def prompt_opens_reasoning(prompt: str) -> bool:
    """Whether a rendered prompt ends inside an opened ``<think>`` (DeepSeek-R1's template
    writes it; Qwen3's with thinking off writes an empty, closed one instead)."""
    return prompt.rstrip().endswith(OPEN_TAG)


@dataclass(frozen=True)
class ThinkingTemplate:
    """What a chat template does about reasoning (see :func:`thinking_template`).

    Attributes:
        switch: The template variable that turns thinking on or off (``enable_thinking``),
            or ``None`` when it has none.
        default_on: Whether the model thinks when the switch is not given.
        keeps_reasoning: The template reads past reasoning (``reasoning_content``) back.
    """

    switch: Optional[str] = None
    default_on: bool = True
    keeps_reasoning: bool = False

    def variables(self, thinking: Optional[bool]) -> dict:
        """The template variables for a thinking choice (``None``: the template's default)."""
        return {self.switch: thinking} if self.switch and thinking is not None else {}

    def history_message(self, role: str, content: str, reasoning: str = "") -> dict:
        """A past message as the engine is sent it: the answer as ``content``, and its
        reasoning as ``reasoning_content`` only when the template reads it back."""
        message = {"role": role, "content": content}
        if reasoning and self.keeps_reasoning and role == "assistant":
            message[REASONING_FIELD] = reasoning
        return message


NO_THINKING = ThinkingTemplate()


@lru_cache(maxsize=16)
def thinking_template(template: Optional[str]) -> ThinkingTemplate:
    """Read a chat template's thinking switch, its default and whether it keeps past
    reasoning. A template that cannot be read has none of them."""
    from models.engine.chat_template import render_with, template_variables
    from models.foundation.errors import QuantDeskError

    if not template:
        return NO_THINKING
    try:
        names = template_variables(template)
    except QuantDeskError:
        return NO_THINKING
    switch = next((name for name in SWITCH_NAMES if name in names), None)
    default_on = True
    if switch is not None:
        probe = [{"role": "user", "content": "Hi"}]
        plain = {"add_generation_prompt": True, "bos_token": "", "eos_token": ""}
        try:
            default_on = render_with(template, probe, plain) == render_with(
                template, probe, {**plain, switch: True})
        except QuantDeskError:
            switch = None
    return ThinkingTemplate(switch, default_on, REASONING_FIELD in template)


def thinking_switch(template: str) -> Optional[str]:
    """The name of ``template``'s thinking switch variable, or ``None``."""
    return thinking_template(template).switch


def reply_opens_reasoning(template: Optional[str], messages: Sequence[dict],
                          thinking: Optional[bool] = None) -> bool:
    """Whether the reply to ``messages`` starts inside its reasoning: the template's
    generation prompt for them ends with ``<think>``. ``False`` when there is no template
    or it cannot render them (the engine will say why)."""
    from models.engine.chat_template import render_chat
    from models.foundation.errors import QuantDeskError
    from models.images import content_text

    if not template or OPEN_TAG not in template:
        return False
    text_only = [{**m, "content": content_text(m.get("content") or "")} for m in messages]  # images aside
    try:
        return prompt_opens_reasoning(render_chat(template, text_only, thinking=thinking))
    except QuantDeskError:
        return False
