"""A reasoning model's thinking in saved conversations: kept apart from the answer (schema
version 2), read back, searched, exported, shown by the CLI, and not part of what the
engine is sent as the answer; databases of version 1 open unchanged."""

from __future__ import annotations

import json
import sqlite3

from app.core.conversation_export import conversation_json, conversation_markdown
from app.core.conversations import _MIGRATIONS, SCHEMA_VERSION, ConversationStore
from tests.core.test_conversation_versions import write_old_database

THOUGHT = "17 × 20 = 340, 17 × 3 = 51, so 391."


def test_a_version_1_database_opens_unchanged_and_gains_the_column(tmp_path):
    path = tmp_path / "conversations.sqlite3"
    write_old_database(path)
    with sqlite3.connect(path) as db:  # as QuantDesk wrote it at schema version 1
        for statement in _MIGRATIONS[0].split(";"):
            if statement.strip():
                db.execute(statement)
        db.execute("PRAGMA user_version = 1")
        db.execute("UPDATE conversations SET settings = '{\"json_mode\": false}'")
        old_rows = db.execute("SELECT * FROM messages ORDER BY seq").fetchall()
    db.close()
    store = ConversationStore(path)
    branch = store.branch("abcd")
    assert [m.content for m in branch][-1] == "answer 2" and all(m.reasoning == "" for m in branch)
    assert store.settings("abcd") == {"json_mode": False}
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        columns = [row[1] for row in db.execute("PRAGMA table_info(messages)")]
        new = columns.index("reasoning")  # the columns after it came with later versions
        assert db.execute(f"SELECT {', '.join(columns[:new])} FROM messages ORDER BY seq").fetchall() == old_rows
        assert db.execute("SELECT COUNT(*) FROM messages WHERE reasoning IS NOT NULL").fetchone()[0] == 0
    db.close()


def test_reasoning_is_stored_apart_searched_exported_and_shown(capsys):
    from app.cli import main

    store = ConversationStore()
    c = store.create(title="Sums")
    store.add_messages(c.id, [
        {"role": "user", "content": "What is 17 × 23?"},
        {"role": "assistant", "content": "**391**", "reasoning": THOUGHT,
         "stats": {"completion_tokens": 30, "reasoning_tokens": 22, "reasoning_seconds": 12.4}}])
    reply = store.branch(c.id)[1]
    assert (reply.content, reply.reasoning) == ("**391**", THOUGHT)
    assert reply.message == {"role": "assistant", "content": "**391**"}  # the answer alone
    assert store.get(c.id).messages[1] == {"role": "assistant", "content": "**391**"}
    assert [x.id for x in store.search("so 391")] == [c.id]  # found in the thinking
    markdown = conversation_markdown(store, c.id)
    assert ("## Assistant\n\n<details><summary>Thought for 12 s</summary>\n\n"
            f"{THOUGHT}\n\n</details>\n\n**391**\n") in markdown
    values = conversation_json(store, c.id)
    assert values["messages"][1]["reasoning"] == THOUGHT and "reasoning" not in values["messages"][0]
    json.dumps(values)
    assert main(["chats", "show", c.id[:8]]) == 0
    out = capsys.readouterr().out
    assert f"[assistant thinking]\n{THOUGHT}\n\n[assistant]\n**391**" in out
