"""Screenshots of the Chat page for people to look at (run under Xvfb by
test_chat_xvfb.py): the panel before a model is chosen, Markdown with highlighted code, the
load settings with the memory-fit verdict, JSON mode with a valid reply, the crash banner,
and a reopened conversation's model offered (another is loaded) or gone — in light and dark.

Run: ``python -m tests.ui.chat.screenshots MODEL.gguf OUT_DIR`` with a display.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

REPLY = """Here is a **small example** with a table and code:

| language | typing |
|---|---|
| Python | dynamic |
| Rust | static |

```python
def fibonacci(n: int) -> list[int]:
    \"\"\"The first n Fibonacci numbers.\"\"\"
    values = [0, 1]
    while len(values) < n:
        values.append(values[-1] + values[-2])
    return values[:n]
```

Math stays readable: $e^{i\\pi} + 1 = 0$. More in the [Python docs](https://docs.python.org).
"""


def run_screenshot_script(module: str, display: str, timeout: int = 600) -> Path:
    """Run ``python -m module ARTIFACTS`` on the X display ``display``; the artifacts folder."""
    import os
    import subprocess

    from tests.conftest import REPO_ROOT

    artifacts = Path(os.environ.get("QUANTDESK_ARTIFACTS", REPO_ROOT / "tests" / "artifacts"))
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env.update(DISPLAY=display, QT_QPA_PLATFORM="xcb", PYTHONPATH=str(REPO_ROOT))
    run = subprocess.run([sys.executable, "-m", module, str(artifacts)], cwd=REPO_ROOT, env=env,
                         capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stderr[-3000:]
    return artifacts


def settle(app, seconds=0.4) -> None:
    end = time.time() + seconds
    while time.time() < end:
        app.processEvents()
        time.sleep(0.01)


def chat_window():
    """The main window, 1280×800, shown on a started Chat page: ``(window, page)``."""
    from app.ui.main_window import MainWindow

    window = MainWindow()
    window.resize(1280, 800)
    window.show()
    page = window.show_page("Chat")
    page.ensure_started()
    return window, page


def save_shot(app, window, out: Path, name: str) -> None:
    """Let the window settle, then save it as ``out/name.png``."""
    settle(app)
    window.grab().save(str(out / f"{name}.png"))


def main(model: Path, out: Path) -> None:
    from app.core.conversations import ConversationStore
    from app.core.preferences import Preferences
    from app.ui.application import create_application
    from app.ui.theme import apply_theme
    from tests.benchmarks.bench_chat_gui import wait_until as wait
    from tests.ui.chat.conftest import second_model_file

    out.mkdir(parents=True, exist_ok=True)
    Preferences().set("default_load_settings", {"threads": 2, "batch_threads": 2, "context_length": 2048})
    store = ConversationStore()
    demo = store.create(title="Fibonacci in Python", model=str(model))
    store.add_messages(demo.id, [
        {"role": "user", "content": "Show me a Fibonacci function in Python, with a table of languages."},
        {"role": "assistant", "content": REPLY, "stats": {
            "time_to_first_token": 0.21, "prefill_tokens_per_second": 812.0,
            "decode_tokens_per_second": 61.4, "completion_tokens": 142,
            "prompt_tokens_reused": 1984, "session_restored": True, "stop_reason": "stop"}}])
    spare = Path(tempfile.mkdtemp(prefix="quantdesk-shots-"))  # a second model file, removed at the end
    offered = _conversation_with_model(store, "Plan a trip to Rome", second_model_file(model, spare))
    gone = _conversation_with_model(store, "Summarise my notes",
                                    Path.home() / "Models" / "Llama-3.2-3B-Instruct.Q4_K_M.gguf")
    app = create_application()
    window, page = chat_window()

    def shot(name: str) -> None:
        save_shot(app, window, out, name)

    page.panel.sections["Load settings"].expand(animate=False)
    for theme in ("dark", "light"):  # no model chosen yet: the GPU layers say "—"
        apply_theme(theme)
        shot(f"chat-no-model-{theme}")
    window.open_path(model)
    wait(app, lambda: page.engine.ready)
    page.panel.sampling.temperature.setValue(0.0)
    wait(app, lambda: "RAM" in page.panel.load_form.verdict.text())
    wait(app, lambda: page.panel.library_row.isVisible())  # opened from elsewhere: now in the Library

    # The load in words, its buffers behind "Details" (opened for the shots).
    page.panel.sections["Load settings"].collapse(animate=False)
    page.panel.details.expand(animate=False)
    for theme in ("light", "dark"):
        apply_theme(theme)
        shot(f"chat-load-report-{theme}")
    page.panel.details.collapse(animate=False)

    # Generate once (light); the dark shots show the same stored conversations re-rendered.
    apply_theme("light")
    page.open_conversation(demo.id)
    page.panel.sections["Load settings"].expand(animate=False)
    shot("chat-markdown-light")
    shot("chat-load-settings-light")

    page.new_chat()
    page.panel.sections["Load settings"].collapse(animate=False)
    page.panel.sections["Structured output"].expand(animate=False)
    page.panel.json_mode.enabled.setChecked(True)
    page.panel.json_mode.schema.setPlainText(
        '{"type": "object", "properties": {"city": {"type": "string"}, '
        '"country": {"type": "string"}}, "required": ["city", "country"]}')
    page.panel.sampling.max_tokens.setValue(48)
    page.box.setPlainText("What is the capital of France?")
    page.send()
    wait(app, lambda: not page.engine.streaming)
    json_chat = page.conversation_id
    shot("chat-json-mode-light")
    page.panel.sections["Structured output"].collapse(animate=False)

    page.new_chat()
    page.panel.json_mode.enabled.setChecked(False)
    page.panel.sampling.max_tokens.setValue(300)
    page.box.setPlainText("Write a long story about a dragon who bakes bread.")
    page.send()
    wait(app, lambda: len(page.transcript.streamed_text) > 80)
    os.kill(page.engine.engine_pid, signal.SIGKILL)
    wait(app, lambda: not page.engine.streaming)
    crash_chat, crash_text = page.conversation_id, page.banner.text()
    shot("chat-crash-banner-light")
    page.banner.clear()
    page.open_conversation(offered)
    shot("chat-model-offer-light")
    page.open_conversation(gone)
    shot("chat-model-missing-light")

    apply_theme("dark")
    page.banner.clear()
    page.open_conversation(demo.id)
    page.panel.sections["Load settings"].expand(animate=False)
    shot("chat-markdown-dark")
    shot("chat-load-settings-dark")
    page.panel.sections["Load settings"].collapse(animate=False)
    page.open_conversation(json_chat)
    page.panel.sections["Structured output"].expand(animate=False)
    shot("chat-json-mode-dark")
    page.panel.sections["Structured output"].collapse(animate=False)
    page.open_conversation(crash_chat)
    page.banner.show_message(crash_text, "error", "Reload model", page.reload_model)
    shot("chat-crash-banner-dark")
    page.open_conversation(offered)
    shot("chat-model-offer-dark")
    page.open_conversation(gone)
    shot("chat-model-missing-dark")
    window.close()
    shutil.rmtree(spare)
    print("screenshots:", " ".join(sorted(p.name for p in out.glob("chat-*.png"))))


def _conversation_with_model(store, title: str, model: Path) -> str:
    """A stored one-turn conversation written with ``model``; its id."""
    conversation = store.create(title=title, model=str(model))
    store.add_messages(conversation.id, [{"role": "user", "content": f"{title}, please."},
                                         {"role": "assistant", "content": "Gladly. Here it is."}])
    return conversation.id


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
