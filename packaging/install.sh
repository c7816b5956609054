#!/usr/bin/env bash
# Set up QuantDesk from a source checkout and launch it.
#
#   packaging/install.sh              # create .venv, build llama.cpp for this CPU/GPU, launch
#   packaging/install.sh --no-launch  # set up only (CI)
#
# Steps: a virtual environment in .venv; llama-cpp-python compiled with the CMAKE_ARGS
# that packaging/llama_cmake_args.py chooses for this machine (no AMX kernels, see there;
# rebuilt only when those arguments change; the wheel kept in build/wheels/); the project
# with its dev extra (tests); then `quantdesk`, which opens the window, or prints a clear
# message and the doctor report where there is no display.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${QUANTDESK_VENV:-$ROOT/.venv}"
LAUNCH=1
[[ "${1:-}" == "--no-launch" ]] && LAUNCH=0

PYTHON="${PYTHON:-python3}"
"$PYTHON" - <<'PY' || { echo "QuantDesk needs Python 3.10 or newer; set PYTHON=/path/to/python3.x." >&2; exit 1; }
import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)
PY

if [[ ! -x "$VENV/bin/python" ]]; then
    echo "==> Creating virtual environment in $VENV"
    "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip wheel setuptools

LLAMA_CPP_PYTHON="$("$PYTHON" "$ROOT/packaging/llama_cmake_args.py" --requirement)"
CMAKE_ARGS="$("$PYTHON" "$ROOT/packaging/llama_cmake_args.py")"
STAMP="$VENV/.quantdesk-llama-build"
WANT="$LLAMA_CPP_PYTHON $CMAKE_ARGS"
if [[ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]] || ! "$VENV/bin/python" -c "import llama_cpp" 2>/dev/null; then
    # The wheel is kept in build/wheels/<key of these options>, the cache packaging/build.py
    # uses too: where this CPU's options equal the installers' portable ones, the
    # installer build reuses it instead of compiling llama.cpp again.
    WHEELS="${QUANTDESK_WHEEL_CACHE:-$ROOT/build/wheels}/$("$PYTHON" "$ROOT/packaging/llama_cmake_args.py" --wheel-key)"
    if ! compgen -G "$WHEELS/llama_cpp_python-*.whl" >/dev/null; then
        echo "==> Building $LLAMA_CPP_PYTHON for this computer (a few minutes)"
        echo "    CMAKE_ARGS=$CMAKE_ARGS"
        # No pip cache: pip's wheel cache ignores CMAKE_ARGS and could hand back a build made
        # with other CPU features.
        CMAKE_ARGS="$CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)}" \
            "${PIP[@]}" wheel -q --no-cache-dir --no-deps -w "$WHEELS" "$LLAMA_CPP_PYTHON"
        echo "$CMAKE_ARGS" > "$WHEELS/CMAKE_ARGS"
    fi
    "${PIP[@]}" install -q --force-reinstall --no-deps "$WHEELS"/llama_cpp_python-*.whl
    echo "$WANT" > "$STAMP"
fi

echo "==> Installing QuantDesk and its test tools"
"${PIP[@]}" install -q -e "$ROOT[dev]"

if [[ $LAUNCH == 1 ]]; then
    echo "==> Launching QuantDesk"
    exec "$VENV/bin/quantdesk"
fi
echo "==> Set up. Run $VENV/bin/quantdesk to open QuantDesk."
