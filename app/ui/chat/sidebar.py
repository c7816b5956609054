"""The conversation sidebar: search, New chat, and the saved conversations (a Qt list
model over :meth:`ConversationStore.search`, most recent first)."""

from __future__ import annotations

import time
from typing import Optional

from PySide6.QtCore import QAbstractListModel, QModelIndex, QPersistentModelIndex, Qt, QTimer, Signal
from PySide6.QtWidgets import (QLineEdit, QListView, QMenu, QPushButton, QVBoxLayout, QWidget)

from app.core.conversations import Conversation

ID_ROLE = Qt.ItemDataRole.UserRole + 1

_Index = QModelIndex | QPersistentModelIndex


class ConversationListModel(QAbstractListModel):
    """The saved conversations as rows; titles are editable (rename in place).

    Args:
        store: The :class:`~app.core.conversations.ConversationStore`, or ``None`` while
            the history cannot be read (the list is then empty).
    """

    renamed = Signal(str, str)  # id, new title

    def __init__(self, store=None, parent=None) -> None:
        super().__init__(parent)
        self.store = store
        self.query = ""
        self._rows: list[Conversation] = []

    def refresh(self, query: Optional[str] = None) -> None:
        """Read the list again (with a new search text when given)."""
        if query is not None:
            self.query = query
        rows = self.store.search(self.query) if self.store is not None else []
        self.beginResetModel()
        self._rows = rows
        self.endResetModel()

    def rowCount(self, parent: _Index = QModelIndex()) -> int:  # noqa: N802 - Qt
        return 0 if parent.isValid() else len(self._rows)

    def data(self, index: _Index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        row = self._rows[index.row()]
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.EditRole):
            return row.title or "New conversation"
        if role == Qt.ItemDataRole.ToolTipRole:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(row.updated))
            return f"{row.title}\n{row.message_count} messages · {when}"
        if role == ID_ROLE:
            return row.id
        return None

    def flags(self, index: _Index) -> Qt.ItemFlag:
        return super().flags(index) | Qt.ItemFlag.ItemIsEditable

    def setData(self, index: _Index, value, role: int = Qt.ItemDataRole.EditRole) -> bool:  # noqa: N802
        if role != Qt.ItemDataRole.EditRole or not str(value).strip():
            return False
        row = self._rows[index.row()]
        self.renamed.emit(row.id, str(value).strip())
        row.title = str(value).strip()
        self.dataChanged.emit(index, index)
        return True

    def row_of(self, conversation_id: Optional[str]) -> int:
        return next((i for i, r in enumerate(self._rows) if r.id == conversation_id), -1)

    def id_at(self, row: int) -> str:
        return self._rows[row].id


class ConversationSidebar(QWidget):
    """Search box, New chat button and the list. Signals carry conversation ids."""

    new_chat = Signal()
    chosen = Signal(str)
    delete_requested = Signal(str)
    export_requested = Signal(str, str)  # id, "markdown" | "json"

    def __init__(self, model: ConversationListModel, parent=None) -> None:
        super().__init__(parent)
        self.model = model
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 8, 4, 8)
        self.new_button = QPushButton("New chat")
        self.new_button.setAccessibleName("New chat")
        self.new_button.setToolTip("Start a new conversation (Ctrl+N)")
        self.new_button.clicked.connect(self.new_chat)
        self.search = QLineEdit()
        self.search.setPlaceholderText("Search conversations")
        self.search.setAccessibleName("Search conversations")
        self.search.setClearButtonEnabled(True)
        self._search_timer = QTimer(self, singleShot=True, interval=200)
        self._search_timer.timeout.connect(lambda: self.model.refresh(self.search.text()))
        self.search.textChanged.connect(lambda _: self._search_timer.start())
        self.list = QListView()
        self.list.setObjectName("conversationList")
        self.list.setAccessibleName("Conversations")
        self.list.setModel(model)
        self.list.setEditTriggers(QListView.EditTrigger.EditKeyPressed)
        self.list.setUniformItemSizes(True)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.activated.connect(self._activated)
        self.list.clicked.connect(self._activated)
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.customContextMenuRequested.connect(self._menu)
        layout.addWidget(self.new_button)
        layout.addWidget(self.search)
        layout.addWidget(self.list, 1)

    def _activated(self, index: QModelIndex) -> None:
        if index.isValid():
            self.chosen.emit(self.model.id_at(index.row()))

    def select(self, conversation_id: Optional[str]) -> None:
        """Highlight a conversation (without emitting :attr:`chosen`)."""
        row = self.model.row_of(conversation_id)
        self.list.blockSignals(True)
        if row >= 0:
            self.list.setCurrentIndex(self.model.index(row))
        else:
            self.list.clearSelection()
        self.list.blockSignals(False)

    def _menu(self, point) -> None:
        index = self.list.indexAt(point)
        if not index.isValid():
            return
        conversation_id = self.model.id_at(index.row())
        menu = QMenu(self)
        menu.addAction("Rename", lambda: self.list.edit(index))
        menu.addAction("Export as Markdown…",
                       lambda: self.export_requested.emit(conversation_id, "markdown"))
        menu.addAction("Export as JSON…", lambda: self.export_requested.emit(conversation_id, "json"))
        menu.addSeparator()
        menu.addAction("Delete…", lambda: self.delete_requested.emit(conversation_id))
        menu.popup(self.list.viewport().mapToGlobal(point))
