"""Pictures on the Chat page with a tiny Gemma 3 and its mmproj (found beside the model):
attach by the file dialog's path, by a drop on the window and by a paste; thumbnails that
remove a picture when clicked; the message, its pictures and the reply, stored and shown."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QMimeData
from PySide6.QtGui import QImage

from tests.factory.images import png_bytes, sample_picture
from tests.factory.vision import model_with_and_without_projector
from tests.models.conftest import FAST_SETTINGS
from tests.ui.chat.conftest import open_chat_window, wait_reply
from tests.ui.drag import drag_and_drop
from tests.ui.test_real_window_xvfb import xvfb_display  # noqa: F401 - fixture

pytest.importorskip("torch")

PICTURE = png_bytes(sample_picture())


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    return model_with_and_without_projector(tmp_path_factory.mktemp("chat-vision"))


def _open(qtbot, model):
    """The Chat page with ``model`` loaded (a context the tiny model was made for)."""
    from app.core.preferences import Preferences

    window, page = open_chat_window(qtbot, max_tokens=4)
    Preferences().set("default_load_settings", {**FAST_SETTINGS, "context_length": 256})
    window.open_path(model)
    qtbot.waitUntil(lambda: page.engine.ready, timeout=120_000)
    return window, page


def test_attach_drop_paste_send_and_show(qtbot, gemma3, tmp_path):
    text, _ = gemma3
    window, page = _open(qtbot, text)
    composer = page.composer
    assert composer.attach_button.isEnabled()
    picture = tmp_path / "picture.png"
    picture.write_bytes(PICTURE)
    composer.attach_file(picture)  # what the file dialog's choice does
    assert drag_and_drop(page.transcript, picture) == (True, True, True)  # dropped on the window
    mime = QMimeData()
    mime.setImageData(QImage.fromData(png_bytes(sample_picture(seed=5))))
    page.box.insertFromMimeData(mime)  # a pasted screenshot
    strip = composer.attachments
    assert len(strip.images) == 3 and strip.isVisible()
    buttons = [strip._row.itemAt(i).widget() for i in range(3)]
    assert [b.accessibleName() for b in buttons] == [f"Remove picture {n}" for n in (1, 2, 3)]
    buttons[1].click()  # the dropped copy goes
    assert len(strip.images) == 2 and strip.images[0] == PICTURE
    page.box.setPlainText("What are these?")
    page.send()
    assert strip.images == [] and not strip.isVisible()
    wait_reply(qtbot, page)
    stored = page.store.branch(page.conversation_id)
    assert stored[0].content == "What are these?" and len(stored[0].images) == 2
    assert stored[1].role == "assistant" and stored[1].stats["images_encoded"] == 2
    html = page.transcript.toHtml()
    assert html.count("qdimage:") == 2
    page.shutdown()


def test_editing_a_message_keeps_its_pictures_and_lets_them_change(qtbot, gemma3):
    text, _ = gemma3
    window, page = _open(qtbot, text)
    strip = page.composer.attachments
    other, third = png_bytes(sample_picture(seed=5)), png_bytes(sample_picture(seed=9))
    page.composer.attach(PICTURE)
    page.composer.attach(other)
    page.box.setPlainText("Compare them.")
    page.send()
    wait_reply(qtbot, page)
    old_user = page.branch[0]

    page.transcript.action.emit("edit", old_user.seq)
    assert page.box.toPlainText() == "Compare them." and strip.images == [PICTURE, other]
    assert strip.isVisible()
    page.escape()  # leaving the edit leaves no pictures behind
    assert strip.images == [] and page.box.toPlainText() == ""

    page.transcript.action.emit("edit", old_user.seq)
    strip._row.itemAt(1).widget().click()  # the second picture goes
    page.composer.attach(third)  # and another joins
    page.box.setPlainText("Compare these.")
    page.send()
    wait_reply(qtbot, page)
    edited = page.store.branch(page.conversation_id)[0]
    assert edited.content == "Compare these." and edited.images == [PICTURE, third]
    assert edited.version == 2
    assert page.branch[1].stats["images_encoded"] == 1  # the kept first picture is cached
    page.transcript.action.emit("version", old_user.seq)  # the old message keeps its own
    assert page.branch[0].images == [PICTURE, other]
    page.shutdown()


def test_attach_is_off_with_a_sentence_for_a_text_only_model(qtbot, gemma3, tmp_path):
    _, plain = gemma3
    window, page = _open(qtbot, plain)
    composer = page.composer
    assert not composer.attach_button.isEnabled()
    assert "reads text only" in composer.attach_button.toolTip()
    picture = tmp_path / "picture.png"
    picture.write_bytes(PICTURE)
    window.open_path(picture)
    assert composer.attachments.images == [] and "reads text only" in composer.note.text()
    page.shutdown()


def test_the_model_picker_leaves_the_encoder_out(gemma3):
    from app.ui.chat.model_control import ModelControl
    from models.library import Library

    text, _ = gemma3
    library = Library()
    library.import_path(text)
    library.import_path(text.parent / "mmproj-gemma3.gguf")
    picked, _ = ModelControl._scan_library()
    assert [m.path for m in picked] == [str(text)]


@pytest.mark.xvfb
def test_screenshots_of_pictures_light_and_dark(xvfb_display):
    from tests.ui.chat.screenshots import run_screenshot_script

    artifacts = run_screenshot_script("tests.ui.chat.image_screenshots", xvfb_display)
    for scene in ("attached", "reply", "editing"):
        for theme in ("light", "dark"):
            shot = artifacts / f"chat-images-{scene}-{theme}.png"
            assert shot.stat().st_size > 20_000, shot
