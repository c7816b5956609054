"""Pictures in saved conversations: kept with their messages, stored once, exported, and
the database from before them opens unchanged."""

from __future__ import annotations

import json
import sqlite3

from app.core.conversation_export import conversation_json, conversation_markdown
from app.core.conversations import SCHEMA_VERSION, ConversationStore
from tests.factory.images import png_bytes, sample_picture

PICTURE = png_bytes(sample_picture(16))
OTHER = png_bytes(sample_picture(16, seed=3))


def _with_images(text: str, *images: bytes) -> dict:
    return {"role": "user", "content": [*({"type": "image", "data": i} for i in images),
                                        {"type": "text", "text": text}]}


def test_a_message_keeps_its_pictures_in_order_and_each_picture_is_stored_once():
    store = ConversationStore()
    one = store.create()
    store.add_messages(one.id, [_with_images("Compare these", PICTURE, OTHER),
                                {"role": "assistant", "content": "Two squares."},
                                _with_images("And this one?", PICTURE)])
    again = ConversationStore().get(one.id)
    assert again.title == "Compare these"
    assert again.messages[0] == _with_images("Compare these", PICTURE, OTHER)
    assert again.messages[1] == {"role": "assistant", "content": "Two squares."}
    branch = ConversationStore().branch(one.id)
    assert branch[0].content == "Compare these" and branch[0].images == [PICTURE, OTHER]
    with sqlite3.connect(store.path) as db:
        assert db.execute("SELECT COUNT(*) FROM images").fetchone()[0] == 2
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    # A picture another conversation still shows stays when one is deleted.
    two = store.create()
    store.add_messages(two.id, [_with_images("Again", OTHER)])
    store.delete(one.id)
    with sqlite3.connect(store.path) as db:
        assert db.execute("SELECT COUNT(*) FROM images").fetchone()[0] == 1
    store.delete(two.id)
    with sqlite3.connect(store.path) as db:
        assert db.execute("SELECT COUNT(*) FROM images").fetchone()[0] == 0


def test_exports_carry_the_pictures_as_data_uris():
    import base64

    store = ConversationStore()
    one = store.create()
    store.add_messages(one.id, [_with_images("Look", PICTURE), {"role": "assistant", "content": "A square."}])
    uri = "data:image/png;base64," + base64.b64encode(PICTURE).decode()
    exported = json.loads(json.dumps(conversation_json(store, one.id)))
    assert exported["messages"][0]["content"] == "Look" and exported["messages"][0]["images"] == [uri]
    assert "images" not in exported["messages"][1]
    assert f"![image 1]({uri})" in conversation_markdown(store, one.id)
