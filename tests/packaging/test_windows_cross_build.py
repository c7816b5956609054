"""The Windows installer built on Linux: the cross build's options, the wheel it packs, the
Wine stand-ins. The build and the installer themselves run in packaging/windows_smoke.sh
(CI), which installs and uses them under Wine."""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.util
import io
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import REPO_ROOT


def _load(name: str):
    """A packaging/ script as a module, leaving sys.path as it was (the scripts put
    packaging/ on it to import each other, where its build.py would shadow others)."""
    saved = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location(f"packaging_{name}",
                                                      REPO_ROOT / "packaging" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path[:] = saved


cross_windows = _load("cross_windows")
wine_prefix = cross_windows.wine_prefix  # the module cross_windows itself uses


def test_the_cross_build_is_portable_x86_64_v3_with_openmp_and_rpc():
    args = cross_windows.cmake_args("cpu")
    assert "-DGGML_NATIVE=OFF" in args and "-DGGML_AVX2=ON" in args and "-DGGML_FMA=ON" in args
    assert "-DGGML_AVX512=OFF" in args and not any("AMX" in a and "=ON" in a for a in args)
    assert "-DGGML_RPC=ON" in args and "-DGGML_OPENMP=ON" in args


def test_a_gpu_backend_cannot_be_cross_built_and_says_where_it_is_built():
    with pytest.raises(wine_prefix.WineSetupError, match="made on Windows"):
        cross_windows.cmake_args("cuda")


def test_packed_wheel_has_the_package_its_dlls_and_a_true_record(tmp_path):
    tree = tmp_path / "src"
    (tree / "llama_cpp" / "lib").mkdir(parents=True)
    (tree / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: llama_cpp_python\n"
                                   "Version: 0.3.36\nRequires-Dist: numpy>=1.20.0\n")
    (tree / "llama_cpp" / "__init__.py").write_text("__version__ = '0.3.36'\n")
    (tree / "llama_cpp" / "lib" / "libllama.so").write_bytes(b"not for windows")
    lib = tmp_path / "dlls"
    lib.mkdir()
    for name in ("libllama.dll", "ggml-base.dll", "libgomp-1.dll"):
        (lib / name).write_bytes(name.encode() * 100)
    wheel = cross_windows.pack_wheel(tree, lib, tmp_path)
    assert wheel.name == "llama_cpp_python-0.3.36-py3-none-win_amd64.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert {"llama_cpp/__init__.py", "llama_cpp/lib/libllama.dll",
                "llama_cpp/lib/ggml-base.dll", "llama_cpp/lib/libgomp-1.dll"} <= names
        assert "llama_cpp/lib/libllama.so" not in names  # only the Windows libraries
        info = "llama_cpp_python-0.3.36.dist-info"
        assert "Tag: py3-none-win_amd64" in archive.read(f"{info}/WHEEL").decode()
        assert "Requires-Dist: numpy" in archive.read(f"{info}/METADATA").decode()
        rows = list(csv.reader(io.StringIO(archive.read(f"{info}/RECORD").decode())))
        recorded = {row[0] for row in rows}
        assert recorded == names
        for name, digest, size in rows:
            if name.endswith("RECORD"):
                continue
            data = archive.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={expected}" and int(size) == len(data)


def test_the_compat_header_defines_what_mingw_w64_10_lacks(tmp_path):
    if shutil.which(cross_windows.CC) is None:
        pytest.skip("mingw-w64 is not installed")
    source = tmp_path / "uses.c"
    source.write_text("#include <windows.h>\nint f(void) { THREAD_POWER_THROTTLING_STATE t;"
                      " t.Version = THREAD_POWER_THROTTLING_CURRENT_VERSION;"
                      " t.ControlMask = THREAD_POWER_THROTTLING_EXECUTION_SPEED;"
                      " return SetThreadInformation(GetCurrentThread(), ThreadPowerThrottling,"
                      " &t, sizeof(t)); }\n")
    subprocess.run([cross_windows.CC, "-include", str(cross_windows.COMPAT_HEADER), "-c",
                    str(source), "-o", str(tmp_path / "uses.o")], check=True)


@pytest.mark.parametrize("name", ["propsys", "ucrtbase"])
def test_a_standin_implements_its_functions_and_forwards_the_rest_to_wine(tmp_path, name):
    if shutil.which(wine_prefix.MINGW_CC) is None or shutil.which(wine_prefix.OBJDUMP) is None:
        pytest.skip("mingw-w64 is not installed")
    try:
        wine_dll = wine_prefix.wine_counterpart(name)
    except wine_prefix.WineSetupError:
        pytest.skip("Wine is not installed")
    dll = wine_prefix.build_standin(name, tmp_path)
    table = subprocess.run([wine_prefix.OBJDUMP, "-p", str(dll)], capture_output=True,
                           text=True, check=True).stdout
    own = wine_prefix.implemented(name)
    assert set(wine_prefix.exported_names(dll)) >= set(wine_prefix.exported_names(wine_dll)) | set(own)
    def forwarded(export: str) -> bool:
        return re.search(rf"-- wine_{name}\.{re.escape(export)}$", table, re.MULTILINE) is not None

    for export in own:
        assert not forwarded(export)  # ours, not Wine's aborting stub
    others = [e for e in wine_prefix.exported_names(wine_dll) if e not in own]
    assert others and all(forwarded(export) for export in others)


@pytest.mark.parametrize("name, needed", [
    ("icuuc", {"ucnv_open", "ucnv_countAvailable", "ucnv_toUnicode", "ucnv_fromUnicode"}),  # QtCore
    ("bcryptprimitives", {"ProcessPrng"}),  # Rust's std: llguidance, hf_xet
])
def test_a_dll_wine_lacks_is_a_whole_standin_with_the_functions_imported(tmp_path, name, needed):
    if shutil.which(wine_prefix.MINGW_CC) is None or shutil.which(wine_prefix.OBJDUMP) is None:
        pytest.skip("mingw-w64 is not installed")
    try:
        assert wine_prefix.wine_counterpart(name) is None  # Wine 8 has no such DLL
    except wine_prefix.WineSetupError:
        pytest.skip("Wine is not installed")
    dll = wine_prefix.build_standin(name, tmp_path)
    assert needed <= set(wine_prefix.exported_names(dll))
    table = subprocess.run([wine_prefix.OBJDUMP, "-p", str(dll)], capture_output=True,
                           text=True, check=True).stdout
    assert f"wine_{name}" not in table  # nothing forwarded: there is no Wine DLL behind it
