"""Running a core job off the GUI thread: the one Qt wrapper every long job goes through.

A job is a plain function ``job(report, cancel) -> result`` from the Qt-free core (the
same shape :func:`app.core.console.run_job` runs in the terminal). :class:`JobWorker`
runs it on Qt's global thread pool; its signals carry :class:`~models.foundation.jobs.Progress`
snapshots, the result, or the user-facing error sentence back to the GUI thread, and
:meth:`JobWorker.cancel` sets the job's :class:`~models.foundation.jobs.CancelToken`.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal
from shiboken6 import isValid

from models.foundation.errors import Cancelled, QuantDeskError
from models.foundation.jobs import CancelToken, Progress

log = logging.getLogger(__name__)

Job = Callable[[Callable[[Progress], None], CancelToken], Any]


class JobSignals(QObject):
    """Signals of a :class:`JobWorker` (a QRunnable cannot own signals itself)."""

    progress = Signal(object)   # Progress
    finished = Signal(object)   # the job's return value
    failed = Signal(str)        # a sentence for the user
    cancelled = Signal()


class JobWorker(QRunnable):
    """Run ``job`` on a pool thread; connect to :attr:`signals` before :meth:`start`."""

    def __init__(self, job: Job) -> None:
        super().__init__()
        self.job = job
        self.token = CancelToken()
        self.signals = JobSignals()
        self.setAutoDelete(False)  # the GUI keeps the worker while showing its result

    def start(self, pool: QThreadPool | None = None) -> "JobWorker":
        """Queue the job on ``pool`` (the global pool by default)."""
        (pool or QThreadPool.globalInstance()).start(self)
        return self

    def cancel(self) -> None:
        """Ask the job to stop at its next check; it then emits ``cancelled``."""
        self.token.cancel()

    def run(self) -> None:  # runs on a pool thread
        try:
            result = self.job(self._progress, self.token)
        except Cancelled:
            self._emit(self.signals.cancelled)
        except QuantDeskError as exc:
            self._emit(self.signals.failed, exc.user_message)
        except Exception as exc:  # a bug: the user still gets a sentence, the log the trace
            log.exception("job failed")
            self._emit(self.signals.failed,
                       f"Something went wrong inside QuantDesk ({type(exc).__name__}: {exc}). "
                       "The details are in the log file; please report it.")
        else:
            self._emit(self.signals.finished, result)

    def _progress(self, progress: Progress) -> None:
        self._emit(self.signals.progress, progress)

    @staticmethod
    def _emit(signal, *args) -> None:
        """Emit, unless the application is already gone (the window closed while the job
        ran and Python is tearing Qt down): then the answer has nowhere to go."""
        try:
            signal.emit(*args)
        except RuntimeError:
            log.debug("a job finished after its signals were deleted; its result is dropped")


#: Workers started by :func:`start_job`, by id → (worker, when its final signal arrived or ``None``).
_ALIVE: dict[int, tuple[JobWorker, Optional[float]]] = {}
#: How long a finished worker stays referenced. The pool thread still calls the runnable
#: (``autoDelete()``) just after ``run()`` returns, which can be after the final signal
#: reached the GUI thread; freeing the Python object then would free the C++ runnable
#: under the pool's feet (a segfault seen in tests).
_KEEP_AFTER_FINISH_S = 10.0


def _ended(key: int) -> None:
    if key in _ALIVE:
        _ALIVE[key] = (_ALIVE[key][0], time.monotonic())


def start_job(job: Job, on_finished: Optional[Callable[[Any], None]] = None,
              on_failed: Optional[Callable[[str], None]] = None,
              on_cancelled: Optional[Callable[[], None]] = None,
              on_progress: Optional[Callable[[Progress], None]] = None,
              pool: Optional[QThreadPool] = None, owner: Optional[QObject] = None) -> JobWorker:
    """Start ``job`` on a :class:`JobWorker` with its callbacks connected.

    ``owner`` is the widget the callbacks update: once Qt has deleted it (the window
    closed while the job ran) they are skipped instead of touching deleted widgets.

    The worker stays referenced until well after its final signal (finished, failed or
    cancelled), so a page need not hold every worker it starts; it is released on the GUI
    thread by a later call (the connections hold only its id, so no reference cycle keeps it).
    """
    now = time.monotonic()
    for key, (_worker, ended) in list(_ALIVE.items()):
        if ended is not None and now - ended > _KEEP_AFTER_FINISH_S:
            del _ALIVE[key]
    worker = JobWorker(job)
    key = id(worker)
    if on_progress is not None:
        worker.signals.progress.connect(_while_alive(owner, on_progress))
    for signal, callback in ((worker.signals.finished, on_finished), (worker.signals.failed, on_failed),
                             (worker.signals.cancelled, on_cancelled)):
        if callback is not None:
            signal.connect(_while_alive(owner, callback))
        signal.connect(lambda *_args, k=key: _ended(k))
    _ALIVE[key] = (worker, None)
    return worker.start(pool)


def _while_alive(owner: Optional[QObject], callback: Callable[..., Any]) -> Callable[..., Any]:
    """``callback``, skipped once ``owner``'s C++ object is gone (no owner: always run)."""
    if owner is None:
        return callback
    return lambda *args: callback(*args) if isValid(owner) else None
