"""The one way to run long work: progress reports and cooperative cancellation.

Every long job in QuantDesk (convert, quantize, download, benchmark) is a plain function
that takes an optional ``report`` callback receiving :class:`Progress` and an optional
:class:`CancelToken` that it checks between units of work (a tensor, a chunk, a file).
The CLI turns the reports into a progress bar; ``app.ui`` wraps a job once in a worker
thread whose signal feeds a progress bar and whose Cancel button sets the token.

Jobs leave no partial output when cancelled or failing: see :func:`atomic_output`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Optional

from models.foundation.errors import Cancelled, QuantDeskError


@dataclass(frozen=True)
class Progress:
    """A snapshot of a job's progress.

    Attributes:
        done: Units finished so far (bytes, tensors, tokens: the job decides).
        total: Units in the whole job, or ``None`` when not known yet.
        stage: Short name of what the job is doing now ("Reading", "Quantizing").
        detail: Free text for the current unit, e.g. a tensor or file name.
    """

    done: float
    total: Optional[float]
    stage: str = ""
    detail: str = ""

    @property
    def fraction(self) -> Optional[float]:
        """Done as a fraction in [0, 1], or ``None`` when the total is unknown."""
        if not self.total:
            return None
        return max(0.0, min(1.0, self.done / self.total))


ProgressCallback = Callable[[Progress], None]


def eta_seconds(started: float, fraction: Optional[float], now: Optional[float] = None) -> Optional[float]:
    """Seconds left, extrapolated from the time since ``started`` and the fraction done.

    ``None`` until a second has passed and 1% is done: extrapolated from a quantize job's
    first tensor (a norm of a few KB), the time left of a model would read days.
    """
    now = time.monotonic() if now is None else now
    if not fraction or fraction < 0.01 or now - started < 1.0:
        return None
    return (now - started) * (1 - fraction) / fraction


class StageClock:
    """When the stage a job reports now began, so that its ETA counts from there.

    A job's stages run at their own pace ("Preparing" the quantizer's kernels can take
    longer than "Quantizing" a small model): extrapolating a stage's fraction from the
    job's start would overstate the time left. A stage is taken to begin where the one
    before it last reported (its end); the first, when the clock was made.
    """

    def __init__(self, started: Optional[float] = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.started = clock() if started is None else started
        self._stage: Optional[str] = None
        self._last = self.started

    def stage_start(self, stage: str) -> float:
        """Note a report of ``stage`` now; return the time its stage began."""
        now = self._clock()
        if self._stage is not None and stage != self._stage:
            self.started = self._last
        self._stage, self._last = stage, now
        return self.started


class CancelToken:
    """A flag a job checks between units of work; setting it asks the job to stop.

    A thin wrapper over :class:`threading.Event` so that any thread (the GUI's Cancel
    button, a signal handler in the CLI) can cancel, and the job raises
    :class:`~models.foundation.errors.Cancelled` at its next check.
    """

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        """Ask the job to stop at its next check."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """Whether cancellation was asked for."""
        return self._event.is_set()

    def raise_if_cancelled(self) -> None:
        """Raise :class:`Cancelled` when cancellation was asked for."""
        if self._event.is_set():
            raise Cancelled()

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, waking early on cancel; True if cancelled."""
        return self._event.wait(timeout)


def check(token: Optional[CancelToken]) -> None:
    """Raise :class:`Cancelled` if ``token`` is set; a no-op for ``None``."""
    if token is not None:
        token.raise_if_cancelled()


class ProgressReporter:
    """Helps a job report :class:`Progress` with a known total and an ETA.

    Calls the callback at most every ``min_interval`` seconds (and always for the last
    unit), so a job with millions of tiny units does not flood a GUI signal.
    """

    def __init__(
        self,
        report: Optional[ProgressCallback],
        total: Optional[float],
        stage: str,
        min_interval: float = 0.05,
    ) -> None:
        self._report = report
        self.total = total
        self.stage = stage
        self.done = 0.0
        self._min_interval = min_interval
        self._last = float("-inf")  # the first unit is always reported
        self.started = time.monotonic()

    def eta_seconds(self) -> Optional[float]:
        """Seconds left, extrapolated from the rate so far; ``None`` until known."""
        if not self.total or self.done <= 0:
            return None
        elapsed = time.monotonic() - self.started
        return elapsed * (self.total - self.done) / self.done

    def advance(self, units: float, detail: str = "") -> None:
        """Add ``units`` to the done count and report if enough time has passed."""
        self.done += units
        now = time.monotonic()
        finished = self.total is not None and self.done >= self.total
        if self._report and (finished or now - self._last >= self._min_interval):
            self._last = now
            self._report(Progress(self.done, self.total, self.stage, detail))


@contextlib.contextmanager
def atomic_output(target: os.PathLike | str, suffix: str = ".part") -> Iterator[Path]:
    """Yield a temporary path beside ``target``; rename it onto ``target`` on success.

    On any exception (cancellation included) the temporary file is removed and
    ``target`` is left as it was, so a failed or cancelled job never leaves a
    half-written model where a complete one is expected.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=suffix, dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    # mkstemp makes the file private (0600); give it the mode open() would have (0666 - umask).
    umask = os.umask(0o022)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        yield tmp
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    replace_file(tmp, target)


#: How long :func:`replace_file` waits for another program to let go of the target.
REPLACE_PATIENCE_S = 3.0


def replace_file(finished: Path, target: Path, patience_s: Optional[float] = None) -> None:
    """Rename the complete file ``finished`` onto ``target``, waiting briefly if it is busy.

    On Windows a file another process has open cannot be replaced (a model loaded by
    the engine or another program; for a moment, a virus scanner reading a new file):
    ``os.replace`` fails with a permission error. A short lock passes within
    ``patience_s``; a lasting one is a sentence, and the finished file is kept beside the
    target under its temporary name rather than thrown away.

    Raises:
        QuantDeskError: ``target`` stayed in use.
    """
    deadline = time.monotonic() + (REPLACE_PATIENCE_S if patience_s is None else patience_s)
    while True:
        try:
            os.replace(finished, target)
            return
        except PermissionError as exc:
            if time.monotonic() >= deadline:
                raise QuantDeskError(
                    f"{target} could not be replaced: another program has it open ({exc.strerror}).",
                    f"The new file is complete and was kept as {finished.name} in the same folder. "
                    "Close what uses the old file (a model loaded in QuantDesk or another app), "
                    "then rename it, or choose another output name.") from exc
            time.sleep(0.1)


@dataclass
class JobResult:
    """What a finished job hands back to the CLI or the GUI."""

    outputs: list[Path] = field(default_factory=list)
    summary: str = ""
