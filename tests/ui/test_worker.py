"""A core job run through the GUI worker: progress, result, cancel, and errors as sentences."""

from app.ui.worker import JobWorker
from models.foundation.errors import QuantDeskError
from models.foundation.jobs import Progress, check


def counting_job(report, cancel, n=50):
    for i in range(n):
        check(cancel)
        report(Progress(i + 1, n, "Counting"))
        cancel.wait(0.002)
    return "done"


def test_progress_and_result_arrive_on_the_gui_thread(qtbot):
    worker = JobWorker(counting_job)
    seen = []
    worker.signals.progress.connect(seen.append)
    with qtbot.waitSignal(worker.signals.finished, timeout=10000) as blocker:
        worker.start()
    assert blocker.args == ["done"]
    qtbot.waitUntil(lambda: len(seen) == 50)
    assert seen[-1].fraction == 1.0 and seen[-1].stage == "Counting"


def test_cancel_stops_the_job(qtbot):
    def slow_job(report, cancel):
        return counting_job(report, cancel, n=100000)

    worker = JobWorker(slow_job)
    finished = []
    worker.signals.finished.connect(finished.append)
    with qtbot.waitSignal(worker.signals.cancelled, timeout=10000):
        worker.start()
        worker.cancel()
    assert finished == []


def test_errors_reach_the_user_as_sentences(qtbot):
    def bad_input(report, cancel):
        raise QuantDeskError("model.safetensors is truncated.", "Download it again.")

    def bug(report, cancel):
        raise ZeroDivisionError("division by zero")

    for job, expected in ((bad_input, "model.safetensors is truncated. Download it again."),
                          (bug, "Something went wrong inside QuantDesk (ZeroDivisionError")):
        worker = JobWorker(job)
        with qtbot.waitSignal(worker.signals.failed, timeout=10000) as blocker:
            worker.start()
        assert blocker.args[0].startswith(expected)
