"""PySide6 6.12 on CPython 3.11 drops references to None (void methods) and True
(``Signal.disconnect``) that it never took; ``app.ui`` makes those singletons immortal so
a long session cannot abort with "deallocating None" / "deallocating True or False"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CALLS = r"""
import gc, sys
import app.ui  # noqa: F401  (the workaround)
from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QApplication, QLabel

application = QApplication([])
label = QLabel()

class Source(QObject):
    changed = Signal()

source = Source()
def slot():
    pass

for number in range(20_000):  # far more than the singletons' own reference counts
    label.setText(str(number))
    source.changed.connect(slot)
    source.changed.disconnect(slot)
gc.collect()
print("alive")
"""


def test_many_void_calls_and_disconnects_do_not_abort_the_interpreter():
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", CALLS], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]  # an abort exits -6 with "Fatal Python error"
    assert done.stdout.strip() == "alive"
