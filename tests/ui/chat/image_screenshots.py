"""Screenshots of pictures in the Chat page for people to look at (run under Xvfb by
test_chat_images.py): a tiny Gemma 3 with its mmproj loaded, one picture dropped on the
window and one pasted, their thumbnails above the message box, then the message with its
pictures in the transcript and the reply, then that message being edited (its pictures back
above the box) — in light and dark.

Run: ``python -m tests.ui.chat.image_screenshots OUT_DIR`` with a display.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tests.ui.chat.screenshots import chat_window, save_shot


def main(out: Path) -> None:
    from PySide6.QtCore import QMimeData
    from PySide6.QtGui import QImage

    from app.core.preferences import Preferences
    from app.ui.application import create_application
    from app.ui.theme import apply_theme
    from quantize.convert.convert import convert_with_projector
    from tests.benchmarks.bench_chat_gui import wait_until as wait
    from tests.factory.images import png_bytes, sample_picture
    from tests.factory.vision import write_tiny_vision_checkpoint
    from tests.ui.drag import drag_and_drop

    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp())
    ck = write_tiny_vision_checkpoint(work / "hf" / "gemma3")
    (work / "models").mkdir()
    model, _ = convert_with_projector(ck.path, work / "models" / "gemma3-vision.gguf", "f16")
    picture = work / "picture.png"
    picture.write_bytes(png_bytes(sample_picture(256)))
    Preferences().set("default_load_settings", {"threads": 2, "batch_threads": 2, "context_length": 256})
    app = create_application()
    window, page = chat_window()
    page.panel.sampling.temperature.setValue(0.0)
    page.panel.sampling.max_tokens.setValue(12)
    window.open_path(model)
    wait(app, lambda: page.engine.ready, 120)
    for theme in ("light", "dark"):
        apply_theme(theme)
        page.new_chat()
        drag_and_drop(page.transcript, picture)
        mime = QMimeData()
        mime.setImageData(QImage.fromData(png_bytes(sample_picture(256, seed=9)[::-1].copy())))
        page.box.insertFromMimeData(mime)
        page.box.setPlainText("What do these two pictures show?")
        save_shot(app, window, out, f"chat-images-attached-{theme}")
        page.send()
        wait(app, lambda: not page.engine.streaming, 120)
        save_shot(app, window, out, f"chat-images-reply-{theme}")
        page.transcript.action.emit("edit", page.branch[0].seq)
        save_shot(app, window, out, f"chat-images-editing-{theme}")
        page.escape()
    window.close()
    page.shutdown()
    print("screenshots:", " ".join(sorted(p.name for p in out.glob("chat-images-*.png"))))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
