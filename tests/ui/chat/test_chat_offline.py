"""The Chat page without a model: names, keys, drops, the history database, the transcript."""

from __future__ import annotations

from PySide6.QtCore import QMimeData, Qt, QUrl
from PySide6.QtWidgets import QApplication, QListView, QPushButton, QComboBox

from app.core.conversations import ConversationStore
from app.ui.chat.markdown import split_segments, stable_length
from app.ui.chat.transcript import TranscriptView
from tests.core.test_conversation_versions import write_old_database
from tests.ui.chat.conftest import open_chat_window


def test_controls_carry_the_accessible_names_checks_rely_on(qtbot):
    window, page = open_chat_window(qtbot)
    named = {w.accessibleName(): w for w in page.findChildren(object) if hasattr(w, "accessibleName")}
    assert named["Message"] is page.box
    assert isinstance(named["Send"], QPushButton) and isinstance(named["Stop"], QPushButton)
    assert isinstance(named["New chat"], QPushButton)
    assert isinstance(named["Conversations"], QListView)
    assert isinstance(named["Model"], QComboBox)
    assert window.focusWidget() is page.box


def test_enter_sends_shift_enter_adds_a_line_and_no_model_is_said_inline(qtbot):
    window, page = open_chat_window(qtbot)
    qtbot.keyClicks(page.box, "first line")
    qtbot.keyClick(page.box, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    qtbot.keyClicks(page.box, "second")
    assert page.box.toPlainText() == "first line\nsecond"
    qtbot.keyClick(page.box, Qt.Key.Key_Return)
    assert "No model is loaded" in page.composer.note.text()  # inline, not a dialog
    assert page.box.toPlainText() == "first line\nsecond"  # kept to send later
    assert QApplication.activeModalWidget() is None
    assert window.focusWidget() is page.box


def test_the_message_box_does_not_paste_a_file_url(qtbot, tmp_path):
    window, page = open_chat_window(qtbot)
    mime = QMimeData()
    url = QUrl.fromLocalFile(str(tmp_path / "model.gguf"))
    mime.setUrls([url])
    mime.setText(url.toString())
    assert not page.box.canInsertFromMimeData(mime)
    page.box.insertFromMimeData(mime)
    assert page.box.toPlainText() == ""
    text = QMimeData()
    text.setText("plain words")
    page.box.insertFromMimeData(text)
    assert page.box.toPlainText() == "plain words"


def test_shortcuts_new_chat_focus_and_find(qtbot):
    window, page = open_chat_window(qtbot)
    page.sidebar.search.setFocus()
    qtbot.keyClick(page.sidebar.search, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier)
    assert window.focusWidget() is page.box
    qtbot.keyClick(page.box, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert page.find_bar.isVisible() and window.focusWidget() is page.find_bar
    qtbot.keyClick(page.find_bar, Qt.Key.Key_Escape)
    assert not page.find_bar.isVisible() and window.focusWidget() is page.box
    old = page.conversation_id
    qtbot.keyClick(page.box, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert page.conversation_id != old


def test_a_history_from_before_the_migration_opens_in_the_window(qtbot, isolated_home):
    path = isolated_home / "conversations" / "conversations.sqlite3"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_old_database(path)
    window, page = open_chat_window(qtbot)
    assert page.conversations.rowCount() == 1
    assert page.conversations.data(page.conversations.index(0)) == "Old chat"
    page.sidebar.list.clicked.emit(page.conversations.index(0))
    text = page.transcript.toPlainText()
    assert "question 0" in text and "answer 2" in text
    assert [m.content for m in page.branch][-1] == "answer 2"


def test_an_unreadable_history_is_a_sentence_and_is_left_untouched(qtbot, isolated_home):
    path = isolated_home / "conversations" / "conversations.sqlite3"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"not a database at all " * 200)
    before = path.read_bytes()
    window, page = open_chat_window(qtbot)
    assert page.banner.isVisible() and page.banner.level() == "error"
    assert "cannot be read" in page.banner.text() and "not saved" in page.banner.text()
    assert page.conversations.rowCount() == 0
    assert path.read_bytes() == before
    assert QApplication.activeModalWidget() is None


def test_search_rename_and_delete_with_an_inline_confirmation(qtbot):
    store = ConversationStore()
    rome = store.create()
    store.add_messages(rome.id, [{"role": "user", "content": "Trip to Rome"},
                                 {"role": "assistant", "content": "See the Colosseum."}])
    bread = store.create()
    store.add_messages(bread.id, [{"role": "user", "content": "Bake bread"}])
    window, page = open_chat_window(qtbot)
    assert page.conversations.rowCount() == 2
    page.sidebar.search.setText("colosseum")
    qtbot.waitUntil(lambda: page.conversations.rowCount() == 1)
    assert page.conversations.id_at(0) == rome.id
    page.conversations.setData(page.conversations.index(0), "Rome plans")
    assert ConversationStore().get(rome.id).title == "Rome plans"
    page.ask_delete(rome.id)
    assert page.banner.isVisible() and "cannot be undone" in page.banner.text()
    assert len(ConversationStore().list()) == 2  # nothing deleted before confirming
    page.banner.action_button.click()
    assert [c.id for c in ConversationStore().list()] == [bread.id]


def test_export_markdown_and_json(qtbot, tmp_path):
    import json

    store = ConversationStore()
    c = store.create(title="Export me")
    store.add_messages(c.id, [{"role": "user", "content": "Hi"},
                              {"role": "assistant", "content": "**Hello**", "stats": {"completion_tokens": 2}}])
    window, page = open_chat_window(qtbot)
    page.open_conversation(c.id)
    page.export_conversation(tmp_path / "c.md", "markdown")
    assert (tmp_path / "c.md").read_text() .startswith("# Export me")
    assert "## Assistant\n\n**Hello**" in (tmp_path / "c.md").read_text()
    page.export_conversation(tmp_path / "c.json", "json")
    values = json.loads((tmp_path / "c.json").read_text())
    assert [m["content"] for m in values["messages"]] == ["Hi", "**Hello**"]
    assert values["messages"][1]["stats"] == {"completion_tokens": 2}
    texts = [a.text() for a in window.file_menu.actions()]
    assert any("Markdown" in t for t in texts) and any("JSON" in t for t in texts)


def test_streaming_rerenders_only_the_unfinished_tail():
    text = "Intro paragraph.\n\n```python\nx = 1\n```\nmore text still being wr"
    assert stable_length(text) == text.index("more")
    assert stable_length("no blank line yet") == 0
    assert stable_length("```\nopen fence\n\nstill open\n") == 0  # blank lines inside code
    segments = split_segments("a\n```js\nlet x\n```\nb\n```\nopen")
    assert [(s.lang, s.closed) for s in segments] == [(None, True), ("js", True), (None, True), ("", False)]


def test_streaming_fast_path_builds_the_same_document_as_rendering_the_tail_again(qtbot, monkeypatch):
    """Inserting new text at the end of the tail (the fast path) must give exactly the
    document that replacing the whole tail at every delta gives, however the text is cut."""
    import random

    import app.ui.chat.transcript as transcript

    text = ("# Title\n\nA paragraph with **bold** and `code`\nthat goes on\n\n- item one\n- item two\n\n"
            "```python\ndef f(x):\n    return x * 2\n\n\nprint(f(3))\n```\n"
            "Then prose right after a fence, with $x^2$ math.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
            "~~~\nan open fence at the end\nstill open")

    def stream(seed) -> TranscriptView:
        rng = random.Random(seed)
        view = TranscriptView()
        qtbot.addWidget(view)
        view.begin_reply()
        i = 0
        while i < len(text):
            step = 1 if seed is None else rng.randint(1, 9)
            view.add_text(text[i:i + step])
            i += step
        assert view.streamed_text == text
        return view

    for seed in (None, 7, 8):  # character by character, then random cuts
        fast = stream(seed)
        with monkeypatch.context() as patch:
            patch.setattr(transcript, "tail_growth", lambda before, after: None)
            slow = stream(seed)
        assert fast.toPlainText() == slow.toPlainText()
        assert fast.document().blockCount() == slow.document().blockCount()
        assert fast.toHtml() == slow.toHtml()


def test_auto_scroll_follows_only_while_at_the_bottom(qtbot):
    view = TranscriptView()
    qtbot.addWidget(view)
    view.resize(400, 300)
    view.show()
    view.begin_reply()
    for i in range(60):
        view.add_text(f"Paragraph {i} with some words.\n\n")
    bar = view.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == bar.maximum()  # followed
    bar.setValue(bar.maximum() // 3)  # the reader scrolls up
    kept = bar.value()
    for i in range(20):
        view.add_text(f"More {i}.\n\n")
    assert bar.value() == kept  # not pulled down
    bar.setValue(bar.maximum())  # back at the bottom: following resumes
    view.add_text("And the end.\n\n")
    assert bar.value() == bar.maximum()


def test_markdown_code_is_highlighted_and_math_kept_verbatim(qtbot):
    from app.core.conversations import BranchMessage

    view = TranscriptView()
    qtbot.addWidget(view)
    reply = "Euler: $e^{i\\pi}+1=0$ costs $5 and $10.\n\n```python\ndef f():\n    return 1\n```\n"
    view.set_messages([BranchMessage(0, -1, "assistant", reply, 0.0, None, 1, [0])])
    text = view.toPlainText()
    assert "$e^{i\\pi}+1=0$" in text and "costs $5 and $10" in text
    html = view.toHtml()
    assert "font-family:'monospace'" in html or "monospace" in html
    colours = {c for c in ("#008000", "#0000ff", "#00f", "#3d7b7b") if c in html.lower()}
    assert "def" in text and colours, "the code block is not highlighted"


def test_the_model_picker_lists_the_library(qtbot, isolated_home):
    from tests.models.library_gguf import write_gguf

    write_gguf(isolated_home / "models" / "tiny-Q8_0.gguf", name="Tiny", n_ctx=256, file_type=7)
    write_gguf(isolated_home / "models" / "plain.gguf", name="Plain", template=False)
    window, page = open_chat_window(qtbot)
    models = page.panel.models
    qtbot.waitUntil(lambda: models.rowCount() == 2, timeout=10_000)
    labels = [models.data(models.index(row)) for row in range(2)]
    assert any("Tiny" in label and "Q8_0" in label and "256 ctx" in label and "· chat template" in label
               for label in labels), labels
    assert any("no chat template" in label for label in labels), labels


def test_the_picker_keeps_the_opened_model_when_the_library_list_arrives(qtbot, isolated_home, tmp_path):
    """A model opened from elsewhere (``quantdesk FILE``, a drop) stays the picker's choice
    when the Library scan, finishing later, replaces the list."""
    from models.library import Library
    from tests.models.library_gguf import write_gguf

    write_gguf(isolated_home / "models" / "tiny-Q8_0.gguf", name="Tiny", file_type=7)
    opened = write_gguf(tmp_path / "elsewhere.gguf", name="Elsewhere", file_type=7)
    window, page = open_chat_window(qtbot)
    page.panel.show_model(opened)
    library = Library()
    library.scan()
    page.panel.set_library(library.models())
    assert page.panel.models.rowCount() == 2
    assert page.panel.current_model() == opened
    assert page.panel.model_picker.currentText() == "elsewhere.gguf"


def test_deleting_a_message_leaves_it_out(qtbot):
    store = ConversationStore()
    c = store.create()
    seqs = store.add_messages(c.id, [{"role": "user", "content": "keep me"},
                                     {"role": "assistant", "content": "drop me"}])
    window, page = open_chat_window(qtbot)
    page.open_conversation(c.id)
    page.transcript.action.emit("delete", seqs[1])
    assert [m.content for m in page.branch] == ["keep me"]
    assert "drop me" not in page.transcript.toPlainText()
    assert ConversationStore().get(c.id).messages == [{"role": "user", "content": "keep me"}]


def test_splitter_sizes_are_restored_in_a_new_window(qtbot):
    window, page = open_chat_window(qtbot)
    window.resize(1200, 700)
    page.splitter.setSizes([300, 500, 250])
    sizes = page.splitter.sizes()
    window.close()  # the page remembers its layout
    window2, page2 = open_chat_window(qtbot)
    window2.resize(1200, 700)
    assert page2.splitter.sizes()[0] == sizes[0]


def test_a_narrow_window_narrows_the_transcript_not_the_side_panel(qtbot):
    window, page = open_chat_window(qtbot)
    page.panel.build_sections()
    page.banner.show_message("This conversation was written with SmolLM2-360M-Instruct-Q4_K_M.gguf.",
                             "info", "Load SmolLM2-360M-Instruct-Q4_K_M", lambda: None)
    window.resize(900, 700)
    body = page.panel.widget()
    # Before: the side panel got 126 px of its forms' 253 and scrolled sideways.
    qtbot.waitUntil(lambda: page.panel.viewport().width() >= body.minimumSizeHint().width())
    assert not page.panel.horizontalScrollBar().isVisible()
    assert page.splitter.sizes()[1] >= page.banner.minimumWidth()
