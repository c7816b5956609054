"""Screenshots of a reasoning reply in the Chat page for people to look at (run under Xvfb
by test_chat_xvfb.py): a recorded Qwen3 reply while it thinks (the folded "Thinking…"
section), then finished with its thinking folded and unfolded — in light and dark.

No model is needed: the reply is replayed through the real page
(:mod:`tests.ui.chat.recorded_reply`).

Run: ``python -m tests.ui.chat.reasoning_screenshots OUT_DIR`` with a display.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from tests.ui.chat.screenshots import chat_window, save_shot


def main(out: Path) -> None:
    from PySide6.QtCore import QUrl

    from app.ui.application import create_application
    from app.ui.chat.transcript import STREAMING
    from app.ui.theme import apply_theme
    from tests.benchmarks.bench_chat_gui import wait_until as wait
    from tests.ui.chat.recorded_reply import RecordedClient, use_recorded_model

    out.mkdir(parents=True, exist_ok=True)
    app = create_application()
    window, page = chat_window()
    client = RecordedClient(size=3)
    use_recorded_model(page, client)
    page.panel.sections["Load settings"].collapse(animate=False)
    page.panel.sections["Sampling"].expand(animate=False)  # the thinking switch is there

    def shot(name: str) -> None:
        save_shot(app, window, out, name)

    def link(target: str) -> None:
        page.transcript.anchorClicked.emit(QUrl(target))

    for theme in ("light", "dark"):
        apply_theme(theme)
        page.new_chat()
        client.gate, client.pause_after = threading.Event(), 120
        page.box.setPlainText("What is 17 × 23? Show the steps.")
        page.send()
        wait(app, lambda: len(page.transcript.streamed_reasoning) > 100)
        shot(f"chat-reasoning-thinking-{theme}")
        link(f"qd:think:{STREAMING}")
        shot(f"chat-reasoning-thinking-unfolded-{theme}")
        link(f"qd:think:{STREAMING}")
        client.gate.set()
        wait(app, lambda: not page.engine.streaming)
        page.box.setPlainText("Thanks!")  # what the next message will be, not sent
        shot(f"chat-reasoning-folded-{theme}")
        link(f"qd:think:{page.branch[-1].seq}")
        shot(f"chat-reasoning-unfolded-{theme}")
        page.box.clear()
    window.close()
    print("screenshots:", " ".join(sorted(p.name for p in out.glob("chat-reasoning-*.png"))))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
