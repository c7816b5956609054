"""The conversation store: saved chats survive, reopen in order, and delete cleanly."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from app.core.conversations import ConversationStore, title_from
from models.engine.sessions import SessionStore
from models.foundation.errors import QuantDeskError


def turn(user: str, reply: str) -> list[dict]:
    return [{"role": "user", "content": user}, {"role": "assistant", "content": reply,
                                                "stats": {"completion_tokens": 3}}]


def test_turns_are_kept_in_order_across_store_instances():
    store = ConversationStore()
    first = store.create(model="m.gguf")
    store.add_messages(first.id, [{"role": "system", "content": "Be brief."}] + turn("Hello there", "Hi."))
    second = store.create(title="Named")
    store.add_messages(second.id, turn("Other", "Yes."))
    store.add_messages(first.id, turn("And now?", "Now this."))

    again = ConversationStore()  # a new process would see the same
    listed = again.list()
    assert [c.id for c in listed] == [first.id, second.id]  # the most recently used first
    assert [c.message_count for c in listed] == [5, 2]
    assert listed[0].title == "Hello there" and listed[1].title == "Named"
    conversation = again.get(first.id[:6])  # a unique prefix is enough
    assert [m["role"] for m in conversation.messages] == ["system", "user", "assistant", "user", "assistant"]
    assert conversation.messages[-1] == {"role": "assistant", "content": "Now this."}
    assert conversation.model == "m.gguf"


def test_titles_come_from_the_first_line_of_the_first_message():
    assert title_from("\n  Plan a trip to Rome\nwith kids") == "Plan a trip to Rome"
    long = title_from("x" * 200)
    assert len(long) == 60 and long.endswith("…")
    assert title_from("   ") == "New conversation"


def test_rename_unknown_and_ambiguous_ids():
    store = ConversationStore()
    conversation = store.create()
    store.rename(conversation.id, "  Trip plans ")
    assert store.get(conversation.id).title == "Trip plans"
    with pytest.raises(QuantDeskError, match="no saved conversation 'nope'"):
        store.get("nope")
    with pytest.raises(QuantDeskError, match="no saved conversation"):
        store.add_messages("0" * 32, turn("a", "b"))
    others = [store.create().id for _ in range(40)]
    shared = next(a[:1] for a in others for b in others if a != b and a[:1] == b[:1])
    with pytest.raises(QuantDeskError, match="More than one conversation"):
        store.get(shared)


def test_delete_removes_messages_and_the_saved_kv_state():
    store = ConversationStore()
    conversation = store.create()
    store.add_messages(conversation.id, turn("Hi", "Hello"))
    sessions = SessionStore.default()
    state = sessions.path_for(conversation.id)
    state.write_bytes(b"a saved KV state")  # what the engine leaves after a reply
    keep = store.create()
    store.add_messages(keep.id, turn("Keep", "me"))
    store.delete(conversation.id[:8])
    assert not state.exists()
    assert [c.id for c in store.list()] == [keep.id]
    with sqlite3.connect(store.path) as db:  # no orphaned messages
        assert db.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 2


def test_a_store_shared_by_threads_writes_through_each_threads_own_connection():
    # The chat page stores replies on the GUI thread and reads in jobs: each thread keeps
    # its own connection, and what one commits the others (and other processes) see.
    store = ConversationStore()
    conversation = store.create(title="Threads")
    seqs, errors = [], []

    def worker(number: int) -> None:
        try:
            for index in range(5):
                seqs.extend(store.add_messages(conversation.id, turn(f"q{number}.{index}", "a")))
        except Exception as exc:  # surfaced below: a thread's exception would be lost
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(number,)) for number in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(seqs) == list(range(30))  # no seq given twice
    assert ConversationStore().list()[0].message_count == 30
    store.close()  # this thread's connection; the next call opens another
    assert store.list()[0].message_count == 30


def test_an_unreadable_history_is_a_sentence_and_is_left_alone(tmp_path):
    path = tmp_path / "conversations.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    before = path.read_bytes()
    with pytest.raises(QuantDeskError, match="cannot be read") as caught:
        ConversationStore(path)
    assert "has not changed the file" in caught.value.fix
    assert path.read_bytes() == before
