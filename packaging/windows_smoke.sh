#!/usr/bin/env bash
# Build the Windows installer on this Linux machine and try it under Wine as a new user would.
#
#   packaging/windows_smoke.sh              # build.py --target windows, then test the installer
#   packaging/windows_smoke.sh --no-build   # test the newest dist/QuantDesk-*-windows-x64-cpu-setup.exe
#
# Needs Debian's wine + wine64, mingw-w64 (g++-mingw-w64-x86-64-posix), cmake, nsis, Xvfb and
# xdotool (.ci/run installs them), network access to PyPI, and the development environment
# .venv (or DEV_PYTHON=...) for the build script and the host-side checks (the openai client,
# SmolLM2, the test factory). What it checks: packaging/windows_smoke.py. Times, the doctor
# report, chat transcripts and the window's screenshot land in tests/artifacts/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DEV_PYTHON="${DEV_PYTHON:-$ROOT/.venv/bin/python}"
BUILD=1
[[ "${1:-}" == "--no-build" ]] && BUILD=0

for tool in wine wineserver x86_64-w64-mingw32-g++-posix cmake makensis Xvfb xdotool; do
    command -v "$tool" >/dev/null || { echo "windows_smoke.sh needs $tool (see .ci/run for the Debian packages)." >&2; exit 2; }
done
[[ -x "$DEV_PYTHON" ]] || { echo "windows_smoke.sh needs the development environment ($DEV_PYTHON): run packaging/install.sh --no-launch, or set DEV_PYTHON." >&2; exit 2; }

T0=$SECONDS
if [[ $BUILD == 1 ]]; then
    echo "==> python packaging/build.py --target windows"
    "$DEV_PYTHON" packaging/build.py --target windows
    echo "  [time] Windows installer build: $((SECONDS - T0)) s"
fi
INSTALLER=$(ls -t dist/QuantDesk-*-windows-x64-cpu-setup.exe 2>/dev/null | head -1 || true)
[[ -n "$INSTALLER" ]] || { echo "WINDOWS SMOKE TEST FAILED: no Windows installer in dist/ (build it first, without --no-build)." >&2; exit 1; }
"$DEV_PYTHON" packaging/windows_smoke.py "$INSTALLER"
echo "  [time] Windows build and smoke test: $((SECONDS - T0)) s"
