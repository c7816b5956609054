"""A reasoning model in the Chat page: a recorded Qwen3 reply streamed through the real
page and transcript — the folded thinking section, the answer, storage, export, what the
next prompt holds — and the per-conversation thinking switch with Qwen3's template."""

from __future__ import annotations

import json
import threading

import pytest
from PySide6.QtCore import QUrl
from PySide6.QtGui import QGuiApplication

from app.core.conversations import BranchMessage, ConversationStore
from app.ui.chat.transcript import STREAMING, TranscriptView
from models.engine.reasoning import REASONING_FIELD, ReasoningSplitter
from tests.ui.chat.conftest import open_chat_window, wait_reply
from tests.ui.chat.recorded_reply import (ANSWER, QWEN3_TEMPLATE, R1_TEMPLATE, REPLY, THOUGHT,
                                          RecordedClient, prompt_of, use_recorded_model)
from tests.ui.test_real_window_xvfb import xvfb_display  # noqa: F401 - fixture


def click(view: TranscriptView, link: str) -> None:
    view.anchorClicked.emit(QUrl(link))


def test_a_reasoning_reply_streamed_in_pieces_of_every_size_renders_the_same(qtbot):
    """Thinking and answer cut at every size, as the page hands them to the transcript:
    the answer shows exactly as the same answer streamed by a model that does not reason,
    the folded section never shows the thinking, and unfolded it does; finished, the
    reply is the stored message's rendering."""
    view, plain = TranscriptView(), TranscriptView()
    qtbot.addWidget(view)
    qtbot.addWidget(plain)
    for size in range(1, len(REPLY) + 1):
        for v in (view, plain):
            v.clear_messages()
            v.begin_reply()
        splitter = ReasoningSplitter()
        saw_thinking = False
        for i in range(0, len(REPLY) + size, size):
            reasoning, answer = splitter.feed(REPLY[i:i + size]) if i < len(REPLY) else splitter.finish()
            view.add_reasoning(reasoning)
            if view.thinking:
                saw_thinking = True
                assert "▸ Thinking…" in view.toPlainText() and "17 × 20" not in view.toPlainText()
            if answer:
                view.end_reasoning(12.3)
                view.add_text(answer)
                plain.add_text(answer)
        assert saw_thinking, size
        assert view.streamed_reasoning.strip() == THOUGHT.strip()
        assert view.streamed_text == ANSWER
        text, expected = view.toPlainText(), plain.toPlainText()
        assert text.startswith("Assistant") and "\n▸ Thought for 12 s\n" in text, size
        assert "17 × 20 = 340" not in text  # folded
        assert text.split("▸ Thought for 12 s\n")[1] == expected.split("\n", 1)[1], size
    click(view, f"qd:think:{STREAMING}")  # unfolded while streaming: the thinking shows
    text = view.toPlainText()
    assert "▾ Thought for 12 s" in text and "17 × 20 = 340" in text
    assert text.endswith(expected.split("\n", 1)[1]) and "```python\n# an unclosed" in text
    view.finish_reply(BranchMessage(0, -1, "assistant", ANSWER, 0.0, {"reasoning_seconds": 12.3},
                                    1, [], THOUGHT.strip()))
    text = view.toPlainText()  # still unfolded, now with its copy link, then the answer
    assert "▾ Thought for 12 s  ·  Copy thinking\nThe user wants 17 × 23." in text
    assert text.index("# an unclosed fence") < text.index(_finished_answer(qtbot))


def _finished_answer(qtbot) -> str:
    """The transcript's text for the answer rendered as a finished message."""
    view = TranscriptView()
    qtbot.addWidget(view)
    view.set_messages([BranchMessage(0, -1, "assistant", ANSWER, 0.0, None, 1, [])])
    return view.toPlainText().split("\n", 1)[1]


def test_reasoning_reply_through_the_page_stored_exported_and_not_sent_back(qtbot, tmp_path):
    window, page = open_chat_window(qtbot)
    client = RecordedClient(size=3)
    use_recorded_model(page, client)
    assert page.panel.sampling.layout().isRowVisible(page.panel.sampling.thinking)
    assert page.panel.sampling.thinking.isChecked()  # Qwen3 thinks by default

    # Stop the reply in the middle of its thinking: the section is folded and streams.
    client.gate, client.pause_after = threading.Event(), len("<think>\n") + 60
    page.box.setPlainText("What is 17 × 23?")
    page.send()
    qtbot.waitUntil(lambda: len(page.transcript.streamed_reasoning) >= 50, timeout=10_000)
    shown = page.transcript.toPlainText()
    assert "▸ Thinking…" in shown and "17 × 20" not in shown and page.transcript.thinking
    click(page.transcript, f"qd:think:{STREAMING}")
    assert "▾ Thinking…" in page.transcript.toPlainText()
    assert page.transcript.streamed_reasoning.strip()[:40] in page.transcript.toPlainText()
    client.gate.set()
    wait_reply(qtbot, page, 20_000)

    stored = ConversationStore().branch(page.conversation_id)
    assert [m.role for m in stored] == ["user", "assistant"]
    assert stored[1].content == ANSWER and stored[1].reasoning == THOUGHT.strip()
    stats = stored[1].stats
    assert 0 < stats["reasoning_tokens"] < stats["completion_tokens"]
    assert stats["reasoning_seconds"] >= 0
    text = page.transcript.toPlainText()  # unfolded while streaming: it stays unfolded
    assert "▾ Thought for" in text and "340 + 51 = 391" in text
    assert f"{stats['reasoning_tokens']:,} thinking" in text  # the facts line
    click(page.transcript, f"qd:think:{stored[1].seq}")
    text = page.transcript.toPlainText()
    assert "▸ Thought for" in text and "340 + 51 = 391" not in text and "17 × 23 = 391." in text

    # Copy: the answer and the thinking, each on its own.
    click(page.transcript, f"qd:copy:{stored[1].seq}")
    assert QGuiApplication.clipboard().text() == ANSWER
    click(page.transcript, f"qd:copythink:{stored[1].seq}")
    assert QGuiApplication.clipboard().text() == THOUGHT.strip()

    # Export: the thinking apart from the answer.
    page.export_conversation(tmp_path / "c.md", "markdown")
    markdown = (tmp_path / "c.md").read_text()
    assert "<details><summary>Thought for" in markdown
    assert markdown.index(THOUGHT.strip()) < markdown.index("</details>") < markdown.index(ANSWER)
    page.export_conversation(tmp_path / "c.json", "json")
    exported = json.loads((tmp_path / "c.json").read_text())["messages"][1]
    assert (exported["content"], exported["reasoning"]) == (ANSWER, THOUGHT.strip())

    # Search finds the thinking as well as the answer.
    assert [c.id for c in ConversationStore().search("division")] == [page.conversation_id]

    # The next turn: the answer goes back as content; the thinking only as reasoning_content,
    # which Qwen3's template reads back for turns after the last question only — so the
    # prompt holds the answer and not the thinking.
    client.gate = None
    page.box.setPlainText("And 17 × 24?")
    page.send()
    wait_reply(qtbot, page, 20_000)
    sent = client.requests[-1][0]
    assert sent[1] == {"role": "assistant", "content": ANSWER, REASONING_FIELD: THOUGHT.strip()}
    prompt = prompt_of(QWEN3_TEMPLATE, client.requests[-1])
    assert "<|im_start|>assistant\n17 × 23 = **391**." in prompt
    assert "<think>" not in prompt and "Check with division" not in prompt
    assert prompt.endswith("<|im_start|>user\nAnd 17 × 24?<|im_end|>\n<|im_start|>assistant\n")


def test_thinking_switch_is_sent_kept_with_the_conversation_and_absent_without_a_template(qtbot):
    window, page = open_chat_window(qtbot)
    client = RecordedClient(text=ANSWER, size=7)  # answered at once, as with thinking off
    use_recorded_model(page, client)
    form = page.panel.sampling
    form.thinking.setChecked(False)
    page.box.setPlainText("What is 17 × 23?")
    page.send()
    wait_reply(qtbot, page, 20_000)
    assert client.requests[-1][1].thinking is False
    assert prompt_of(QWEN3_TEMPLATE, client.requests[-1]).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    stored = ConversationStore().branch(page.conversation_id)
    assert stored[1].content == ANSWER and stored[1].reasoning == ""
    assert "Thought" not in page.transcript.toPlainText()  # no section without thinking
    conversation = page.conversation_id
    page._save_conversation_settings()
    assert ConversationStore().settings(conversation)["thinking"] is False

    page.new_chat()
    form.thinking.setChecked(True)
    page.open_conversation(conversation)
    assert not form.thinking.isChecked() and form.thinking_choice() is False

    # DeepSeek-R1-Distill: no switch, the prompt opens <think>; the reply starts inside it.
    client.text = f"{THOUGHT}\n</think>\n\n{ANSWER}"
    use_recorded_model(page, client, R1_TEMPLATE)
    assert not form.layout().isRowVisible(form.thinking) and form.thinking_choice() is None
    page.new_chat()
    page.box.setPlainText("What is 17 × 23?")
    page.send()
    wait_reply(qtbot, page, 20_000)
    assert client.requests[-1][1].thinking is None
    stored = ConversationStore().branch(page.conversation_id)
    assert (stored[1].content, stored[1].reasoning) == (ANSWER, THOUGHT.strip())
    page.box.setPlainText("And 17 × 24?")
    page.send()
    wait_reply(qtbot, page, 20_000)
    assert client.requests[-1][0][1] == {"role": "assistant", "content": ANSWER}  # not sent back
    # Unfolding re-renders this conversation only (the one before is not on screen).
    click(page.transcript, f"qd:think:{page.branch[-1].seq}")
    text = page.transcript.toPlainText()
    assert text.count("Assistant   Copy") == 2 and text.count("Check with division") == 1


def test_a_model_that_does_not_reason_is_unchanged(qtbot):
    window, page = open_chat_window(qtbot)
    text = "  <b>Plain</b> reply with a </think> in the middle.\n"
    client = RecordedClient(text=text, size=2)
    use_recorded_model(page, client, "{% for m in messages %}{{ m['content'] }}{% endfor %}")
    assert page.panel.sampling.thinking_choice() is None
    page.box.setPlainText("Hi")
    page.send()
    wait_reply(qtbot, page, 20_000)
    stored = ConversationStore().branch(page.conversation_id)
    assert (stored[1].content, stored[1].reasoning) == (text, "")
    assert "reasoning_tokens" not in stored[1].stats or not stored[1].stats["reasoning_tokens"]


@pytest.mark.xvfb
def test_screenshots_of_a_reasoning_reply_light_and_dark(xvfb_display):
    from tests.ui.chat.screenshots import run_screenshot_script

    artifacts = run_screenshot_script("tests.ui.chat.reasoning_screenshots", xvfb_display, timeout=300)
    for scene in ("thinking", "thinking-unfolded", "folded", "unfolded"):
        for theme in ("light", "dark"):
            shot = artifacts / f"chat-reasoning-{scene}-{theme}.png"
            assert shot.stat().st_size > 20_000, shot
