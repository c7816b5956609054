"""The Server page: the local OpenAI-compatible API server in the window.

On/off, the address to copy, the API key (generate, copy, reset, remove; shown masked),
serving on the local network (only with a key: the page says so beside the switch), the
port, the requests served at once, the idle time after which a model is unloaded, Ollama's
API on a port of its own (off by default; for clients that speak only Ollama's), the
models the server sees with their slots and context per slot, and a live request log.

The server itself is Qt-free (:mod:`models.server`): a
:class:`~models.server.controller.ServerController` runs uvicorn on its own thread. The
page starts and stops it off the GUI thread (one job at a time, in order, on the page's own
one-thread pool), and the controller's listener — called on a server thread after each
request — only emits a signal, queued to the GUI thread, where the log's table model grows.
Errors (a port in use, a network address without a key) are sentences in the page's banner.

While the server runs, the Chat page's engine is lent to the server's engine pool
(:attr:`app.ui.chat.engine.ChatEngine.lender`), so the model the chat has loaded is never
loaded a second time for the server.

The settings are remembered (:mod:`app.core.server_settings`); a server that was on when
the window closed starts again with the window.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from typing import Optional
from urllib.parse import urlsplit

from PySide6.QtCore import Qt, QThreadPool, QTimer, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox, QGridLayout, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QPushButton, QSpinBox,
    QVBoxLayout, QWidget,
)

from models.foundation.errors import Cancelled, QuantDeskError
from app.core.server_settings import (
    LOOPBACK_HOST, MAX_PARALLEL, MAX_PORT, MIN_PORT, ServerSettings, load_server_settings,
    save_server_settings,
)
from app.ui.pages import Page
from app.ui.server.tables import ModelStatusModel, RequestLogModel, fit_log_columns
from app.ui.widgets.banner import MessageBanner
from app.ui.widgets.confirm import confirm as ask
from app.ui.widgets.page_frame import page_layout
from app.ui.widgets.rows_model import make_table
from app.ui.worker import JobWorker, start_job

log = logging.getLogger(__name__)

#: How often the models table is read while the page is on screen and the server runs.
STATUS_INTERVAL_MS = 2000
#: Settings typed into a spin box are saved once the typing pauses.
SAVE_DELAY_MS = 400
#: How long a Copy button says "Copied".
COPIED_MS = 1500
#: How long closing the window waits for a start or stop in progress.
SHUTDOWN_WAIT_MS = 15000

OFF, STARTING, ON, STOPPING = "off", "starting", "on", "stopping"

RESTART_TO_APPLY = "The server uses the new settings once it restarts."
NEEDS_KEY = ("Serving on the local network needs an API key, so that only the programs you give "
             "it to can connect. Generate an API key first.")


class ServerPage(Page):
    """The local API server: see the module docstring."""

    title = "Server"
    summary = ("Let other programs — editors, coding agents, scripts, other computers — use your "
               "Library's models through an OpenAI-compatible API.")

    #: The server's state changed: ``"off"``, ``"starting"``, ``"on"`` or ``"stopping"``.
    state_changed = Signal(str)
    #: A RequestLogEntry from the controller's listener (emitted on a server thread).
    _entry_arrived = Signal(object)

    def __init__(self, parent: Optional[QWidget] = None) -> None:
        super().__init__(parent)
        self.state = OFF
        #: The running ServerController (set by the start job once it listens).
        self.controller = None
        #: The running server's EnginePool (one engine per model, the chat's lent to it).
        self.pool = None
        # (the address to share, this computer's, the Ollama API's or "")
        self._urls: tuple[str, str, str] = ("", "", "")
        self._serving: Optional[ServerSettings] = None  # what the server was started with
        self._closing = threading.Event()
        self._status_job: Optional[JobWorker] = None
        # Start, stop and restart run one at a time, in order, and closing the window can
        # wait for the one in progress.
        self._server_jobs = QThreadPool(self)
        self._server_jobs.setMaxThreadCount(1)
        remembered = load_server_settings()

        layout = page_layout(self, self.title, self.summary)
        self.banner = MessageBanner(self)
        layout.addWidget(self.banner)
        boxes = QHBoxLayout()
        boxes.setSpacing(12)
        boxes.addWidget(self._server_box(), 3)
        boxes.addWidget(self._options_box(remembered), 2)
        layout.addLayout(boxes)
        layout.addWidget(self._models_box())
        layout.addWidget(self._log_box(), 1)

        self._entry_arrived.connect(self._log_entry, Qt.ConnectionType.QueuedConnection)
        self._status_timer = QTimer(self, interval=STATUS_INTERVAL_MS)
        self._status_timer.timeout.connect(self.refresh_models)
        self._refresh_soon = QTimer(self, singleShot=True, interval=150)  # after requests, once
        self._refresh_soon.timeout.connect(self.refresh_models)
        self._save_timer = QTimer(self, singleShot=True, interval=SAVE_DELAY_MS)
        self._save_timer.timeout.connect(self._options_changed)
        self._show_key()
        self._show_state()
        if remembered.enabled:
            # After the window is up: it opens as fast with the server on as without.
            QTimer.singleShot(0, self, self._start_remembered)

    # ------------------------------------------------------------------ layout
    def _server_box(self) -> QGroupBox:
        box = QGroupBox("Connection")
        # A grid, not a QFormLayout: the form gives a wrapped sentence the height of its
        # narrowest wrapping (a gap under it); a grid row takes the height it needs.
        grid = QGridLayout(box)
        grid.setColumnStretch(1, 1)
        switch_row = QHBoxLayout()
        self.switch = QCheckBox()  # the sentence beside it says what it is doing
        self.switch.setObjectName("serverSwitch")
        self.switch.setAccessibleName("Server on")
        self.switch.toggled.connect(self._switch_toggled)
        self.state_label = QLabel()
        self.state_label.setObjectName("serverState")
        self.state_label.setWordWrap(True)
        switch_row.addWidget(self.switch)
        switch_row.addWidget(self.state_label, 1)
        _grid_row(grid, "Server:", switch_row)

        address_row = QHBoxLayout()
        self.address_edit = QLineEdit()
        self.address_edit.setReadOnly(True)
        self.address_edit.setAccessibleName("Server address")
        self.copy_address_button = _button("Copy", "Copy the server address", self.copy_address)
        address_row.addWidget(self.address_edit, 1)
        address_row.addWidget(self.copy_address_button)
        _grid_row(grid, "Address:", address_row)
        self.address_hint = _hint("addressHint")
        _grid_row(grid, "", self.address_hint)

        key_row = QHBoxLayout()
        self.key_edit = QLineEdit()
        self.key_edit.setReadOnly(True)
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_edit.setAccessibleName("API key")
        self.show_key_button = _button("Show", "Show the API key")
        self.show_key_button.setCheckable(True)
        self.show_key_button.toggled.connect(self._reveal_key)
        self.copy_key_button = _button("Copy", "Copy the API key", self.copy_key)
        self.generate_key_button = _button("Generate", "Generate an API key", self.generate_key)
        self.reset_key_button = _button("Reset…", "Reset the API key", lambda: self.reset_key())
        self.remove_key_button = _button("Remove", "Remove the API key", self.remove_key)
        for widget in (self.key_edit, self.show_key_button, self.copy_key_button,
                       self.generate_key_button, self.reset_key_button, self.remove_key_button):
            key_row.addWidget(widget, 1 if widget is self.key_edit else 0)
        _grid_row(grid, "API key:", key_row)
        self.key_hint = _hint("keyHint")
        _grid_row(grid, "", self.key_hint)
        grid.setRowStretch(grid.rowCount(), 1)
        return box

    def _options_box(self, remembered: ServerSettings) -> QGroupBox:
        box = QGroupBox("Options")
        grid = QGridLayout(box)
        grid.setColumnStretch(2, 1)
        self.network_switch = QCheckBox("Serve on the local network")
        self.network_switch.setAccessibleName("Serve on the local network")
        self.network_switch.setChecked(remembered.network)
        self.network_switch.toggled.connect(self._network_toggled)
        grid.addWidget(self.network_switch, 0, 0, 1, 3)
        self.network_hint = _hint("networkHint")
        grid.addWidget(self.network_hint, 1, 0, 1, 3)
        self.port_spin = _spin("Port", MIN_PORT, MAX_PORT, remembered.port)
        self.port_spin.setGroupSeparatorShown(False)
        _grid_row(grid, "Port:", self.port_spin)
        self.parallel_spin = _spin("Requests at once per model", 0, MAX_PARALLEL, remembered.parallel)
        self.parallel_spin.setSpecialValueText("Auto (by memory)")
        self.parallel_spin.setToolTip("How many requests one model serves at the same time (its slots); "
                                      "the context is shared between them. More wait in line.")
        _grid_row(grid, "Requests at once:", self.parallel_spin)
        self.idle_spin = _spin("Unload idle models after minutes", 0, 24 * 60, remembered.idle_unload_minutes)
        self.idle_spin.setSuffix(" min")
        self.idle_spin.setSpecialValueText("Never")
        self.idle_spin.setToolTip("A model no request used for this long is unloaded, freeing its memory.")
        _grid_row(grid, "Unload idle after:", self.idle_spin)
        self.ollama_switch = QCheckBox("Also answer Ollama's API")
        self.ollama_switch.setAccessibleName("Answer Ollama's API")
        self.ollama_switch.setToolTip("For programs that speak only Ollama's API (Open WebUI, "
                                      "Continue and others): /api/chat, /api/generate, "
                                      "/api/tags, /api/embed… on a port of its own.")
        self.ollama_switch.setChecked(remembered.ollama)
        self.ollama_switch.toggled.connect(self._ollama_toggled)
        grid.addWidget(self.ollama_switch, grid.rowCount(), 0, 1, 3)
        self.ollama_port_spin = _spin("Ollama port", MIN_PORT, MAX_PORT, remembered.ollama_port)
        self.ollama_port_spin.setGroupSeparatorShown(False)
        self.ollama_port_spin.setEnabled(remembered.ollama)
        _grid_row(grid, "Ollama port:", self.ollama_port_spin)
        grid.setRowStretch(grid.rowCount(), 1)
        for spin in (self.port_spin, self.parallel_spin, self.idle_spin, self.ollama_port_spin):
            spin.valueChanged.connect(lambda _value: self._save_timer.start())
        return box

    def _models_box(self) -> QGroupBox:
        box = QGroupBox("Models")
        column = QVBoxLayout(box)
        self.models_model = ModelStatusModel(self)
        self.models_view = make_table(self.models_model, "Models served")
        self.models_view.setSortingEnabled(False)
        self.models_view.setMinimumHeight(110)
        self.models_view.setMaximumHeight(120)
        column.addWidget(self.models_view)
        self.models_hint = _hint("modelsHint")
        column.addWidget(self.models_hint)
        return box

    def _log_box(self) -> QGroupBox:
        box = QGroupBox("Requests")
        column = QVBoxLayout(box)
        self.log_model = RequestLogModel(self)
        self.log_view = make_table(self.log_model, "Request log", stretch_column=3)
        fit_log_columns(self.log_view)
        self.log_view.setMinimumHeight(160)
        column.addWidget(self.log_view, 1)
        row = QHBoxLayout()
        self.log_count = QLabel("No requests yet.")
        self.log_count.setObjectName("requestCount")
        self.clear_log_button = _button("Clear", "Clear the request log", self.clear_log)
        row.addWidget(self.log_count, 1)
        row.addWidget(self.clear_log_button)
        column.addLayout(row)
        return box

    # ------------------------------------------------------------------ settings
    def settings(self) -> ServerSettings:
        """The settings on the page (the switch is ``enabled``)."""
        return ServerSettings(enabled=self.switch.isChecked(), port=self.port_spin.value(),
                              network=self.network_switch.isChecked(),
                              parallel=self.parallel_spin.value(),
                              idle_unload_minutes=self.idle_spin.value(),
                              ollama=self.ollama_switch.isChecked(),
                              ollama_port=self.ollama_port_spin.value())

    def _remember(self) -> None:
        try:
            save_server_settings(self.settings())
        except QuantDeskError as exc:
            self.banner.show_message(exc.user_message, "error")

    def _options_changed(self) -> None:
        """An option changed: remember it; a running server uses it after a restart."""
        self._remember()
        serving = self._serving
        if self.state in (ON, STARTING) and serving is not None \
                and replace(self.settings(), enabled=True) != replace(serving, enabled=True):
            self.banner.show_message(RESTART_TO_APPLY, "info", "Restart now", self.restart)
        elif self.banner.text() == RESTART_TO_APPLY:
            self.banner.clear()  # changed back to what the server runs with

    def _ollama_toggled(self, on: bool) -> None:
        self.ollama_port_spin.setEnabled(on)
        self._options_changed()

    def _network_toggled(self, on: bool) -> None:
        if on and not self._api_key():
            self.network_switch.blockSignals(True)
            self.network_switch.setChecked(False)
            self.network_switch.blockSignals(False)
            self._show_network_hint(refused=True)
            return
        self._show_network_hint()
        self._options_changed()

    def _show_network_hint(self, refused: bool = False) -> None:
        if refused:
            text = NEEDS_KEY
        elif self.network_switch.isChecked():
            text = ("Other computers on your network can connect, with the key. Check that your "
                    "firewall lets them reach the port.")
        else:
            text = "Only programs on this computer can connect."
        self.network_hint.setText(text)
        if bool(self.network_hint.property("refused")) != refused:
            self.network_hint.setProperty("refused", refused)  # the style sheet colours it
            self.network_hint.style().unpolish(self.network_hint)
            self.network_hint.style().polish(self.network_hint)

    # ------------------------------------------------------------------ API key
    @staticmethod
    def _api_key() -> Optional[str]:
        from models.server.api_key import load_api_key

        return load_api_key()

    def _show_key(self) -> None:
        try:
            key = self._api_key()
        except QuantDeskError as exc:
            key = None
            self.banner.show_message(exc.user_message, "error")
        self.key_edit.setText(key or "")
        self.key_edit.setPlaceholderText("" if key else "No key")
        for button in (self.show_key_button, self.copy_key_button, self.reset_key_button,
                       self.remove_key_button):
            button.setEnabled(bool(key))
        self.generate_key_button.setVisible(not key)
        self.reset_key_button.setVisible(bool(key))
        if not key:
            self.show_key_button.setChecked(False)
            self.key_hint.setText("Without a key, programs on this computer connect freely.")
        else:
            self.key_hint.setText("Programs send it as “Authorization: Bearer KEY”. "
                                  "It is kept readable by you only and never logged.")
        self._show_network_hint()

    def _reveal_key(self, shown: bool) -> None:
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Normal if shown else QLineEdit.EchoMode.Password)
        self.show_key_button.setText("Hide" if shown else "Show")

    def generate_key(self) -> None:
        """Make a key and store it; a running server restarts to require it."""
        self._new_key("A key was generated; programs now need it to connect.")

    def reset_key(self, confirm: bool = True) -> None:
        """Replace the key; programs using the old one are refused from now on."""
        if confirm and not ask(self, "Reset the API key",
                               "Make a new key? Programs using the current key will be refused "
                               "until they are given the new one.", "resetKeyQuestion"):
            return
        self._new_key("A new key was made; programs using the old one are refused from now on.")

    def _new_key(self, sentence: str) -> None:
        from models.server.api_key import generate_api_key, save_api_key

        try:
            save_api_key(generate_api_key())
        except QuantDeskError as exc:
            self.banner.show_message(exc.user_message, "error")
            return
        self._show_key()
        self._restart_for_key()
        self.banner.show_message(sentence, "info")

    def remove_key(self) -> None:
        """Forget the key (not while serving the local network, which needs one)."""
        from models.server.api_key import forget_api_key

        if self.network_switch.isChecked():
            self.banner.show_message("The key cannot be removed while the server serves the local "
                                     "network: turn that off first.", "warning")
            return
        forget_api_key()
        self._show_key()
        self._restart_for_key()
        self.banner.show_message("The key was removed; programs on this computer connect without one.",
                                 "info")

    def _restart_for_key(self) -> None:
        """A changed key applies at once: a running server restarts with it."""
        if self.state in (ON, STARTING):
            self.restart()

    def copy_key(self) -> None:
        key = self._api_key()
        if key:
            QGuiApplication.clipboard().setText(key)
            _say_copied(self.copy_key_button)

    # ------------------------------------------------------------------ address
    def address(self) -> str:
        """The address to give clients (the OpenAI base URL), ``""`` when off."""
        return self._urls[0] if self.state == ON else ""

    def copy_address(self) -> None:
        if self.address():
            QGuiApplication.clipboard().setText(self.address())
            _say_copied(self.copy_address_button)

    # ------------------------------------------------------------------ on / off
    def _switch_toggled(self, on: bool) -> None:
        self._remember()
        if on:
            self.start()
        else:
            self.stop()

    def _start_remembered(self) -> None:
        if self.state == OFF and not self._closing.is_set():
            self._set_switch(True)
            self.start()

    def _set_switch(self, on: bool) -> None:
        """Move the switch without it starting or stopping anything."""
        self.switch.blockSignals(True)
        self.switch.setChecked(on)
        self.switch.blockSignals(False)

    def start(self) -> None:
        """Start serving with the page's settings (off the GUI thread)."""
        if self.state != OFF:
            return
        settings = self.settings()
        try:
            key = self._api_key()
        except QuantDeskError as exc:
            return self._start_failed(exc.user_message)
        if settings.network and not key:
            return self._start_failed(NEEDS_KEY)
        self.banner.clear()
        self._set_state(STARTING)
        self._run(self._start_job(settings, key), self._started, self._start_failed)

    def stop(self) -> None:
        """Stop serving: requests in flight get an error; the server's own engines end."""
        if self.state not in (ON, STARTING):
            return
        self._set_state(STOPPING)
        chat = self._chat_engine()
        self._run(lambda report, token: self._stop_server(chat), lambda _none: self._stopped(),
                  lambda message: self._stopped(message))

    def restart(self) -> None:
        """Stop and start again with the page's settings and key."""
        if self.state not in (ON, STARTING):
            return
        settings = self.settings()
        try:
            key = self._api_key()
        except QuantDeskError as exc:
            return self.banner.show_message(exc.user_message, "error")
        if settings.network and not key:
            return self.banner.show_message(NEEDS_KEY, "error")
        self.banner.clear()
        self._set_state(STARTING)
        chat = self._chat_engine()
        start = self._start_job(settings, key)

        def job(report, token):
            self._stop_server(chat)
            return start(report, token)

        self._run(job, self._started, self._start_failed)

    def _run(self, job, on_done, on_failed) -> None:
        start_job(job, on_finished=on_done, on_failed=on_failed, on_cancelled=lambda: None,
                  pool=self._server_jobs, owner=self)

    def _start_job(self, settings: ServerSettings, key: Optional[str]):
        """The job that starts a server (it runs on the page's server thread).

        Its engine pool is lent the chat's engine here, on the GUI thread, before the job
        runs: a model the chat loads from now on goes through the pool's ``release`` and
        ``adopt`` in order, on the chat's load thread.
        """
        from app.core.model_settings import load_settings_for
        from models.server.engine_pool import EnginePool

        self._serving = settings
        pool = EnginePool(load_settings_for, parallel=settings.parallel or None,
                          idle_unload_seconds=settings.idle_unload_minutes * 60)
        chat = self._chat_engine()
        lent = None
        if chat is not None:
            chat.lender = pool
            lent = (chat.model_path, chat.client) if chat.ready else None
        listener = self._listener
        closing = self._closing

        def job(report, token):
            from app.core.server_settings import lan_address
            from models.server.config import ServerConfig
            from models.server.controller import ServerController

            config = ServerConfig(host=settings.host, port=settings.port, api_key=key,
                                  parallel=settings.parallel or None,
                                  idle_unload_seconds=settings.idle_unload_minutes * 60,
                                  ollama_port=settings.ollama_port if settings.ollama else None)
            controller = ServerController(config, engines=pool)
            controller.add_listener(listener)
            try:
                if lent is not None:
                    pool.adopt(*lent)
                controller.start()
            except BaseException:
                _end(controller, chat)
                raise
            self.controller, self.pool = controller, pool
            if closing.is_set():  # the window closed while it started: stop it again
                self._stop_server(chat)
                raise Cancelled()
            return _client_urls(controller.port, settings.network and lan_address(),
                                controller.ollama_port if settings.ollama else None)

        return job

    def _stop_server(self, chat) -> None:
        """Stop the running server, if any (on the server thread, or as the window closes)."""
        controller, self.controller = self.controller, None
        if controller is not None:
            if self.pool is controller.engines:
                self.pool = None
            _end(controller, chat)

    def _chat_engine(self):
        """The Chat page's :class:`~app.ui.chat.engine.ChatEngine`, when the window has one."""
        window = self.window()
        chat = getattr(window, "pages", {}).get("Chat") if window is not None else None
        return getattr(chat, "engine", None)

    def _started(self, urls: tuple[str, str, str]) -> None:
        if self.state == STOPPING:  # a stop queued behind this start: it follows at once
            return
        self._urls = urls
        self._set_switch(True)
        self._set_state(ON)
        self.refresh_models()
        self._status_timer.start()

    def _start_failed(self, message: str) -> None:
        self._set_switch(False)
        self._set_state(OFF)
        self.banner.show_message(message, "error", "Try again", self._try_again)

    def _try_again(self) -> None:
        self._set_switch(True)
        self.start()

    def _stopped(self, message: str = "") -> None:
        self._status_timer.stop()
        self._set_state(OFF)
        self.models_model.set_status([])
        if message:
            self.banner.show_message(message, "error")

    def _set_state(self, state: str) -> None:
        self.state = state
        self._show_state()
        self.state_changed.emit(state)

    def _show_state(self) -> None:
        state = self.state
        self.switch.setEnabled(state in (OFF, ON))
        self.copy_address_button.setEnabled(state == ON)
        local = self._urls[1]
        if state == ON:
            ollama = self._urls[2]
            self.state_label.setText(f"Serving at {urlsplit(self._urls[0]).netloc}" + (
                f"; Ollama's API at {urlsplit(ollama).netloc}" if ollama else "") + ".")
            self.address_edit.setText(self._urls[0])
            self.address_hint.setText(
                "Give this address to an OpenAI client as its base URL; the model field names a model "
                "below." + (f" On this computer: {local}" if local != self._urls[0] else "")
                + (f" Ollama clients: {ollama}" if ollama else ""))
        else:
            self.state_label.setText({OFF: "Off.", STARTING: "Starting…", STOPPING: "Stopping…"}[state])
            self.address_edit.clear()
            self.address_edit.setPlaceholderText("Turn the server on to get its address")
            self.address_hint.setText("")
        self.address_hint.setVisible(bool(self.address_hint.text()))
        self.models_view.setVisible(state == ON)
        self._show_models_hint()

    # ------------------------------------------------------------------ models
    def refresh_models(self) -> None:
        """Read the models the server sees (off the GUI thread), while the page is on screen."""
        controller = self.controller
        if controller is None or self.state != ON or self._status_job is not None or not self.isVisible():
            return

        def done(statuses) -> None:
            self._status_job = None
            if self.state == ON:
                self.models_model.set_status(statuses)
                self._show_models_hint()

        def failed(message: str) -> None:
            self._status_job = None
            log.warning("server models not read: %s", message)

        self._status_job = start_job(lambda report, token: controller.models_status(),
                                     on_finished=done, on_failed=failed, owner=self)

    def _show_models_hint(self) -> None:
        if self.state != ON:
            text = "The Library's models are listed here while the server is on."
        elif not self.models_model.rows:
            text = "The Library has no models yet: download or import one on the Models page."
        else:
            minutes = self.idle_spin.value()
            idle = f"after {minutes} min without requests" if minutes else "only when the server stops"
            text = (f"{self.models_model.loaded_count()} loaded. A request loads the model it names, with "
                    f"the load settings the Chat page remembers for it; it is unloaded {idle}.")
        self.models_hint.setText(text)

    def on_shown(self) -> None:
        self.refresh_models()

    # ------------------------------------------------------------------ request log
    def _listener(self, entry) -> None:
        """The controller's listener: runs on a server thread, so it only emits."""
        try:
            self._entry_arrived.emit(entry)
        except RuntimeError:  # the window has gone; the server is stopping with it
            pass

    def _log_entry(self, entry) -> None:
        bar = self.log_view.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 2
        self.log_model.append(entry)
        if at_bottom:
            self.log_view.scrollToBottom()
        count = self.log_model.rowCount()
        self.log_count.setText(f"{count:,} request{'s' if count != 1 else ''} shown.")
        self._refresh_soon.start()  # the request may have loaded a model

    def clear_log(self) -> None:
        self.log_model.set_rows([])
        self.log_count.setText("No requests yet.")

    # ------------------------------------------------------------------ lifecycle
    def shutdown(self) -> None:
        """The window is closing: stop the server (requests in flight get an error)."""
        self._closing.set()
        self._status_timer.stop()
        self._refresh_soon.stop()
        if self._save_timer.isActive():
            self._save_timer.stop()
            self._remember()
        self._server_jobs.waitForDone(SHUTDOWN_WAIT_MS)
        self._stop_server(self._chat_engine())


def _end(controller, chat) -> None:
    """Stop ``controller`` and unload the models its pool loaded; the chat's engine, lent
    to that pool, goes back to being the chat's alone."""
    if chat is not None and chat.lender is controller.engines:
        chat.lender = None
    controller.close()


def _client_urls(port: int, lan: Optional[str],
                 ollama_port: Optional[int] = None) -> tuple[str, str, str]:
    """(the base URL to give clients, the one for this computer, the Ollama API's address
    or "" when it is off).

    Serving the network, the server listens on every interface; the address to share is
    this computer's address on the network (``lan``), not ``0.0.0.0``.
    """
    local = f"http://{LOOPBACK_HOST}:{port}/v1"
    ollama = f"http://{lan or LOOPBACK_HOST}:{ollama_port}" if ollama_port else ""
    return (f"http://{lan}:{port}/v1" if lan else local), local, ollama


def _grid_row(grid: QGridLayout, label: str, field) -> None:
    """A label and its field (a widget or a layout) as the next row of ``grid``."""
    row = grid.rowCount()
    if label:
        grid.addWidget(QLabel(label), row, 0)
    if isinstance(field, QWidget):
        grid.addWidget(field, row, 1)
    else:
        grid.addLayout(field, row, 1)


def _hint(name: str) -> QLabel:
    label = QLabel()
    label.setObjectName(name)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


def _button(text: str, name: str, on_click=None) -> QPushButton:
    button = QPushButton(text)
    button.setAccessibleName(name)
    if on_click is not None:
        button.clicked.connect(lambda _checked=False: on_click())
    return button


def _spin(name: str, low: int, high: int, value: int) -> QSpinBox:
    spin = QSpinBox()
    spin.setAccessibleName(name)
    spin.setRange(low, high)
    spin.setValue(value)
    spin.setMinimumWidth(150)
    return spin


def _say_copied(button: QPushButton) -> None:
    """The button says "Copied" for a moment: the click did something."""
    text = button.text()
    if text == "Copied":
        return
    button.setText("Copied")
    QTimer.singleShot(COPIED_MS, button, lambda: button.setText(text))
