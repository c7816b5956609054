"""Saved conversations: the chat history the CLI and the GUI reopen, in SQLite.

One database (``conversations/conversations.sqlite3`` in the app folders) holds every
conversation and its messages. A conversation's id is also its KV-cache session id in the
engine (``models.engine.sessions``): reopening a conversation sends its messages with that
id, and the engine restores the saved state instead of reading them all again; deleting a
conversation deletes that state too.

Never losing a conversation: every message is written in its own transaction (WAL
journal, so a crash mid-write leaves the last complete state), a reply is stored once it
has ended (a cancelled reply keeps its partial text, as the chat shows it), and a
database that cannot be opened or read is reported with a sentence and left untouched.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

from app.core.errors import QuantDeskError
from app.core.paths import app_paths

DB_NAME = "conversations.sqlite3"
TITLE_LENGTH = 60

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY, title TEXT NOT NULL, model TEXT, created REAL NOT NULL,
    updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS messages (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL, created REAL NOT NULL,
    stats TEXT, PRIMARY KEY (conversation_id, seq));
"""


@dataclass
class Conversation:
    """A conversation: its summary, and its messages when read with :meth:`ConversationStore.get`.

    ``messages`` are ``{"role", "content"}`` dicts, ready for ``EngineClient.chat``.
    """

    id: str
    title: str
    model: Optional[str]
    created: float
    updated: float
    message_count: int = 0
    messages: list[dict] = field(default_factory=list)


def new_conversation_id() -> str:
    """A fresh conversation id (also its KV-session file name: hex only)."""
    return uuid.uuid4().hex


def title_from(text: str) -> str:
    """A conversation title from its first message: the first line, at most 60 characters."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    if len(line) > TITLE_LENGTH:
        line = line[: TITLE_LENGTH - 1].rstrip() + "…"
    return line or "New conversation"


class ConversationStore:
    """The saved conversations. Cheap to create; every method opens the database.

    Args:
        path: The database file (default: in the app's conversations folder).
    """

    def __init__(self, path: Optional[Path] = None) -> None:
        self.path = Path(path) if path is not None else app_paths().ensure().conversations / DB_NAME
        with self._db() as db:
            db.executescript(_SCHEMA)

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        try:
            db = sqlite3.connect(self.path, timeout=10)
            db.execute("PRAGMA foreign_keys = ON")
            db.execute("PRAGMA journal_mode = WAL")
        except sqlite3.Error as exc:
            raise self._unreadable(exc) from exc
        try:
            with db:
                yield db
        except sqlite3.DatabaseError as exc:
            raise self._unreadable(exc) from exc
        finally:
            db.close()

    def _unreadable(self, exc: Exception) -> QuantDeskError:
        return QuantDeskError(
            f"The conversation history {self.path} cannot be read ({exc}).",
            "QuantDesk has not changed the file. Close other QuantDesk windows, or move the "
            "file away to start a new history (keep it: it may be recoverable).")

    def create(self, title: str = "", model: Optional[str] = None,
               conversation_id: Optional[str] = None) -> Conversation:
        """A new, empty conversation (titled by its first message unless ``title``).

        ``conversation_id``: an id from :func:`new_conversation_id` already used for the
        engine's KV session of the first reply (the CLI stores a chat once it has one).
        """
        now = time.time()
        conversation = Conversation(conversation_id or new_conversation_id(), title.strip(),
                                    model, now, now)
        with self._db() as db:
            db.execute("INSERT INTO conversations (id, title, model, created, updated) "
                       "VALUES (?, ?, ?, ?, ?)", (conversation.id, conversation.title, model, now, now))
        return conversation

    def add_messages(self, conversation_id: str, messages: list[dict]) -> None:
        """Add messages at the end, all in one transaction (a turn: the user's message and
        the reply); the first user message titles an untitled conversation.

        Each message is ``{"role", "content"}``, optionally with ``"stats"`` (a dict).

        Raises:
            QuantDeskError: There is no such conversation (deleted meanwhile).
        """
        now = time.time()
        with self._db() as db:
            row = db.execute("SELECT title, (SELECT COUNT(*) FROM messages WHERE conversation_id = ?) "
                             "FROM conversations WHERE id = ?", (conversation_id, conversation_id)).fetchone()
            if row is None:
                raise self._missing(conversation_id)
            title, count = row
            for seq, message in enumerate(messages, start=count):
                stats = message.get("stats")
                db.execute("INSERT INTO messages (conversation_id, seq, role, content, created, stats) "
                           "VALUES (?, ?, ?, ?, ?, ?)", (conversation_id, seq, message["role"],
                                                         message["content"], now,
                                                         json.dumps(stats) if stats else None))
                if not title and message["role"] == "user":
                    title = title_from(message["content"])
            db.execute("UPDATE conversations SET updated = ?, title = ? WHERE id = ?",
                       (now, title, conversation_id))

    def get(self, conversation_id: str) -> Conversation:
        """The conversation with its messages, oldest first.

        ``conversation_id`` may be a unique prefix of the id (as the CLI prints it).

        Raises:
            QuantDeskError: No conversation, or more than one, matches.
        """
        full_id = self.resolve(conversation_id)
        with self._db() as db:
            row = db.execute("SELECT id, title, model, created, updated FROM conversations "
                             "WHERE id = ?", (full_id,)).fetchone()
            messages = db.execute("SELECT role, content FROM messages WHERE conversation_id = ? "
                                  "ORDER BY seq", (full_id,)).fetchall()
        conversation = Conversation(*row, message_count=len(messages))
        conversation.messages = [{"role": role, "content": content} for role, content in messages]
        return conversation

    def resolve(self, id_or_prefix: str) -> str:
        """The full id of the one conversation whose id starts with ``id_or_prefix``."""
        prefix = id_or_prefix.strip().lower()
        with self._db() as db:
            ids = [r[0] for r in db.execute(
                "SELECT id FROM conversations WHERE substr(id, 1, ?) = ? LIMIT 2",
                (len(prefix), prefix))] if prefix else []
        if len(ids) != 1:
            raise self._missing(id_or_prefix) if not ids else QuantDeskError(
                f"More than one conversation starts with '{id_or_prefix}'.",
                "Give more characters of its id (`quantdesk chats` lists them).")
        return ids[0]

    def list(self) -> list[Conversation]:
        """Every conversation (without messages), the most recently used first."""
        with self._db() as db:
            rows = db.execute(
                "SELECT c.id, c.title, c.model, c.created, c.updated, COUNT(m.seq) "
                "FROM conversations c LEFT JOIN messages m ON m.conversation_id = c.id "
                "GROUP BY c.id ORDER BY c.updated DESC").fetchall()
        return [Conversation(*row[:5], message_count=row[5]) for row in rows]

    def rename(self, conversation_id: str, title: str) -> None:
        """Give a conversation another title."""
        full_id = self.resolve(conversation_id)
        with self._db() as db:
            db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title.strip(), full_id))

    def delete(self, conversation_id: str, engine=None) -> None:
        """Delete a conversation, its messages and its saved KV-cache state.

        Args:
            engine: The running :class:`~models.engine.EngineClient`, if any: it deletes
                the state itself, so a save it is finishing cannot bring the file back.
        """
        full_id = self.resolve(conversation_id)
        if engine is not None:
            engine.delete_session(full_id)
        else:
            from models.engine.sessions import SessionStore

            SessionStore.default().delete(full_id)
        with self._db() as db:
            db.execute("DELETE FROM conversations WHERE id = ?", (full_id,))

    @staticmethod
    def _missing(conversation_id: str) -> QuantDeskError:
        return QuantDeskError(f"There is no saved conversation '{conversation_id}'.",
                              "Run `quantdesk chats` to list the saved conversations.")
