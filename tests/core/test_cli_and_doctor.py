"""The `quantdesk` command: versions, doctor, and the no-display fallback."""

import os
import subprocess
import sys

from app import __version__
from app.cli import NO_DISPLAY_MESSAGE, has_display
from app.core import doctor
from tests.conftest import REPO_ROOT


def run_cli(*args: str, env_update: dict | None = None, drop: tuple = ()) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(env_update or {})
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_version_names_quantdesk_and_llama_cpp():
    result = run_cli("--version")
    assert result.returncode == 0, result.stderr
    assert f"QuantDesk {__version__}" in result.stdout
    assert "llama-cpp-python 0." in result.stdout


def test_every_command_starts_without_numpy():
    """Each command's module is imported at every start (``--version`` included, 0.15 s
    its goal): what is heavy must be imported inside the command. A module-level import of
    models.gguf_header (numpy, 0.1-0.3 s) once slipped in this way."""
    probe = ("import sys, app.cli; app.cli.build_parser(); "
             "print(sorted(m for m in ('numpy', 'numba', 'quantize.blocks', 'models.gguf_header') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_doctor_reports_backends_cpu_folders_disk_and_ram(isolated_home):
    result = run_cli("doctor")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for section in ("== Versions", "== System", "== llama.cpp", "== Folders"):
        assert section in out
    assert "Backends compiled in  CPU" in out or "Backends compiled in" in out
    assert "CPU: yes" in out and "CUDA:" in out and "Metal:" in out and "Vulkan:" in out
    assert str(isolated_home / "models") in out
    assert "Free disk (models)" in out and "GiB" in out
    assert "RAM" in out and "error" not in out.lower()


def test_doctor_survives_a_broken_probe(monkeypatch):
    def broken():
        raise OSError("library exploded")

    monkeypatch.setattr(doctor, "SECTIONS", [("Broken", broken), ("Versions", doctor.package_versions)])
    text = doctor.format_report(doctor.collect())
    assert "OSError: library exploded" in text and "QuantDesk" in text


def test_no_display_prints_a_clear_message_and_the_doctor_report():
    result = run_cli(drop=("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(NO_DISPLAY_MESSAGE)
    assert "== llama.cpp" in result.stdout


def test_has_display_rules():
    if sys.platform.startswith("linux"):
        assert not has_display({})
        assert has_display({"DISPLAY": ":1"})
        assert has_display({"WAYLAND_DISPLAY": "wayland-0"})
