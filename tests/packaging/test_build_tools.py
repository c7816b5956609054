"""The pure parts of the installer build: llama.cpp options, the wheel cache key, the
.deb's dependency rules. The build itself runs in packaging/smoke_test.sh (CI)."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT


def _load(name: str):
    """A script of packaging/ as a module (packaging/ is not a package, and putting it on
    sys.path would let its build.py shadow other modules named build)."""
    spec = importlib.util.spec_from_file_location(f"packaging_{name}",
                                                  REPO_ROOT / "packaging" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


llama_cmake_args = _load("llama_cmake_args")
pack_linux = _load("pack_linux")


def test_portable_x86_build_is_the_x86_64_v3_baseline_on_any_build_cpu(monkeypatch):
    monkeypatch.setattr(llama_cmake_args, "cpu_flags", lambda: {"avx512f", "amx_tile", "avx2"})
    args = llama_cmake_args.cpu_args(portable=True, machine="x86_64")
    assert args[0] == "-DGGML_NATIVE=OFF"
    on = {a[2:-3] for a in args if a.endswith("=ON")}
    assert on == {"GGML_AVX", "GGML_AVX2", "GGML_FMA", "GGML_F16C", "GGML_BMI2"}
    assert not any("AMX" in a for a in args)
    # The source install follows this CPU instead (still never AMX).
    local = llama_cmake_args.cpu_args(portable=False, machine="x86_64")
    assert "-DGGML_AVX512=ON" in local and not any("AMX" in a for a in local)


def test_backends_and_cuda_architectures():
    assert llama_cmake_args.backend_args("cuda", portable=True) == [
        "-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={llama_cmake_args.PORTABLE_CUDA_ARCHITECTURES}"]
    assert llama_cmake_args.backend_args("vulkan") == ["-DGGML_VULKAN=ON"]
    assert llama_cmake_args.cpu_args(portable=True, machine="arm64") == ["-DGGML_NATIVE=OFF"]


def test_wheel_key_follows_the_options():
    a = llama_cmake_args.wheel_key(["-DGGML_NATIVE=OFF"])
    assert a == llama_cmake_args.wheel_key(["-DGGML_NATIVE=OFF"])
    assert a != llama_cmake_args.wheel_key(["-DGGML_NATIVE=OFF", "-DGGML_CUDA=ON"])


@pytest.mark.parametrize("soname, package", [
    ("libxcb-cursor.so.0", "libxcb-cursor0"), ("libX11.so.6", "libx11-6"),
    ("libwayland-egl.so.1", "libwayland-egl1"), ("libgssapi_krb5.so.2", "libgssapi-krb5-2"),
    ("libstdc++.so.6", "libstdc++6"), ("not-a-library", None)])
def test_debian_package_names_from_sonames(soname, package):
    assert pack_linux.package_for_soname(soname) == package


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF files")
def test_elf_reading_on_the_running_python():
    python = Path(sys.executable).resolve()
    assert pack_linux._is_elf(python)
    version, where = pack_linux.newest_glibc([python])
    assert where == python and version.startswith("2.")


#: An ordinary Debian user's PATH: no /sbin, where ldconfig is.
USER_PATH = "/usr/local/bin:/usr/bin:/bin"


@pytest.mark.skipif(not (os.path.exists("/usr/bin/dpkg") and os.path.exists("/sbin/ldconfig")),
                    reason="a Debian system")
def test_the_deb_dependencies_are_found_with_an_ordinary_users_path(monkeypatch):
    """``ldconfig -p`` and ``dpkg -S`` run for a normal user, whose PATH has no /sbin."""
    monkeypatch.setenv("PATH", USER_PATH)
    libraries = pack_linux.system_library_paths()
    assert "libc.so.6" in libraries
    assert pack_linux.owning_package(libraries["libc.so.6"]).startswith("libc6")
    assert pack_linux.deb_architecture()


def test_desktop_entry_opens_gguf_files():
    entry = (REPO_ROOT / "packaging" / "linux" / "quantdesk.desktop").read_text()
    assert "MimeType=application/x-gguf;" in entry and "%f" in entry
    mime = (REPO_ROOT / "packaging" / "linux" / "quantdesk-mime.xml").read_text()
    assert 'type="application/x-gguf"' in mime and 'pattern="*.gguf"' in mime


def test_every_build_has_the_rpc_backend_and_its_wheel_key_differs(monkeypatch):
    # A wheel built before GGML_RPC=ON joined the options has another cache key, so
    # install.sh and build.py compile a new one instead of reusing it.
    for portable in (False, True):
        for backend in llama_cmake_args.BACKENDS:
            assert "-DGGML_RPC=ON" in llama_cmake_args.cmake_args(backend, portable)
    args = llama_cmake_args.cmake_args("cpu")
    without_rpc = [a for a in args if a != "-DGGML_RPC=ON"]
    assert llama_cmake_args.wheel_key(args) != llama_cmake_args.wheel_key(without_rpc)


def test_a_wheel_cache_the_user_cannot_write_is_a_sentence(monkeypatch, tmp_path):
    from models.foundation.errors import QuantDeskError

    build = _load("build")
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a folder cannot be made under a file, whoever the user is
    monkeypatch.setenv("QUANTDESK_WHEEL_CACHE", str(blocker / "wheels"))
    with pytest.raises(QuantDeskError) as caught:
        build.llama_wheel(Path(sys.executable), ["-DGGML_NATIVE=OFF"])
    assert "cannot add one" in caught.value.user_message
    assert "QUANTDESK_WHEEL_CACHE" in caught.value.user_message
