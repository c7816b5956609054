"""Versions and branches of saved conversations, and the append-only schema migration."""

from __future__ import annotations

import sqlite3

import pytest

from app.core.conversations import ROOT, SCHEMA_VERSION, ConversationStore
from models.foundation.errors import QuantDeskError

# The schema as QuantDesk wrote it before versions and branches (user_version 0).
OLD_SCHEMA = """
CREATE TABLE conversations (
    id TEXT PRIMARY KEY, title TEXT NOT NULL, model TEXT, created REAL NOT NULL,
    updated REAL NOT NULL);
CREATE TABLE messages (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL, created REAL NOT NULL,
    stats TEXT, PRIMARY KEY (conversation_id, seq));
"""


def write_old_database(path, turns=3):
    with sqlite3.connect(path) as db:
        db.executescript(OLD_SCHEMA)
        db.execute("INSERT INTO conversations VALUES ('abcd1234', 'Old chat', 'm.gguf', 1, 2)")
        for i in range(turns):
            db.execute("INSERT INTO messages VALUES ('abcd1234', ?, 'user', ?, 1, NULL)",
                       (2 * i, f"question {i}"))
            db.execute("INSERT INTO messages VALUES ('abcd1234', ?, 'assistant', ?, 1, ?)",
                       (2 * i + 1, f"answer {i}", '{"completion_tokens": 2}'))
    db.close()


def test_a_database_from_before_the_migration_opens_with_its_messages(tmp_path):
    path = tmp_path / "conversations.sqlite3"
    write_old_database(path)
    with sqlite3.connect(path) as db:
        old_rows = db.execute("SELECT * FROM messages ORDER BY seq").fetchall()
    store = ConversationStore(path)
    conversation = store.get("abcd")
    assert [m["content"] for m in conversation.messages] == [
        "question 0", "answer 0", "question 1", "answer 1", "question 2", "answer 2"]
    assert store.list()[0].message_count == 6
    branch = store.branch("abcd")
    assert [m.parent for m in branch] == [ROOT, 0, 1, 2, 3, 4]
    assert branch[1].stats == {"completion_tokens": 2} and branch[1].versions == [1]
    with sqlite3.connect(path) as db:  # append-only: the old rows are as they were
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.execute("SELECT conversation_id, seq, role, content, created, stats "
                          "FROM messages ORDER BY seq").fetchall() == old_rows
    # It goes on as usual: the next turn follows the last old message.
    store.add_messages("abcd1234", [{"role": "user", "content": "question 3"}])
    assert store.get("abcd").messages[-1]["content"] == "question 3"
    assert ConversationStore(path).get("abcd").message_count == 7  # reopens migrated


def test_regenerate_keeps_versions_and_selecting_shows_each():
    store = ConversationStore()
    c = store.create()
    user, first = store.add_messages(c.id, [{"role": "user", "content": "Hi"},
                                            {"role": "assistant", "content": "Hello!"}])
    (second,) = store.add_messages(c.id, [{"role": "assistant", "content": "Hey."}], parent=user)
    branch = store.branch(c.id)
    assert [m.content for m in branch] == ["Hi", "Hey."]
    assert (branch[1].version, branch[1].versions) == (2, [first, second])
    store.select(c.id, first)
    assert [m["content"] for m in store.get(c.id).messages] == ["Hi", "Hello!"]
    assert store.branch(c.id)[1].version == 1


def test_edit_makes_a_branch_and_the_old_one_stays_reachable():
    store = ConversationStore()
    c = store.create()
    q1, a1, q2, a2 = store.add_messages(c.id, [
        {"role": "user", "content": "Name a fruit"}, {"role": "assistant", "content": "Apple"},
        {"role": "user", "content": "Another"}, {"role": "assistant", "content": "Pear"}])
    edited, reply = store.add_messages(c.id, [{"role": "user", "content": "Name a vegetable"},
                                              {"role": "assistant", "content": "Leek"}], parent=ROOT)
    again = ConversationStore()
    assert [m["content"] for m in again.get(c.id).messages] == ["Name a vegetable", "Leek"]
    first = again.branch(c.id)[0]
    assert first.versions == [q1, edited] and first.version == 2
    again.select(c.id, q1)  # back to the old branch, with everything after it
    assert [m["content"] for m in again.get(c.id).messages] == ["Name a fruit", "Apple", "Another", "Pear"]


def test_deleted_messages_are_left_out_and_settings_are_kept():
    store = ConversationStore()
    c = store.create()
    seqs = store.add_messages(c.id, [{"role": "user", "content": "a"},
                                     {"role": "assistant", "content": "b"}])
    store.hide(c.id, seqs[1])
    assert [m["content"] for m in store.get(c.id).messages] == ["a"]
    store.add_messages(c.id, [{"role": "assistant", "content": "c"}])
    assert [m["content"] for m in store.get(c.id).messages] == ["a", "c"]
    store.set_settings(c.id, {"system_prompt": "Be brief.", "schema_text": "{}"})
    assert ConversationStore().settings(c.id[:6])["system_prompt"] == "Be brief."
    with pytest.raises(QuantDeskError, match="no message 99"):
        store.select(c.id, 99)


def test_search_finds_titles_and_message_text():
    store = ConversationStore()
    a = store.create()
    store.add_messages(a.id, [{"role": "user", "content": "Trip to Rome"},
                              {"role": "assistant", "content": "Visit the Colosseum 100%"}])
    b = store.create()
    store.add_messages(b.id, [{"role": "user", "content": "Bake bread"}])
    assert [c.id for c in store.search("rome")] == [a.id]
    assert [c.id for c in store.search("colosseum")] == [a.id]
    assert [c.id for c in store.search("100%")] == [a.id]
    assert [c.id for c in store.search("%")] == [a.id]  # a literal percent sign
    assert len(store.search("")) == 2 and store.search("nothing here") == []


def test_chats_show_prints_the_current_branch(capsys):
    from app.cli import main

    store = ConversationStore()
    c = store.create()
    user, _ = store.add_messages(c.id, [{"role": "user", "content": "Pick a number"},
                                        {"role": "assistant", "content": "Seven"}])
    store.add_messages(c.id, [{"role": "assistant", "content": "Three"}], parent=user)
    assert main(["chats", "show", c.id[:8]]) == 0
    out = capsys.readouterr().out
    assert "[assistant, version 2/2]\nThree" in out and "Seven" not in out
