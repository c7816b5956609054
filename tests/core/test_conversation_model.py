"""A conversation's model: recorded where a reply is stored, and what reopening it does
about that model (load it, offer it, or explain a file that has gone)."""

from __future__ import annotations

from app.core.conversation_model import KEEP, LOAD, MISSING, OFFER, choose_conversation_model
from app.core.conversations import ConversationStore


def test_the_model_that_wrote_the_last_reply_becomes_the_conversations_model(tmp_path):
    store = ConversationStore()
    first, second = str(tmp_path / "first.gguf"), str(tmp_path / "second.gguf")
    conversation = store.create(model=first)
    store.add_messages(conversation.id, [{"role": "user", "content": "Hi"}])
    assert store.model_of(conversation.id) == first  # a user message alone changes nothing
    store.add_messages(conversation.id, [{"role": "assistant", "content": "Hello"}], model=second)
    assert store.model_of(conversation.id[:8]) == second
    assert ConversationStore().get(conversation.id).model == second
    assert store.model_of(store.create().id) is None


def test_no_model_recorded_or_the_loaded_one_keeps_what_is_loaded(tmp_path):
    loaded = tmp_path / "loaded.gguf"
    assert choose_conversation_model(None, loaded).action == KEEP
    assert choose_conversation_model(None, None).action == KEEP
    same = choose_conversation_model(str(loaded), loaded)
    assert same.action == KEEP and same.path == loaded.resolve() and same.message == ""
    loaded.write_bytes(b"GGUF")
    (tmp_path / "link.gguf").symlink_to(loaded)  # one file, however it was named
    assert choose_conversation_model(str(tmp_path / "link.gguf"), loaded).action == KEEP


def test_a_model_on_disk_is_loaded_when_none_is_and_offered_when_another_is(tmp_path):
    recorded = tmp_path / "Qwen-7B.Q4_K_M.gguf"
    recorded.write_bytes(b"GGUF")
    load = choose_conversation_model(str(recorded), None)
    assert load.action == LOAD and load.path == recorded.resolve()
    offer = choose_conversation_model(str(recorded), tmp_path / "other.gguf")
    assert offer.action == OFFER and offer.action_text == "Load Qwen-7B.Q4_K_M"
    assert offer.message == ("This conversation was written with Qwen-7B.Q4_K_M.gguf. "
                             "other.gguf is loaded now and will answer what you send next.")


def test_a_model_file_that_has_gone_is_a_sentence_naming_it_and_what_to_do(tmp_path):
    gone = tmp_path / "moved" / "tiny.gguf"
    for loaded in (None, tmp_path / "other.gguf"):
        choice = choose_conversation_model(str(gone), loaded)
        assert choice.action == MISSING and choice.path == gone.resolve()
        assert str(gone.resolve()) in choice.message and "no longer there" in choice.message
        assert "Choose another model in the Model list" in choice.message
    folder = tmp_path / "a-folder.gguf"
    folder.mkdir()  # not a file either
    assert choose_conversation_model(str(folder), None).action == MISSING

