"""The Chat page in a real window on Xvfb: screenshots to look at, and `quantdesk MODEL.gguf`
answering a question typed with xdotool, which `quantdesk chats show` then lists."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.ui.test_real_window_xvfb import _require, xvfb_display  # noqa: F401 - fixture

pytestmark = [pytest.mark.xvfb, pytest.mark.smollm2]


def _env(display: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY")}
    env.update(DISPLAY=display, QT_QPA_PLATFORM="xcb", PYTHONPATH=str(REPO_ROOT))
    return env


def test_screenshots_light_and_dark(xvfb_display, smollm2_gguf):
    artifacts = Path(os.environ.get("QUANTDESK_ARTIFACTS", REPO_ROOT / "tests" / "artifacts"))
    run = subprocess.run([sys.executable, "-m", "tests.ui.chat.screenshots", str(smollm2_gguf),
                          str(artifacts)], cwd=REPO_ROOT, env=_env(xvfb_display),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    for scene in ("no-model", "load-report", "markdown", "load-settings", "json-mode", "crash-banner",
                  "model-offer", "model-missing"):
        for theme in ("light", "dark"):
            shot = artifacts / f"chat-{scene}-{theme}.png"
            assert shot.stat().st_size > 20_000, shot


def _cli(*args: str, env: dict) -> str:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=60).stdout


def test_quantdesk_model_answers_a_typed_question(xvfb_display, smollm2_gguf, isolated_home):
    xdotool = _require("xdotool")
    env = _env(xvfb_display)
    from app.core.preferences import Preferences

    Preferences().set("default_load_settings", {"threads": 2, "batch_threads": 2, "context_length": 1024})
    Preferences().set("chat_sampling", {"temperature": 0.0, "max_tokens": 24})  # short on slow CI
    app = subprocess.Popen([sys.executable, "-m", "app.cli", str(smollm2_gguf)], cwd=REPO_ROOT,
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = isolated_home / "logs" / "quantdesk.log"
    try:
        found = subprocess.run([xdotool, "search", "--sync", "--onlyvisible", "--name", "^QuantDesk$"],
                               env=env, capture_output=True, text=True, timeout=60)
        assert found.returncode == 0, "the window never appeared"
        deadline = time.time() + 120
        while "chat: model loaded" not in (log.read_text() if log.exists() else ""):
            assert time.time() < deadline and app.poll() is None, "the model did not load"
            time.sleep(0.3)
        # Keyboard focus is in the message box already: type and press Enter.
        subprocess.run([xdotool, "type", "--delay", "20", "What is the capital of France? Answer in one word."],
                       env=env, check=True, timeout=60)
        subprocess.run([xdotool, "key", "Return"], env=env, check=True, timeout=20)
        deadline = time.time() + 120
        shown = ""
        while "[assistant]" not in shown:
            assert time.time() < deadline, f"no stored answer: {_cli('chats', env=env)}"
            time.sleep(1)
            listed = _cli("chats", env=env).split()
            if listed and listed[0] != "No":
                shown = _cli("chats", "show", listed[0], env=env)
        assert "[user]\nWhat is the capital of France? Answer in one word." in shown, shown
        answer = shown.split("[assistant]", 1)[1].strip()
        assert "Paris" in answer, shown
        assert app.poll() is None
    finally:
        app.terminate()
        try:
            app.wait(timeout=20)
        except subprocess.TimeoutExpired:
            app.kill()
