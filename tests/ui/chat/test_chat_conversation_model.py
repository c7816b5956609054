"""Reopening a conversation brings back its model: loaded when none is, offered (never
swapped silently) when another is, explained when its file has gone. And the GPU-layers
slider before and after a model is chosen.

Waits use qtbot.waitUntil (QTest.qWait holds the GIL in PySide6 6.12 and starves the
worker threads that load and stream).
"""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from app.core.conversations import ConversationStore
from tests.ui.chat.conftest import open_chat_window, second_model_file, wait_reply


def saved_conversation(model) -> str:
    """A stored two-message conversation written with ``model`` (a path or None); its id."""
    store = ConversationStore()
    conversation = store.create(model=None if model is None else str(model))
    store.add_messages(conversation.id, [{"role": "user", "content": "Name a fruit."},
                                         {"role": "assistant", "content": "Apple."}])
    return conversation.id


# -- without an engine ------------------------------------------------------------------


def test_a_conversation_whose_model_file_has_gone_opens_with_a_sentence(qtbot, tmp_path):
    gone = tmp_path / "moved-away" / "Llama-3-8B.Q4_K_M.gguf"
    conversation_id = saved_conversation(gone)
    window, page = open_chat_window(qtbot)
    page.sidebar.list.clicked.emit(page.conversations.index(0))  # as a click opens it
    assert page.conversation_id == conversation_id
    assert "Apple." in page.transcript.toPlainText()  # the conversation opened anyway
    assert page.banner.isVisible() and page.banner.level() == "warning"
    text = page.banner.text()
    assert str(gone) in text and "no longer there" in text and "Choose another model in the Model list" in text
    assert page.banner.action_button.isHidden()
    assert not page.engine.loading and page.engine.model_path is None  # nothing was tried
    assert page.panel.current_model() is None  # the picker offers the Library's models
    assert QApplication.activeModalWidget() is None and window.focusWidget() is page.box
    page.new_chat()  # the sentence was about that conversation
    assert not page.banner.isVisible()


def test_a_conversation_without_a_recorded_model_opens_as_before(qtbot):
    conversation_id = saved_conversation(None)
    window, page = open_chat_window(qtbot)
    page.open_conversation(conversation_id)
    assert page.branch[-1].content == "Apple."
    assert not page.banner.isVisible() and not page.engine.loading
    assert page.engine.model_path is None and page.panel.current_model() is None


def test_the_gpu_layers_slider_says_nothing_false_before_a_model_is_chosen(qtbot, tmp_path):
    from models.engine.settings import ALL_LAYERS, LoadSettings
    from models.gguf_header import read_gguf_header
    from tests.models.library_gguf import write_gguf

    window, page = open_chat_window(qtbot)
    page.panel.sections["Load settings"].expand(animate=False)
    form = page.panel.load_form
    assert form.gpu_layers_value.text() == "—" and not form.gpu_layers.isEnabled()
    assert "Choose a model" in form.gpu_layers.toolTip()
    assert form.settings().gpu_layers == ALL_LAYERS  # "all" stays the wish, not "1 layer"

    # As load_model does: the model's settings first, its header (read off the GUI
    # thread) afterwards. One block: two layers with the output layer.
    header = read_gguf_header(write_gguf(tmp_path / "tiny.gguf"))
    form.set_settings(LoadSettings())
    form.set_machine(header, 8 << 30, 8 << 30)
    assert form.gpu_layers.isEnabled() and form.gpu_layers.maximum() == 2
    assert form.gpu_layers_value.text() == "all" and form.settings().gpu_layers == ALL_LAYERS
    form.gpu_layers.setFocus()
    qtbot.keyClick(form.gpu_layers, Qt.Key.Key_Home)  # a person moves it
    assert form.gpu_layers_value.text() == "0 of 2" and form.settings().gpu_layers == 0
    qtbot.keyClick(form.gpu_layers, Qt.Key.Key_Right)
    assert form.gpu_layers_value.text() == "1 of 2" and form.settings().gpu_layers == 1
    qtbot.keyClick(form.gpu_layers, Qt.Key.Key_End)
    assert form.gpu_layers_value.text() == "all" and form.settings().gpu_layers == ALL_LAYERS
    form.set_settings(LoadSettings(gpu_layers=1))
    assert form.gpu_layers_value.text() == "1 of 2" and form.settings().gpu_layers == 1
    form.set_machine(header, 8 << 30, None)  # this llama.cpp build sees no GPU
    assert form.gpu_layers_value.text() == "CPU only" and not form.gpu_layers.isEnabled()
    assert form.settings().gpu_layers == 0 and "No GPU" in form.gpu_layers.toolTip()


# -- with SmolLM2 ------------------------------------------------------------------------


@pytest.mark.smollm2
def test_opening_a_conversation_loads_its_model_with_its_remembered_settings(qtbot, smollm2_gguf,
                                                                             shared_engine):
    from app.core.model_settings import remember_load_settings
    from models.engine.settings import LoadSettings
    from tests.models.conftest import FAST_SETTINGS

    conversation_id = saved_conversation(smollm2_gguf.resolve())
    window, page = open_chat_window(qtbot, client=shared_engine)
    remember_load_settings(smollm2_gguf, LoadSettings(**{**FAST_SETTINGS, "context_length": 768}))
    assert page.panel.load_form.gpu_layers_value.text() == "—"
    page.open_conversation(conversation_id)
    assert page.engine.loading and page.engine.model_path == smollm2_gguf.resolve()
    assert page.panel.current_model() == smollm2_gguf.resolve()  # the picker shows it at once
    assert not page.banner.isVisible()
    qtbot.waitUntil(lambda: page.engine.ready, timeout=120_000)
    assert page.engine.report.context_length == 768
    form = page.panel.load_form
    qtbot.waitUntil(lambda: "RAM" in form.verdict.text(), timeout=30_000)
    assert form.gpu_layers_value.text() in ("all", "CPU only")  # the model's layers are known
    page.panel.sampling.max_tokens.setValue(8)
    page.box.setPlainText("Name another one.")
    page.send()
    wait_reply(qtbot, page)
    assert page.branch[-1].stats["stop_reason"] in ("stop", "length")
    page.shutdown()


@pytest.mark.smollm2
def test_a_different_loaded_model_is_offered_not_swapped_and_the_offer_loads_it(
        qtbot, chat, smollm2_gguf, tmp_path):
    window, page = chat  # SmolLM2 loaded
    other = second_model_file(smollm2_gguf, tmp_path)
    conversation_id = saved_conversation(other)
    page.conversations.refresh()
    page.sidebar.list.clicked.emit(page.conversations.index(0))
    assert page.conversation_id == conversation_id and "Apple." in page.transcript.toPlainText()
    assert not page.engine.loading and page.engine.model_path == smollm2_gguf.resolve()  # not swapped
    assert page.panel.current_model() == smollm2_gguf.resolve()
    assert page.banner.isVisible() and page.banner.level() == "info"
    assert other.name in page.banner.text() and smollm2_gguf.name in page.banner.text()
    button = page.banner.action_button
    assert button.isVisible() and button.text() == "Load SmolLM2-copy.Q4_1"
    assert window.focusWidget() is page.box  # non-modal: typing goes on
    button.click()
    assert not page.banner.isVisible()
    assert page.engine.loading and page.engine.model_path == other
    assert page.panel.current_model() == other
    qtbot.waitUntil(lambda: page.engine.ready, timeout=120_000)
    assert page.engine.report.path == other


@pytest.mark.smollm2
def test_continuing_with_the_loaded_model_drops_the_offer_and_records_that_model(
        qtbot, chat, smollm2_gguf, tmp_path):
    window, page = chat
    other = second_model_file(smollm2_gguf, tmp_path)
    conversation_id = saved_conversation(other)
    page.open_conversation(conversation_id)
    assert page.banner.action_button.text() == "Load SmolLM2-copy.Q4_1"
    page.panel.sampling.max_tokens.setValue(200)
    page.box.setPlainText("Write a long story about a dragon.")
    page.send()
    assert page.engine.streaming and not page.banner.isVisible()  # the person chose to go on
    elsewhere = saved_conversation(None)
    page.open_conversation(elsewhere)  # refused while the reply streams, as before
    assert page.conversation_id == conversation_id and "Esc" in page.composer.note.text()
    page.stop()
    wait_reply(qtbot, page)
    assert ConversationStore().model_of(conversation_id) == str(page.engine.model_path)
    assert page.engine.model_path == smollm2_gguf.resolve()
    page.open_conversation(elsewhere)
    page.open_conversation(conversation_id)  # now written with the loaded model: no offer
    assert not page.banner.isVisible() and page.engine.model_path == smollm2_gguf.resolve()


def test_a_header_read_for_a_model_no_longer_chosen_is_not_shown(qtbot, tmp_path):
    """After a quick switch, the first model's header (read off the GUI thread) can arrive
    after the second's: it must not fill the form of the model now chosen."""
    from pathlib import Path

    from models.gguf_header import read_gguf_header
    from tests.models.library_gguf import write_gguf

    window, page = open_chat_window(qtbot)
    form = page.panel.load_form
    first = read_gguf_header(write_gguf(tmp_path / "first.gguf"))
    page.engine.model_path = Path(tmp_path / "second.gguf")  # as engine.load sets it
    page._machine_read(tmp_path / "first.gguf", (first, 8 << 30, 8 << 30))
    page._machine_read(tmp_path / "first.gguf", None, "first.gguf could not be read.")
    assert form.gpu_layers_value.text() == "—" and "first.gguf" not in form.verdict.text()
    page._machine_read(tmp_path / "second.gguf", (first, 8 << 30, 8 << 30))
    assert form.gpu_layers.isEnabled() and form.gpu_layers.maximum() == 2


def test_a_relative_model_path_is_found_in_the_library_once_its_list_arrives(qtbot, tmp_path,
                                                                              monkeypatch):
    """An older CLI recorded "tiny.Q4_K.gguf" as typed. The GUI does not look in its own
    working directory but in the models folder and the Library, whose list is read off
    the GUI thread: opened before that list arrives, the conversation says the file was
    not found, and offers the model once the list shows it; the full path is recorded."""
    import threading
    from pathlib import Path

    from app.ui.chat.page import ChatPage
    from models.library import Library
    from tests.models.library_gguf import write_gguf

    model = write_gguf(tmp_path / "elsewhere" / "tiny.Q4_K.gguf").resolve()
    Library().import_path(model)  # a Library row outside the models folder
    monkeypatch.chdir(tmp_path / "elsewhere")  # where a cwd-relative lookup would find it
    conversation_id = saved_conversation("tiny.Q4_K.gguf")
    release = threading.Event()
    scan = ChatPage._scan_library
    monkeypatch.setattr(ChatPage, "_scan_library", staticmethod(lambda: release.wait(30) and scan()))
    window, page = open_chat_window(qtbot)
    page.engine.model_path, page.engine.report = tmp_path / "other.gguf", object()  # as if loaded

    page.open_conversation(conversation_id)
    assert page.banner.level() == "warning" and "saved as tiny.Q4_K.gguf" in page.banner.text()
    assert ConversationStore().model_of(conversation_id) == "tiny.Q4_K.gguf"
    release.set()  # the Library's list arrives
    qtbot.waitUntil(lambda: page.banner.level() == "info", timeout=10_000)
    assert page.banner.action_button.text() == "Load tiny.Q4_K" and "tiny.Q4_K.gguf" in page.banner.text()
    assert ConversationStore().model_of(conversation_id) == str(model)
    assert not page.engine.loading and page.engine.model_path == tmp_path / "other.gguf"  # offered only
    page.open_conversation(saved_conversation(None))
    page.open_conversation(conversation_id)  # found directly now
    assert page.banner.action_button.text() == "Load tiny.Q4_K"
    assert Path(ConversationStore().model_of(conversation_id)).is_absolute()


@pytest.mark.smollm2
def test_a_relative_model_path_in_the_models_folder_is_loaded(qtbot, smollm2_gguf, shared_engine):
    from models.foundation.paths import app_paths

    folder = app_paths().ensure().models
    copy = second_model_file(smollm2_gguf, folder)
    conversation_id = saved_conversation(copy.name)  # as an older CLI recorded it
    window, page = open_chat_window(qtbot, client=shared_engine)
    page.open_conversation(conversation_id)
    assert page.engine.loading and page.engine.model_path == copy.resolve()
    assert page.panel.current_model() == copy.resolve() and not page.banner.isVisible()
    assert ConversationStore().model_of(conversation_id) == str(copy.resolve())
    qtbot.waitUntil(lambda: page.engine.ready, timeout=120_000)
    assert page.engine.report.path == copy.resolve()
    page.shutdown()


def test_the_offer_keeps_a_long_model_name_whole_and_its_button_short(qtbot, tmp_path):
    from app.ui.widgets.banner import ACTION_TEXT_WIDTH, NON_BREAKING_HYPHEN
    from tests.models.library_gguf import write_gguf

    model = write_gguf(tmp_path / "SmolLM2-360M-Instruct-Q4_K_M-imatrix-long.gguf")
    conversation_id = saved_conversation(model)
    window, page = open_chat_window(qtbot)
    page.engine.model_path, page.engine.report = tmp_path / "other.gguf", object()  # as if loaded
    page.open_conversation(conversation_id)
    assert model.name in page.banner.text()  # the sentence as given
    assert model.name.replace("-", NON_BREAKING_HYPHEN) in page.banner.label.text()  # as shown
    button = page.banner.action_button
    assert button.fontMetrics().horizontalAdvance(button.text()) <= ACTION_TEXT_WIDTH
    assert "…" in button.text() and button.toolTip() == f"Load {model.stem}"
