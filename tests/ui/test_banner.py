"""The message banner keeps file names whole on screen, copies their real characters, and
elides a long action."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication, QTextLayout

from app.ui.widgets.banner import (ACTION_TEXT_WIDTH, NON_BREAKING_HYPHEN, MessageBanner,
                                   keep_file_names_whole)

NAME = "SmolLM2-360M-Instruct-Q4_K_M.gguf"
SENTENCE = (f"This conversation was written with {NAME}. A well-known model in "
            f"/tmp/moved-away/{NAME}, is loaded now.")


def line_texts(label, width: int) -> list[str]:
    """The lines Qt breaks the label's text into at ``width`` pixels."""
    layout = QTextLayout(label.text(), label.font())
    layout.beginLayout()
    while (line := layout.createLine()).isValid():
        line.setLineWidth(width)
    layout.endLayout()
    text = label.text()
    return [text[layout.lineAt(i).textStart():layout.lineAt(i).textStart() + layout.lineAt(i).textLength()]
            for i in range(layout.lineCount())]


def test_only_file_names_get_non_breaking_hyphens():
    shown = keep_file_names_whole(SENTENCE)
    assert shown.count(NAME.replace("-", NON_BREAKING_HYPHEN)) == 2
    assert "well-known" in shown and "/tmp/moved-away/" in shown  # words and folders may break
    assert keep_file_names_whole("no file here - really.") == "no file here - really."


def test_a_file_name_is_not_wrapped_at_its_hyphens_and_copies_as_it_is(qtbot):
    banner = MessageBanner()
    qtbot.addWidget(banner)
    banner.show_message(SENTENCE, "info")
    assert banner.text() == SENTENCE  # what callers compare and tests read
    for width in (180, 240, 320):
        for line in line_texts(banner.label, width):
            assert not line.rstrip().endswith(("SmolLM2" + NON_BREAKING_HYPHEN, "SmolLM2-")), line
        assert any(NAME.replace("-", NON_BREAKING_HYPHEN) in line for line in line_texts(banner.label, width))

    banner.label.setSelection(0, len(banner.label.text()))
    banner.label.setFocus()
    qtbot.keyClick(banner.label, Qt.Key.Key_C, Qt.KeyboardModifier.ControlModifier)
    assert QGuiApplication.clipboard().text() == SENTENCE  # a pasted path must work
    QGuiApplication.clipboard().clear()
    banner.copy_message()
    assert QGuiApplication.clipboard().text() == SENTENCE


def test_a_long_action_is_elided_and_its_tooltip_names_it_whole(qtbot):
    banner = MessageBanner()
    qtbot.addWidget(banner)
    calls = []
    action = f"Load {NAME[:-5]}-with-an-even-longer-name"
    banner.show_message("x", "info", action, lambda: calls.append(1))
    button = banner.action_button
    assert "…" in button.text() and button.text().endswith("name")  # the end tells models apart
    assert button.fontMetrics().horizontalAdvance(button.text()) <= ACTION_TEXT_WIDTH
    assert button.toolTip() == action and button.accessibleName() == action
    button.click()
    assert calls == [1]
    banner.show_message("y", "error", "Reload model", lambda: None)
    assert banner.action_button.text() == "Reload model" and banner.action_button.toolTip() == ""


def test_the_action_goes_under_the_sentence_when_the_banner_is_narrow(qtbot):
    banner = MessageBanner()
    qtbot.addWidget(banner)
    banner.show_message(SENTENCE, "info", f"Load {NAME[:-5]}", lambda: None)
    banner.resize(900, 80)
    qtbot.waitUntil(banner.action_beside_text)
    button, label = banner.action_button, banner.label
    qtbot.waitUntil(lambda: button.geometry().left() > label.geometry().right())  # one row
    # Before: the whole name and the button side by side made the banner (and the Chat page's
    # middle) at least 494 px wide, so a 900 px window cut off the side panel.
    least = banner.minimumSizeHint().width()
    beside = label.minimumSizeHint().width() + button.sizeHint().width()
    assert banner.minimumWidth() < beside
    banner.resize(banner.minimumWidth(), 120)
    qtbot.waitUntil(lambda: not banner.action_beside_text())
    qtbot.waitUntil(lambda: button.geometry().top() >= label.geometry().bottom())  # under it
    assert button.geometry().right() <= banner.width() and label.geometry().right() <= banner.width()
    assert least >= label.minimumSizeHint().width()  # a whole file name still fits one line
