"""The Windows installer tried under Wine as a new user would: installed, used, removed.

Run by ``packaging/windows_smoke.sh`` (which builds the installer first) with the
development environment's Python (it has the ``openai`` client, the test factory and the
SmolLM2 fetcher):

    .venv/bin/python packaging/windows_smoke.py dist/QuantDesk-<ver>-windows-x64-cpu-setup.exe

In a fresh Wine prefix whose user is called "Zoë Tester" (a user folder with a space and a
non-ASCII letter, as many Windows users have), on an Xvfb display:

1. ``setup.exe /S`` — the program folder, the Start-menu shortcut, the entry in Settings ›
   Apps (the uninstall key) and the ``.gguf`` association in the registry;
2. ``quantdesk-cli.exe doctor`` — "installed (Windows installer)", llama.cpp's CPU backend
   and device, RPC;
3. ``quantdesk-cli.exe chat`` with SmolLM2 — an answer; then a reply held to CJK text and an
   emoji by a grammar, read through a pipe as UTF-8;
4. ``quantdesk-cli.exe quantize`` — a tiny Hugging Face checkpoint to Q4_K_M, the same bytes
   as this Linux checkout writes;
5. ``quantdesk-cli.exe serve`` — the ``openai`` client on Linux gets a reply over HTTP;
6. ``QuantDesk.exe model.gguf`` — the window opens with the model, a question is typed and
   sent, the reply is awaited and the screen kept (``tests/artifacts/windows-chat.png``);
7. ``Uninstall.exe /S`` — the program, shortcut and registry entries gone; the user's data
   (models, chats in ``%LOCALAPPDATA%\\QuantDesk``) kept.

Each step is timed; a failure is one sentence (and the output that shows it). The Wine
prefix gets the stand-ins of ``wine_prefix.py``; nothing is changed in what was installed.

``--native`` runs the same checks on a real Windows (the release workflow's Windows job
installs the file built on Linux): the user's own folders and registry, no Wine, and
without the window and the comparison with the Linux build's bytes (steps 4 and 6).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import wine_prefix  # noqa: E402

USER = "Zoë Tester"
PROMPT = "What is the capital of France?"
#: A reply held to this text by a grammar: CJK, an emoji and a non-Latin-1 letter, which a
#: cp1252 pipe cannot carry.
UNICODE_REPLY = "東京は日本の首都です 🗼 — Zoë"


class SmokeFailure(Exception):
    """One check failed; the message says which, in a sentence."""


class WindowsSmoke:
    """The checks, under Wine (``display`` given) or on Windows itself (``display`` None)."""

    def __init__(self, installer: Path, work: Path, artifacts: Path, display: str | None):
        self.installer = installer
        self.work = work
        self.artifacts = artifacts
        self.summary: list[str] = []
        self.prefix = wine_prefix.prefix_path("smoke")
        if display is None:
            self.launcher: list[str] = []
            self.env = dict(os.environ)
        else:
            self.launcher = ["wine"]
            shutil.rmtree(self.prefix, ignore_errors=True)
            self.env = wine_prefix.make_prefix(self.prefix, user=USER) | {"DISPLAY": display}

    # -- helpers ------------------------------------------------------------------------

    def note(self, line: str) -> None:
        print(line, flush=True)
        self.summary.append(line)

    @contextmanager
    def step(self, name: str):
        print(f"==> {name}", flush=True)
        started = time.monotonic()
        yield
        self.note(f"  [time] {name}: {time.monotonic() - started:.0f} s")

    def settle(self) -> None:
        """Wait until the programs started so far have ended (Wine: its server is idle)."""
        if self.launcher:
            subprocess.run(["wineserver", "--wait"], env=self.env, check=True)

    def stop_all(self) -> None:
        if self.launcher:
            subprocess.run(["wineserver", "-k"], env=self.env)

    def wine(self, *args, stdin: str | None = None, timeout: float = 600,
             check: bool = True, what: str = "") -> str:
        """Run a Windows program; stdout and stderr together (pipes: see cross_windows)."""
        result = subprocess.run([*self.launcher, *[str(a) for a in args]], env=self.env,
                                input=(stdin or "").encode("utf-8"), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, timeout=timeout)
        text = result.stdout.decode("utf-8", errors="replace")
        if check and result.returncode != 0:
            print(text[-4000:])
            raise SmokeFailure(f"{what or args[0]} exited with status {result.returncode}.")
        return text

    def start(self, args: list, log: Path) -> subprocess.Popen:
        """Start a Windows program in the background, its output copied to ``log``.

        Through a pipe and a thread: Wine 8 gives a Windows program invalid handles for
        streams redirected to a file (the program dies before Python starts).
        """
        process = subprocess.Popen([*self.launcher, *[str(a) for a in args]], env=self.env,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT)
        sink = open(log, "wb")

        def copy() -> None:
            with sink:
                shutil.copyfileobj(process.stdout, sink)

        threading.Thread(target=copy, daemon=True).start()
        return process

    def windows_folder(self, variable: str) -> Path:
        """This user's ``LOCALAPPDATA`` or ``APPDATA`` (under Wine: its Linux path)."""
        if not self.launcher:
            return Path(os.environ[variable])
        profile = self.prefix / "drive_c" / "users" / USER / "AppData"
        return profile / {"LOCALAPPDATA": "Local", "APPDATA": "Roaming"}[variable]

    def registry(self, key: str, value: str | None = None) -> str | None:
        args = ["reg", "query", key] + (["/v", value] if value else ["/ve"])
        result = subprocess.run([*self.launcher, *args], env=self.env, capture_output=True)
        if result.returncode != 0:
            return None
        for line in result.stdout.decode("utf-8", errors="replace").splitlines():
            parts = line.strip().split(None, 2)
            if len(parts) == 3 and parts[1].startswith("REG_"):
                return parts[2]
        return ""

    def save(self, name: str, text: str) -> Path:
        path = self.artifacts / name
        path.write_text(text, encoding="utf-8")
        return path

    # -- the checks ---------------------------------------------------------------------

    def install(self) -> None:
        with self.step("setup.exe /S"):
            self.wine(self.installer, "/S", what="the installer")
            self.settle()
            for _ in range(120):  # on Windows the installer's process may outlive its start
                if (self.windows_folder("LOCALAPPDATA") / "Programs" / "QuantDesk" /
                        "Uninstall.exe").exists():
                    break
                time.sleep(1)
            local = self.windows_folder("LOCALAPPDATA")
            self.program = local / "Programs" / "QuantDesk"
            self.data = local / "QuantDesk"
            for name in ("QuantDesk.exe", "quantdesk-cli.exe", "Uninstall.exe", "install-kind"):
                if not (self.program / name).exists():
                    raise SmokeFailure(f"The installer did not put {name} in {self.program}.")
            shortcut = self.windows_folder("APPDATA") / "Microsoft" / "Windows" / "Start Menu" / \
                "Programs" / "QuantDesk.lnk"
            if not shortcut.exists():
                raise SmokeFailure(f"There is no Start-menu shortcut at {shortcut}.")
            uninstall = r"HKCU\Software\Microsoft\Windows\CurrentVersion\Uninstall\QuantDesk"
            if self.registry(uninstall, "DisplayName") != "QuantDesk":
                raise SmokeFailure("Settings › Apps has no QuantDesk entry (no uninstall key).")
            if self.registry(r"HKCU\Software\Classes\.gguf") != "QuantDesk.gguf":
                raise SmokeFailure(".gguf files are not associated with QuantDesk.")
            command = self.registry(r"HKCU\Software\Classes\QuantDesk.gguf\shell\open\command")
            if not command or "QuantDesk.exe" not in command or "%1" not in command:
                raise SmokeFailure(f"Opening a .gguf runs {command!r}, not QuantDesk.exe with the file.")
            size = sum(f.stat().st_size for f in self.program.rglob("*") if f.is_file())
            self.note(f"installed in {self.program} ({size / 2**20:.0f} MiB): QuantDesk.exe, "
                      f"quantdesk-cli.exe, Start-menu shortcut, uninstall entry, .gguf opens with "
                      f"{command}")

    def cli(self, *args, **kwargs) -> str:
        return self.wine(self.program / "quantdesk-cli.exe", *args, **kwargs)

    def doctor(self) -> None:
        with self.step("quantdesk-cli.exe doctor"):
            out = self.cli("doctor", what="quantdesk doctor")
            self.save("windows-doctor.txt", out)
            for needle, sentence in (
                ("installed (Windows installer)", "doctor does not say it was installed by the Windows installer"),
                ("Backends compiled in", "doctor has no llama.cpp section"),
                ("RPC", "doctor does not mention the RPC backend"),
            ):
                if needle not in out:
                    print(out)
                    raise SmokeFailure(sentence + ".")
            if not any("CPU" in line for line in out.splitlines() if "evice" in line or "Backends" in line):
                print(out)
                raise SmokeFailure("doctor lists no CPU device or backend.")
            self.note("quantdesk doctor: " + "; ".join(
                line.strip() for line in out.splitlines()
                if line.strip().startswith(("Installed as", "Backends compiled in", "RPC"))))

    def chat(self, model: Path) -> None:
        with self.step("quantdesk-cli.exe chat (SmolLM2)"):
            out = self.cli("chat", model, "--no-save", "--seed", "2", "--temperature", "0.7",
                           "--top-p", "0.95", "--top-k", "40", "--min-p", "0.05",
                           "--max-tokens", "60", stdin=PROMPT + "\n", what="quantdesk chat")
            self.save("windows-chat.txt", out)
            if "paris" not in out.lower():
                print(out)
                raise SmokeFailure("The chat reply does not mention Paris.")
            self.note("quantdesk chat answered: " + next(
                line for line in out.splitlines() if "paris" in line.lower())[:120])
        with self.step("quantdesk-cli.exe chat, CJK and emoji through a pipe"):
            grammar = self.work / "unicode.gbnf"
            grammar.write_text(f'root ::= "{UNICODE_REPLY}"\n', encoding="utf-8")
            out = self.cli("chat", model, "--no-save", "--grammar", grammar, "--max-tokens", "60",
                           stdin="Say where the capital of Japan is.\n",
                           what="quantdesk chat with non-ASCII output")
            self.save("windows-chat-unicode.txt", out)
            if UNICODE_REPLY not in out:
                print(out)
                raise SmokeFailure("The reply with CJK text and an emoji did not come through the "
                                   "pipe as UTF-8.")
            self.note(f"quantdesk chat wrote {UNICODE_REPLY!r} through a pipe, in UTF-8")

    def quantize(self, checkpoint: Path, linux_cli: list[str]) -> None:
        with self.step("quantdesk-cli.exe quantize (tiny HF llama -> Q4_K_M)"):
            ours = self.work / "tiny-windows-Q4_K_M.gguf"
            reference = self.work / "tiny-linux-Q4_K_M.gguf"
            ours.unlink(missing_ok=True)
            started = time.monotonic()
            self.cli("quantize", checkpoint, "--type", "Q4_K_M", "-o", ours, what="quantdesk quantize")
            windows_s = time.monotonic() - started
            subprocess.run([*linux_cli, "quantize", str(checkpoint), "--type", "Q4_K_M", "-o",
                            str(reference)], check=True, capture_output=True)
            a, b = (hashlib.sha256(p.read_bytes()).hexdigest() for p in (ours, reference))
            if a != b:
                raise SmokeFailure("The Windows build's Q4_K_M file differs from the Linux build's.")
            self.note(f"quantdesk quantize: {ours.stat().st_size} bytes in {windows_s:.0f} s, "
                      f"sha256 {a[:16]}… identical to the Linux build's file")

    def serve(self, model: Path) -> None:
        from openai import OpenAI

        with self.step("quantdesk-cli.exe serve + the openai client"):
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            server = self.start([self.program / "quantdesk-cli.exe", "serve", model, "--port", port],
                                self.work / "serve.log")
            try:
                client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none",
                                max_retries=0, timeout=120)
                deadline = time.monotonic() + 180
                while True:
                    try:
                        models = [m.id for m in client.models.list().data]
                        break
                    except Exception:
                        if server.poll() is not None or time.monotonic() > deadline:
                            print((self.work / "serve.log").read_text(errors="replace")[-3000:])
                            raise SmokeFailure("quantdesk serve did not start answering.") from None
                        time.sleep(1)
                reply = client.chat.completions.create(
                    model=models[0], messages=[{"role": "user", "content": PROMPT}],
                    max_tokens=40, temperature=0)
                text = reply.choices[0].message.content or ""
                if not text.strip() or reply.usage.completion_tokens < 1:
                    raise SmokeFailure("The server's reply to the openai client is empty.")
                self.note(f"quantdesk serve on port {port}: models {models}; the openai client got "
                          f"{reply.usage.completion_tokens} tokens: {text.strip()[:80]!r}")
            finally:
                server.terminate()
                try:
                    server.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    server.kill()
                self.stop_all()

    def window(self, model: Path, dev_python: str) -> None:
        with self.step("QuantDesk.exe model.gguf: the window, a question, the reply"):
            app = self.start([self.program / "QuantDesk.exe", model], self.work / "window.log")
            try:
                started = time.monotonic()
                window_id = ""
                while not window_id:
                    found = subprocess.run(["xdotool", "search", "--onlyvisible", "--name",
                                            "QuantDesk"], env=self.env, capture_output=True,
                                           text=True)
                    window_id = found.stdout.split()[0] if found.stdout.split() else ""
                    if app.poll() is not None:
                        raise SmokeFailure(f"QuantDesk.exe exited ({app.returncode}) before its "
                                           "window appeared.")
                    if time.monotonic() - started > 180:
                        raise SmokeFailure("QuantDesk.exe showed no window within 3 minutes.")
                    time.sleep(0.2)
                first_window = time.monotonic() - started
                self.note(f"first window after {first_window:.1f} s")
                time.sleep(15)  # the model loads; the message box has the focus
                subprocess.run(["xdotool", "windowactivate", "--sync", window_id], env=self.env,
                               capture_output=True)  # without a window manager: focus stays
                subprocess.run(["xdotool", "key", "ctrl+l"], env=self.env)  # the message box
                subprocess.run(["xdotool", "type", "--delay", "40", PROMPT], env=self.env, check=True)
                subprocess.run(["xdotool", "key", "Return"], env=self.env, check=True)
                reply = self.stored_reply(PROMPT, timeout=240)
                time.sleep(1)  # the last paint
                shot = self.artifacts / "windows-chat.png"
                grab = subprocess.run(
                    [dev_python, "-c", GRAB, str(shot)], env=dict(self.env, QT_QPA_PLATFORM="xcb"),
                    capture_output=True, text=True, timeout=60)
                if grab.returncode != 0:
                    raise SmokeFailure(f"The screenshot could not be taken: {grab.stderr[-300:]}")
                if app.poll() is not None:
                    raise SmokeFailure("QuantDesk.exe died while answering.")
                self.note(f"window: question typed and sent; the reply, as the app stored it: "
                          f"{reply[:80]!r}; screenshot {shot}")
            finally:
                app.terminate()
                self.stop_all()

    def stored_reply(self, question: str, timeout: float) -> str:
        """The reply to ``question`` once the window has stored it in its conversations."""
        database = self.data / "conversations" / "conversations.sqlite3"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if database.exists():
                try:
                    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
                        rows = db.execute(
                            "SELECT a.content FROM messages q JOIN messages a ON "
                            "a.conversation_id = q.conversation_id AND a.seq > q.seq "
                            "WHERE q.role = 'user' AND q.content = ? AND a.role = 'assistant'",
                            (question,)).fetchall()
                    if rows and rows[0][0].strip():
                        return rows[0][0]
                except sqlite3.Error:
                    pass  # being written
            time.sleep(2)
        raise SmokeFailure(f"The window stored no reply to the typed question within {timeout:.0f} s.")

    def uninstall(self) -> None:
        with self.step("Uninstall.exe /S"):
            if not self.data.exists():
                raise SmokeFailure(f"The app kept nothing in {self.data}; the uninstall check "
                                   "needs its data folder.")
            self.wine(self.program / "Uninstall.exe", "/S", what="the uninstaller")
            self.settle()
            for _ in range(60):  # the uninstaller runs from a copy in %TEMP% and returns at once
                if not (self.program / "QuantDesk.exe").exists():
                    break
                time.sleep(1)
            left = [p.name for p in self.program.glob("*")] if self.program.exists() else []
            if left:
                raise SmokeFailure(f"Uninstall left {', '.join(left)} in {self.program}.")
            if self.registry(r"HKCU\Software\Microsoft\Windows\CurrentVersion\Uninstall\QuantDesk",
                             "DisplayName") is not None:
                raise SmokeFailure("Uninstall left the Settings › Apps entry.")
            if self.registry(r"HKCU\Software\Classes\QuantDesk.gguf\shell\open\command") is not None:
                raise SmokeFailure("Uninstall left the .gguf association.")
            kept = sorted(p.name for p in self.data.iterdir())
            if not kept:
                raise SmokeFailure(f"Uninstall emptied the user's data folder {self.data}.")
            self.note(f"uninstalled: program folder, shortcut and registry entries gone; "
                      f"{self.data} kept ({', '.join(kept)})")


GRAB = r"""
import sys
from PySide6.QtGui import QGuiApplication
app = QGuiApplication(sys.argv[:1])
image = app.primaryScreen().grabWindow(0).toImage()
image.save(sys.argv[1])
"""


def test_model(work: Path) -> Path:
    """SmolLM2, fetched once as the tests do, under a name with spaces as downloads have."""
    from tests.conftest import cached_models_dir, fetch_smollm2

    model = work / "SmolLM2 135M Instruct.Q4_1.gguf"
    if not model.exists():
        shutil.copyfile(fetch_smollm2(cached_models_dir()), model)
    return model


def test_checkpoint(work: Path) -> Path:
    """A tiny Hugging Face checkpoint from the test factory."""
    from tests.factory.checkpoints import write_tiny_checkpoint

    checkpoint = work / "tiny-llama"
    shutil.rmtree(checkpoint, ignore_errors=True)
    write_tiny_checkpoint(checkpoint)
    return checkpoint


def start_xvfb(work: Path) -> tuple[subprocess.Popen, str]:
    for n in range(150, 190):
        if not Path(f"/tmp/.X11-unix/X{n}").exists() and not Path(f"/tmp/.X{n}-lock").exists():
            break
    server = subprocess.Popen(["Xvfb", f":{n}", "-screen", "0", "1280x800x24", "-nolisten",
                               "tcp", "-noreset"], stdout=subprocess.DEVNULL,
                              stderr=open(work / "xvfb.log", "wb"))
    for _ in range(100):
        if Path(f"/tmp/.X11-unix/X{n}").exists():
            return server, f":{n}"
        time.sleep(0.1)
    raise SmokeFailure("Xvfb did not start.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("installer", type=Path)
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "windows-smoke")
    parser.add_argument("--native", action="store_true",
                        help="on Windows itself: no Wine, no window check, no Linux comparison")
    parser.add_argument("--artifacts", type=Path,
                        default=Path(os.environ.get("QUANTDESK_ARTIFACTS", ROOT / "tests" / "artifacts")))
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    args.artifacts.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    xvfb, display = (None, None) if args.native else start_xvfb(args.work)
    try:
        smoke = WindowsSmoke(args.installer.resolve(), args.work.resolve(), args.artifacts, display)
        smoke.note(f"installer {args.installer.name}: {args.installer.stat().st_size / 2**20:.1f} MiB")
        model = test_model(args.work)
        smoke.install()
        smoke.doctor()
        smoke.chat(model)
        if not args.native:
            smoke.quantize(test_checkpoint(args.work), [sys.executable, "-m", "app.cli"])
        smoke.serve(model)
        if not args.native:
            smoke.window(model, sys.executable)
        smoke.uninstall()
        smoke.note(f"Windows smoke test passed in {time.monotonic() - started:.0f} s")
        return 0
    except (SmokeFailure, wine_prefix.WineSetupError) as exc:
        print(f"WINDOWS SMOKE TEST FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        if "smoke" in locals():
            (args.artifacts / "windows-smoke.txt").write_text("\n".join(smoke.summary) + "\n",
                                                             encoding="utf-8")
            smoke.stop_all()
        if xvfb is not None:
            xvfb.terminate()


if __name__ == "__main__":
    sys.exit(main())
