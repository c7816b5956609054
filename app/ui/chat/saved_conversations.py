"""The Chat page's saved conversations: a new chat, opening one (with its settings and its
model), renaming, deleting after an inline confirmation, and exporting.

A mixin of :class:`~app.ui.chat.page.ChatPage` over its ``store``
(:class:`~app.core.conversations.ConversationStore`), sidebar and transcript.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QFileDialog

from app.ui.chat.transcript import SHOWN_AT_FIRST
from models.foundation.errors import QuantDeskError


class SavedConversations:
    """New, open, rename, delete and export conversations."""

    def _add_file_actions(self) -> None:
        window = self.window()
        if not hasattr(window, "add_file_action"):
            return
        for text, fmt in (("Export Chat as &Markdown…", "markdown"),
                          ("Export Chat as &JSON…", "json")):
            action = QAction(text, window)
            action.triggered.connect(lambda _=False, f=fmt: self.choose_export_file(None, f))
            window.add_file_action(action)

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
        self.transcript.forget_folds()
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
        self.transcript.forget_folds()
        self.transcript.set_messages(self.branch)
        self.sidebar.select(self.conversation_id)
        self._follow_conversation_model(model)
        self.focus_message_box()

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
