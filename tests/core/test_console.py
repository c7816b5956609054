"""The CLI's progress bar and Ctrl+C-as-cancel."""

import io
import os
import signal

import pytest

from app.core.console import ConsoleProgress, run_job
from app.core.errors import Cancelled
from app.core.jobs import Progress


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
