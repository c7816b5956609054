"""A conversation's model: recorded where a reply is stored, and what reopening it does
about that model (load it, offer it, or explain a file that has gone)."""

from __future__ import annotations

from pathlib import Path

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



# -- relative paths, as older CLIs recorded them ---------------------------------------


def test_a_relative_path_is_found_in_the_models_folder_not_the_working_directory(tmp_path, monkeypatch):
    folder, elsewhere = tmp_path / "models", tmp_path / "cwd"
    in_folder = folder / "SmolLM2-Q4_K_M.gguf"
    for path in (in_folder, elsewhere / "SmolLM2-Q4_K_M.gguf", folder / "models" / "x.gguf"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"GGUF")
    monkeypatch.chdir(elsewhere)  # a file of that name here is not the one meant
    choice = choose_conversation_model("SmolLM2-Q4_K_M.gguf", None, folder)
    assert choice.action == LOAD and choice.path == in_folder.resolve() and choice.relocated
    # "models/x.gguf" under the models folder as written, else by its name there
    assert choose_conversation_model("models/x.gguf", None, folder).path == (folder / "models" / "x.gguf").resolve()
    (folder / "y.gguf").write_bytes(b"GGUF")
    assert choose_conversation_model("models/y.gguf", None, folder).path == (folder / "y.gguf").resolve()
    offer = choose_conversation_model("SmolLM2-Q4_K_M.gguf", tmp_path / "other.gguf", folder)
    assert offer.action == OFFER and offer.relocated and offer.action_text == "Load SmolLM2-Q4_K_M"
    keep = choose_conversation_model("SmolLM2-Q4_K_M.gguf", in_folder, folder)
    assert keep.action == KEEP and keep.relocated  # still worth recording the full path
    absolute = choose_conversation_model(str(in_folder), None, folder)
    assert absolute.action == LOAD and not absolute.relocated


def test_a_relative_path_is_found_by_name_among_the_librarys_models(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    imported = tmp_path / "disk" / "a" / "tiny.gguf"
    inside = folder / "sub" / "tiny.gguf"
    for path in (imported, inside):
        path.parent.mkdir(parents=True)
        path.write_bytes(b"GGUF")
    choice = choose_conversation_model("models/tiny.gguf", None, folder, [imported])
    assert choice.action == LOAD and choice.path == imported.resolve() and choice.relocated
    # several of that name: the one inside the models folder first
    assert choose_conversation_model("tiny.gguf", None, folder, [imported, inside]).path == inside.resolve()
    inside.unlink()  # a Library row whose file has gone is passed over
    assert choose_conversation_model("tiny.gguf", None, folder, [str(inside), str(imported)]).path \
        == imported.resolve()


def test_a_relative_path_found_nowhere_says_where_it_was_looked_for(tmp_path, monkeypatch):
    folder = tmp_path / "models"
    folder.mkdir()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gone.gguf").write_bytes(b"GGUF")  # the working directory is not looked in
    choice = choose_conversation_model("gone.gguf", None, folder, [tmp_path / "other.gguf"])
    assert choice.action == MISSING and choice.path == Path("gone.gguf") and not choice.relocated
    assert "saved as gone.gguf" in choice.message and str(folder) in choice.message
    assert "Library" in choice.message and "Choose another model in the Model list" in choice.message


def test_set_model_records_the_found_file_on_the_conversation(tmp_path):
    store = ConversationStore()
    conversation = store.create(model="tiny.gguf")
    store.set_model(conversation.id[:8], str(tmp_path / "tiny.gguf"))
    assert ConversationStore().model_of(conversation.id) == str(tmp_path / "tiny.gguf")
    assert store.get(conversation.id).updated == conversation.updated  # not a new message
