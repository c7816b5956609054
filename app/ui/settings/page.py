"""The Settings page: folders, Hugging Face token and endpoint, theme, default load settings,
the disk used by saved KV sessions, and a worker that lends this computer's devices to a
model loaded on another computer (:class:`app.core.local_worker.LocalWorker`).

The token goes through :mod:`models.hub.auth` (a 0600 file; never shown back, only where
it comes from); "Test" asks the Hub's whoami off the GUI thread. The endpoint, theme and
default load settings are kept in :class:`app.core.preferences.Preferences`; the endpoint
is applied to ``HF_ENDPOINT`` at once, which :mod:`models.hub.auth` reads at each call.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Optional

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox, QFileDialog, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QPushButton,
    QSpinBox, QWidget,
)

from app.ui.pages import Page
from app.ui.widgets.banner import MessageBanner
from app.ui.widgets.confirm import confirm as ask
from app.ui.widgets.page_frame import field_with_button, page_layout
from app.ui.worker import JobWorker, start_job
from models.foundation.errors import QuantDeskError

log = logging.getLogger(__name__)

THEMES = ("system", "light", "dark")


def whoami_sentence() -> str:
    """Ask the Hub who the current token belongs to; a sentence either way (runs off the GUI thread)."""
    from models.hub.auth import describe_token, resolve_token
    from models.hub.client import hub_api, hub_errors

    if resolve_token()[0] is None:
        raise QuantDeskError("No Hugging Face token is set, so there is nothing to test.",
                             "Paste a token from huggingface.co/settings/tokens and save it.")
    with hub_errors("the token check"):
        info = hub_api().whoami()
    name = info.get("name") or info.get("fullname") or "an unnamed account"
    return f"The Hub accepts {describe_token()}: it belongs to {name}."


def _preferences():
    try:
        from app.core.preferences import Preferences
    except ImportError:
        return None
    return Preferences()


def apply_saved_endpoint() -> None:
    """Put the saved Hub endpoint in ``HF_ENDPOINT`` unless the environment already sets one."""
    prefs = _preferences()
    endpoint = (prefs.get("hf_endpoint", "") if prefs else "") or ""
    if endpoint and not os.environ.get("HF_ENDPOINT"):
        os.environ["HF_ENDPOINT"] = endpoint


class SettingsPage(Page):
    """Folders, token, endpoint, theme, default load settings, KV sessions."""

    title = "Settings"
    summary = "Folders, the Hugging Face token, the theme, and the defaults for loading models."

    #: Emitted when a background check (token test, session size) has shown its answer.
    answered = Signal(str)

    def __init__(self, parent: Optional[QWidget] = None) -> None:
        super().__init__(parent)
        self.prefs = _preferences()
        apply_saved_endpoint()
        layout = page_layout(self, self.title, self.summary)
        self.banner = MessageBanner(self)
        layout.addWidget(self.banner)
        layout.addWidget(self._folders_box())
        layout.addWidget(self._hub_box())
        layout.addWidget(self._appearance_box())
        layout.addWidget(self._load_box())
        layout.addWidget(self._sessions_box())
        layout.addWidget(self._worker_box())
        layout.addStretch(1)

    # ----------------------------------------------------------------- folders
    def _folders_box(self) -> QGroupBox:
        from models.foundation.paths import app_paths

        box = QGroupBox("Folders")
        form = QFormLayout(box)
        self.folder_labels: dict[str, QLabel] = {}
        for name, folder in app_paths().all().items():
            row = QHBoxLayout()
            label = QLabel(str(folder))
            label.setObjectName(f"folder-{name}")
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            button = QPushButton("Open")
            button.setAccessibleName(f"Open the {name} folder")
            button.clicked.connect(lambda _c=False, n=name: self.open_folder(app_paths().all()[n]))
            row.addWidget(label, 1)
            if name == "models":
                move = QPushButton("Change…")
                move.setAccessibleName("Change the models folder")
                move.clicked.connect(self._choose_models_folder)
                row.addWidget(move)
            row.addWidget(button)
            form.addRow(f"{name.capitalize()}:", row)
            self.folder_labels[name] = label
        hint = QLabel("Set QUANTDESK_HOME before starting QuantDesk to keep every folder under one directory.")
        hint.setWordWrap(True)
        hint.setObjectName("hint")
        form.addRow("", hint)
        return box

    def _choose_models_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose the models folder",
                                                  self.folder_labels["models"].text())
        if folder:
            self.set_models_folder(Path(folder))

    def set_models_folder(self, folder: Optional[Path]) -> None:
        """Keep new downloads and the Library in ``folder`` (``None``: the default folder).

        Models already on disk are not moved; the Library of the new folder lists what it
        holds, and the old folder's models can be imported from where they are.
        """
        from models.foundation.paths import MODELS_FOLDER_KEY, app_paths

        if folder is not None:
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                self.banner.show_message(f"QuantDesk cannot use {folder} as its models folder ({exc.strerror}).",
                                         level="error")
                return
        if self.prefs is None:
            self.banner.show_message("Preferences cannot be saved, so the models folder stays.", level="error")
            return
        self.prefs.set(MODELS_FOLDER_KEY, str(folder) if folder else "")
        new = app_paths().models
        self.folder_labels["models"].setText(str(new))
        models_page = getattr(self.window(), "pages", {}).get("Models")
        if models_page is not None and hasattr(models_page, "models_folder_changed"):
            models_page.models_folder_changed()
        self.banner.show_message(f"Models now go to {new}. Models in the old folder stay there; "
                                 "import them from the Library if you want them listed.", level="info")

    def open_folder(self, folder: Path) -> None:
        from models.foundation.system_programs import open_in_file_manager

        try:
            folder.mkdir(parents=True, exist_ok=True)
            open_in_file_manager(folder)
        except OSError as exc:
            self.banner.show_message(f"QuantDesk cannot create {folder} ({exc.strerror}).", level="error")
        except QuantDeskError as exc:
            self.banner.show_message(exc.user_message, level="warning")

    # ----------------------------------------------------------------- hub
    def _hub_box(self) -> QGroupBox:
        box = QGroupBox("Hugging Face Hub")
        form = QFormLayout(box)
        token_row = QHBoxLayout()
        self.token_edit = QLineEdit()
        self.token_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.token_edit.setPlaceholderText("hf_… (paste a token to store it; it is never shown back)")
        self.token_edit.setAccessibleName("Hugging Face token")
        self.save_token_button = QPushButton("Save")
        self.save_token_button.setAccessibleName("Save the token")
        self.save_token_button.clicked.connect(self.save_token)
        self.forget_token_button = QPushButton("Forget")
        self.forget_token_button.setAccessibleName("Forget the token")
        self.forget_token_button.clicked.connect(self.forget_token)
        self.test_token_button = QPushButton("Test")
        self.test_token_button.setAccessibleName("Test the token")
        self.test_token_button.clicked.connect(self.test_token)
        for w in (self.token_edit, self.save_token_button, self.forget_token_button, self.test_token_button):
            token_row.addWidget(w, 1 if w is self.token_edit else 0)
        form.addRow("Token:", token_row)
        self.token_status = QLabel("")
        self.token_status.setObjectName("tokenStatus")
        self.token_status.setWordWrap(True)
        form.addRow("", self.token_status)
        self.endpoint_edit = QLineEdit(os.environ.get("HF_ENDPOINT", ""))
        form.addRow("Endpoint:", field_with_button(self.endpoint_edit, "Hub endpoint", "Apply",
                                                   "Apply the Hub endpoint", self.save_endpoint,
                                                   "https://huggingface.co"))
        self._show_token_source()
        return box

    def _show_token_source(self) -> None:
        from models.hub.auth import describe_token

        try:
            text = f"QuantDesk uses {describe_token()}."
        except QuantDeskError as exc:
            text = exc.user_message
        self.token_status.setText(text)

    def save_token(self) -> None:
        from models.hub.auth import store_token

        try:
            path = store_token(self.token_edit.text())
        except QuantDeskError as exc:
            self.banner.show_message(exc.user_message, level="error")
            return
        self.token_edit.clear()
        self._show_token_source()
        self.banner.show_message(f"Token saved in {path} (readable by you only).", level="info")

    def forget_token(self) -> None:
        from models.hub.auth import forget_token

        forget_token()
        self._show_token_source()
        self.banner.show_message("The stored token was deleted.", level="info")

    def test_token(self) -> None:
        """Ask the Hub's whoami with the current token, off the GUI thread."""
        self.token_status.setText("Asking the Hub …")
        self.test_token_button.setEnabled(False)

        def done(text: str) -> None:
            self.test_token_button.setEnabled(True)
            self.token_status.setText(text)
            self.banner.clear()
            self.answered.emit(text)

        def failed(text: str) -> None:
            self.test_token_button.setEnabled(True)
            self._show_token_source()
            self.banner.show_message(text, level="error")
            self.answered.emit(text)

        self._run(lambda report, cancel: whoami_sentence(), done, failed)

    def save_endpoint(self) -> None:
        text = self.endpoint_edit.text().strip().rstrip("/")
        if text and not text.startswith(("http://", "https://")):
            self.banner.show_message(f"'{text}' is not a web address.",
                                     level="error")
            return
        if text:
            os.environ["HF_ENDPOINT"] = text
        else:
            os.environ.pop("HF_ENDPOINT", None)
        if self.prefs is not None:
            self.prefs.set("hf_endpoint", text)
        self.banner.show_message(f"The Hub is now {text or 'https://huggingface.co'}.", level="info")

    # ----------------------------------------------------------------- theme
    def _appearance_box(self) -> QGroupBox:
        box = QGroupBox("Appearance")
        form = QFormLayout(box)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.FieldsStayAtSizeHint)
        self.theme_combo = QComboBox()
        self.theme_combo.setAccessibleName("Theme")
        self.theme_combo.addItems(list(THEMES))
        current = self.prefs.get("theme", "system") if self.prefs else "system"
        self.theme_combo.setCurrentText(current if current in THEMES else "system")
        self.theme_combo.currentTextChanged.connect(self.set_theme)
        form.addRow("Theme:", self.theme_combo)
        return box

    def set_theme(self, mode: str) -> None:
        if self.prefs is not None:
            self.prefs.set("theme", mode)
        try:
            from app.ui.theme import apply_theme
        except ImportError:
            return
        apply_theme(mode)

    # ----------------------------------------------------------------- load settings
    def _load_box(self) -> QGroupBox:
        """The defaults for new models: the Chat panel's load settings form, in its
        defaults mode (no model: no fit verdict, GPU layers as all / none / a number)."""
        from app.ui.widgets.load_settings_form import LoadSettingsForm
        from models.memory_fit import free_memory

        box = QGroupBox("Defaults for new models")
        row = QHBoxLayout(box)
        self.load_form = LoadSettingsForm(defaults=True)
        self.load_form.setMaximumWidth(520)  # sliders a hand can use, not the page's width
        self.load_form.set_settings(self._saved_load_settings())
        self.load_form.apply_button.clicked.connect(self.save_load_settings)
        # Whether this machine has a GPU (device queries, off the GUI thread): without
        # one, a number of GPU layers would be refused at every load.
        self._run(lambda report, cancel: free_memory(),
                  lambda memory: self.load_form.set_machine(None, *memory),
                  lambda text: log.warning("GPU not queried for the load defaults: %s", text))
        row.addWidget(self.load_form, 1)
        row.addStretch(0)
        return box

    def _saved_load_settings(self):
        from app.core.model_settings import DEFAULT_LOAD_KEY
        from models.engine.settings import LoadSettings

        return LoadSettings.from_dict((self.prefs.get(DEFAULT_LOAD_KEY, {}) or {}) if self.prefs else {})

    def load_settings_values(self) -> dict:
        """The form as a ``LoadSettings`` dict (what the Chat page and fit badges read);
        fields the form does not show keep their saved values."""
        return self.load_form.settings(self._saved_load_settings()).to_dict()

    def save_load_settings(self) -> None:
        from app.core.model_settings import DEFAULT_LOAD_KEY

        if self.prefs is None:
            self.banner.show_message("Preferences cannot be saved, so the defaults stay.", level="error")
            return
        try:
            self.prefs.set(DEFAULT_LOAD_KEY, self.load_settings_values())
        except QuantDeskError as exc:
            self.banner.show_message(exc.user_message, level="error")
            return
        self.banner.show_message("Saved: new models load with these settings.", level="info")

    # ----------------------------------------------------------------- sessions
    def _sessions_box(self) -> QGroupBox:
        box = QGroupBox("Saved chat states (KV sessions)")
        row = QHBoxLayout(box)
        self.sessions_label = QLabel("Measuring …")
        self.sessions_label.setObjectName("sessionsSize")
        self.sessions_label.setWordWrap(True)
        self.clear_sessions_button = QPushButton("Clear")
        self.clear_sessions_button.setAccessibleName("Clear saved sessions")
        self.clear_sessions_button.clicked.connect(lambda: self.clear_sessions())
        row.addWidget(self.sessions_label, 1)
        row.addWidget(self.clear_sessions_button)
        self.measure_sessions()
        return box

    def measure_sessions(self) -> None:
        from models.engine.sessions import SessionStore

        def work(report, cancel):
            store = SessionStore.default()
            return len(store.files()), store.total_bytes()

        self._run(work, self._show_sessions, lambda text: self.sessions_label.setText(text))

    def _show_sessions(self, result) -> None:
        count, total = result
        self.sessions_label.setText(
            f"{count} saved conversation state(s) use {total / 2**20:.1f} MiB. Clearing them keeps the "
            "conversations; reopening one reads its prompt again.")
        self.clear_sessions_button.setEnabled(count > 0)
        self.answered.emit(self.sessions_label.text())

    def clear_sessions(self, confirm: bool = True) -> None:
        from models.engine.sessions import SessionStore

        if confirm and not ask(self, "Clear saved sessions",
                               "Delete every saved chat state? The conversations stay."):
            return
        self._run(lambda report, cancel: SessionStore.default().clear(), lambda _freed: self.measure_sessions(),
                  lambda text: self.banner.show_message(text, level="error"))

    # ----------------------------------------------------------------- worker
    def _worker_box(self) -> QGroupBox:
        from app.core.local_worker import LocalWorker
        from models.rpc.endpoints import DEFAULT_WORKER_PORT

        box = QGroupBox("Worker: lend this computer's devices to another computer")
        column = QFormLayout(box)
        self.local_worker = LocalWorker()
        self.worker_label = QLabel(
            "Another computer's QuantDesk can put part of a model's layers here while a worker "
            "runs. It listens on 127.0.0.1 only: the other computer reaches it through SSH "
            "(remote device ssh://you@this-computer), so nothing is open to the network.")
        self.worker_label.setObjectName("workerStatus")
        self.worker_label.setWordWrap(True)
        self.worker_port = QSpinBox()
        self.worker_port.setRange(1024, 65535)
        self.worker_port.setValue(DEFAULT_WORKER_PORT)
        self.worker_port.setAccessibleName("Worker port")
        self.worker_button = QPushButton("Start worker")
        self.worker_button.setAccessibleName("Start or stop the worker")
        self.worker_button.clicked.connect(self.toggle_worker)
        row = QHBoxLayout()
        row.addWidget(QLabel("Port"))
        row.addWidget(self.worker_port)
        row.addWidget(self.worker_button)
        row.addStretch(1)
        column.addRow(self.worker_label)
        column.addRow(row)
        return box

    def toggle_worker(self) -> None:
        """Start the worker (off the GUI thread: it waits for the handshake) or stop it."""
        if self.local_worker.running:
            self.local_worker.stop()
            self._show_worker(self.local_worker.status())
            return
        self.worker_button.setEnabled(False)
        self.worker_label.setText("Starting the worker …")
        port = self.worker_port.value()

        def failed(text: str) -> None:
            self.worker_button.setEnabled(True)
            self._show_worker(self.local_worker.status())
            self.banner.show_message(text, level="error")

        self._run(lambda report, cancel: self.local_worker.start(port), self._show_worker, failed)

    def _show_worker(self, status) -> None:
        self.worker_button.setEnabled(True)
        self.worker_button.setText("Stop worker" if status.running else "Start worker")
        self.worker_port.setEnabled(not status.running)
        self.worker_label.setText(status.sentence)
        self.answered.emit(status.sentence)

    def _run(self, work, done, failed) -> JobWorker:
        return start_job(work, done, failed, owner=self)
