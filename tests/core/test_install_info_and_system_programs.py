"""Where QuantDesk runs from (doctor/About) and the clean environment for system programs."""

import json
import os
import sys

import pytest

from app.core import install_info as ii
from models.foundation import system_programs as sp
from models.foundation.errors import QuantDeskError


@pytest.fixture
def fake_bundle(tmp_path, monkeypatch):
    """A frozen-looking process: sys.frozen, sys._MEIPASS and an executable in a bundle."""
    bundle = tmp_path / "QuantDesk"
    data = bundle / "_internal"
    data.mkdir(parents=True)
    (data / ii.BUILD_INFO_FILE).write_text(json.dumps({
        "backend": "cpu", "cpu_level": "x86-64-v3", "llama_cpp_python": "0.3.36",
        "required_cpu_flags": ["avx", "avx2", "fma"], "commit": "abc1234", "built": "now"}))
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(data), raising=False)
    monkeypatch.setattr(sys, "executable", str(bundle / "quantdesk"))
    ii.install_info.cache_clear()
    yield bundle
    ii.install_info.cache_clear()


def test_a_checkout_is_a_source_checkout():
    ii.install_info.cache_clear()
    info = ii.install_info()
    assert (info.kind, info.description, info.frozen) == ("source", "source checkout", False)
    assert info.build == {} and info.backend_text() == ""


@pytest.mark.parametrize("word, description", [
    ("deb", "installed (.deb)"), ("tar", "portable (.tar.gz)"),
    ("nsis", "installed (Windows installer)"), ("dmg", "installed (macOS app)")])
def test_a_bundle_says_how_it_was_packed(fake_bundle, word, description):
    (fake_bundle / ii.INSTALL_KIND_FILE).write_text(word + "\n")
    info = ii.install_info()
    assert info.description == description and info.frozen
    assert "cpu backend" in info.backend_text() and "abc1234" in info.backend_text()


def test_an_unpacked_bundle_and_a_cpu_without_avx2(fake_bundle):
    info = ii.install_info()
    assert info.kind == "frozen"
    assert ii.missing_cpu_flags({"avx", "sse4_2"}, info) == ["avx2", "fma"]
    assert ii.missing_cpu_flags(set(), info) == []  # unknown flags: no false alarm


def test_on_windows_only_the_features_it_reports_can_be_missing(fake_bundle):
    from models.hardware import readable_cpu_flags

    info = ii.install_info()
    windows = readable_cpu_flags("win32")
    assert {"avx", "avx2"} <= windows and "fma" not in windows  # no PF_ number for FMA
    # A CPU with AVX but not AVX2: AVX2 is missing; FMA is unknown, not missing.
    assert ii.missing_cpu_flags({"sse3", "avx"}, info, windows) == ["avx2"]
    assert ii.missing_cpu_flags({"sse3", "avx", "avx2"}, info, windows) == []


def test_doctor_reports_the_installation():
    from app.core import doctor

    ii.install_info.cache_clear()
    rows = dict(doctor.install_section())
    assert rows["Installed as"] == "source checkout"


def test_system_environment_undoes_the_bootloader(tmp_path):
    bundle = str(tmp_path / "QuantDesk" / "_internal")
    env = {"LD_LIBRARY_PATH": f"{bundle}:/usr/local/lib", "LD_LIBRARY_PATH_ORIG": "/usr/local/lib",
           "QT_PLUGIN_PATH": f"{bundle}/PySide6/Qt/plugins", "PATH": "/usr/bin", "HOME": "/h",
           "_PYI_APPLICATION_HOME_DIR": bundle, "_PYI_PARENT_PROCESS_LEVEL": "1"}
    clean = sp.system_environment(env, bundle)
    assert clean == {"LD_LIBRARY_PATH": "/usr/local/lib", "PATH": "/usr/bin", "HOME": "/h"}
    # No saved value: the bootloader's entries go, anything else the user set stays.
    clean = sp.system_environment({"LD_LIBRARY_PATH": f"{bundle}:/opt/x"}, bundle)
    assert clean == {"LD_LIBRARY_PATH": "/opt/x"}
    assert sp.system_environment({"LD_LIBRARY_PATH": bundle}, bundle) == {}


def test_outside_a_bundle_the_environment_is_unchanged(monkeypatch):
    monkeypatch.setenv("LD_LIBRARY_PATH", "/somewhere")
    assert sp.system_environment()["LD_LIBRARY_PATH"] == "/somewhere"


@pytest.mark.skipif(os.name != "posix", reason="sbin folders are a Unix convention")
def test_programs_for_administrators_are_found_off_an_ordinary_users_path(monkeypatch, tmp_path):
    """Debian keeps ldconfig in /sbin, which a normal user's PATH leaves out (the .deb
    build failed there with FileNotFoundError); anyone may run what is in it."""
    sbin = tmp_path / "sbin"
    sbin.mkdir()
    tool = sbin / "admin-tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setattr(sp, "SBIN_FOLDERS", (str(sbin),))
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert sp.find_program("admin-tool") == str(tool)
    assert sp.require_program("admin-tool", "list the libraries") == str(tool)
    assert sp.find_program("no-such-program") is None
    with pytest.raises(QuantDeskError, match="cannot list the libraries: the program no-such-program"):
        sp.require_program("no-such-program", "list the libraries")


def test_a_missing_program_is_a_sentence(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(QuantDeskError, match="xdg-open is not installed"):
        sp.start_system_program(["xdg-open", str(tmp_path)], "open the folder")
    with pytest.raises(QuantDeskError, match="does not exist"):
        sp.open_in_file_manager(tmp_path / "gone")


@pytest.mark.skipif(sys.platform != "linux", reason="xdg-open is the Linux opener")
def test_open_in_file_manager_starts_xdg_open_with_a_clean_environment(fake_bundle, tmp_path,
                                                                       monkeypatch):
    """A stand-in xdg-open records its arguments and the LD_LIBRARY_PATH it got."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "record"
    script = bin_dir / "xdg-open"
    script.write_text(f'#!/bin/sh\necho "$1|${{LD_LIBRARY_PATH-unset}}" > {record}\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(fake_bundle / "_internal"))
    monkeypatch.setenv("LD_LIBRARY_PATH_ORIG", "/usr/local/lib")
    sp.open_in_file_manager(tmp_path).wait(timeout=10)  # a folder: xdg-open opens it
    assert record.read_text().strip() == f"{tmp_path}|/usr/local/lib"
