"""The Chat page: conversations on the left, the transcript and composer in the middle,
the model and its settings on the right.

The page is glue. Conversations, versions and branches are the Qt-free
:class:`~app.core.conversations.ConversationStore`; loading and replies run through
:class:`~app.ui.chat.engine.ChatEngine` off the GUI thread; the transcript renders.
Every reply is stored when it ends (a stopped or crashed one with its partial text), every
sent message when it is sent. Errors are shown inline (banner or the line above the
message box), never in modal boxes, and the message box keeps keyboard focus.

Construction is cheap (no engine, no database, no library scan): those start when the
page is first shown or given a model, so the window opens fast.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Optional

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction, QKeySequence, QShortcut
from PySide6.QtWidgets import QFileDialog, QLineEdit, QSplitter, QVBoxLayout, QWidget

from app.core.errors import QuantDeskError
from app.ui.chat.composer import Composer
from app.ui.chat.engine import ChatEngine, ReplyOutcome
from app.ui.chat.side_panel import SidePanel
from app.ui.chat.sidebar import ConversationListModel, ConversationSidebar
from app.ui.chat.transcript import SHOWN_AT_FIRST, TranscriptView
from app.ui.pages import Page
from app.ui.widgets.banner import MessageBanner
from app.ui.worker import JobWorker, start_job

log = logging.getLogger(__name__)

# The GUI renders streamed text when it arrives, at most 20 times a second: smooth for
# reading, and the GUI thread's share of a core while a reply streams stays ~2.5% (at 30 Hz
# it was ~4%), which the engine feels when its threads use every core (bench_chat_gui:
# decode through the GUI vs alone).
TICK_MS = 50
SPLITTER_KEY = "chat_splitter_sizes"
SAMPLING_KEY = "chat_sampling"


class ChatPage(Page):
    """Chat with a local model; see the module docstring."""

    title = "Chat"

    def __init__(self, parent: Optional[QWidget] = None) -> None:
        super().__init__(parent)
        self.store = None
        self.started = False
        self._start_scheduled = False
        self._closing = False
        self.engine = ChatEngine(self)
        self.engine.loaded.connect(self._loaded)
        self.engine.load_progress.connect(self._load_progress)
        self.engine.load_failed.connect(self._load_failed)
        self.engine.reply_done.connect(self._reply_done)
        self.engine.text_arrived.connect(self._text_arrived)
        self.conversation_id: Optional[str] = None
        self.stored = False
        self.branch: list = []
        self.editing = None  # the BranchMessage being edited
        self._reply_parent: Optional[int] = None
        self._reply_model: Optional[str] = None  # the model writing the reply in progress
        self._pending_load: Optional[Path] = None
        self._model_notice = ""  # the banner's sentence about a reopened conversation's model
        # (conversation id, recorded path): a relative model path not found before the
        # Library's list arrived, looked for again when it does.
        self._awaiting_library: Optional[tuple[str, str]] = None

        self.conversations = ConversationListModel()
        self.sidebar = ConversationSidebar(self.conversations)
        self.banner = MessageBanner()
        self.transcript = TranscriptView()
        self.composer = Composer()
        self.box = self.composer.box
        self.find_bar = QLineEdit()
        self.find_bar.setPlaceholderText("Find in conversation (Enter: next, Esc: close)")
        self.find_bar.setAccessibleName("Find in conversation")
        self.find_bar.hide()
        self.panel = SidePanel()

        middle = QWidget()
        column = QVBoxLayout(middle)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(0)
        column.addWidget(self.banner)
        column.addWidget(self.find_bar)
        column.addWidget(self.transcript, 1)
        column.addWidget(self.composer)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.sidebar)
        self.splitter.addWidget(middle)
        self.splitter.addWidget(self.panel)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setCollapsible(1, False)
        self.splitter.setSizes([220, 640, 320])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.splitter)
        self.setFocusProxy(self.box)

        self._tick = QTimer(self, singleShot=True)  # the next render, when text came too soon
        self._tick.timeout.connect(self._take_text)
        self._last_take = 0.0
        self._save_settings_timer = QTimer(self, singleShot=True, interval=400)
        self._save_settings_timer.timeout.connect(self._save_conversation_settings)

        self.composer.send_button.clicked.connect(self.send)
        self.composer.stop_button.clicked.connect(self.stop)
        self.box.send_requested.connect(self.send)
        self.box.stop_requested.connect(self.escape)
        self.sidebar.new_chat.connect(self.new_chat)
        self.sidebar.chosen.connect(self.open_conversation)
        self.sidebar.delete_requested.connect(self.ask_delete)
        self.sidebar.export_requested.connect(self.choose_export_file)
        self.conversations.renamed.connect(self._rename)
        self.transcript.action.connect(self._message_action)
        self.transcript.link_failed.connect(lambda text: self.banner.show_message(text, "warning"))
        self.panel.model_picker.activated.connect(self._model_chosen)
        self.find_bar.returnPressed.connect(self._find_next)
        for keys, slot in (("Ctrl+N", self.new_chat), ("Ctrl+F", self.show_find),
                           ("Ctrl+L", self.focus_message_box), ("Esc", self.escape)):
            shortcut = QShortcut(QKeySequence(keys), self)
            shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            shortcut.activated.connect(slot)

    # -- start-up ---------------------------------------------------------------------

    def ensure_started(self) -> None:
        """Open the conversation history and scan the library (once, when first needed)."""
        if self.started or self._closing:
            return
        self.started = True
        from app.core.conversations import ConversationStore, new_conversation_id

        self.panel.build_sections()
        if not self.panel.sections:
            return
        self.panel.load_form.apply_button.clicked.connect(self.apply_load_settings)
        self.panel.sampling.save_preset.clicked.connect(self._save_preset)
        self.panel.sampling.changed.connect(self._save_settings_timer.start)
        self.panel.system_prompt.textChanged.connect(self._save_settings_timer.start)
        self.panel.json_mode.changed.connect(self._save_settings_timer.start)

        try:
            self.store = ConversationStore()
        except QuantDeskError as exc:
            self.banner.show_message(exc.user_message + " Chats in this session are not saved.",
                                     "error")
        self.conversations.store = self.store
        self.conversations.refresh()
        self.conversation_id = new_conversation_id()
        self._restore_splitter()
        self._restore_sampling()
        self._add_file_actions()
        self._run(self._scan_library, self._library_arrived)
        from app.ui.chat.markdown import warm_up

        self._run(warm_up, lambda _: None, lambda _: None)
        self.transcript.warm_up()

    def on_shown(self) -> None:
        self.focus_message_box()

    def paintEvent(self, event) -> None:  # noqa: N802 - Qt
        super().paintEvent(event)
        if not self.started and not self._start_scheduled:
            # After the first paint: the window is on screen and typing works before
            # the history, the library and the settings sections (numpy...) load.
            self._start_scheduled = True
            QTimer.singleShot(0, self, self.ensure_started)  # dropped if the page goes

    def _run(self, job, on_done, on_failed=None) -> JobWorker:
        """Run ``job()`` on the thread pool; ``on_done(result)`` back on the GUI thread
        (skipped when the page has gone meanwhile)."""
        return start_job(lambda report, token: job(), on_finished=on_done,
                         on_failed=on_failed or (lambda m: self.banner.show_message(m, "error")), owner=self)

    @staticmethod
    def _scan_library():
        from models.library import Library

        library = Library()
        library.scan()
        return library.models()

    def _library_arrived(self, models: list) -> None:
        """The background Library scan's list: into the picker; and a reopened
        conversation whose relative model path was not found yet is looked at again."""
        self.panel.set_library(models)
        waiting, self._awaiting_library = self._awaiting_library, None
        if waiting is not None and waiting[0] == self.conversation_id and self._model_notice \
                and self.banner.text() == self._model_notice:
            self._follow_conversation_model(waiting[1])

    def _add_file_actions(self) -> None:
        window = self.window()
        if not hasattr(window, "add_file_action"):
            return
        for text, fmt in (("Export Chat as &Markdown…", "markdown"),
                          ("Export Chat as &JSON…", "json")):
            action = QAction(text, window)
            action.triggered.connect(lambda _=False, f=fmt: self.choose_export_file(None, f))
            window.add_file_action(action)

    def _restore_splitter(self) -> None:
        sizes = self._preferences().get(SPLITTER_KEY)
        if isinstance(sizes, list) and len(sizes) == 3:
            self.splitter.setSizes([int(s) for s in sizes])

    def _restore_sampling(self) -> None:
        """New chats start with the sampling last used (``chat_sampling`` preference)."""
        from app.core.model_settings import apply_preset
        from models.engine.options import ChatOptions

        saved = self._preferences().get(SAMPLING_KEY)
        if isinstance(saved, dict):
            try:
                self.panel.sampling.set_options(apply_preset(ChatOptions(), saved))
            except (TypeError, ValueError):
                log.warning("ignoring unreadable %s preference", SAMPLING_KEY)

    @staticmethod
    def _preferences():
        from app.core.preferences import Preferences

        try:
            return Preferences()
        except QuantDeskError:
            return {}

    # -- models ------------------------------------------------------------------------

    def open_path(self, path: Path) -> None:
        """The window's "open this path" entry for a ``.gguf``: load it, focus the box."""
        self.ensure_started()
        self.panel.show_model(Path(path))
        self.load_model(Path(path))
        self.focus_message_box()

    @property
    def model_path(self) -> Optional[Path]:
        """The model loaded or being loaded."""
        return self.engine.model_path

    def _model_chosen(self, _row: int) -> None:
        path = self.panel.current_model()
        if path is not None and path != self.engine.model_path:
            self.load_model(path)

    def load_model(self, path: Path, settings=None) -> None:
        """Load ``path`` (with its remembered settings unless ``settings``)."""
        from app.core import model_settings

        self._clear_model_notice()  # a model was chosen: the offer or warning has had its say
        if self.engine.streaming:
            self.engine.stop()  # a new model ends the reply in progress
        if self.engine.loading:
            self._pending_load = path
            return
        if settings is None:
            settings = model_settings.load_settings_for(path)
        self.panel.load_form.set_settings(settings)
        self.panel.progress.setRange(0, 0)  # busy until the first fraction arrives
        self.panel.progress.show()
        self.panel.status.setText(f"Loading {path.name}…")
        self.engine.load(path, settings)
        self._run(lambda: _machine_facts(path), lambda facts: self._machine_read(path, facts),
                  lambda message: self._machine_read(path, None, message))

    def _machine_read(self, path: Path, facts, message: str = "") -> None:
        """The background read of ``path``'s header arrived: shown only if ``path`` is still
        the model (after a quick switch the first model's read can arrive last)."""
        if self.engine.model_path != path:
            return
        if facts is None:
            self.panel.load_form.verdict.setText(message)
        else:
            self.panel.load_form.set_machine(*facts)

    def changeEvent(self, event) -> None:  # noqa: N802 - Qt
        """A theme switch re-renders the transcript (code colours follow the background)."""
        from PySide6.QtCore import QEvent

        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and self.started and not self._closing \
                and not self.engine.streaming and self.branch:
            self._reload_branch()

    def _load_progress(self, progress) -> None:
        """llama.cpp's progress reading the tensors, then the self-test decode."""
        if progress.stage == "Loading":
            self.panel.progress.setRange(0, 100)
            self.panel.progress.setValue(round(100 * (progress.fraction or 0.0)))
            self.panel.status.setText(f"Loading {progress.detail}…")
        else:
            self.panel.progress.setRange(0, 0)
            self.panel.status.setText(f"Loaded; testing {progress.detail}…")

    def _loaded(self, report) -> None:
        from app.core import model_settings

        log.info("chat: model loaded: %s", report.summary())
        if self._pending_load is not None:
            path, self._pending_load = self._pending_load, None
            return self.load_model(path)
        self.panel.progress.hide()
        template = report.template
        note = "" if template == "the model's own" else \
            f" This model has no chat template of its own; QuantDesk formats the chat with its {template} preset."
        self.panel.status.setText(f"Loaded in {report.load_seconds:.1f} s. {report.summary()}.{note}")
        try:
            model_settings.remember_load_settings(report.path, report.settings)
        except QuantDeskError as exc:
            log.warning("load settings not remembered: %s", exc.user_message)
        if self.banner.level() == "error" and "engine" in self.banner.text():
            self.banner.clear()

    def _load_failed(self, message: str) -> None:
        self.panel.progress.hide()
        self.panel.status.setText("No model loaded.")
        self.banner.show_message(message, "error")
        self._pending_load = None

    def apply_load_settings(self) -> None:
        """Reload the model with the settings on the panel (remembered for this model)."""
        from app.core import model_settings

        path = self.panel.current_model()
        if path is None:
            return self.banner.show_message("Choose a model first.", "warning")
        new = self.panel.load_form.settings(self.engine.settings)
        changed = model_settings.fingerprint_changes(self.engine.settings, new)
        self.load_model(path, new)
        if changed:
            self.banner.show_message(
                f"The {', '.join(changed)} changed: saved conversation states made with the old "
                "settings cannot be reused, so those conversations are read again from their "
                "start once.", "info")

    def reload_model(self) -> None:
        """The crash banner's "Reload model"."""
        path = self.engine.model_path or self.panel.current_model()
        if path is not None:
            self.load_model(path, self.engine.settings)

    # -- conversations -------------------------------------------------------------

    def new_chat(self) -> None:
        """Start an empty conversation (stored once its first message is sent)."""
        from app.core.conversations import new_conversation_id

        if self._refuse_while_streaming():
            return
        self.ensure_started()
        self.conversation_id, self.stored, self.branch = new_conversation_id(), False, []
        self._cancel_edit()
        self._clear_model_notice()
        self.transcript.clear_messages()
        self.sidebar.select(None)
        self.focus_message_box()

    def open_conversation(self, conversation_id: str) -> None:
        """Show a saved conversation with its settings and bring back its model; its next
        reply continues from its saved KV state."""
        if self._refuse_while_streaming():
            return
        self.ensure_started()
        try:
            self.branch = self.store.branch(conversation_id)
            settings = self.store.settings(conversation_id)
            model = self.store.model_of(conversation_id)
        except QuantDeskError as exc:
            return self.banner.show_message(exc.user_message, "error")
        self.conversation_id, self.stored = self.store.resolve(conversation_id), True
        self._cancel_edit()
        self._apply_conversation_settings(settings)
        self.transcript.set_messages(self.branch)
        self.sidebar.select(self.conversation_id)
        self._follow_conversation_model(model)
        self.focus_message_box()

    def _follow_conversation_model(self, recorded: Optional[str]) -> None:
        """Bring back the model a reopened conversation was written with: load it when
        none is loaded; offer it (never swap silently: a load is slow and drops the other
        model's state) when another is; explain a file that has gone."""
        from app.core.conversation_model import LOAD, MISSING, OFFER, choose_conversation_model
        from app.core.paths import app_paths

        self._clear_model_notice()
        engine = self.engine
        loaded = engine.model_path if (engine.ready or engine.loading) else None
        # A relative path (older CLIs) is looked for in the models folder and among the
        # Library's models as the picker lists them: the list the page read off the GUI
        # thread at start, so only a stat or two happen here.
        choice = choose_conversation_model(recorded, loaded, app_paths().models,
                                           self.panel.models.paths())
        if choice.relocated:
            self._record_conversation_model(choice.path)
        if choice.action == LOAD:
            self.panel.show_model(choice.path)
            self.load_model(choice.path)
        elif choice.action == OFFER:
            self._show_model_notice(choice.message, "info", choice.action_text,
                                    lambda: self._load_offered(choice))
        elif choice.action == MISSING:
            self._show_model_notice(choice.message, "warning")
            if not choice.path.is_absolute() and not self.panel.models.library_known:
                self._awaiting_library = (self.conversation_id, recorded)

    def _record_conversation_model(self, path: Path) -> None:
        """Store the file a relative recorded model path was found to be, so reopening
        the conversation finds it directly next time."""
        try:
            self.store.set_model(self.conversation_id, str(path))
        except QuantDeskError as exc:
            log.warning("conversation model not recorded: %s", exc.user_message)

    def _load_offered(self, choice) -> None:
        """The offer's button: load the conversation's model (not while a reply streams:
        the offer stays up for later)."""
        if self._refuse_while_streaming():
            return self._show_model_notice(choice.message, "info", choice.action_text,
                                           lambda: self._load_offered(choice))
        self.panel.show_model(choice.path)
        self.load_model(choice.path)

    def _show_model_notice(self, text: str, level: str, action_text=None, on_action=None) -> None:
        """Show a sentence about the conversation's model in the banner (remembered, so
        that only this sentence is cleared once it no longer applies)."""
        self._model_notice = text
        self.banner.show_message(text, level, action_text, on_action)

    def _clear_model_notice(self) -> None:
        """Hide the banner's sentence about a conversation's model, if it is still the one
        on show: a model was chosen, another conversation opened, or the chat went on."""
        if self._model_notice and self.banner.text() == self._model_notice:
            self.banner.clear()
        self._model_notice = ""
        self._awaiting_library = None

    def _reload_branch(self, limit_all: bool = False) -> None:
        if self.store is not None and self.stored:
            self.branch = self.store.branch(self.conversation_id)
        self.transcript.set_messages(self.branch, limit=None if limit_all else SHOWN_AT_FIRST)

    def _rename(self, conversation_id: str, title: str) -> None:
        try:
            self.store.rename(conversation_id, title)
        except QuantDeskError as exc:
            self.banner.show_message(exc.user_message, "error")

    def ask_delete(self, conversation_id: str) -> None:
        """Deleting asks first, inline: the banner's button deletes."""
        title = next((c.title for c in self.store.list() if c.id == conversation_id), "")
        self.banner.show_message(f"Delete the conversation “{title}” and its saved state? "
                                 "This cannot be undone.", "warning", "Delete",
                                 lambda: self.delete_conversation(conversation_id))

    def delete_conversation(self, conversation_id: str) -> None:
        try:
            self.store.delete(conversation_id, self.engine.running_client)
        except QuantDeskError as exc:
            return self.banner.show_message(exc.user_message, "error")
        self.conversations.refresh()
        if conversation_id == self.conversation_id:
            self.new_chat()

    def choose_export_file(self, conversation_id: Optional[str], fmt: str) -> None:
        """Ask where to save (non-modal dialog), then export."""
        conversation_id = conversation_id or (self.conversation_id if self.stored else None)
        if conversation_id is None:
            return self.banner.show_message("This chat has no messages to export yet.", "info")
        dialog = QFileDialog(self, "Export conversation")
        dialog.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dialog.setDefaultSuffix("md" if fmt == "markdown" else "json")
        dialog.setNameFilter("Markdown (*.md)" if fmt == "markdown" else "JSON (*.json)")
        dialog.fileSelected.connect(lambda name: self.export_conversation(Path(name), fmt, conversation_id))
        dialog.open()

    def export_conversation(self, path: Path, fmt: str, conversation_id: Optional[str] = None) -> None:
        from app.core.conversation_export import export_conversation

        try:
            export_conversation(self.store, conversation_id or self.conversation_id, path, fmt)
        except QuantDeskError as exc:
            return self.banner.show_message(exc.user_message, "error")
        self.banner.show_message(f"Exported to {path}.", "info")

    # -- per-conversation settings ----------------------------------------------------

    def conversation_settings(self) -> dict:
        sampling = self.panel.sampling.options()
        from app.core.model_settings import sampling_of

        return {"system_prompt": self.panel.system_prompt.toPlainText(),
                "sampling": sampling_of(sampling),
                "json_mode": self.panel.json_mode.enabled.isChecked(),
                "schema_text": self.panel.json_mode.schema.toPlainText()}

    def _apply_conversation_settings(self, values: dict) -> None:
        from app.core.model_settings import apply_preset
        from models.engine.options import ChatOptions

        panel = self.panel
        for widget in (panel.sampling, panel.system_prompt, panel.json_mode):
            widget.blockSignals(True)
        if values.get("sampling"):
            panel.sampling.set_options(apply_preset(ChatOptions(), values["sampling"]))
        panel.system_prompt.setPlainText(values.get("system_prompt", ""))
        panel.json_mode.enabled.setChecked(bool(values.get("json_mode")))
        panel.json_mode.schema.setPlainText(values.get("schema_text", ""))
        for widget in (panel.sampling, panel.system_prompt, panel.json_mode):
            widget.blockSignals(False)
        panel.json_mode.check()

    def _save_conversation_settings(self) -> None:
        from app.core.model_settings import sampling_of

        prefs = self._preferences()
        if prefs:
            try:
                prefs.set(SAMPLING_KEY, sampling_of(self.panel.sampling.options()))
            except QuantDeskError as exc:
                log.warning("sampling not remembered: %s", exc.user_message)
        if self.store is not None and self.stored:
            try:
                self.store.set_settings(self.conversation_id, self.conversation_settings())
            except QuantDeskError as exc:
                log.warning("conversation settings not saved: %s", exc.user_message)

    def _save_preset(self) -> None:
        from app.core.model_settings import save_preset

        try:
            save_preset(self.panel.sampling.preset_name.text(), self.panel.sampling.options())
        except QuantDeskError as exc:
            return self.banner.show_message(exc.user_message, "warning")
        self.panel.sampling.reload_presets()
        self.panel.sampling.preset.setCurrentText(self.panel.sampling.preset_name.text().strip())

    # -- sending and streaming ------------------------------------------------------

    def options(self):
        """The ChatOptions on the panel. Raises QuantDeskError for a bad schema."""
        from dataclasses import replace

        options = self.panel.sampling.options()
        return replace(options, **self.panel.json_mode.output_fields())

    def _history(self, before_seq: Optional[int] = None) -> list[dict]:
        """System prompt and the branch's messages (up to, not including, ``before_seq``)."""
        messages = []
        system = self.panel.system_prompt.toPlainText().strip()
        if system and not any(m.role == "system" for m in self.branch):
            messages.append({"role": "system", "content": system})
        for message in self.branch:
            if message.seq == before_seq:
                break
            messages.append(message.message)
        return messages

    def _refuse_while_streaming(self) -> bool:
        if self.engine.streaming:
            self.composer.show_note("A reply is still being written — press Esc to stop it first.")
            self.focus_message_box()
            return True
        return False

    def send(self) -> None:
        """Send the message box's text (as a new branch when a message is being edited)."""
        text = self.box.toPlainText().strip()
        if not text or self._refuse_while_streaming():
            return
        self.ensure_started()
        if self.engine.loading and not self.engine.ready:
            return self.composer.show_note("The model is still loading; send again when it is ready.")
        editing = self.editing
        user = {"role": "user", "content": text}
        parent = editing.parent if editing is not None else None
        history = self._history(editing.seq if editing is not None else None)
        if not self._start_reply(history + [user], parent_for_reply=None):
            return
        if editing is not None:  # the new branch starts where the edited message was
            self.branch = self.branch[:self._index_of(editing.seq)]
        user_seq = self._store_messages([user], parent)
        from app.core.conversations import ROOT, BranchMessage

        message = BranchMessage(user_seq if user_seq is not None else -2 - len(self.branch),
                                parent if parent is not None else
                                (self.branch[-1].seq if self.branch else ROOT),
                                "user", text, 0.0, None, 1, [])
        self._reply_parent = message.seq
        if self.stored:
            self.branch = self.store.branch(self.conversation_id)
        else:
            self.branch.append(message)
        self.box.clear()
        self._cancel_edit()
        if editing is not None:
            self.transcript.set_messages(self.branch)
        else:
            self.transcript.append_message(self.branch[-1])
        self.transcript.begin_reply()
        self.conversations.refresh()
        self.sidebar.select(self.conversation_id)

    def _index_of(self, seq: int) -> int:
        return next((i for i, m in enumerate(self.branch) if m.seq == seq), len(self.branch))

    def regenerate(self, seq: int) -> None:
        """Answer the same question again; the old answer stays as a version."""
        if self._refuse_while_streaming():
            return
        index = self._index_of(seq)
        if index >= len(self.branch):
            return
        parent = self.branch[index].parent
        history = self._history(seq)
        if not self._start_reply(history, parent_for_reply=parent):
            return
        self.branch = self.branch[:index]
        self.transcript.set_messages(self.branch)
        self.transcript.begin_reply()

    def _start_reply(self, messages: list[dict], parent_for_reply: Optional[int]) -> bool:
        try:
            options = self.options()
            self.engine.start_reply(messages, options, self.conversation_id)
        except QuantDeskError as exc:
            self.composer.show_note(exc.user_message)
            self.focus_message_box()
            return False
        self.composer.show_note("")
        self.composer.set_streaming(True)
        self._reply_parent = parent_for_reply
        self._reply_model = str(self.engine.model_path) if self.engine.model_path else None
        self._clear_model_notice()  # the chat goes on with the model that is loaded
        self.focus_message_box()
        return True

    def _store_messages(self, messages: list[dict], parent: Optional[int],
                        model: Optional[str] = None) -> Optional[int]:
        """Store messages (creating the conversation at its first); the last one's seq.
        ``model``: the model that wrote the reply among them, recorded as the
        conversation's model (the one reopening it brings back)."""
        if self.store is None:
            return None
        try:
            if not self.stored:
                loaded = str(self.engine.model_path) if self.engine.model_path else None
                self.store.create(model=loaded, conversation_id=self.conversation_id)
                self.stored = True
                self.store.set_settings(self.conversation_id, self.conversation_settings())
            return self.store.add_messages(self.conversation_id, messages, parent, model)[-1]
        except QuantDeskError as exc:
            self.banner.show_message(f"This message was not saved: {exc.user_message}", "error")
            return None

    def _text_arrived(self) -> None:
        """Render the new text now, or when TICK_MS have passed since the last render."""
        wait_ms = TICK_MS - 1000 * (time.perf_counter() - self._last_take)
        if wait_ms <= 0:
            self._take_text()
        elif not self._tick.isActive():
            self._tick.start(int(wait_ms) + 1)

    def _take_text(self) -> None:
        self._last_take = time.perf_counter()
        text = self.engine.take_text()
        if text:
            self.transcript.add_text(text)

    def _reply_done(self, outcome: ReplyOutcome) -> None:
        from app.core.conversations import BranchMessage

        self._tick.stop()
        self._take_text()
        self.composer.set_streaming(False)
        text, stats = outcome.text, outcome.stats()
        parent = self._reply_parent
        if parent is None and self.branch:
            parent = self.branch[-1].seq
        seq = self._store_messages([{"role": "assistant", "content": text, "stats": stats}], parent,
                                   self._reply_model)
        if self.stored and seq is not None:
            self.branch = self.store.branch(self.conversation_id)
            message = self.branch[-1]
        else:
            message = BranchMessage(-2 - len(self.branch), parent if parent is not None else -1,
                                    "assistant", text, 0.0, stats, 1, [])
            self.branch.append(message)
        self.transcript.finish_reply(message)
        self.conversations.refresh()
        self.sidebar.select(self.conversation_id)
        if outcome.crashed:
            self.banner.show_message(outcome.error.user_message, "error", "Reload model",
                                     self.reload_model)
        elif outcome.error is not None:
            self.banner.show_message(outcome.error.user_message, "error")
        self.focus_message_box()

    def stop(self) -> None:
        """Stop the reply (Stop button, Esc); the text so far is kept and marked."""
        self.engine.stop()
        self.focus_message_box()

    def escape(self) -> None:
        """Esc: stop a reply; else leave editing; else close the find bar."""
        if self.engine.streaming:
            self.stop()
        elif self.editing is not None:
            self._cancel_edit()
        elif self.find_bar.isVisible():
            self.find_bar.hide()
        self.focus_message_box()

    # -- message actions -------------------------------------------------------------

    def _message_action(self, name: str, seq: int) -> None:
        if name == "earlier":
            return self._reload_branch(limit_all=True)
        if name in ("copy",):
            return
        if name == "regenerate":
            return self.regenerate(seq)
        if self._refuse_while_streaming():
            return
        if name == "edit":
            message = self.branch[self._index_of(seq)]
            self.editing = message
            self.box.setPlainText(message.content)
            self.composer.show_note("Editing your message: Enter sends it as a new branch "
                                    "(the old one stays under ‹ ›); Esc cancels.")
            self.focus_message_box()
        elif name == "delete" and self.stored:
            self.store.hide(self.conversation_id, seq)
            self._reload_branch()
        elif name == "version" and self.stored:
            self.select_version(seq)

    def select_version(self, seq: int) -> None:
        """Show the version (and the branch after it) of message ``seq``."""
        self.store.select(self.conversation_id, seq)
        self._reload_branch()

    def _cancel_edit(self) -> None:
        if self.editing is not None:
            self.editing = None
            self.box.clear()
        self.composer.show_note("")

    # -- desktop manners ---------------------------------------------------------------

    def focus_message_box(self) -> None:
        self.box.setFocus(Qt.FocusReason.OtherFocusReason)

    def show_find(self) -> None:
        self.find_bar.show()
        self.find_bar.setFocus()
        self.find_bar.selectAll()

    def _find_next(self) -> None:
        if not self.transcript.find(self.find_bar.text()):
            self.transcript.moveCursor(self.transcript.textCursor().MoveOperation.Start)
            self.transcript.find(self.find_bar.text())

    def shutdown(self) -> None:
        """The window is closing: stop the reply and the engine, remember the layout."""
        self._closing = True
        self._tick.stop()
        if self._save_settings_timer.isActive():
            self._save_settings_timer.stop()
            self._save_conversation_settings()
        prefs = self._preferences()
        if self.started and prefs:
            try:
                prefs.set(SPLITTER_KEY, self.splitter.sizes())
            except QuantDeskError:
                pass
        self.engine.shutdown()


def _machine_facts(path: Path):
    """The model's header and this machine's free RAM/VRAM (disk and device queries,
    so run off the GUI thread)."""
    from app.ui.widgets.load_settings_form import machine_memory
    from models.gguf_header import read_gguf_header

    return (read_gguf_header(path), *machine_memory())
