"""How the engine's end is told to a person: POSIX signals and Windows crash statuses."""

import signal

from models.engine.client import _exit_description


def test_a_posix_signal_is_named():
    assert _exit_description(-signal.SIGSEGV) == "was killed by SIGSEGV"


def test_a_windows_crash_status_is_said_in_words():
    # Windows has no signals: a crashed engine process ends with an NTSTATUS code.
    assert _exit_description(0xC0000005) == "crashed with an access violation (0xC0000005)"
    assert "instruction this CPU does not have" in _exit_description(0xC000001D)


def test_an_ordinary_status_and_a_hang():
    assert _exit_description(3) == "exited with status 3"
    assert _exit_description(None) == "stopped responding"
