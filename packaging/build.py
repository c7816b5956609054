"""Build QuantDesk's installers: one command.

    python packaging/build.py [--backend cpu|cuda|metal|vulkan] [--formats deb,tar]
    python packaging/build.py --target windows      # on Linux: the Windows installer

``--target windows`` on Linux makes the Windows installer with mingw-w64, Wine and NSIS
(``cross_windows.py`` says how); the steps below are those of a build for the system it
runs on.

From a fresh clone with nothing run before it, this

1. makes its own build environment ``build/venv`` (never the development ``.venv``: the
   bundle must hold exactly the runtime dependencies of ``pyproject.toml``, not pytest,
   torch or transformers);
2. builds llama-cpp-python for the chosen backend with the *portable* CMake options of
   ``packaging/llama_cmake_args.py`` (x86-64-v3 baseline, ``GGML_NATIVE=OFF``, no AMX), and
   keeps the wheel in ``build/wheels/<key>/`` (``QUANTDESK_WHEEL_CACHE`` moves it), keyed
   by the version and those options, so a re-run does not compile llama.cpp again;
3. installs QuantDesk itself (not editable) and PyInstaller into that environment;
4. writes ``build/quantdesk-build.json`` (backend, CMake options, CPU level, commit), which
   the spec puts in the bundle and ``app/core/install_info.py`` reads;
5. freezes the app with ``packaging/quantdesk.spec`` into ``dist/QuantDesk/`` (Linux,
   Windows) or ``dist/QuantDesk.app`` (macOS);
6. packs it: Linux ``.deb`` + ``.tar.gz``, Windows NSIS ``.exe``, macOS ``.dmg``; prints
   the sizes.

Packing steps live in ``packaging/pack_*.py``; this file only orders them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))  # this checkout's app package (find_program), not an installed one

import llama_cmake_args  # noqa: E402  (packaging/ is not a package)
import wine_prefix  # noqa: E402
from models.foundation.errors import QuantDeskError  # noqa: E402
from models.foundation.system_programs import find_program  # noqa: E402

LLAMA_CPP_PYTHON = llama_cmake_args.LLAMA_CPP_PYTHON
PYINSTALLER = "pyinstaller==6.22.3"
BUILD = ROOT / "build"
DIST = ROOT / "dist"
BUILD_INFO = BUILD / "quantdesk-build.json"


def step(message: str) -> None:
    print(f"==> {message}", flush=True)


def run(args: list, **kwargs) -> None:
    """Run a command, echoing it; a failure stops the build with its exit status."""
    print("    $ " + " ".join(str(a) for a in args), flush=True)
    subprocess.run([str(a) for a in args], check=True, **kwargs)


def venv_python(folder: Path) -> Path:
    return folder / ("Scripts/python.exe" if sys.platform == "win32" else "bin/python")


def make_build_env() -> Path:
    """``build/venv`` with up-to-date pip; created once, reused by re-runs."""
    folder = BUILD / "venv"
    python = venv_python(folder)
    if not python.exists():
        step(f"Creating the build environment {folder.relative_to(ROOT)}")
        venv.EnvBuilder(with_pip=True, clear=True).create(folder)
    run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--upgrade",
         "pip", "wheel", "setuptools"])
    return python


def llama_wheel(python: Path, cmake: list[str]) -> Path:
    """The llama-cpp-python wheel for ``cmake``, compiled now unless cached."""
    cache = Path(os.environ.get("QUANTDESK_WHEEL_CACHE", BUILD / "wheels")) / \
        llama_cmake_args.wheel_key(cmake)
    wheels = sorted(cache.glob("llama_cpp_python-*.whl"))
    if wheels:
        step(f"Using the cached llama-cpp-python wheel {wheels[-1]}")
        return wheels[-1]
    step(f"Compiling {LLAMA_CPP_PYTHON} (several minutes); CMAKE_ARGS={' '.join(cmake)}")
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise QuantDeskError(
            f"The llama-cpp-python wheel cache {cache.parent} has no wheel for these options "
            f"and this user cannot add one ({exc.strerror}).",
            "Point QUANTDESK_WHEEL_CACHE at a folder you can write to, or leave it unset "
            "(the wheel is then kept in build/wheels).") from None
    env = dict(os.environ, CMAKE_ARGS=" ".join(cmake))
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 2))
    started = time.monotonic()
    # --no-cache-dir: pip's own wheel cache ignores CMAKE_ARGS and could hand back a build
    # made with other options (say, a -march=native one with AMX kernels).
    run([python, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-cache-dir",
         "--no-deps", "-w", cache, LLAMA_CPP_PYTHON], env=env)
    (cache / "CMAKE_ARGS").write_text(" ".join(cmake) + "\n")
    print(f"    compiled in {time.monotonic() - started:.0f} s", flush=True)
    return sorted(cache.glob("llama_cpp_python-*.whl"))[-1]


#: CUDA 12 runtime libraries a CUDA build bundles (hooks/hook-llama_cpp.py collects them).
CUDA_RUNTIME_WHEELS = ["nvidia-cuda-runtime-cu12", "nvidia-cublas-cu12"]


def install_app(python: Path, wheel: Path, backend: str) -> None:
    """llama-cpp-python from the wheel, then QuantDesk and its runtime dependencies."""
    step("Installing QuantDesk and its runtime dependencies into the build environment")
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    run(pip + ["--force-reinstall", "--no-deps", wheel])
    if backend == "cuda":
        run(pip + CUDA_RUNTIME_WHEELS)
    # Not editable: the bundle takes the installed package and its metadata (the app reads
    # its version from it). --no-build-isolation would miss setuptools' pin; keep isolation.
    # Build-only tools, never imported by the app (so never frozen into it): Pillow turns
    # the rendered icon into .ico/.icns, dmgbuild makes the macOS disk image.
    tools = {"win32": ["pillow"], "darwin": ["pillow", "dmgbuild"]}.get(sys.platform, [])
    run(pip + [ROOT, PYINSTALLER, *tools])
    run([python, "-m", "pip", "check"])  # the --no-deps wheel's own dependencies are there


def render_icons(python: Path) -> None:
    """The .ico/.icns the Windows and macOS executables carry (Linux uses the SVG)."""
    if sys.platform in ("win32", "darwin"):
        step("Rendering the app icon")
        run([python, HERE / "render_icons.py", BUILD / "icons"])


def git_commit() -> str:
    git = find_program("git")
    if git is None:
        return "unknown"
    try:
        return subprocess.run([git, "rev-parse", "--short", "HEAD"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


#: Run by the bundle's Python: the versions and platform build info records.
VERSIONS_SCRIPT = ("import importlib.metadata as m, platform, sys; "
                   "print(m.version('quantdesk'), m.version('llama-cpp-python'), sys.platform, "
                   "platform.machine().lower(), platform.python_version())")


def write_build_info(versions: str, backend: str, cmake: list[str]) -> dict:
    """What the bundle was built with; shown by ``quantdesk doctor`` and About.

    ``versions`` is what :data:`VERSIONS_SCRIPT` printed in the build environment.
    """
    app, llama, system, machine, python = versions.split()
    x86 = machine in ("x86_64", "amd64")
    info = {
        "app_version": app,
        "llama_cpp_python": llama,
        "backend": backend,
        "cmake_args": " ".join(cmake),
        "cpu_level": llama_cmake_args.PORTABLE_X86_LEVEL if x86 else machine,
        "required_cpu_flags": sorted(llama_cmake_args.PORTABLE_X86_FLAGS) if x86 else [],
        "platform": f"{system}-{machine}",
        "python": python,
        "commit": git_commit(),
        "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    BUILD_INFO.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return info


def freeze(python: Path, clean: bool = False) -> Path:
    """Run PyInstaller on the spec; return the bundle folder (or ``.app`` on macOS).

    Without ``clean``, PyInstaller reuses its analysis in ``build/pyinstaller`` when no
    input changed (minutes saved on a re-run; a fresh clone has none to reuse).
    """
    step("Freezing with PyInstaller (onedir: QuantDesk + the quantdesk CLI, one bundle)")
    started = time.monotonic()
    run([python, "-m", "PyInstaller", "--noconfirm", *(["--clean"] if clean else []),
         "--log-level", "WARN", "--distpath", DIST, "--workpath", BUILD / "pyinstaller",
         HERE / "quantdesk.spec"])
    bundle = DIST / ("QuantDesk.app" if sys.platform == "darwin" else "QuantDesk")
    # Packages shipped with their .py sources (for numba's cache, see the spec): a .py
    # beside a .pyc is imported from source, compiled at every start, unless __pycache__
    # holds its bytecode. tar and dpkg keep the mtimes that bytecode is checked against.
    for package in bundle.rglob("quantize"):
        if (package / "__init__.py").exists():
            run([python, "-m", "compileall", "-q", package])
    print(f"    frozen in {time.monotonic() - started:.0f} s", flush=True)
    return bundle


def pack(bundle: Path, info: dict, formats: list[str]) -> list[Path]:
    """The installers for this OS."""
    outputs: list[Path] = []
    if sys.platform.startswith("linux"):
        import pack_linux

        if "deb" in formats:
            outputs.append(pack_linux.build_deb(bundle, info, DIST))
        if "tar" in formats:
            outputs.append(pack_linux.build_tarball(bundle, info, DIST))
    elif sys.platform == "win32":
        import pack_windows

        outputs.append(pack_windows.build_installer(bundle, info, DIST))
    elif sys.platform == "darwin":
        import pack_macos

        outputs.append(pack_macos.build_dmg(bundle, info, DIST))
    return outputs


def build_windows(backend: str) -> list[Path]:
    """The Windows installer, made on Linux (``cross_windows.py``); returns bundle and installer."""
    import cross_windows
    import pack_windows

    wheel = cross_windows.build_llama_wheel(BUILD, backend)
    python = cross_windows.windows_python(BUILD)
    step("Installing QuantDesk and its runtime dependencies into Windows' Python (pip under Wine)")
    started = time.monotonic()
    app_wheel = cross_windows.project_wheel(ROOT, BUILD / "windows" / "wheels")
    # Both wheels forced: a rebuild has the same version numbers, which pip would take as
    # already installed and keep the previous build's code.
    python.pip("install", "-q", "--force-reinstall", "--no-deps", cross_windows.windows_path(wheel),
               cross_windows.windows_path(app_wheel))
    python.pip("install", "-q", cross_windows.windows_path(app_wheel), PYINSTALLER, "pillow")
    python.pip("check")
    print(f"    installed in {time.monotonic() - started:.0f} s", flush=True)
    info = write_build_info(python.run(["-c", VERSIONS_SCRIPT], quiet=True), backend,
                            cross_windows.cmake_args(backend))
    step("Rendering the app icon (Qt under Wine)")
    python.run([cross_windows.windows_path(HERE / "render_icons.py"),
                cross_windows.windows_path(BUILD / "icons")], env={"QT_QPA_PLATFORM": "offscreen"})
    step("Freezing with PyInstaller under Wine (onedir: QuantDesk.exe + quantdesk-cli.exe)")
    started = time.monotonic()
    dist = DIST / "windows"
    python.run(["-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
                "--distpath", cross_windows.windows_path(dist),
                "--workpath", cross_windows.windows_path(BUILD / "windows" / "pyinstaller"),
                cross_windows.windows_path(HERE / "quantdesk.spec")], cwd=ROOT)
    bundle = dist / "QuantDesk"
    for package in bundle.rglob("quantize"):  # see freeze(): bytecode beside the sources
        if (package / "__init__.py").exists():
            python.run(["-m", "compileall", "-q", cross_windows.windows_path(package)], quiet=True)
    missing = cross_windows.bundle_runtime_check(bundle)
    if missing:
        raise QuantDeskError(f"The Windows bundle lacks the mingw runtime DLLs {', '.join(missing)}.",
                             "Rebuild the llama-cpp-python wheel for Windows (delete its cache).")
    print(f"    frozen in {time.monotonic() - started:.0f} s", flush=True)
    return [bundle, pack_windows.build_installer(bundle, info, DIST)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build QuantDesk's installers.")
    parser.add_argument("--backend", choices=llama_cmake_args.BACKENDS,
                        default=llama_cmake_args.default_backend(),
                        help="llama.cpp backend (default: as install.sh chooses: %(default)s)")
    parser.add_argument("--target", choices=("host", "windows"), default="host",
                        help="host: installers for this OS; windows (on Linux): the Windows "
                             "installer, cross-built with mingw-w64, Wine and NSIS")
    parser.add_argument("--formats", default="deb,tar",
                        help="Linux only: which of deb,tar to make (default: both)")
    parser.add_argument("--no-pack", action="store_true", help="freeze only")
    parser.add_argument("--clean", action="store_true",
                        help="make PyInstaller analyse everything again instead of reusing")
    args = parser.parse_args(argv)
    started = time.monotonic()

    if args.target == "windows":
        if not sys.platform.startswith("linux"):
            parser.error("--target windows is made on Linux; on Windows run build.py itself")
        outputs = build_windows(args.backend)
        report(started, args.backend, outputs)
        return 0

    cmake = llama_cmake_args.cmake_args(args.backend, portable=True)
    python = make_build_env()
    install_app(python, llama_wheel(python, cmake), args.backend)
    versions = subprocess.run([python, "-c", VERSIONS_SCRIPT], check=True, capture_output=True,
                              text=True).stdout
    info = write_build_info(versions, args.backend, cmake)
    render_icons(python)
    bundle = freeze(python, args.clean)
    # The packers call build tools installed in the build environment (dmgbuild).
    os.environ["PATH"] = str(venv_python(BUILD / "venv").parent) + os.pathsep + os.environ["PATH"]
    outputs = [] if args.no_pack else pack(bundle, info, args.formats.split(","))
    report(started, args.backend, [bundle, *outputs])
    return 0


def report(started: float, backend: str, paths: list[Path]) -> None:
    step(f"Done in {time.monotonic() - started:.0f} s ({backend} backend)")
    for path in paths:
        size = path.stat().st_size if path.is_file() else \
            sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
        print(f"    {path.relative_to(ROOT)}  {size / 2**20:.1f} MiB", flush=True)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except QuantDeskError as exc:  # a missing build tool: its sentence, not a traceback
        print(f"build.py: {exc.user_message}", file=sys.stderr)
        sys.exit(2)
    except wine_prefix.WineSetupError as exc:  # the Windows build's tools, one sentence
        print(f"build.py: {exc}", file=sys.stderr)
        sys.exit(2)
