"""Python's cyclic garbage collector, run on the GUI thread only.

Left automatic, the collector runs in whichever thread happens to allocate when a
generation's threshold is crossed — often a worker thread (a reply stream, a quantize
or Hub job). If the garbage it then frees holds Qt wrappers (a closed page, a finished
job's signal object, the receiver of a queued connection), their C++ objects are deleted
on that worker thread while the GUI thread may be delivering events to them: a segfault
in ``QApplicationPrivate::notify_helper`` or, in PySide6 6.12, in shiboken's
``runDeletionInMainThread`` (both seen in this project's tests, about one run in two).

So automatic collection is switched off and a timer on the GUI thread collects with the
same generation thresholds Python would use — the approach pyqtgraph takes for the same
reason (``pyqtgraph.util.garbage_collector``). Reference counting still frees everything
that is not in a cycle at once, on any thread; only cycles wait for the next check.

At its first check — the window is built by then — the collector moves everything alive
into the permanent generation (``gc.freeze``): modules, classes and the window live as
long as the process, and a full collection that scans them costs 50–90 ms here, a visible
stall in the middle of a streaming reply. Python's own trigger avoids most full
collections with a heuristic it does not expose; after the freeze a full collection
scans only what was created since, a few milliseconds.
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

CHECK_MS = 250  # how often the GUI thread looks at the collector's counts


class GuiThreadCollector(QObject):
    """Runs generation 0/1/2 collections from a GUI-thread timer (see the module text)."""

    def __init__(self, parent: QObject) -> None:
        super().__init__(parent)
        self.thresholds = gc.get_threshold()
        self.frozen = False
        gc.disable()
        self._timer = QTimer(self, interval=CHECK_MS)
        self._timer.timeout.connect(self.check)
        self._timer.start()

    def check(self) -> None:
        """Collect the oldest generation whose count passed its threshold, as Python does."""
        if not self.frozen:
            gc.freeze()
            self.frozen = True
        counts = gc.get_count()
        for generation in (2, 1, 0):
            if counts[generation] > self.thresholds[generation]:
                gc.collect(generation)
                return


def collect_on_gui_thread(app: QObject) -> GuiThreadCollector:
    """Install the collector on ``app`` (the QApplication) once; later calls return it."""
    collector = app.findChild(GuiThreadCollector)
    return collector if collector is not None else GuiThreadCollector(app)
