"""The one rule for what a path handed to QuantDesk means (command line and drops)."""

from pathlib import Path

import pytest

from app.cli import open_path_argument
from app.core.open_path import (CHAT, QUANTIZE, OpenRoute, add_opened_model, forget_opened_model,
                                is_image_file, is_unquantized_gguf, route_path)
from models.foundation.errors import QuantDeskError
from tests.models.library_gguf import write_gguf


def test_quantized_gguf_goes_to_chat_wherever_it_is_dropped(tmp_path):
    model = write_gguf(tmp_path / "m-Q4_K_M.gguf", file_type=15)
    assert not is_unquantized_gguf(model)
    for page in (None, "Chat", "Models", "Quantize"):
        route = route_path(model, page)
        assert (route.page, route.path) == (CHAT, model.resolve())


def test_unquantized_gguf_goes_to_quantize_only_from_the_quantize_page(tmp_path):
    for file_type in (0, 1, 32):  # F32, F16, BF16
        model = write_gguf(tmp_path / f"m-{file_type}.gguf", file_type=file_type)
        assert is_unquantized_gguf(model)
        assert route_path(model, "Quantize").page == QUANTIZE
        assert route_path(model, "Chat").page == CHAT
        assert route_path(model, None).page == CHAT


def test_checkpoint_files_and_folders_go_to_quantize_as_their_folder(tmp_path):
    folder = tmp_path / "hf-model"
    folder.mkdir()
    for name in ("model.safetensors", "config.json", "model.safetensors.index.json",
                 "pytorch_model.bin"):
        (folder / name).write_bytes(b"{}")
        route = route_path(folder / name, "Chat")
        assert (route.page, route.path) == (QUANTIZE, folder.resolve())
    assert route_path(folder).path == folder.resolve()


def test_missing_and_foreign_paths_are_sentences(tmp_path):
    with pytest.raises(QuantDeskError, match="does not exist"):
        route_path(tmp_path / "nope.gguf")
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    with pytest.raises(QuantDeskError, match="neither a GGUF model file nor a Hugging Face"):
        route_path(notes)
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not gguf at all")
    assert route_path(broken, "Chat").page == CHAT  # the Chat page reports the load error
    with pytest.raises(QuantDeskError):
        route_path(broken, "Quantize")  # the header must be read to decide: a sentence


def test_command_line_path_argument():
    commands = {"chat", "doctor", "quantize"}
    assert open_path_argument(["model.gguf"], commands) == "model.gguf"
    assert open_path_argument(["a.gguf", "b.gguf"], commands) == "a.gguf"
    assert open_path_argument(["chat", "model.gguf"], commands) is None
    assert open_path_argument(["--version"], commands) is None
    assert open_path_argument([], commands) is None


def test_a_word_that_is_no_command_and_no_path_is_an_unknown_command(tmp_path, capsys,
                                                                      monkeypatch):
    from app import cli

    monkeypatch.chdir(tmp_path)
    assert cli.main(["evl", "x"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'evl'" in err and "Did you mean `quantdesk eval`?" in err
    assert cli.main(["zzzz"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'zzzz'" in err and "Did you mean" not in err
    commands = {"chat", "eval"}
    (tmp_path / "evl").mkdir()  # a folder of that name here: a path to open, as before
    assert cli.unknown_command(["evl"], commands) is None
    for path_like in ("evl.gguf", "models/evl", "~/evl", "--help", "chat"):
        assert cli.unknown_command([path_like], commands) is None


def test_open_path_without_display_says_what_to_run(tmp_path, capsys, monkeypatch):
    from app import cli

    model = write_gguf(tmp_path / "m.gguf")
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(cli.sys, "platform", "linux")
    assert cli.main([str(model)]) == 2
    err = capsys.readouterr().err
    assert "no display" in err and f"quantdesk chat {model}" in err


def test_pictures_go_to_the_chat_page(tmp_path):
    for name in ("photo.PNG", "scan.jpg", "scan.jpeg", "anim.gif", "old.bmp"):
        (tmp_path / name).write_bytes(b"x")
        assert is_image_file(tmp_path / name)
        assert route_path(tmp_path / name, "Quantize") == OpenRoute(CHAT, (tmp_path / name).resolve())
    assert not is_image_file(tmp_path / "model.gguf")


def test_a_model_opened_from_elsewhere_joins_the_library_until_undone(tmp_path):
    from models.library import Library

    model = write_gguf(tmp_path / "elsewhere" / "tiny-Q8_0.gguf", name="Tiny")
    added = add_opened_model(model)
    assert added is not None and added.path == str(model.resolve()) and added.source == "imported"
    # Listed from now on: a new Library (the Models page, the server) finds it after a scan.
    library = Library()
    library.scan()
    assert [m.path for m in library.models()] == [str(model.resolve())]
    assert add_opened_model(model) is None  # known already: nothing to add or undo
    forget_opened_model(model)
    library.scan()
    assert library.models() == [] and model.is_file()  # forgotten; the file stays


def test_a_model_in_the_models_folder_is_left_to_the_librarys_scan(tmp_path):
    from models.library import Library

    inside = write_gguf(Library().models_dir / "mine" / "tiny.gguf")
    assert add_opened_model(inside) is None
    with pytest.raises(ValueError):
        forget_opened_model(inside)  # removing it from the Library would delete the file
    assert inside.is_file()
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"not gguf at all")
    with pytest.raises(QuantDeskError):
        add_opened_model(broken)
