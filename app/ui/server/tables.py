"""The Server page's two lists as table models: the request log and the models served.

Both are :class:`~app.ui.widgets.rows_model.RowsTableModel` (the one table model over
plain rows) with their columns. The log holds the server's ``RequestLogEntry`` rows
(:mod:`models.server`), at most :data:`LOG_LIMIT` of them: the oldest go first, so a
server that runs for days keeps a bounded window. The models table holds
``ModelStatus`` rows, loaded ones first.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Optional, Sequence

from PySide6.QtCore import QModelIndex
from PySide6.QtGui import QColor

from app.ui.theme import color
from app.ui.widgets.rows_model import Column, RowsTableModel

#: Requests the log keeps on screen.
LOG_LIMIT = 2000
#: Removed at once when the log is full (one model change per batch, not one per request).
LOG_TRIM = 200


def _clock(value: Any) -> str:
    """A log time (epoch seconds or a datetime) as the local wall-clock time."""
    if isinstance(value, (int, float)):
        value = _dt.datetime.fromtimestamp(value)
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone()
        return value.strftime("%H:%M:%S")
    return str(value or "")


def _count(value: Optional[int]) -> str:
    return "" if value is None else f"{value:,}"


def _tokens(entry, value: int) -> str:
    """A token count, blank for a request that ran no model (a model list, a refusal)."""
    return _count(value) if getattr(entry, "model", "") else ""


def _ttft(entry) -> str:
    seconds = getattr(entry, "ttft_seconds", None)
    if seconds is None:
        return ""
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def _speed(entry) -> str:
    speed = getattr(entry, "tokens_per_second", None)
    return "" if not speed else f"{speed:.1f}"


def _status(entry) -> str:
    status = getattr(entry, "status", None)
    return "" if status is None else str(status)


def _error(entry) -> str:
    return getattr(entry, "error", None) or ""


def _status_colour(entry):
    """Refused and failed requests (4xx, 5xx) in the theme's colour for bad news."""
    status = getattr(entry, "status", None)
    if status is None or status < 400:
        return None
    return QColor(color("bad"))


def _request(entry) -> str:
    return f"{getattr(entry, 'method', '') or ''} {getattr(entry, 'path', '') or ''}".strip()


LOG_COLUMNS = (
    Column("Time", lambda e: _clock(e.time), sort=lambda e: _clock(e.time)),
    Column("Client", lambda e: e.client or ""),
    Column("Request", _request),
    Column("Model", lambda e: e.model or "", tooltip=_error),
    Column("Prompt", lambda e: _tokens(e, e.prompt_tokens), sort=lambda e: e.prompt_tokens, align_right=True),
    Column("Cached", lambda e: _tokens(e, e.cached_tokens), sort=lambda e: e.cached_tokens, align_right=True),
    Column("Generated", lambda e: _tokens(e, e.completion_tokens), sort=lambda e: e.completion_tokens,
           align_right=True),
    Column("Drafted", lambda e: _tokens(e, getattr(e, "drafted_tokens", 0)),
           sort=lambda e: getattr(e, "drafted_tokens", 0), align_right=True),
    Column("Accepted", lambda e: _tokens(e, getattr(e, "accepted_tokens", 0)),
           sort=lambda e: getattr(e, "accepted_tokens", 0), align_right=True),
    Column("TTFT", _ttft, sort=lambda e: e.ttft_seconds, align_right=True),
    Column("tok/s", _speed, sort=lambda e: e.tokens_per_second, align_right=True),
    Column("Status", _status, sort=lambda e: e.status, tooltip=_error, foreground=_status_colour),
)


#: The widest text each log column usually shows: the columns get that width once, instead
#: of fitting their contents as rows arrive (no measuring per request, no jumping columns).
#: ``None``: the column takes the remaining width.
LOG_WIDTHS = ("00:00:00", "255.255.255.255:65535", "POST /v1/chat/completions", None, "100,000",
              "100,000", "100,000", "100,000", "100,000", "9999 ms", "999.9", "Status")


def fit_log_columns(view) -> None:
    """Give a view of the request log its column widths (see :data:`LOG_WIDTHS`)."""
    from PySide6.QtWidgets import QHeaderView

    header = view.horizontalHeader()
    metrics = view.fontMetrics()
    for column, sample in enumerate(LOG_WIDTHS):
        if sample is None:
            continue
        title = LOG_COLUMNS[column].header
        width = max(metrics.horizontalAdvance(sample), metrics.horizontalAdvance(title)) + 18
        header.setSectionResizeMode(column, QHeaderView.ResizeMode.Interactive)
        header.resizeSection(column, width)


class RequestLogModel(RowsTableModel):
    """The live request log: one row per request the server answered, newest last."""

    def __init__(self, parent=None) -> None:
        super().__init__(LOG_COLUMNS, parent)

    def append(self, entry) -> None:
        """Add ``entry`` at the end, dropping the oldest rows when the log is full."""
        if len(self.rows) >= LOG_LIMIT:
            self.beginRemoveRows(QModelIndex(), 0, LOG_TRIM - 1)
            for old in self.rows[:LOG_TRIM]:
                self._haystacks.pop(id(old), None)
            del self.rows[:LOG_TRIM]
            self.endRemoveRows()
        self.beginInsertRows(QModelIndex(), len(self.rows), len(self.rows))
        self.rows.append(entry)
        self.endInsertRows()


def _slots(status) -> str:
    return str(status.slots) if status.loaded and status.slots else ""


def _context(status) -> str:
    return _count(status.context_per_slot) if status.loaded and status.context_per_slot else ""


def _busy(status) -> str:
    if not status.loaded:
        return ""
    queued = getattr(status, "queued", 0) or 0
    active = getattr(status, "active_requests", 0) or 0
    if not active and not queued:
        return "idle"
    return f"{active} serving, {queued} waiting" if queued else f"{active} serving"


def _fingerprint(status) -> tuple:
    return (status.id, status.loaded, status.slots, status.context_per_slot,
            getattr(status, "active_requests", 0), getattr(status, "queued", 0))


MODEL_COLUMNS = (
    Column("Model", lambda s: s.id, tooltip=lambda s: str(s.path)),
    Column("State", lambda s: "loaded" if s.loaded else "not loaded", sort=lambda s: not s.loaded),
    Column("Slots", _slots, sort=lambda s: s.slots if s.loaded else None, align_right=True),
    Column("Context per slot", _context, sort=lambda s: s.context_per_slot if s.loaded else None,
           align_right=True),
    Column("Requests", _busy),
)


class ModelStatusModel(RowsTableModel):
    """The Library's models as the server sees them, loaded ones first."""

    def __init__(self, parent=None) -> None:
        super().__init__(MODEL_COLUMNS, parent)

    def set_status(self, statuses: Sequence[Any]) -> None:
        """Show ``statuses`` (a fresh ``models_status()``), loaded models first, then by name;
        the view keeps its sort when the person chose one."""
        rows = sorted(statuses, key=lambda s: (not s.loaded, s.id.lower()))
        if [_fingerprint(s) for s in rows] == [_fingerprint(s) for s in self.rows]:
            return  # nothing changed: no reset (a reset loses the view's selection)
        self.set_rows(rows)

    def loaded_count(self) -> int:
        return sum(1 for s in self.rows if s.loaded)
