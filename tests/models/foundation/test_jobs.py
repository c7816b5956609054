"""Progress, cancellation and all-or-nothing output: the contract every long job follows."""

import os
import threading

import pytest

from models.foundation.errors import Cancelled, QuantDeskError
from models.foundation.jobs import CancelToken, Progress, ProgressReporter, StageClock, atomic_output, check


def test_progress_fraction_is_clamped_and_unknown_without_total():
    assert Progress(5, 10).fraction == 0.5
    assert Progress(12, 10).fraction == 1.0
    assert Progress(3, None).fraction is None


def test_cancel_token_raises_user_facing_cancelled_from_another_thread():
    token = CancelToken()
    check(token)  # not cancelled: no-op
    check(None)
    threading.Thread(target=token.cancel).start()
    assert token.wait(5.0)
    with pytest.raises(Cancelled) as info:
        token.raise_if_cancelled()
    assert isinstance(info.value, QuantDeskError)
    assert "Cancelled" in info.value.user_message


def test_reporter_throttles_but_always_reports_the_last_unit():
    seen: list[Progress] = []
    reporter = ProgressReporter(seen.append, total=1000, stage="Working", min_interval=3600)
    for i in range(1000):
        reporter.advance(1, detail=f"unit {i}")
    # The first report goes out (no earlier one), then the throttle holds until the end.
    assert [p.done for p in seen] == [1, 1000]
    assert seen[-1].detail == "unit 999" and seen[-1].stage == "Working"
    assert reporter.eta_seconds() == pytest.approx(0.0)


def test_atomic_output_renames_on_success(tmp_path):
    target = tmp_path / "out" / "model.gguf"
    with atomic_output(target) as tmp:
        assert tmp.parent == target.parent and tmp != target
        tmp.write_bytes(b"complete")
    assert target.read_bytes() == b"complete"
    assert list(target.parent.iterdir()) == [target]


def test_atomic_output_leaves_nothing_and_keeps_old_file_on_cancel(tmp_path):
    target = tmp_path / "model.gguf"
    target.write_bytes(b"previous good file")
    token = CancelToken()
    with pytest.raises(Cancelled):
        with atomic_output(target) as tmp:
            tmp.write_bytes(b"half")
            token.cancel()
            check(token)
    assert target.read_bytes() == b"previous good file"
    assert list(tmp_path.iterdir()) == [target]


def test_error_message_joins_what_and_fix():
    err = QuantDeskError("The file x.gguf is truncated.", "Download it again.")
    assert str(err) == "The file x.gguf is truncated. Download it again."
    assert QuantDeskError("Only what.").user_message == "Only what."


def test_a_stage_clock_starts_each_stage_where_the_last_one_reported():
    times = iter([0.0, 40.0, 100.0, 110.0, 120.0])
    clock = StageClock(clock=lambda: next(times))  # made at 0 s
    assert clock.stage_start("Preparing") == 0.0  # report at 40 s
    assert clock.stage_start("Preparing") == 0.0  # its last report, at 100 s
    assert clock.stage_start("Quantizing") == 100.0  # first report at 110 s: began when Preparing ended
    assert clock.stage_start("Quantizing") == 100.0
    assert StageClock(started=5.0, clock=lambda: 9.0).stage_start("Reading") == 5.0


def _busy_replace(times: int):
    """os.replace as Windows answers while another process has the target open."""
    real = os.replace
    calls = {"n": 0}

    def replace(src, dst):
        calls["n"] += 1
        if calls["n"] <= times:
            raise PermissionError(13, "The process cannot access the file because it is being "
                                      "used by another process", str(dst))
        return real(src, dst)

    return replace, calls


def test_atomic_output_waits_out_a_short_lock_on_the_target(tmp_path, monkeypatch):
    target = tmp_path / "model.gguf"
    target.write_bytes(b"old")
    replace, calls = _busy_replace(times=3)  # a virus scanner's moment, say
    monkeypatch.setattr("models.foundation.jobs.os.replace", replace)
    with atomic_output(target) as tmp:
        tmp.write_bytes(b"new")
    assert target.read_bytes() == b"new" and calls["n"] == 4
    assert [p.name for p in tmp_path.iterdir()] == ["model.gguf"]


def test_a_target_held_open_is_a_sentence_and_the_finished_file_is_kept(tmp_path, monkeypatch):
    target = tmp_path / "model.gguf"
    target.write_bytes(b"old")
    replace, _ = _busy_replace(times=10**9)
    monkeypatch.setattr("models.foundation.jobs.os.replace", replace)
    monkeypatch.setattr("models.foundation.jobs.REPLACE_PATIENCE_S", 0.3)
    with pytest.raises(QuantDeskError) as caught:
        with atomic_output(target) as tmp:
            tmp.write_bytes(b"an hour of quantizing")
    assert "another program has it open" in caught.value.user_message
    assert tmp.name in caught.value.user_message
    assert tmp.read_bytes() == b"an hour of quantizing"  # not thrown away
    assert target.read_bytes() == b"old"
