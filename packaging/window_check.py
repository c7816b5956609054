"""Start QuantDesk on an X display, time it to a visible window, and keep a screenshot.

Used by ``packaging/smoke_test.sh`` for the frozen app (inside the clean chroot) and the
source install, so both are timed the same way. "Usable window" here means: the
top-level window titled ``QuantDesk`` is mapped and viewable (``xdotool search
--onlyvisible``), polled every 20 ms from the moment the process is started. The
screenshot is taken 1.5 s later with Qt (the dev environment's PySide6) and must show
more than a blank screen.

    python packaging/window_check.py --display :99 --runs 3 --shot out.png -- CMD ARGS...

Prints ``startup <median> s (runs: ...)``; exit status 1 when the window never appears,
the app died, or the screen stayed blank.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

GRAB = r"""
import sys
from PySide6.QtGui import QGuiApplication
app = QGuiApplication(sys.argv[:1])
image = app.primaryScreen().grabWindow(0).toImage()
image.save(sys.argv[1])
colors = {image.pixel(x, y) for x in range(0, image.width(), 7) for y in range(0, image.height(), 7)}
print(len(colors))
"""


def visible_window(display: str) -> bool:
    found = subprocess.run(["xdotool", "search", "--onlyvisible", "--name", "^QuantDesk$"],
                           env=dict(os.environ, DISPLAY=display), capture_output=True, text=True)
    return found.returncode == 0 and bool(found.stdout.strip())


def stop(app: subprocess.Popen) -> None:
    app.terminate()
    try:
        app.wait(timeout=10)
    except subprocess.TimeoutExpired:
        app.kill()
        app.wait()


def one_run(command: list[str], display: str, timeout: float, shot: Path | None) -> float:
    while visible_window(display):  # the previous run's window must be gone
        time.sleep(0.05)
    started = time.perf_counter()
    app = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        while not visible_window(display):
            if app.poll() is not None:
                raise SystemExit(f"QuantDesk exited ({app.returncode}) before its window "
                                 f"appeared:\n{app.stdout.read()}")
            if time.perf_counter() - started > timeout:
                raise SystemExit(f"no QuantDesk window after {timeout:.0f} s")
            time.sleep(0.02)
        elapsed = time.perf_counter() - started
        if shot is not None:
            time.sleep(1.5)  # let the first paint land
            shot.parent.mkdir(parents=True, exist_ok=True)
            env = {k: v for k, v in os.environ.items() if k != "WAYLAND_DISPLAY"}
            env.update(DISPLAY=display, QT_QPA_PLATFORM="xcb")
            grab = subprocess.run([sys.executable, "-c", GRAB, str(shot)], env=env,
                                  capture_output=True, text=True, timeout=60)
            if grab.returncode != 0:
                raise SystemExit(f"screenshot failed: {grab.stderr}")
            if int(grab.stdout.split()[-1]) <= 20:
                raise SystemExit("the screen is blank: nothing was drawn")
            if app.poll() is not None:
                raise SystemExit(f"QuantDesk died after showing its window:\n{app.stdout.read()}")
        return elapsed
    finally:
        stop(app)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--display", required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--shot", type=Path, help="screenshot of the last run")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    times = [one_run(command, args.display, args.timeout,
                     args.shot if i == args.runs - 1 else None) for i in range(args.runs)]
    print(f"startup {statistics.median(times):.2f} s (runs: "
          f"{', '.join(f'{t:.2f}' for t in times)})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
