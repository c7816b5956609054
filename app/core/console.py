"""The terminal: a progress bar on stderr, Ctrl+C as Cancel, text in UTF-8.

The CLI's counterpart of the GUI's worker: :func:`run_job` calls a job function with a
:class:`ConsoleProgress` as its ``report`` and a :class:`~models.foundation.jobs.CancelToken`
that the first Ctrl+C sets (a second Ctrl+C interrupts at once). :func:`utf8_streams`
makes piped output on Windows carry every character a model can write.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Callable, Optional, TextIO, TypeVar

from models.foundation.jobs import CancelToken, Progress, StageClock, eta_seconds

T = TypeVar("T")


def utf8_streams(platform: str = sys.platform) -> None:
    """Standard input, output and error in UTF-8 on Windows when they are pipes or files.

    Windows' Python reads and writes a pipe or a file in the ANSI code page (cp1252 in
    Western Europe and America), which has no CJK text or emoji: ``quantdesk chat ... >
    reply.txt`` would stop with ``UnicodeEncodeError`` at the first such token. A console
    window has its own Unicode stream and is left as it is. Characters that cannot be
    decoded from input are replaced rather than fatal.
    """
    if platform != "win32":
        return
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if stream is not None and hasattr(stream, "reconfigure") and encoding != "utf8":
            stream.reconfigure(encoding="utf-8", errors="replace")


def _format_eta(seconds: Optional[float]) -> str:
    if seconds is None:
        return "--:--"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 \
        else f"{seconds // 60:02d}:{seconds % 60:02d}"


class ConsoleProgress:
    """A :data:`~models.foundation.jobs.ProgressCallback` that draws one updating line."""

    def __init__(self, stream: Optional[TextIO] = None, width: int = 30) -> None:
        # sys.stderr looked up now, not at import: it may have been replaced since (tests, GUI).
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self._stages = StageClock()
        self._tty = getattr(self.stream, "isatty", lambda: False)()
        self._last_stage = ""

    def __call__(self, p: Progress) -> None:
        fraction = p.fraction
        eta = eta_seconds(self._stages.stage_start(p.stage), fraction)
        if fraction is None:
            bar, pct = "?" * self.width, "   ?%"
        else:
            filled = int(fraction * self.width)
            bar, pct = "#" * filled + "-" * (self.width - filled), f"{fraction * 100:5.1f}%"
        line = f"{p.stage:<12} [{bar}] {pct} ETA {_format_eta(eta)}  {p.detail}"[:160]
        if self._tty:
            self.stream.write("\r\x1b[2K" + line)
            if fraction is not None and fraction >= 1:
                self.stream.write("\n")
        elif p.stage != self._last_stage or (fraction is not None and fraction >= 1):
            self.stream.write(line + "\n")  # logs and pipes: one line per stage and at the end
        self._last_stage = p.stage
        self.stream.flush()


def run_job(job: Callable[[ConsoleProgress, CancelToken], T]) -> T:
    """Run ``job(report, cancel)`` with a progress bar; the first Ctrl+C cancels it."""
    token = CancelToken()
    previous = None
    if threading.current_thread() is threading.main_thread():
        def on_sigint(signum, frame):
            if token.cancelled:
                raise KeyboardInterrupt
            sys.stderr.write("\nCancelling... (Ctrl+C again to stop at once)\n")
            token.cancel()

        previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        return job(ConsoleProgress(), token)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
