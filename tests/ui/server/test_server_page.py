"""The Server page with the real server on 127.0.0.1: on/off, the address to copy, the key
(generate, copy, reset, remove), the network switch refused without a key, a port in use,
the settings remembered and the server started with the window, requests in the live log,
and the Chat page's engine lent to the server (a model the chat has loaded is not loaded
twice).

Every wait is on what the page shows (``qtbot.waitUntil`` on its labels and tables), never
on the server thread's state.
"""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QGuiApplication

from app.ui.server.page import RESTART_TO_APPLY

START_MS = 30_000


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def fetch(url: str, key: str | None = None, body: dict | None = None, timeout: float = 120):
    """(status, decoded JSON) of a request to the server (on this thread: the server runs
    on its own)."""
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json"})
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def log_row(page, row: int) -> dict[str, str]:
    """A row of the request log as the table shows it, by column header."""
    model = page.log_model
    return {model.headerData(c, Qt.Orientation.Horizontal): model.index(row, c).data()
            for c in range(model.columnCount())}


def turn_on(qtbot, page, port: int) -> None:
    page.port_spin.setValue(port)
    page.switch.click()
    qtbot.waitUntil(lambda: page.state_label.text().startswith("Serving"), timeout=START_MS)


def turn_off(qtbot, page) -> None:
    page.switch.click()
    qtbot.waitUntil(lambda: page.state_label.text() == "Off.", timeout=START_MS)


def test_switch_serves_copies_the_address_and_logs_requests(qtbot, window):
    from app.core.server_settings import load_server_settings

    page = window.show_page("Server")
    assert page.state_label.text() == "Off." and not page.copy_address_button.isEnabled()
    port = free_port()
    turn_on(qtbot, page, port)
    address = f"http://127.0.0.1:{port}/v1"
    assert page.address_edit.text() == address
    page.copy_address_button.click()
    assert QGuiApplication.clipboard().text() == address
    assert page.copy_address_button.text() == "Copied"
    assert load_server_settings().enabled and load_server_settings().port == port

    status, body = fetch(f"{address}/models")
    assert status == 200 and body["object"] == "list"
    qtbot.waitUntil(lambda: page.log_model.rowCount() == 1, timeout=10_000)
    row = log_row(page, 0)
    assert row["Request"] == "GET /v1/models" and row["Status"] == "200"
    assert row["Client"].startswith("127.0.0.1:")
    assert page.log_count.text() == "1 request shown."
    status, body = fetch(f"{address}/models/none-such")  # a 404 is logged with its status
    qtbot.waitUntil(lambda: page.log_model.rowCount() == 2, timeout=10_000)
    assert log_row(page, 1)["Status"] == str(status) != "200"
    page.clear_log()
    assert page.log_model.rowCount() == 0

    # The port typed before starting is what the server runs with: no restart asked for.
    qtbot.waitUntil(lambda: not page._save_timer.isActive(), timeout=5_000)
    assert page.banner.text() != RESTART_TO_APPLY
    page.idle_spin.setValue(3)  # a change while serving: applied by a restart, on request
    qtbot.waitUntil(lambda: page.banner.text() == RESTART_TO_APPLY, timeout=5_000)
    page.banner.action_button.click()
    qtbot.waitUntil(lambda: page.state_label.text().startswith("Serving"), timeout=START_MS)
    assert load_server_settings().idle_unload_minutes == 3 and page.banner.text() == ""
    assert fetch(f"{address}/models")[0] == 200

    turn_off(qtbot, page)
    assert page.address_edit.text() == "" and not load_server_settings().enabled
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"{address}/models", timeout=5)


def test_the_ollama_switch_serves_ollamas_api_on_its_port(qtbot, window):
    from app.core.server_settings import load_server_settings

    page = window.show_page("Server")
    assert not page.ollama_switch.isChecked() and not page.ollama_port_spin.isEnabled()
    port, ollama_port = free_port(), free_port()
    turn_on(qtbot, page, port)  # off by default: the Ollama port does not answer
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{ollama_port}/api/version", timeout=5)
    page.ollama_switch.click()
    assert page.ollama_port_spin.isEnabled()
    page.ollama_port_spin.setValue(ollama_port)
    qtbot.waitUntil(lambda: page.banner.text() == RESTART_TO_APPLY, timeout=5_000)
    page.banner.action_button.click()
    qtbot.waitUntil(lambda: "Ollama's API" in page.state_label.text(), timeout=START_MS)
    assert f"Ollama clients: http://127.0.0.1:{ollama_port}" in page.address_hint.text()
    status, body = fetch(f"http://127.0.0.1:{ollama_port}/api/version")
    assert status == 200 and body["version"]
    assert fetch(f"http://127.0.0.1:{ollama_port}/api/tags")[1]["models"] == []
    qtbot.waitUntil(lambda: not page._save_timer.isActive(), timeout=5_000)
    settings = load_server_settings()
    assert settings.ollama and settings.ollama_port == ollama_port
    turn_off(qtbot, page)
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{ollama_port}/api/version", timeout=5)


def test_key_generate_copy_reset_remove_and_the_network_switch(qtbot, window):
    from PySide6.QtWidgets import QLineEdit

    from models.server.api_key import api_key_path, load_api_key

    page = window.show_page("Server")
    assert load_api_key() is None and not page.copy_key_button.isEnabled()
    page.network_switch.click()  # refused: no key
    assert not page.network_switch.isChecked()
    assert "needs an API key" in page.network_hint.text() and page.network_hint.property("refused")

    port = free_port()
    turn_on(qtbot, page, port)
    address = f"http://127.0.0.1:{port}/v1"
    assert fetch(f"{address}/models")[0] == 200  # no key: open to this computer
    page.generate_key_button.click()  # the running server restarts to require the key
    key = load_api_key()
    assert key and page.key_edit.text() == key
    assert page.key_edit.echoMode() == QLineEdit.EchoMode.Password  # shown masked
    assert oct(os.stat(api_key_path()).st_mode & 0o777) == "0o600"
    page.copy_key_button.click()
    assert QGuiApplication.clipboard().text() == key
    page.show_key_button.click()
    assert page.key_edit.echoMode() == QLineEdit.EchoMode.Normal and page.show_key_button.text() == "Hide"
    qtbot.waitUntil(lambda: page.state_label.text().startswith("Serving"), timeout=START_MS)
    assert fetch(f"{address}/models")[0] == 401
    assert fetch(f"{address}/models", key)[0] == 200
    qtbot.waitUntil(lambda: page.log_model.rowCount() >= 3, timeout=10_000)
    assert [log_row(page, r)["Status"] for r in range(page.log_model.rowCount())][-2:] == ["401", "200"]

    page.reset_key(confirm=False)
    new = load_api_key()
    assert new and new != key and page.key_edit.text() == new
    qtbot.waitUntil(lambda: page.state_label.text().startswith("Serving"), timeout=START_MS)
    assert fetch(f"{address}/models", key)[0] == 401  # the old key is refused at once
    assert fetch(f"{address}/models", new)[0] == 200

    page.network_switch.click()  # with a key: accepted, and the page says a restart applies it
    assert page.network_switch.isChecked() and not page.network_hint.property("refused")
    qtbot.waitUntil(lambda: page.banner.text() == RESTART_TO_APPLY, timeout=5_000)
    page.remove_key()  # refused while serving the network
    assert load_api_key() == new and "turn that off first" in page.banner.text()
    page.network_switch.click()
    page.remove_key()
    assert load_api_key() is None and page.generate_key_button.isVisible()
    qtbot.waitUntil(lambda: page.state_label.text().startswith("Serving"), timeout=START_MS)
    assert fetch(f"{address}/models")[0] == 200  # no key again
    turn_off(qtbot, page)


def test_a_port_in_use_is_said_in_the_banner_and_the_switch_goes_back(qtbot, window):
    page = window.show_page("Server")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        page.port_spin.setValue(taken.getsockname()[1])
        page.switch.click()
        qtbot.waitUntil(lambda: page.banner.level() == "error" and bool(page.banner.text()), timeout=START_MS)
    assert "already in use" in page.banner.text()
    assert not page.switch.isChecked() and page.state_label.text() == "Off."


def test_settings_are_remembered_and_the_server_starts_with_the_window(qtbot):
    from app.core.server_settings import ServerSettings, save_server_settings
    from app.ui.main_window import MainWindow

    port = free_port()
    save_server_settings(ServerSettings(enabled=True, port=port, parallel=2, idle_unload_minutes=5))
    win = MainWindow()
    qtbot.addWidget(win)
    win.show()
    page = win.pages["Server"]
    assert (page.port_spin.value(), page.parallel_spin.value(), page.idle_spin.value()) == (port, 2, 5)
    qtbot.waitUntil(lambda: page.state_label.text().startswith("Serving"), timeout=START_MS)
    assert page.switch.isChecked()
    assert fetch(f"http://127.0.0.1:{port}/health")[0] == 200
    win.close()  # closing the window stops the server
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)


def library_model(model: Path) -> Path:
    """``model`` in the Library's folder (a hard link, else a copy)."""
    import shutil

    from models.foundation.paths import app_paths

    target = app_paths().ensure().models / model.name
    try:
        os.link(model, target)
    except OSError:
        shutil.copyfile(model, target)
    return target


@pytest.mark.smollm2
def test_a_chat_request_appears_in_the_log_with_its_tokens(qtbot, window, smollm2_gguf):
    from app.core.preferences import Preferences
    from tests.models.conftest import FAST_SETTINGS

    Preferences().set("default_load_settings", dict(FAST_SETTINGS))
    library_model(smollm2_gguf)
    model_id = smollm2_gguf.stem
    page = window.show_page("Server")
    port = free_port()
    turn_on(qtbot, page, port)
    qtbot.waitUntil(lambda: page.models_model.rowCount() == 1, timeout=10_000)
    assert page.models_model.index(0, 1).data() == "not loaded"

    status, body = fetch(f"http://127.0.0.1:{port}/v1/chat/completions", body={
        "model": model_id, "max_tokens": 8, "temperature": 0,
        "messages": [{"role": "user", "content": "Say hello."}]})
    assert status == 200, body
    usage = body["usage"]
    qtbot.waitUntil(lambda: page.log_model.rowCount() == 1, timeout=10_000)
    row = log_row(page, 0)
    assert row["Request"] == "POST /v1/chat/completions" and row["Status"] == "200"
    assert row["Model"] == model_id
    assert row["Prompt"] == f"{usage['prompt_tokens']:,}" and row["Generated"] == str(usage["completion_tokens"])
    assert row["Cached"] == str(usage["prompt_tokens_details"]["cached_tokens"])
    assert row["TTFT"].endswith(("ms", " s")) and float(row["tok/s"]) > 0
    # The model the request loaded, with its slots and context per slot.
    qtbot.waitUntil(lambda: page.models_model.index(0, 1).data() == "loaded", timeout=10_000)
    assert int(page.models_model.index(0, 2).data()) >= 1
    assert int(page.models_model.index(0, 3).data().replace(",", "")) > 0
    assert page.models_hint.text().startswith("1 loaded.")
    turn_off(qtbot, page)
    assert page.models_model.rowCount() == 0


@pytest.mark.smollm2
def test_the_chat_engine_serves_the_model_the_chat_has_loaded(qtbot, smollm2_gguf):
    from tests.ui.chat.conftest import open_chat_window

    model = library_model(smollm2_gguf)
    window, chat = open_chat_window(qtbot, model)
    page = window.show_page("Server")
    port = free_port()
    turn_on(qtbot, page, port)
    pool = page.pool
    lent = pool.peek(model)
    assert lent is not None and lent.client is chat.engine.client and not lent.owned
    status, body = fetch(f"http://127.0.0.1:{port}/v1/chat/completions", body={
        "model": smollm2_gguf.stem, "max_tokens": 4,
        "messages": [{"role": "user", "content": "Hi"}]})
    assert status == 200, body
    qtbot.waitUntil(lambda: page.log_model.rowCount() == 1, timeout=10_000)
    # Served by the chat's engine: the pool loaded no engine of its own.
    assert [e.owned for e in pool.engines()] == [False]
    assert pool.peek(model).client is chat.engine.client

    # The chat loads another file: the pool gives the model back before the engine changes.
    from tests.ui.chat.conftest import second_model_file

    other = second_model_file(model, model.parent)
    window.open_path(other)
    qtbot.waitUntil(lambda: chat.engine.ready and chat.engine.model_path == other, timeout=120_000)
    assert pool.peek(model) is None
    assert pool.peek(other).client is chat.engine.client

    # A request loads the first model in an engine of the server's own; the chat opening
    # that model again takes that engine over instead of loading the model a second time.
    status, body = fetch(f"http://127.0.0.1:{port}/v1/chat/completions", body={
        "model": smollm2_gguf.stem, "max_tokens": 4,
        "messages": [{"role": "user", "content": "Hi"}]})
    assert status == 200, body
    served = pool.peek(model)
    assert served is not None and served.owned and served.client is not chat.engine.client
    window.open_path(model)
    qtbot.waitUntil(lambda: chat.engine.ready and chat.engine.model_path == model,
                    timeout=120_000)
    assert chat.engine.client is served.client and not served.owned
    assert pool.peek(other) is None  # the chat's former engine, with the other file, is gone
    assert [e.client for e in pool.engines()] == [chat.engine.client]
    turn_off(qtbot, page)
    assert chat.engine.lender is None and chat.engine.ready  # the chat keeps its engine and model
    window.close()
