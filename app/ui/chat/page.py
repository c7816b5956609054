"""The Chat page: conversations on the left, the transcript and composer in the middle,
the model and its settings on the right.

The page is glue. Conversations, versions and branches are the Qt-free
:class:`~app.core.conversations.ConversationStore`; loading and replies run through
:class:`~app.ui.chat.engine.ChatEngine` off the GUI thread; the transcript renders.
Every reply is stored when it ends (a stopped or crashed one with its partial text), every
sent message when it is sent. Errors are shown inline (banner or the line above the
message box), never in modal boxes, and the message box keeps keyboard focus.

This module builds the page and starts it; what the page does lives beside it, one
concern a module, as mixins of :class:`ChatPage`:
:mod:`~app.ui.chat.model_control` (loading, reloading and offering models),
:mod:`~app.ui.chat.saved_conversations` (new, open, rename, delete, export),
:mod:`~app.ui.chat.conversation_settings` (system prompt, sampling, JSON mode, presets) and
:mod:`~app.ui.chat.replies` (sending, streaming, storing, message actions).

Construction is cheap (no engine, no database, no library scan): those start when the
page is first shown or given a model, so the window opens fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QLineEdit, QSplitter, QVBoxLayout, QWidget

from app.ui.chat.composer import Composer
from app.ui.chat.conversation_settings import ConversationSettings
from app.ui.chat.engine import ChatEngine
from app.ui.chat.model_control import ModelControl
from app.ui.chat.replies import TICK_MS, Replies  # noqa: F401 - TICK_MS: bench_chat_gui reads it here
from app.ui.chat.saved_conversations import SavedConversations
from app.ui.chat.side_panel import SidePanel
from app.ui.chat.sidebar import ConversationListModel, ConversationSidebar
from app.ui.chat.transcript import TranscriptView
from app.ui.pages import Page
from app.ui.widgets.banner import MessageBanner
from app.ui.worker import JobWorker, start_job
from models.foundation.errors import QuantDeskError

SPLITTER_KEY = "chat_splitter_sizes"


class ChatPage(ModelControl, SavedConversations, ConversationSettings, Replies, Page):
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
        self._opened_model: Optional[Path] = None  # opened in the window: joins the Library once loaded
        self._added_to_library: Optional[Path] = None  # what the Library note's Undo takes out
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
        self.panel.library_undo.clicked.connect(self._undo_library)
        self.find_bar.returnPressed.connect(self._find_next)
        for keys, slot in (("Ctrl+N", self.new_chat), ("Ctrl+F", self.show_find),
                           ("Ctrl+L", self.focus_message_box), ("Esc", self.escape)):
            shortcut = QShortcut(QKeySequence(keys), self)
            shortcut.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            shortcut.activated.connect(slot)

    # -- start-up --------------------------------------------------------------

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

    def _restore_splitter(self) -> None:
        sizes = self._preferences().get(SPLITTER_KEY)
        if isinstance(sizes, list) and len(sizes) == 3:
            self.splitter.setSizes([int(s) for s in sizes])

    @staticmethod
    def _preferences():
        from app.core.preferences import Preferences

        try:
            return Preferences()
        except QuantDeskError:
            return {}

    def changeEvent(self, event) -> None:  # noqa: N802 - Qt
        """A theme switch re-renders the transcript (code colours follow the background)."""
        from PySide6.QtCore import QEvent

        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and self.started and not self._closing \
                and not self.engine.streaming and self.branch:
            self._reload_branch()

    # -- desktop manners -------------------------------------------------------

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
