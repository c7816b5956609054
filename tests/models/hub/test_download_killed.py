"""A `quantdesk pull` killed with SIGKILL mid-file resumes from its partial data when rerun."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time

import pytest

from models.foundation.paths import app_paths
from models.hub.transfer import local_target, part_path, sidecar_path
from tests.conftest import REPO_ROOT


@pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")
def test_pull_killed_with_sigkill_resumes_where_it_was(hub):
    name = "tiny.Q8_0.gguf"
    hub.state.faults.throttle_bytes_per_s = 150_000  # 500 kB: about 3.3 s, time to kill it
    target = local_target(app_paths().ensure().models, "acme/tiny-GGUF", name)
    cmd = [sys.executable, "-m", "app.cli", "pull", "acme/tiny-GGUF:Q8_0"]
    child = subprocess.Popen(cmd, cwd=REPO_ROOT, env=dict(os.environ), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not (part_path(target).exists() and part_path(target).stat().st_size >= 100_000):
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline, "the download never started"
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    assert child.wait(10) == -signal.SIGKILL
    kept = part_path(target).stat().st_size
    assert 100_000 <= kept < 500_000 and sidecar_path(target).exists() and not target.exists()

    hub.state.faults.throttle_bytes_per_s = None
    done = subprocess.run(cmd, cwd=REPO_ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert str(target) in done.stdout
    expected = hub.state.repos["acme/tiny-GGUF"].files[name].sha256
    assert hashlib.sha256(target.read_bytes()).hexdigest() == expected
    assert not part_path(target).exists() and not sidecar_path(target).exists()
    last_get = [r for r in hub.state.requests if r["method"] == "GET" and r["path"].startswith("/cdn/")][-1]
    assert last_get["range"] == f"bytes={kept}-"  # continued from the bytes on disk, not from 0
