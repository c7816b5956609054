"""``quantdesk chat`` and ``quantdesk bench`` on the real SmolLM2, as a user runs them."""

from __future__ import annotations

import json
import os
import queue
import sqlite3
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.smollm2

FAST = ["--threads", "2", "--batch-threads", "2", "--ctx", "1024"]


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "app.cli", *args]


def test_chat_answers_remembers_and_exits(smollm2_gguf):
    script = ("What is the capital of France? Answer in one word.\n"
              "What did I just ask you about?\n/exit\n")
    result = subprocess.run(cli("chat", str(smollm2_gguf), *FAST, "--temperature", "0",
                                "--max-tokens", "24"),
                            input=script, capture_output=True, text=True, timeout=300,
                            cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Paris" in result.stdout
    assert f"{smollm2_gguf.name} runs on the CPU and uses" in result.stderr
    stats = [line for line in result.stderr.splitlines() if line.startswith("[")]
    assert len(stats) == 2, result.stderr
    # The second turn reused the first one from the KV cache.
    cached = int(stats[1].split(" new + ")[1].split()[0])
    assert cached > 30, stats[1]


def test_chat_ctrl_c_stops_the_reply_and_the_session_goes_on(smollm2_gguf):
    process = subprocess.Popen(
        cli("chat", str(smollm2_gguf), *FAST, "--max-tokens", "600", "--seed", "3"),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=REPO_ROOT, bufsize=1)
    out: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [out.put(c) for c in iter(lambda: process.stdout.read(1), "")],
                     daemon=True).start()
    try:
        process.stdin.write("Write a very long story about a dragon and a knight.\n")
        process.stdin.flush()
        seen, deadline = "", time.monotonic() + 120
        while len(seen) < 80 and time.monotonic() < deadline:  # the reply is streaming
            seen += out.get(timeout=120)
        os.kill(process.pid, signal.SIGINT)
        time.sleep(0.5)
        process.stdin.write("/exit\n")
        process.stdin.flush()
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr[-2000:]
    stats = [line for line in stderr.splitlines() if line.startswith("[")]
    assert len(stats) == 1 and "stopped" in stats[0], stderr
    assert int(stats[0][1:].split()[0]) < 600


def test_bench_reports_speeds_and_the_bandwidth_fraction(smollm2_gguf):
    result = subprocess.run(cli("bench", str(smollm2_gguf), *FAST, "--runs", "1",
                                "--prompt-tokens", "48", "--gen-tokens", "16"),
                            capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = dict(line.split(":", 1) for line in result.stdout.splitlines() if ":" in line)
    decode = float(lines["Generation"].split()[0])
    bandwidth = float(lines["Memory bandwidth"].split()[0])
    per_token_mb = float(lines["Weights per token"].split()[0])
    limit = float(lines["Bandwidth limit"].split()[0])
    assert decode > 0 and bandwidth > 0.5  # GB/s: any computer copies faster than that
    assert per_token_mb == pytest.approx(96.6, abs=0.1)  # SmolLM2 Q4_1, tied embeddings
    assert limit == pytest.approx(bandwidth * 1000 / per_token_mb, rel=0.01)
    fraction = result.stdout.split("Generation reaches ")[1].split("%")[0]
    # The command rounds the ratio of its unrounded speeds; the printed ones are rounded to
    # a tenth, which moves the ratio by a few hundredths of a percent (19.497 vs 19.5).
    assert abs(int(fraction) - 100 * decode / limit) <= 0.55


def test_chats_are_saved_reopened_from_their_kv_state_and_deleted(smollm2_gguf):
    from app.core.conversations import ConversationStore
    from models.engine.sessions import SessionStore

    chat = cli("chat", str(smollm2_gguf), *FAST, "--temperature", "0", "--max-tokens", "24")
    first = subprocess.run(chat, input="Name a fruit.\nName another one.\n/exit\n",
                           capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert first.returncode == 0, first.stderr[-2000:]
    short_id = first.stderr.split("saved as conversation ")[1].split(";")[0]
    listed = subprocess.run(cli("chats"), capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert short_id in listed.stdout and "4 msgs  Name a fruit." in listed.stdout
    conversation = ConversationStore().get(short_id)
    assert [m["content"] for m in conversation.messages if m["role"] == "user"] == \
        ["Name a fruit.", "Name another one."]
    state = SessionStore.default().path_for(conversation.id)
    assert state.exists()  # the engine saved the KV cache after the last reply

    # A new process, a new engine: the conversation comes back from its saved state.
    resumed = subprocess.run(chat + ["--resume", short_id], input="And a third?\n/exit\n",
                             capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert 'reopened "Name a fruit.": 2 messages from you' in resumed.stderr
    assert conversation.messages[-1]["content"] in resumed.stdout  # the last reply is shown
    stats = [line for line in resumed.stderr.splitlines() if line.startswith("[")]
    cached = int(stats[0].split(" new + ")[1].split()[0])
    with sqlite3.connect(ConversationStore().path) as db:  # turn 2's stats, as stored with it
        last = json.loads(db.execute("SELECT stats FROM messages WHERE role = 'assistant' "
                                     "ORDER BY seq DESC LIMIT 1 OFFSET 1").fetchone()[0])
    # The whole history was restored from the saved state, not read again.
    assert cached >= last["prompt_tokens"] + last["completion_tokens"] - 1, stats[0]
    assert len(ConversationStore().get(short_id).messages) == 6

    removed = subprocess.run(cli("chats", "rm", short_id), capture_output=True, text=True,
                             timeout=60, cwd=REPO_ROOT)
    assert removed.returncode == 0 and "Deleted conversation" in removed.stdout
    assert not state.exists() and ConversationStore().list() == []
    missing = subprocess.run(cli("chats", "show", short_id), capture_output=True, text=True,
                             timeout=60, cwd=REPO_ROOT)
    assert missing.returncode != 0 and "no saved conversation" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_chat_records_the_models_absolute_path_given_a_relative_one(smollm2_gguf):
    """`quantdesk chat model.gguf` run in the model's folder records the full path, the form
    the window's model picker knows, so the window reopens the conversation with its model."""
    from app.core.conversations import ConversationStore

    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))  # this checkout's app, from another folder
    run = subprocess.run(cli("chat", smollm2_gguf.name, *FAST, "--temperature", "0", "--max-tokens", "4"),
                         input="Hi\n/exit\n", capture_output=True, text=True, timeout=300,
                         cwd=smollm2_gguf.parent, env=env)
    assert run.returncode == 0, run.stderr[-2000:]
    [conversation] = ConversationStore().list()
    assert conversation.model == str(smollm2_gguf.resolve())
