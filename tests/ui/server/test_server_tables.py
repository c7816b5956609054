"""The Server page's tables over the server's own records: the request log keeps a bounded
window, shows blanks where a request ran no model, and colours refusals; the models table
puts loaded models first."""

from pathlib import Path

from PySide6.QtCore import Qt

from app.ui.server.tables import LOG_LIMIT, LOG_TRIM, ModelStatusModel, RequestLogModel
from models.server.engine_pool import ModelStatus
from models.server.request_log import RequestLogEntry


def texts(model, row: int) -> list[str]:
    return [model.index(row, c).data() for c in range(model.columnCount())]


def test_log_rows_show_tokens_timing_and_status_and_the_log_stays_bounded(qtbot):
    log = RequestLogModel()
    log.append(RequestLogEntry("127.0.0.1:5000", "POST", "/v1/chat/completions", 200, model="smol",
                               prompt_tokens=2048, cached_tokens=2000, completion_tokens=16,
                               drafted_tokens=12, accepted_tokens=9,
                               ttft_seconds=0.0423, tokens_per_second=51.27, time=0))
    log.append(RequestLogEntry("127.0.0.1:5001", "GET", "/v1/models", 401, error="This server needs an API key"))
    assert texts(log, 0)[1:] == ["127.0.0.1:5000", "POST /v1/chat/completions", "smol", "2,048", "2,000",
                                 "16", "12", "9", "42 ms", "51.3", "200"]
    assert texts(log, 1)[4:9] == ["", "", "", "", ""]  # no model ran: no token counts
    status = log.columnCount() - 1
    assert log.index(0, status).data(Qt.ItemDataRole.ForegroundRole) is None
    assert log.index(1, status).data(Qt.ItemDataRole.ForegroundRole) is not None  # in red
    assert log.index(1, status).data(Qt.ItemDataRole.ToolTipRole) == "This server needs an API key"

    for i in range(LOG_LIMIT):
        log.append(RequestLogEntry("c", "GET", f"/{i}", 200))
    assert log.rowCount() == LOG_LIMIT + 2 - LOG_TRIM
    assert texts(log, log.rowCount() - 1)[2] == f"GET /{LOG_LIMIT - 1}"  # the newest kept, last


def test_every_control_of_the_page_has_an_accessible_name(qtbot):
    from PySide6.QtWidgets import (QAbstractButton, QAbstractItemView, QAbstractSpinBox, QHeaderView,
                                   QLineEdit)

    from app.ui.server.page import ServerPage

    page = ServerPage()
    qtbot.addWidget(page)
    controls = [w for kind in (QAbstractButton, QLineEdit, QAbstractSpinBox, QAbstractItemView)
                for w in page.findChildren(kind)
                if w.isVisibleTo(page) and not w.objectName().startswith("qt_")  # Qt's own parts
                and not isinstance(w, QHeaderView)]
    unnamed = [f"{type(w).__name__} {w.text() if hasattr(w, 'text') else ''}" for w in controls
               if not w.accessibleName()]
    assert len(controls) >= 14 and unnamed == []


def test_models_table_lists_loaded_models_first_and_resets_only_on_change(qtbot):
    models = ModelStatusModel()
    idle = ModelStatus("b-model", Path("/m/b.gguf"), False, 0, 0, 0, 0)
    busy = ModelStatus("a-model", Path("/m/a.gguf"), True, 4, 4096, 3, 2)
    models.set_status([idle, busy])
    assert texts(models, 0) == ["a-model", "loaded", "4", "4,096", "3 serving, 2 waiting"]
    assert texts(models, 1) == ["b-model", "not loaded", "", "", ""]
    resets = []
    models.modelReset.connect(lambda: resets.append(1))
    models.set_status([ModelStatus(*[getattr(busy, f) for f in busy.__dataclass_fields__]), idle])
    assert resets == [] and models.loaded_count() == 1
