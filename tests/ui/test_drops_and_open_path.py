"""Files dragged over the window: accepted over every widget, opened through one entry."""

from pathlib import Path

from PySide6.QtCore import QMimeData, QPoint, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDragMoveEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QPlainTextEdit

from app.ui.main_window import MainWindow
from tests.models.library_gguf import write_gguf


def _file_mime(path: Path) -> QMimeData:
    """What a file manager's drag carries: the URL and the same as plain text."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    mime.setText(QUrl.fromLocalFile(str(path)).toString())
    return mime


def _drag_and_drop(widget, mime: QMimeData) -> tuple[bool, bool, bool]:
    """Deliver enter, move and drop to ``widget`` as Qt would; whether each was accepted."""
    pos = QPoint(widget.width() // 2, widget.height() // 2)
    action = Qt.DropAction.CopyAction
    buttons, mods = Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier
    enter = QDragEnterEvent(QPointF(pos), action, mime, buttons, mods)
    QApplication.sendEvent(widget, enter)
    move = QDragMoveEvent(QPointF(pos), action, mime, buttons, mods)
    QApplication.sendEvent(widget, move)
    drop = QDropEvent(QPointF(pos), action, mime, buttons, mods)
    QApplication.sendEvent(widget, drop)
    return enter.isAccepted(), move.isAccepted(), drop.isAccepted()


def test_a_gguf_dropped_anywhere_opens_the_chat_page(qtbot, tmp_path):
    model = write_gguf(tmp_path / "tiny-Q4_K_M.gguf", file_type=15)
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    window.show_page("Settings")
    opened = []
    window.pages["Chat"].open_path = opened.append  # record what the page is asked to open
    for widget in (window.nav.viewport(), window.stack, window.current_page()):
        assert _drag_and_drop(widget, _file_mime(model)) == (True, True, True)
    assert opened == [model.resolve()] * 3
    assert window.current_page().title == "Chat"


def test_a_text_box_does_not_swallow_a_file_url(qtbot, tmp_path):
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    box = QPlainTextEdit(window.current_page())
    box.show()
    opened = []
    window.pages["Quantize"].open_path = opened.append
    assert _drag_and_drop(box.viewport(), _file_mime(folder)) == (True, True, True)
    assert box.toPlainText() == ""
    assert opened == [folder.resolve()]
    assert window.current_page().title == "Quantize"


def test_text_drags_pass_through_and_bad_paths_show_a_banner(qtbot, tmp_path):
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    box = QPlainTextEdit(window.current_page())
    box.show()
    text = QMimeData()
    text.setText("just words")
    _drag_and_drop(box.viewport(), text)
    assert box.toPlainText() == "just words"  # the text box handled its own text drop

    notes = tmp_path / "notes.txt"
    notes.write_text("x")
    assert _drag_and_drop(window.stack, _file_mime(notes)) == (True, True, True)
    assert window.banner.isVisibleTo(window)
    assert "neither a GGUF model file" in window.banner.label.text()
    assert window.open_path(tmp_path / "missing.gguf") is None
    assert "does not exist" in window.banner.label.text()


def test_initial_path_opens_once_the_window_runs(qtbot, tmp_path):
    model = write_gguf(tmp_path / "m.gguf", file_type=15)
    window = MainWindow(initial_path=model)
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: getattr(window.pages["Chat"], "model_path", None) == model.resolve())
    assert window.current_page().title == "Chat"


def test_geometry_is_restored_in_a_new_window(qtbot):
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    window.resize(700, 500)
    qtbot.waitUntil(lambda: window.width() == 700)
    window.close()
    again = MainWindow()
    qtbot.addWidget(again)
    assert (again.width(), again.height()) == (700, 500)
