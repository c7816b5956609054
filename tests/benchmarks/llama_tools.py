"""llama.cpp's own command-line tools, built from the llama.cpp that the engine runs.

The benchmarks compare QuantDesk with llama.cpp's reference programs (``llama-bench``,
``llama-server``, ``llama-perplexity``…). A fair comparison needs the *same* llama.cpp:
the llama-cpp-python sdist that ``packaging/llama_cmake_args.py`` pins carries it in
``vendor/llama.cpp``, and a pip build of it never builds the tools. So this module
configures that folder directly, with the CPU options the engine's wheel was built with
(``llama_cmake_args.cmake_args()``: this CPU's SIMD features, never AMX), and keeps the
result in a cache folder outside the repository (about 20 minutes on 2 cores, once):

    <cache>/src/llama_cpp_python-<version>.tar.gz   the sdist, from PyPI
    <cache>/src/llama_cpp_python-<version>/          unpacked
    <cache>/build/bin/                               the tools and their shared libraries
    <cache>/build.log                                configure and build output
    <cache>/BUILD_INFO                               version and CMake options of the build

A cache whose ``BUILD_INFO`` names another version or other options is not used.

The cache folder is ``--llama-tools DIR``, else ``QUANTDESK_LLAMA_TOOLS``, else
``~/.cache/quantdesk-llama-tools``. Run the tools with :meth:`LlamaTools.env` (their
shared libraries are next to them in ``bin/``)::

    python tests/benchmarks/llama_tools.py --build     # build once (or find), print bin/
    python tests/benchmarks/llama_tools.py --build --target llama-mtmd-cli   # only that tool
    python tests/benchmarks/llama_tools.py             # print bin/, or say how to build

llama.cpp's tools default to flash attention "auto" while ``Llama()`` (and so the
engine) turns it off: pass ``-fa 0`` / ``--flash-attn off`` when comparing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "packaging"))

from llama_cmake_args import LLAMA_CPP_PYTHON, cmake_args  # noqa: E402

#: The CMake targets built, one after the other in this order, so the first ones can be
#: used while the others build (``ggml-rpc-server`` is the RPC worker, ``rpc-server`` in docs).
TARGETS = ("llama-bench", "llama-server", "llama-perplexity", "llama-imatrix",
           "llama-quantize", "ggml-rpc-server")

#: Built only for the benchmarks that ask for it (the image encoder's reference).
MTMD_CLI = "llama-mtmd-cli"

#: Options beside this CPU's: the tools only, no tests, the server without its web UI
#: (building it needs npm; the prebuilt one is downloaded at configure time) and without
#: OpenSSL (plain HTTP on localhost is all a benchmark needs), the RPC backend on.
TOOL_OPTIONS = ("-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_TESTS=OFF",
                "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=ON",
                "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_USE_PREBUILT_UI=OFF",
                "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DGGML_RPC=ON")

ENV_VAR = "QUANTDESK_LLAMA_TOOLS"


def default_cache_dir() -> Path:
    """``QUANTDESK_LLAMA_TOOLS``, else the per-user cache folder."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "quantdesk-llama-tools"


def build_options() -> list[str]:
    """Every CMake option of the tools' build: :data:`TOOL_OPTIONS` and this CPU's."""
    # The tools' own options already turn the RPC backend on; the engine's options add
    # it too, and a repeated option would make the cached build look stale.
    return list(TOOL_OPTIONS) + [a for a in cmake_args() if a not in TOOL_OPTIONS]


def build_info() -> str:
    """What a cached build must have been made from to be used."""
    return f"{LLAMA_CPP_PYTHON}\n{' '.join(build_options())}\n"


@dataclass(frozen=True)
class LlamaTools:
    """A finished build: ``bin`` holds the tools and their shared libraries."""

    bin: Path

    def path(self, tool: str) -> Path:
        """The executable ``tool`` (e.g. ``"llama-bench"``)."""
        return self.bin / tool

    def env(self, base: Optional[dict] = None) -> dict:
        """An environment that runs the tools (their libraries found in ``bin``)."""
        env = dict(os.environ if base is None else base)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(self.bin), env.get("LD_LIBRARY_PATH", "")) if p)
        return env

    def run(self, tool: str, args: Sequence[str], **kwargs) -> subprocess.CompletedProcess:
        """Run ``tool`` to the end with :meth:`env`; output captured as text."""
        return subprocess.run([str(self.path(tool)), *args], env=self.env(),
                              capture_output=True, text=True, check=True, **kwargs)


def find_tools(cache: Optional[Path] = None,
               needed: Sequence[str] = TARGETS) -> Optional[LlamaTools]:
    """The cached build in ``cache`` if it holds the ``needed`` tools and was made from
    today's options (``BUILD_INFO`` is written when the configure step succeeds)."""
    cache = Path(cache or default_cache_dir())
    info = cache / "BUILD_INFO"
    tools = LlamaTools(cache / "build" / "bin")
    if not info.is_file() or info.read_text() != build_info():
        return None
    if not all(os.access(tools.path(t), os.X_OK) for t in needed):
        return None
    return tools


def _sdist_version() -> str:
    return LLAMA_CPP_PYTHON.split("==", 1)[1]


def unpack_sdist(cache: Path, log) -> Path:
    """Download the pinned llama-cpp-python sdist into ``cache/src`` and unpack it once;
    return its ``vendor/llama.cpp``."""
    src = cache / "src"
    folder = src / f"llama_cpp_python-{_sdist_version()}"
    source = folder / "vendor" / "llama.cpp"
    if (source / "CMakeLists.txt").is_file():
        return source
    src.mkdir(parents=True, exist_ok=True)
    archive = src / f"llama_cpp_python-{_sdist_version()}.tar.gz"
    if not archive.is_file():
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                        ":all:", LLAMA_CPP_PYTHON, "-d", str(src)],
                       check=True, stdout=log, stderr=subprocess.STDOUT)
    with tarfile.open(archive) as tar:
        tar.extractall(src, filter="data")
    return source


def build_tools(cache: Optional[Path] = None, jobs: int = 2, nice: int = 5,
                targets: Sequence[str] = TARGETS) -> LlamaTools:
    """Find the ``targets`` in ``cache``, or build them there from the sdist (output in
    ``cache/build.log``; tools built before stay); ``nice`` lowers the compilers' priority."""
    cache = Path(cache or default_cache_dir())
    found = find_tools(cache, targets)
    if found is not None:
        return found
    cache.mkdir(parents=True, exist_ok=True)
    info = cache / "BUILD_INFO"
    if not info.is_file() or info.read_text() != build_info():
        info.unlink(missing_ok=True)  # configured again below; its old tools are stale
    build = cache / "build"
    prefix = ["nice", "-n", str(nice)] if nice and shutil.which("nice") else []
    with open(cache / "build.log", "a") as log:
        source = unpack_sdist(cache, log)
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        commands = [["cmake", "-S", str(source), "-B", str(build), *generator, *build_options()]]
        commands += [[*prefix, "cmake", "--build", str(build), "-j", str(jobs), "--target", target]
                     for target in targets]
        for index, command in enumerate(commands):
            log.write(f"$ {' '.join(command)}\n")
            log.flush()
            subprocess.run(command, check=True, stdout=log, stderr=subprocess.STDOUT)
            if index == 0:  # configured with today's options: finished tools are usable
                (cache / "BUILD_INFO").write_text(build_info())
    tools = find_tools(cache, targets)
    if tools is None:
        raise RuntimeError(f"the build in {build} did not produce {', '.join(targets)}")
    return tools


def machine_line() -> str:
    """The machine a benchmark ran on, for its report: CPU, cores, load average (the
    other processes' share matters on a shared machine)."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return f"{model}, {os.cpu_count()} cores, load average {load}"


def add_argument(parser: argparse.ArgumentParser) -> None:
    """The ``--llama-tools DIR`` option every benchmark that uses the tools takes."""
    parser.add_argument("--llama-tools", type=Path, default=None, metavar="DIR",
                        help=f"cache of llama.cpp's tools (default: ${ENV_VAR} or "
                             "~/.cache/quantdesk-llama-tools); built there when missing")


def require_tools(cache: Optional[Path], build: bool = True,
                  needed: Sequence[str] = TARGETS) -> LlamaTools:
    """The ``needed`` tools for a benchmark: found, or built when ``build`` (else exit
    with how to)."""
    tools = find_tools(cache, needed)
    if tools is not None:
        return tools
    if not build:
        sys.exit(f"llama.cpp's tools are not built in {cache or default_cache_dir()}; run "
                 f"python tests/benchmarks/llama_tools.py --build")
    print(f"building llama.cpp's tools in {cache or default_cache_dir()} (about 20 minutes "
          "on 2 cores, once)...", flush=True)
    return build_tools(cache, targets=needed)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_argument(parser)
    parser.add_argument("--build", action="store_true", help="build the tools if missing")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="parallel compile jobs")
    parser.add_argument("--target", action="append", default=None, metavar="TOOL",
                        help=f"build only this tool (repeatable; default: {', '.join(TARGETS)})")
    args = parser.parse_args(argv)
    targets = tuple(args.target or TARGETS)
    if args.build:
        tools = build_tools(args.llama_tools, jobs=args.jobs, targets=targets)
    else:
        tools = require_tools(args.llama_tools, build=False, needed=targets)
    print(tools.bin)
    return 0


if __name__ == "__main__":
    sys.exit(main())
