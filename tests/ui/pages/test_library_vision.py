"""Choosing a model's vision encoder in the Library (Models page): the encoders of its
width beside it or elsewhere in the Library are offered, the one it loads with ticked; the
choice is remembered with its load settings, and the Chat page then reads images with it.
A file that is not an encoder of its width is refused with a sentence."""

from __future__ import annotations

import shutil

import pytest
from PySide6.QtCore import Qt

from tests.factory.vision import model_with_and_without_projector
from tests.models.conftest import FAST_SETTINGS


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    return model_with_and_without_projector(tmp_path_factory.mktemp("library-vision"))


def _menu(qtbot, library):
    library.projector_menu = None
    library.buttons["Vision encoder"].click()
    qtbot.waitUntil(lambda: library.projector_menu is not None, timeout=20_000)
    actions = [a for a in library.projector_menu.actions() if not a.isSeparator()]
    return {a.text().split("  ")[0]: a for a in actions}


def test_choose_the_encoder_a_model_reads_images_with(qtbot, window, gemma3, tmp_path):
    from app.core.model_settings import load_settings_for
    from app.core.preferences import Preferences

    Preferences().set("default_load_settings", {**FAST_SETTINGS, "context_length": 256})
    text, plain = gemma3  # the plain copy has no encoder beside it
    elsewhere = tmp_path / "encoders"
    elsewhere.mkdir()
    encoder = shutil.copy(text.parent / "mmproj-gemma3.gguf", elsewhere / "mmproj-gemma3-F16.gguf")
    page = window.show_page("Models")
    library = page.show_library()
    for path in (plain, encoder, text):
        library.import_path(path)
        qtbot.waitUntil(lambda: library.select_path(str(path)), timeout=10_000)
    assert library.select_path(str(encoder)) and not library.buttons["Vision encoder"].isEnabled()
    assert library.reads.get(str(text)) == ("image",)  # worked out as it joined
    library.reads.clear()
    library.load(rescan=True)  # and again with each rescan
    qtbot.waitUntil(lambda: library.reads.get(str(text)) == ("image",), timeout=20_000)
    column = [library.model.headerData(c, Qt.Orientation.Horizontal)
              for c in range(library.model.columnCount())].index("Architecture")
    shown = {library.model.row_at(library.proxy.index(r, 0)).path: library.proxy.index(r, column).data()
             for r in range(library.proxy.rowCount())}
    assert shown == {str(text): "gemma3 · vision", str(plain): "gemma3", str(encoder): "clip · vision encoder"}

    assert library.select_path(str(text))
    offered = _menu(qtbot, library)
    assert list(offered) == ["mmproj-gemma3.gguf", "mmproj-gemma3-F16.gguf", "Other file…"]
    assert offered["mmproj-gemma3.gguf"].isChecked()  # the one beside it, as it loads now
    assert not offered["mmproj-gemma3-F16.gguf"].isChecked()

    assert library.select_path(str(plain))
    offered = _menu(qtbot, library)
    assert list(offered) == ["mmproj-gemma3-F16.gguf", "Other file…"]
    assert not offered["mmproj-gemma3-F16.gguf"].isChecked()  # it reads text only so far
    offered["mmproj-gemma3-F16.gguf"].trigger()
    qtbot.waitUntil(lambda: "reads images with" in page.banner.text(), timeout=10_000)
    assert "gemma3-text.gguf reads images with mmproj-gemma3-F16.gguf" in page.banner.text()
    assert load_settings_for(plain).mmproj == str(encoder)
    assert _menu(qtbot, library)["mmproj-gemma3-F16.gguf"].isChecked()
    assert library.reads[str(plain)] == ("image",)  # now it reads images too

    library.set_projector(library.selected(), text)  # a model, not an encoder
    qtbot.waitUntil(lambda: page.banner.level() == "error", timeout=10_000)
    assert "is not a vision encoder" in page.banner.text()
    assert load_settings_for(plain).mmproj == str(encoder)

    # The Chat page loads the model with the chosen encoder: pictures can be attached.
    chat = window.show_page("Chat")
    chat.ensure_started()
    window.open_path(plain)
    qtbot.waitUntil(lambda: chat.engine.ready, timeout=120_000)
    assert chat.composer.attach_button.isEnabled()
    chat.shutdown()
