#!/usr/bin/env bash
# Build the Linux installers as an ordinary user would, then try them (smoke_test.sh).
#
#   sudo packaging/build_as_user.sh                 # this checkout's branch, as user qdbuild
#   sudo packaging/build_as_user.sh --no-smoke      # build only
#   sudo BUILD_USER=alice SOURCE=https://… BRANCH=main packaging/build_as_user.sh
#
# What a person does after `git clone`: no root, no /sbin on PATH, nothing of this
# machine's development environment, a home of their own. As root, the script
#   1. creates the user (BUILD_USER, default qdbuild) if missing (a plain account, no sudo);
#   2. clones SOURCE (default: this checkout) at BRANCH (default: its current branch)
#      fresh into ~BUILD_USER/quantdesk, as that user (committed work only: a clone);
#   3. runs `python3 packaging/build.py` there as that user, with `env -i` and
#      PATH=/usr/local/bin:/usr/bin:/bin, HOME, USER and LANG only — the build makes its own
#      build/venv and compiles llama-cpp-python (about 6 minutes on a quiet 2-core machine,
#      much longer on a busy one; QUANTDESK_WHEEL_CACHE=DIR, readable by the user, reuses a
#      wheel compiled before with the same options — and must be writable by the user
#      when it has no wheel for this build's options: build.py says so if not);
#   4. runs packaging/smoke_test.sh --no-build on that clone's dist/ (as root: it needs
#      debootstrap and chroot), with this checkout's development .venv (DEV_PYTHON) for its
#      helpers and its artifacts in this checkout's tests/artifacts.
# The build's log is ~BUILD_USER/quantdesk/build/build-as-user.log; the smoke test's
# summary tests/artifacts/installers-smoke.txt.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_USER="${BUILD_USER:-qdbuild}"
SOURCE="${SOURCE:-$ROOT}"
BRANCH="${BRANCH:-$(git -C "$ROOT" rev-parse --abbrev-ref HEAD)}"
DEV_PYTHON="${DEV_PYTHON:-$ROOT/.venv/bin/python}"
[[ -x "$DEV_PYTHON" ]] || DEV_PYTHON=/work/main/.venv/bin/python
SMOKE=1
[[ "${1:-}" == "--no-smoke" ]] && SMOKE=0
USER_PATH=/usr/local/bin:/usr/bin:/bin

[[ $(id -u) -eq 0 ]] || { echo "build_as_user.sh needs root (it creates the user and runs the smoke test); run it with sudo." >&2; exit 2; }
for tool in git runuser useradd; do
    command -v "$tool" >/dev/null || { echo "build_as_user.sh needs $tool." >&2; exit 2; }
done
PYTHON3=$(PATH=$USER_PATH command -v python3) || { echo "An ordinary user has no python3 on PATH ($USER_PATH): install Debian's python3 and libpython3-dev." >&2; exit 2; }

T0=$SECONDS
step() { echo "==> [$((SECONDS - T0)) s] $*"; }

step "user $BUILD_USER"
if ! id "$BUILD_USER" >/dev/null 2>&1; then
    useradd --create-home --shell /bin/bash "$BUILD_USER"
    echo "created user $BUILD_USER"
fi
HOME_DIR=$(getent passwd "$BUILD_USER" | cut -d: -f6)
[[ -d "$HOME_DIR" ]] || { echo "$BUILD_USER has no home folder ($HOME_DIR)." >&2; exit 1; }
AS_USER=(runuser -u "$BUILD_USER" -- env -i HOME="$HOME_DIR" USER="$BUILD_USER" LOGNAME="$BUILD_USER"
         PATH="$USER_PATH" LANG=C.UTF-8 ${QUANTDESK_WHEEL_CACHE:+QUANTDESK_WHEEL_CACHE="$QUANTDESK_WHEEL_CACHE"})

CLONE="$HOME_DIR/quantdesk"
step "fresh clone of $SOURCE ($BRANCH) into $CLONE, as $BUILD_USER"
rm -rf "$CLONE"
# A local source belongs to another user (root), which git refuses ("dubious ownership")
# unless told otherwise, in the clone and in the upload-pack it starts (git 2.39).
URL="$SOURCE"
[[ -d "$SOURCE" ]] && URL="file://$(cd "$SOURCE" && pwd)"
"${AS_USER[@]}" git -c safe.directory='*' clone --quiet --upload-pack='git -c safe.directory=* upload-pack' \
    --branch "$BRANCH" "$URL" "$CLONE"
"${AS_USER[@]}" git -C "$CLONE" log -1 --format='commit %h %s'

step "python3 packaging/build.py as $BUILD_USER (PATH=$USER_PATH, $($PYTHON3 --version))"
mkdir -p "$CLONE/build" && chown "$BUILD_USER:" "$CLONE/build"
LOG="$CLONE/build/build-as-user.log"
if ! "${AS_USER[@]}" bash -c 'cd "$1" && python3 packaging/build.py' _ "$CLONE" > >(tee "$LOG") 2>&1; then
    echo "BUILD AS $BUILD_USER FAILED: see $LOG" >&2
    exit 1
fi
ls -l "$CLONE"/dist/quantdesk_*.deb "$CLONE"/dist/QuantDesk-*-linux-*.tar.gz
chown "$BUILD_USER:" "$LOG"
foreign=$(find "$CLONE" -xdev ! -user "$BUILD_USER" | head)
[[ -z "$foreign" ]] || { echo "files not owned by $BUILD_USER appeared in the clone:" >&2; echo "$foreign" >&2; exit 1; }

if [[ $SMOKE == 1 ]]; then
    step "packaging/smoke_test.sh --no-build on $CLONE/dist (as root)"
    DEV_PYTHON="$DEV_PYTHON" QUANTDESK_ARTIFACTS="${QUANTDESK_ARTIFACTS:-$ROOT/tests/artifacts}" \
        bash "$CLONE/packaging/smoke_test.sh" --no-build
fi
step "done: built as $BUILD_USER from a fresh clone$([[ $SMOKE == 1 ]] && echo ', smoke test passed')"
