"""Files dragged over the window: accepted over every widget, opened through one entry."""

from PySide6.QtCore import QMimeData
from PySide6.QtWidgets import QPlainTextEdit

from app.ui.main_window import MainWindow
from tests.models.library_gguf import write_gguf
from tests.ui.drag import drag_and_drop, file_mime


def test_a_gguf_dropped_anywhere_opens_the_chat_page(qtbot, tmp_path):
    model = write_gguf(tmp_path / "tiny-Q4_K_M.gguf", file_type=15)
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    window.show_page("Settings")
    opened = []
    window.pages["Chat"].open_path = opened.append  # record what the page is asked to open
    for widget in (window.nav.viewport(), window.stack, window.current_page()):
        assert drag_and_drop(widget, file_mime(model)) == (True, True, True)
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
    assert drag_and_drop(box.viewport(), file_mime(folder)) == (True, True, True)
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
    drag_and_drop(box.viewport(), text)
    assert box.toPlainText() == "just words"  # the text box handled its own text drop

    notes = tmp_path / "notes.txt"
    notes.write_text("x")
    assert drag_and_drop(window.stack, file_mime(notes)) == (True, True, True)
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
