"""The download queue: bytes, speed, ETA and state per download; pause, resume, cancel.

The core's :class:`models.hub.downloads.DownloadManager` runs the queue in its own thread
and calls ``on_update(task)`` from there; :class:`_Bridge` turns that into a Qt signal
so the table repaints on the GUI thread. Partial downloads found at start are listed
paused (``DownloadManager.restore``); closing the window pauses what runs, so the next
start lists it paused again. Automatic retries show as the state "retrying".
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.ui.widgets.banner import MessageBanner
from app.ui.widgets.confirm import confirm as ask
from app.ui.widgets.rows_model import Column, RowsTableModel, make_table

STATE_WORDS = {"queued": "queued", "downloading": "downloading", "retrying": "retrying (connection lost)",
               "paused": "paused", "cancelled": "cancelled", "done": "done", "failed": "failed"}


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def _bytes_text(task) -> str:
    p = task.progress
    if p is None:
        return f"– / {_mib(task.plan.size)}"
    return f"{_mib(p.done)} / {_mib(p.total or task.plan.size)} ({(p.fraction or 0) * 100:.0f}%)"


def _speed_eta(task) -> str:
    """Speed and ETA from the core's progress line (``name 1.0/2.0 MiB 3.1 MiB/s ETA 0:05``)."""
    p = task.progress
    if p is None or task.state not in ("downloading", "retrying"):
        return ""
    if p.stage == "Retrying":
        return p.detail
    words = p.detail.split()
    return " ".join(words[-4:]) if len(words) >= 4 else p.detail


DOWNLOAD_COLUMNS = [
    Column("Model", lambda t: f"{t.plan.repo_id} {t.plan.label}",
           tooltip=lambda t: "\n".join(f.path for f in t.plan.files)),
    Column("State", lambda t: STATE_WORDS.get(t.state, t.state), tooltip=lambda t: t.error or ""),
    Column("Bytes", _bytes_text, sort=lambda t: t.progress.done if t.progress else 0, align_right=True),
    Column("Speed and ETA", _speed_eta),
]


class _Bridge(QObject):
    """Carries the manager's thread callbacks to the GUI thread."""

    updated = Signal(object)


class DownloadsPanel(QWidget):
    """The queue table with Pause, Resume and Cancel for the selected download."""

    #: Emitted on the GUI thread for every change of a task (tests wait on it).
    task_changed = Signal(object)
    #: Emitted when a task is done, with its task (the Library rescans).
    task_done = Signal(object)

    def __init__(self, banner: MessageBanner, parent: Optional[QWidget] = None) -> None:
        super().__init__(parent)
        self.banner = banner
        self._manager = None
        self._on_done: dict[int, Callable[[object], None]] = {}
        self._bridge = _Bridge(self)
        self._bridge.updated.connect(self._task_updated, Qt.ConnectionType.QueuedConnection)
        self._dirty: set[int] = set()
        self._repaint = QTimer(self, interval=200)  # progress repaints at most 5 times a second
        self._repaint.timeout.connect(self._flush)
        self.model = RowsTableModel(DOWNLOAD_COLUMNS, self)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        top = QHBoxLayout()
        top.addWidget(QLabel("Downloads"))
        top.addStretch(1)
        self.buttons: dict[str, QPushButton] = {}
        for text, slot in (("Pause", self.pause_selected), ("Resume", self.resume_selected),
                           ("Cancel download", self.cancel_selected)):
            button = QPushButton(text)
            button.setAccessibleName(text)
            button.clicked.connect(lambda _c=False, s=slot: s())
            top.addWidget(button)
            self.buttons[text] = button
        layout.addLayout(top)
        self.view = make_table(self.model, "Download queue")
        self.view.selectionModel().selectionChanged.connect(lambda *_: self._update_buttons())
        layout.addWidget(self.view, 1)
        self._update_buttons()

    @property
    def manager(self):
        """The core's queue, started on first use (its thread only waits until given work)."""
        if self._manager is None:
            from models.hub.downloads import DownloadManager

            self._manager = DownloadManager(on_update=self._bridge.updated.emit)
        return self._manager

    def reset_manager(self) -> None:
        """The models folder moved: the next download starts a queue there. Running
        downloads finish where they began."""
        if self._manager is not None and not any(
                t.state in ("queued", "downloading", "retrying") for t in self._manager.tasks):
            self._manager = None

    def restore(self) -> list:
        """List, paused, the partial downloads a previous run left (call off the GUI thread)."""
        return self.manager.restore()

    def show_restored(self, tasks: list) -> None:
        for task in tasks:
            self.model.update_row(task)
        self._update_buttons()

    def enqueue(self, plan, on_done: Optional[Callable[[object], None]] = None):
        """Add ``plan`` to the queue; ``on_done(task)`` runs on the GUI thread when it is done."""
        task = self.manager.enqueue(plan)
        if on_done is not None:
            self._on_done[id(task)] = on_done
        self.model.update_row(task)
        self._repaint.start()
        return task

    def _task_updated(self, task) -> None:
        if task.state in ("downloading", "retrying") and task.progress is not None:
            self._dirty.add(id(task))  # repainted by the timer: a progress flood costs nothing
        else:
            self.model.update_row(task)
            self._update_buttons()
        if task.state == "done":
            callback = self._on_done.pop(id(task), None)
            self.task_done.emit(task)
            if callback is not None:
                callback(task)
        elif task.state == "failed":
            from app.ui.models.hub_panel import show_hub_error

            error = task.error or "The download failed."
            if any(word in error.lower() for word in ("token", "gated", "private")):
                show_hub_error(self.banner, error, self)
            else:
                self.banner.show_message(error, level="error", action_text="Retry",
                                         on_action=lambda t=task: self.resume(t))
        self.task_changed.emit(task)

    def _flush(self) -> None:
        if self._dirty:
            for task in self.model.rows:
                if id(task) in self._dirty:
                    self.model.update_row(task)
            self._dirty.clear()
            self._update_buttons()

    def selected(self):
        rows = self.view.selectionModel().selectedRows()
        return self.model.row_at(rows[0]) if rows else None

    def _update_buttons(self) -> None:
        task = self.selected()
        state = task.state if task is not None else None
        self.buttons["Pause"].setEnabled(state in ("queued", "downloading", "retrying"))
        self.buttons["Resume"].setEnabled(state in ("paused", "failed"))
        self.buttons["Cancel download"].setEnabled(state in ("queued", "downloading", "retrying", "paused", "failed"))

    def pause(self, task) -> None:
        self.manager.pause(task)

    def resume(self, task) -> None:
        self.banner.clear()
        self.manager.resume(task)
        self.model.update_row(task)
        self._update_buttons()

    def cancel(self, task, confirm: bool = True) -> bool:
        """Cancel ``task`` and delete its partial data, after a confirmation."""
        done = _mib(task.progress.done if task.progress else 0)
        if confirm and not ask(self, "Cancel download", f"Cancel {task.plan.repo_id} {task.plan.label} and "
                               f"delete the {done} downloaded so far?", "confirmCancelDownload"):
            return False
        self.manager.cancel(task)
        self.model.update_row(task)
        self._update_buttons()
        return True

    def pause_selected(self) -> None:
        if (task := self.selected()) is not None:
            self.pause(task)

    def resume_selected(self) -> None:
        if (task := self.selected()) is not None:
            self.resume(task)

    def cancel_selected(self) -> None:
        if (task := self.selected()) is not None:
            self.cancel(task)

    def shutdown(self, timeout: float = 5.0) -> None:
        """Pause every running or queued download and wait for it to stop writing.

        The partial files and their records stay, so the next start lists them paused.
        """
        if self._manager is None:
            return
        self._repaint.stop()
        active = [t for t in self._manager.tasks if t.state in ("queued", "downloading", "retrying")]
        for task in active:
            self._manager.pause(task)
        for task in active:
            task.wait(timeout)

    @staticmethod
    def target_folder(task) -> Optional[Path]:
        """The folder the task's files went to (a checkpoint's folder), once done."""
        return Path(task.paths[0]).parent if task.paths else None
