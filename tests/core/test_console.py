"""The CLI's progress bar and Ctrl+C-as-cancel."""

import io
import os
import signal

import pytest

from app.core.console import ConsoleProgress, run_job, utf8_streams
from models.foundation.errors import Cancelled
from models.foundation.jobs import Progress


def test_console_progress_writes_a_line_per_stage_when_not_a_tty():
    out = io.StringIO()
    bar = ConsoleProgress(stream=out)
    bar(Progress(0, 100, "Reading", "a"))
    bar(Progress(50, 100, "Reading", "b"))  # same stage, not finished: no new line
    bar(Progress(100, 100, "Reading", "c"))
    bar(Progress(3, None, "Writing", "d"))
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert "100.0%" in lines[1] and lines[1].endswith("c")
    assert "?%" in lines[2] and "Writing" in lines[2]


def test_first_ctrl_c_cancels_the_job_through_its_token():
    def job(report, cancel):
        os.kill(os.getpid(), signal.SIGINT)  # what a user's Ctrl+C does
        assert cancel.wait(5.0)
        cancel.raise_if_cancelled()

    # Python's own handler, as in a terminal: a test run started in the background by a
    # shell without job control inherits SIGINT ignored, and the job must give back
    # whatever handler it found.
    launched_with = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(Cancelled):
            run_job(job)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, launched_with)


def _cp1252_stream() -> io.TextIOWrapper:
    """A pipe as Windows' Python opens one: the ANSI code page, strict errors."""
    return io.TextIOWrapper(io.BytesIO(), encoding="cp1252", errors="strict")


def test_utf8_streams_lets_a_windows_pipe_carry_cjk_text_and_emoji(monkeypatch):
    reply = "東京は日本の首都です 🗼 — naïve"
    stdout, stderr, stdin = _cp1252_stream(), _cp1252_stream(), _cp1252_stream()
    with pytest.raises(UnicodeEncodeError):
        _cp1252_stream().write(reply)  # what `quantdesk chat ... > file` met on Windows
    monkeypatch.setattr("sys.stdout", stdout)
    monkeypatch.setattr("sys.stderr", stderr)
    monkeypatch.setattr("sys.stdin", stdin)
    utf8_streams(platform="win32")
    for stream in (stdout, stderr):
        stream.write(reply)
        stream.flush()
        assert stream.buffer.getvalue().decode("utf-8") == reply
    assert stdin.encoding == "utf-8"


def test_utf8_streams_leaves_other_systems_alone(monkeypatch):
    stdout = _cp1252_stream()
    monkeypatch.setattr("sys.stdout", stdout)
    utf8_streams(platform="linux")
    assert stdout.encoding == "cp1252"
