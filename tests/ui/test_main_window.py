"""The main window offscreen: the five places, navigation, the About box."""

import PySide6
from PySide6.QtCore import qVersion

from app import __version__
from app.ui.application import create_application
from app.ui.main_window import MainWindow
from app.ui.pages import page_classes

PLACES = ["Chat", "Models", "Quantize", "Server", "Settings"]


def test_five_places_are_present_and_navigable(qtbot):
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    assert window.windowTitle() == "QuantDesk"
    assert [window.nav.item(i).text() for i in range(window.nav.count())] == PLACES
    assert [p.title for p in page_classes()] == PLACES
    assert window.current_page().title == "Chat"
    for row, title in enumerate(PLACES):
        window.nav.setCurrentRow(row)
        assert window.stack.currentIndex() == row
        assert window.current_page().title == title
        assert window.current_page().isVisible()
    assert window.show_page("Models") is window.current_page()


def test_window_and_application_have_the_icon(qtbot):
    app = create_application()
    window = MainWindow()
    qtbot.addWidget(window)
    assert not window.windowIcon().isNull()
    assert not app.windowIcon().isNull()
    assert app.applicationVersion() == __version__


def test_about_box_names_quantdesk_llama_cpp_and_qt_versions(qtbot):
    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    box = window.show_about()
    qtbot.waitUntil(box.isVisible)
    text = box.text()
    assert f"QuantDesk {__version__}" in text
    assert "llama-cpp-python 0." in text and "CPU" in text
    assert f"Qt {qVersion()}" in text and PySide6.__version__ in text
    box.close()
