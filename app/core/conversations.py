"""Saved conversations: the chat history the CLI and the GUI reopen, in SQLite.

One database (``conversations/conversations.sqlite3`` in the app folders) holds every
conversation and its messages. A conversation's id is also its KV-cache session id in the
engine (``models.engine.sessions``): reopening a conversation sends its messages with that
id, and the engine restores the saved state instead of reading them all again; deleting a
conversation deletes that state too.

Versions and branches: messages form a tree. Each message names its ``parent`` (the
message it answers or follows); a conversation's ``head`` is the last message of the
branch on screen, and the branch is the path from the head up to the first message.
Regenerating an answer adds a sibling of the old answer (same parent): both stay, as
versions ‹ 1/2 › and ‹ 2/2 ›. Editing a user message adds a sibling of that message and
continues from it: a new branch, the old one still reachable through the versions of the
edited message. :meth:`ConversationStore.get` (what the CLI shows and the engine is sent)
returns the current branch.

The schema grows by an append-only migration (``PRAGMA user_version``): version 1 adds
``messages.parent``, ``messages.hidden``, ``conversations.head`` and
``conversations.settings`` with ``ALTER TABLE ... ADD COLUMN`` and rewrites no row. A
``NULL`` parent means "the message stored before me" and a ``NULL`` head "the last
message", so a database written before the migration reads as the single branch it
always was. Version 2 adds ``messages.reasoning``: a reasoning model's thinking, kept
apart from its answer (``content``) — shown folded, exported, searched, and not sent back
to the model as part of the answer (``NULL`` for every message without one).

Never losing a conversation: every message is written in its own transaction (WAL
journal, so a crash mid-write leaves the last complete state), a reply is stored once it
has ended (a cancelled reply keeps its partial text, as the chat shows it), and a
database that cannot be opened or read is reported with a sentence and left untouched.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

from models.foundation.errors import QuantDeskError
from models.foundation.paths import app_paths

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

# Append-only migrations, one per schema version (index + 1 = the version it makes).
# Never edit one that has shipped: add the next.
_MIGRATIONS = (
    # 1: versions and branches, per-conversation settings. NULL keeps the old meaning.
    "ALTER TABLE messages ADD COLUMN parent INTEGER;"
    "ALTER TABLE messages ADD COLUMN hidden INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE conversations ADD COLUMN head INTEGER;"
    "ALTER TABLE conversations ADD COLUMN settings TEXT;",
    # 2: a reasoning model's thinking, apart from its answer. NULL: none.
    "ALTER TABLE messages ADD COLUMN reasoning TEXT;",
    # 3: images in messages: the parts in order (text, and images by hash; NULL: text
    # only), each picture stored once however many messages show it.
    "ALTER TABLE messages ADD COLUMN parts TEXT;"
    "CREATE TABLE IF NOT EXISTS images (sha256 TEXT PRIMARY KEY, data BLOB NOT NULL);",
)
SCHEMA_VERSION = len(_MIGRATIONS)
ROOT = -1  # the parent of a conversation's first message


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


@dataclass
class BranchMessage:
    """One message of the branch on screen, with where it sits among its versions.

    Attributes:
        seq: The message's number in its conversation (stable; how to refer to it).
        parent: The ``seq`` of the message before it (:data:`ROOT` for the first).
        version: 1-based position among the messages sharing its parent.
        versions: ``seq`` of every version (siblings, oldest first, itself included).
        stats: The reply's :class:`~models.engine.ChatStats` as a dict, or ``None``.
        reasoning: A reasoning model's thinking before ``content`` (its answer); "" for none.
        parts: For a message with images, its text and image parts in order
            (``{"type": "image", "data": bytes}``, see :mod:`models.images`); ``content``
            is then its text alone. ``None`` for a text message.
    """

    seq: int
    parent: int
    role: str
    content: str
    created: float
    stats: Optional[dict]
    version: int = 1
    versions: list[int] = field(default_factory=list)
    reasoning: str = ""
    parts: Optional[list] = None

    @property
    def message(self) -> dict:
        """``{"role", "content"}``, as the engine takes it: the answer without the
        reasoning (``ThinkingTemplate.history_message`` adds it for templates that read it),
        a message with images as its parts."""
        return {"role": self.role, "content": self.parts if self.parts is not None else self.content}

    @property
    def images(self) -> list[bytes]:
        """The message's pictures (image files), in order."""
        return [p["data"] for p in self.parts or () if p["type"] == "image"]


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
    """The saved conversations. Cheap to create; the database opens at first use.

    Each thread that uses a store keeps one connection to it for the store's lifetime:
    opening and closing per call made every write checkpoint and delete the WAL file
    (2-3 ms a call, spikes of 30 ms on a busy disk, on the GUI thread at each reply's end);
    kept open, a write is ~0.5 ms and still synced to disk before it returns.

    Args:
        path: The database file (default: in the app's conversations folder).
    """

    def __init__(self, path: Optional[Path] = None) -> None:
        self.path = Path(path) if path is not None else app_paths().ensure().conversations / DB_NAME
        self._connections = threading.local()
        with self._db(write=True) as db:
            db.executescript(_SCHEMA)  # commits: the migrations get a transaction of their own
        with self._db(write=True) as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            for number in range(version, SCHEMA_VERSION):
                for statement in _MIGRATIONS[number].split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute(f"PRAGMA user_version = {number + 1}")

    @contextlib.contextmanager
    def _db(self, write: bool = False) -> Iterator[sqlite3.Connection]:
        """This thread's connection, inside one transaction (committed at the end).

        A writing transaction takes the write lock at its start (``BEGIN IMMEDIATE``,
        waiting up to 10 s for another writer): a read-then-write transaction that began
        deferred would fail at once with "database is locked" when another thread or
        process wrote in between (two writers raised that in a test of the old code).
        """
        db = getattr(self._connections, "db", None)
        if db is None:
            try:
                # isolation_level=None: the transactions are the explicit ones below.
                db = sqlite3.connect(self.path, timeout=10, isolation_level=None)
                db.execute("PRAGMA foreign_keys = ON")
                db.execute("PRAGMA journal_mode = WAL")
            except sqlite3.Error as exc:
                raise self._unreadable(exc) from exc
            self._connections.db = db
        if db.in_transaction:  # a call inside another's transaction joins it
            yield db
            return
        try:
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield db
            except BaseException:
                db.rollback()
                raise
            db.commit()
        except sqlite3.DatabaseError as exc:
            self.close()  # the next call opens the file afresh
            raise self._unreadable(exc) from exc

    def close(self) -> None:
        """Close this thread's connection (the next call opens a new one)."""
        db = getattr(self._connections, "db", None)
        if db is not None:
            self._connections.db = None
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
        with self._db(write=True) as db:
            db.execute("INSERT INTO conversations (id, title, model, created, updated) "
                       "VALUES (?, ?, ?, ?, ?)", (conversation.id, conversation.title, model, now, now))
        return conversation

    def add_messages(self, conversation_id: str, messages: list[dict],
                     parent: Optional[int] = None, model: Optional[str] = None) -> list[int]:
        """Add messages as a chain after ``parent``, all in one transaction (a turn: the
        user's message and the reply), and make the last one the conversation's head.
        The first user message titles an untitled conversation.

        Args:
            conversation_id: The conversation's full id.
            messages: ``{"role", "content"}`` dicts, optionally with ``"stats"`` (a dict)
                and ``"reasoning"`` (a reasoning model's thinking, apart from its answer).
            parent: The ``seq`` to continue from: ``None`` for the head (the end of the
                branch on screen), the parent of an answer to regenerate it (a new
                version), the parent of a user message to edit it (a new branch), or
                :data:`ROOT`.
            model: The model file that wrote the reply among ``messages``: it becomes the
                conversation's model (the one reopening it brings back), so a
                conversation continued with another model reopens with that one.

        Returns:
            The ``seq`` of each added message.

        Raises:
            QuantDeskError: There is no such conversation (deleted meanwhile).
        """
        now = time.time()
        seqs = []
        with self._db(write=True) as db:
            row = db.execute("SELECT title, head, (SELECT MAX(seq) FROM messages WHERE "
                             "conversation_id = ?) FROM conversations WHERE id = ?",
                             (conversation_id, conversation_id)).fetchone()
            if row is None:
                raise self._missing(conversation_id)
            title, head, last = row
            after = parent if parent is not None else (head if head is not None else
                                                       (last if last is not None else ROOT))
            seq = -1 if last is None else last
            for message in messages:
                seq += 1
                stats = message.get("stats")
                text, parts = self._store_parts(db, message["content"])
                db.execute("INSERT INTO messages (conversation_id, seq, role, content, created, "
                           "stats, parent, reasoning, parts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           (conversation_id, seq, message["role"], text, now,
                            json.dumps(stats) if stats else None, after,
                            message.get("reasoning") or None, parts))
                if not title and message["role"] == "user":
                    title = title_from(text)
                seqs.append(seq)
                after = seq
            db.execute("UPDATE conversations SET updated = ?, title = ?, head = ? WHERE id = ?",
                       (now, title, after, conversation_id))
            if model is not None:
                db.execute("UPDATE conversations SET model = ? WHERE id = ?", (model, conversation_id))
        return seqs

    @staticmethod
    def _store_parts(db: sqlite3.Connection, content) -> tuple[str, Optional[str]]:
        """A message's text, and for one with images its parts as JSON (images by hash,
        their bytes stored once in ``images``)."""
        if isinstance(content, str):
            return content, None
        from models.images import check_image, content_text

        parts = []
        for part in content:
            if part["type"] == "image":
                digest = check_image(part["data"]).sha256
                db.execute("INSERT OR IGNORE INTO images (sha256, data) VALUES (?, ?)",
                           (digest, bytes(part["data"])))
                parts.append({"type": "image", "sha256": digest})
            else:
                parts.append({"type": "text", "text": part["text"]})
        return content_text(content), json.dumps(parts)

    @staticmethod
    def _load_parts(db: sqlite3.Connection, parts: Optional[str]) -> Optional[list]:
        if parts is None:
            return None
        out = []
        for part in json.loads(parts):
            if part["type"] == "image":
                row = db.execute("SELECT data FROM images WHERE sha256 = ?", (part["sha256"],)).fetchone()
                if row is None:  # never deleted while a message refers to it; be safe
                    continue
                out.append({"type": "image", "data": bytes(row[0])})
            else:
                out.append(part)
        return out

    def get(self, conversation_id: str) -> Conversation:
        """The conversation with the messages of its current branch, oldest first.

        ``conversation_id`` may be a unique prefix of the id (as the CLI prints it).

        Raises:
            QuantDeskError: No conversation, or more than one, matches.
        """
        full_id = self.resolve(conversation_id)
        with self._db() as db:
            row = db.execute("SELECT id, title, model, created, updated FROM conversations "
                             "WHERE id = ?", (full_id,)).fetchone()
            branch = self._branch(db, full_id)
        conversation = Conversation(*row, message_count=len(branch))
        conversation.messages = [m.message for m in branch]
        return conversation

    def branch(self, conversation_id: str) -> list[BranchMessage]:
        """The messages of the current branch, with their versions (what the GUI shows)."""
        full_id = self.resolve(conversation_id)
        with self._db() as db:
            return self._branch(db, full_id)

    @staticmethod
    def _tree(db: sqlite3.Connection, full_id: str) -> tuple[dict, dict, Optional[int]]:
        """Every message by seq, the visible children of each parent, and the head."""
        rows = db.execute("SELECT seq, parent, role, content, created, stats, hidden, reasoning, "
                          "parts FROM messages WHERE conversation_id = ? ORDER BY seq",
                          (full_id,)).fetchall()
        by_seq: dict[int, tuple] = {}
        children: dict[int, list[int]] = {}
        for seq, parent, role, content, created, stats, hidden, reasoning, parts in rows:
            parent = (seq - 1 if seq > 0 else ROOT) if parent is None else parent  # before v1
            by_seq[seq] = (parent, role, content, created, stats, hidden, reasoning, parts)
            if not hidden:
                children.setdefault(parent, []).append(seq)
        head = db.execute("SELECT head FROM conversations WHERE id = ?", (full_id,)).fetchone()
        head = head[0] if head and head[0] is not None else (rows[-1][0] if rows else None)
        return by_seq, children, head

    def _branch(self, db: sqlite3.Connection, full_id: str) -> list[BranchMessage]:
        by_seq, children, head = self._tree(db, full_id)
        path = []
        seq = head
        while seq is not None and seq in by_seq and len(path) <= len(by_seq):
            path.append(seq)
            seq = by_seq[seq][0] if by_seq[seq][0] != ROOT else None
        branch = []
        for seq in reversed(path):
            parent, role, content, created, stats, hidden, reasoning, parts = by_seq[seq]
            if hidden:
                continue
            siblings = children.get(parent, [seq])
            branch.append(BranchMessage(seq, parent, role, content, created,
                                        json.loads(stats) if stats else None,
                                        siblings.index(seq) + 1, siblings, reasoning or "",
                                        self._load_parts(db, parts)))
        return branch

    def select(self, conversation_id: str, seq: int) -> None:
        """Show the branch through message ``seq`` (a version picked with ‹ ›): the head
        becomes its newest descendant, following the newest child at each step."""
        full_id = self.resolve(conversation_id)
        with self._db(write=True) as db:
            by_seq, children, _ = self._tree(db, full_id)
            if seq not in by_seq:
                raise QuantDeskError(f"The conversation has no message {seq}.",
                                     "Reopen the conversation; it may have changed meanwhile.")
            while children.get(seq):
                seq = children[seq][-1]
            db.execute("UPDATE conversations SET head = ? WHERE id = ?", (seq, full_id))

    def hide(self, conversation_id: str, seq: int) -> None:
        """Delete a message from the conversation as shown and sent (its row stays, so the
        messages after it keep their place; versions of it remain)."""
        full_id = self.resolve(conversation_id)
        with self._db(write=True) as db:
            db.execute("UPDATE messages SET hidden = 1 WHERE conversation_id = ? AND seq = ?",
                       (full_id, seq))
            db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (time.time(), full_id))

    def model_of(self, conversation_id: str) -> Optional[str]:
        """The path of the model the conversation was last written with (``None`` when
        none was recorded)."""
        full_id = self.resolve(conversation_id)
        with self._db() as db:
            row = db.execute("SELECT model FROM conversations WHERE id = ?", (full_id,)).fetchone()
        return row[0] if row else None

    def set_model(self, conversation_id: str, model: Optional[str]) -> None:
        """Record ``model`` as the conversation's model without adding a message: a
        relative path saved by an older CLI, once found, is stored as the file it means."""
        full_id = self.resolve(conversation_id)
        with self._db(write=True) as db:
            db.execute("UPDATE conversations SET model = ? WHERE id = ?", (model, full_id))

    def settings(self, conversation_id: str) -> dict:
        """The conversation's own settings (system prompt, sampling, schema text...)."""
        full_id = self.resolve(conversation_id)
        with self._db() as db:
            row = db.execute("SELECT settings FROM conversations WHERE id = ?", (full_id,)).fetchone()
        return json.loads(row[0]) if row and row[0] else {}

    def set_settings(self, conversation_id: str, values: dict) -> None:
        """Replace the conversation's own settings (plain JSON values)."""
        full_id = self.resolve(conversation_id)
        with self._db(write=True) as db:
            db.execute("UPDATE conversations SET settings = ? WHERE id = ?",
                       (json.dumps(values), full_id))

    def search(self, text: str) -> list[Conversation]:
        """Conversations whose title or any message contains ``text`` (case-insensitive for
        ASCII) — in a message's answer or in its reasoning —, the most recently used
        first; every conversation for empty text."""
        needle = text.strip()
        if not needle:
            return self.list()
        pattern = "%" + needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        return self._list(where="WHERE c.title LIKE ?1 ESCAPE '\\' OR EXISTS (SELECT 1 FROM "
                               "messages s WHERE s.conversation_id = c.id AND s.hidden = 0 AND "
                               "(s.content LIKE ?1 ESCAPE '\\' OR s.reasoning LIKE ?1 ESCAPE '\\'))",
                          args=(pattern,))

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
        """Every conversation (without messages), the most recently used first.

        ``message_count`` counts the stored messages that are not deleted, every version
        included.
        """
        return self._list()

    def _list(self, where: str = "", args: tuple = ()) -> list[Conversation]:
        with self._db() as db:
            rows = db.execute(
                "SELECT c.id, c.title, c.model, c.created, c.updated, COUNT(m.seq) "
                "FROM conversations c LEFT JOIN messages m ON m.conversation_id = c.id "
                f"AND m.hidden = 0 {where} GROUP BY c.id ORDER BY c.updated DESC", args).fetchall()
        return [Conversation(*row[:5], message_count=row[5]) for row in rows]

    def rename(self, conversation_id: str, title: str) -> None:
        """Give a conversation another title."""
        full_id = self.resolve(conversation_id)
        with self._db(write=True) as db:
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
        with self._db(write=True) as db:
            db.execute("DELETE FROM conversations WHERE id = ?", (full_id,))
            # Pictures no message shows any more (parts name them by hash).
            db.execute("DELETE FROM images WHERE NOT EXISTS (SELECT 1 FROM messages WHERE "
                       "messages.parts LIKE '%' || images.sha256 || '%')")

    @staticmethod
    def _missing(conversation_id: str) -> QuantDeskError:
        return QuantDeskError(f"There is no saved conversation '{conversation_id}'.",
                              "Run `quantdesk chats` to list the saved conversations.")
