"""The Chat page with the real engine and SmolLM2: streaming, stop, versions, branches,
reopening with the saved KV state, JSON mode and crash recovery.

Waits use qtbot.waitUntil (QTest.qWait holds the GIL in PySide6 6.12 and starves the
worker threads that stream the reply).
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from PySide6.QtCore import Qt

from app.core.conversations import ConversationStore
from tests.ui.chat.conftest import open_chat_window, wait_reply

pytestmark = pytest.mark.smollm2

QUESTION = "What is the capital of France? Answer in one word."
LONG = "Write a long story about a dragon who learns to bake bread. Use many paragraphs."


def type_and_send(qtbot, page, text: str) -> None:
    """Type into the message box and press Enter, as a person does."""
    page.box.setFocus()
    qtbot.keyClicks(page.box, text)
    qtbot.keyClick(page.box, Qt.Key.Key_Return)


def test_loading_shows_llama_cpps_progress_as_a_percentage(qtbot, smollm2_gguf, shared_engine):
    window, page = open_chat_window(qtbot, client=shared_engine)
    seen = []  # connected after the page's own slot: the bar as the page left it
    page.engine.load_progress.connect(lambda progress: seen.append(
        (progress.stage, page.panel.progress.maximum(), page.panel.progress.value(),
         page.panel.status.text())))
    window.open_path(smollm2_gguf)
    qtbot.waitUntil(lambda: page.engine.ready, timeout=120_000)
    loading = [entry for entry in seen if entry[0] == "Loading"]
    assert loading and all(maximum == 100 for _, maximum, _, _ in loading)
    assert [value for _, _, value, _ in loading] == sorted(value for _, _, value, _ in loading)
    assert loading[-1][2] == 100 and smollm2_gguf.name in loading[-1][3]
    assert seen[-1][0] == "Testing" and seen[-1][1] == 0  # busy while the first decode runs
    assert page.panel.progress.isHidden() and page.panel.status.text().startswith("Loaded in")
    page.shutdown()


def test_the_load_report_is_plain_and_an_opened_model_joins_the_library(qtbot, smollm2_gguf,
                                                                         shared_engine):
    from models.library import Library

    window, page = open_chat_window(qtbot, client=shared_engine)
    window.open_path(smollm2_gguf)
    qtbot.waitUntil(lambda: page.engine.ready, timeout=120_000)
    # Which model, where it runs, how much memory, how long its context is: in words.
    status = page.panel.status.text()
    assert f"{smollm2_gguf.name} runs on the CPU and uses" in status
    assert "MiB of memory; its context holds 1,024 tokens." in status
    assert "buffer" not in status and "KV" not in status and "backends" not in status
    # The buffers, one a line, behind "Details" (folded until opened).
    details = page.panel.details
    assert details.isVisible() and not details.isExpanded()
    assert "KV CPU" in page.panel.details_text.text() and "backends" in page.panel.details_text.text()

    # Opened from outside the models folder: now in the Library, with a way to undo.
    qtbot.waitUntil(lambda: page.panel.library_row.isVisible(), timeout=10_000)
    assert "is now in the Library" in page.panel.library_note.text()
    assert Library().get(smollm2_gguf) is not None
    qtbot.mouseClick(page.panel.library_undo, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "no longer in the Library" in page.panel.library_note.text(),
                    timeout=10_000)
    assert not page.panel.library_undo.isVisible()
    assert Library().get(smollm2_gguf) is None and smollm2_gguf.is_file()
    page.shutdown()


def test_send_streams_the_reply_and_stores_the_turn(qtbot, chat):
    window, page = chat
    ticks = []
    page.transcript.textChanged.connect(lambda: ticks.append(time.perf_counter()))
    assert window.focusWidget() is page.box  # focus in the message box after loading
    type_and_send(qtbot, page, QUESTION)
    assert page.engine.streaming and page.box.toPlainText() == ""
    assert page.box.isEnabled()
    wait_reply(qtbot, page)
    assert "Paris" in page.transcript.toPlainText()
    assert len(ticks) >= 3  # streamed in pieces, not one block at the end
    stored = ConversationStore().get(page.conversation_id)
    assert [m["role"] for m in stored.messages] == ["user", "assistant"]
    assert stored.messages[0]["content"] == QUESTION and "Paris" in stored.messages[1]["content"]
    assert page.branch[-1].stats["completion_tokens"] > 0
    assert "tok/s" in page.transcript.toPlainText()  # the facts line
    assert page.sidebar.model.rowCount() == 1 and window.focusWidget() is page.box


def test_stop_keeps_the_partial_text_and_marks_it(qtbot, chat):
    window, page = chat
    page.panel.sampling.max_tokens.setValue(400)
    type_and_send(qtbot, page, LONG)
    qtbot.waitUntil(lambda: len(page.transcript.streamed_text) > 20, timeout=60_000)
    pressed = time.perf_counter()
    qtbot.keyClick(page.box, Qt.Key.Key_Escape)
    wait_reply(qtbot, page, timeout=10_000)
    stopped_after = time.perf_counter() - pressed
    reply = page.branch[-1]
    assert reply.stats["stop_reason"] == "cancelled"
    assert len(reply.content) > 20 and reply.stats["completion_tokens"] < 400
    assert ConversationStore().get(page.conversation_id).messages[-1]["content"] == reply.content
    assert "stopped" in page.transcript.toPlainText()
    assert window.focusWidget() is page.box
    # A generous bound (a stop that did not work runs on to 400 tokens); the 100 ms goal
    # is measured by tests/benchmarks/bench_engine.py.
    assert stopped_after < 2.0, stopped_after


def test_regenerate_keeps_both_versions_and_switching_shows_each(qtbot, chat):
    window, page = chat
    type_and_send(qtbot, page, "Name a colour.")
    wait_reply(qtbot, page)
    first = page.branch[-1]
    page.panel.sampling.temperature.setValue(1.5)
    page.panel.sampling.seed.setText("7")
    page.transcript.action.emit("regenerate", first.seq)
    assert page.engine.streaming
    wait_reply(qtbot, page)
    second = page.branch[-1]
    assert second.versions == [first.seq, second.seq] and second.version == 2
    assert "2/2" in page.transcript.toPlainText()
    page.transcript.action.emit("version", first.seq)  # the ‹ link
    assert page.branch[-1].seq == first.seq
    assert page.transcript.toPlainText().count(first.content.strip()[:20]) >= 1
    assert "1/2" in page.transcript.toPlainText()
    page.transcript.action.emit("version", second.seq)
    assert page.branch[-1].content == second.content


def test_edit_makes_a_branch_and_the_old_one_survives_reopening(qtbot, chat, smollm2_gguf,
                                                                shared_engine):
    window, page = chat
    type_and_send(qtbot, page, "Say hello.")
    wait_reply(qtbot, page)
    old_user, old_reply = page.branch
    page.transcript.action.emit("edit", old_user.seq)
    assert page.box.toPlainText() == "Say hello." and page.editing is not None
    page.box.clear()
    type_and_send(qtbot, page, QUESTION)
    wait_reply(qtbot, page)
    assert [m.content for m in page.branch][0] == QUESTION
    conversation_id = page.conversation_id
    window.close()

    window2, page2 = open_chat_window(qtbot, client=shared_engine)
    page2.open_conversation(conversation_id)
    assert page2.branch[0].content == QUESTION and page2.branch[0].version == 2
    page2.transcript.action.emit("version", old_user.seq)  # back to the old branch
    assert [m.content for m in page2.branch] == ["Say hello.", old_reply.content]
    assert "1/2" in page2.transcript.toPlainText()


def test_a_reopened_conversation_continues_from_its_saved_state(qtbot, smollm2_gguf):
    window, page = open_chat_window(qtbot, smollm2_gguf)  # its own engine: a real restart
    type_and_send(qtbot, page, "Tell me one fact about the Moon.")
    wait_reply(qtbot, page)
    conversation_id = page.conversation_id
    first_tokens = page.branch[-1].stats["prompt_tokens"]
    window.close()  # stops that engine process
    assert page.engine.engine_pid is None

    window2, page2 = open_chat_window(qtbot, smollm2_gguf)
    try:
        page2.open_conversation(conversation_id)
        type_and_send(qtbot, page2, "And one about Mars?")
        wait_reply(qtbot, page2)
        stats = page2.branch[-1].stats
        assert stats["session_restored"] is True
        assert stats["prompt_tokens_reused"] >= first_tokens
        assert "restored" in page2.transcript.toPlainText() and "from disk" in page2.transcript.toPlainText()
    finally:
        page2.shutdown()


def test_json_mode_gives_a_valid_reply_and_unsupported_schemas_are_refused_before_sending(qtbot, chat):
    window, page = chat
    json_form = page.panel.json_mode
    json_form.enabled.setChecked(True)
    json_form.schema.setPlainText('{"type": "object", "properties": {"city": '
                                  '{"type": "string", "not": {"const": "x"}}}}')
    qtbot.waitUntil(lambda: "/properties/city/not" in json_form.problems.text(), timeout=5_000)
    assert "strict request is refused" in json_form.problems.text()
    json_form.strict.setChecked(False)  # the verdict follows the switch
    qtbot.waitUntil(lambda: "generating anyway" in json_form.problems.text(), timeout=5_000)
    json_form.strict.setChecked(True)
    qtbot.waitUntil(lambda: "strict request is refused" in json_form.problems.text(), timeout=5_000)
    type_and_send(qtbot, page, QUESTION)
    assert not page.engine.streaming and "/properties/city/not" in page.composer.note.text()
    assert page.box.toPlainText() == QUESTION  # kept, to send again once fixed
    assert not page.stored  # nothing was sent or stored

    json_form.schema.setPlainText('{"type": "object", "properties": {"city": {"type": "string"}},'
                                  ' "required": ["city"]}')
    qtbot.waitUntil(lambda: "Enforced exactly" in json_form.problems.text(), timeout=5_000)
    page.panel.sampling.max_tokens.setValue(40)
    page.box.clear()
    type_and_send(qtbot, page, QUESTION)
    wait_reply(qtbot, page)
    reply = page.branch[-1]
    assert reply.stats["valid"] is True, reply.stats
    text = page.transcript.toPlainText()
    assert "✓ valid JSON" in text and '"city"' in text
    # The schema text is kept with the conversation.
    assert ConversationStore().settings(page.conversation_id)["schema_text"].startswith('{"type"')


def test_killing_the_engine_mid_reply_keeps_the_window_and_the_partial_reply(qtbot, chat):
    window, page = chat
    page.panel.sampling.max_tokens.setValue(400)
    type_and_send(qtbot, page, LONG)
    qtbot.waitUntil(lambda: len(page.transcript.streamed_text) > 10, timeout=60_000)
    os.kill(page.engine.engine_pid, signal.SIGKILL)
    wait_reply(qtbot, page, timeout=30_000)
    reply = page.branch[-1]
    assert reply.stats == {"stop_reason": "crashed"} and len(reply.content) > 10
    assert ConversationStore().get(page.conversation_id).messages[-1]["content"] == reply.content
    assert "crashed" in page.transcript.toPlainText()
    assert page.banner.isVisible() and "was killed by SIGKILL" in page.banner.text()
    assert page.banner.action_button.text() == "Reload model"
    assert window.focusWidget() is page.box
    page.panel.sampling.max_tokens.setValue(16)
    type_and_send(qtbot, page, QUESTION)  # a fresh engine starts and reloads the model
    wait_reply(qtbot, page)
    assert page.branch[-1].stats["stop_reason"] in ("stop", "length")
    assert page.branch[-1].content


def test_applying_load_settings_reloads_remembers_and_warns_about_saved_states(qtbot, chat,
                                                                               smollm2_gguf):
    from app.core.model_settings import load_settings_for

    window, page = chat
    form = page.panel.load_form
    qtbot.waitUntil(lambda: "RAM" in form.verdict.text(), timeout=30_000)
    before = form.verdict.text()
    form.context.setValue(form.context.value() * 2)  # the verdict follows the slider at once
    assert form.verdict.text() != before and "Context (2,048)" == form.context_label.text()
    form.apply_button.click()
    assert "context length" in page.banner.text()  # saved KV states cannot be reused
    qtbot.waitUntil(lambda: page.engine.ready, timeout=120_000)
    assert page.engine.report.context_length == 2048
    assert load_settings_for(smollm2_gguf).context_length == 2048  # remembered for this model
