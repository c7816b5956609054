"""Shared setup for the GUI tests."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def collect_windows_on_the_gui_thread(qtbot):
    """Before and after each test, delete closed windows and collect their Python wrappers
    here, on the GUI thread.

    pytest-qt only schedules a closed window's deletion (``deleteLater``), and nothing runs
    it until a later event loop: windows piled up and made a later theme switch re-polish
    thousands of widgets (19 s). Left to the cyclic collector, wrappers would be freed by
    whichever thread allocates next — a quantize or Hub worker — and Qt widgets must not
    die off the GUI thread (a segfault seen in these tests). Between the two, the app's
    own GUI-thread collector (:mod:`app.ui.garbage`) is what the window uses in real life."""
    import gc

    from PySide6.QtCore import QCoreApplication, QEvent

    from app.ui.garbage import collect_on_gui_thread

    collect_on_gui_thread(QCoreApplication.instance())

    def collect() -> None:
        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
        QCoreApplication.processEvents()
        gc.collect()

    collect()
    yield
    collect()


@pytest.fixture
def window(qtbot):
    """The real main window, shown offscreen; closing it runs every page's shutdown."""
    from app.ui.main_window import MainWindow

    win = MainWindow()
    qtbot.addWidget(win)
    win.show()
    yield win
    win.close()
