"""Benchmark: the Chat page's streaming, decode speed, launch and long-conversation opening.

1. **Stall while streaming.** A scripted token source (a thread, like the engine worker)
   emits a long reply of Markdown and code (≥ 4,000 tokens) at ≥ 200 tokens/s; the page's
   renderer takes the text every ``TICK_MS`` (what its arrival-driven, rate-limited
   rendering does under a continuous stream) into the real :class:`TranscriptView`. A
   10 ms heartbeat timer on the GUI thread measures its lateness: worst and 99th
   percentile (the paints Qt makes of each change run on that thread too, in its event loop,
   as in the window — nothing forces a synchronous ``repaint()``). Goal: worst ≤ 50 ms. Also
   printed: the GUI thread's own CPU time per render (take the text, update the document),
   which separates our work from a busy machine's preemption.
   **With a long thinking section**: the same, for a reasoning model's reply — ≥ 3,000
   tokens of thinking after ``<think>``, then the answer — split by the
   :class:`~models.engine.reasoning.ReasoningSplitter` on the producing thread as the
   page's engine worker does, rendered as the page does (folded, and unfolded from its
   first token: every thinking token on screen, the whole section re-laid out once as
   the answer starts). Same goal.
2. **Decode through the GUI vs EngineClient alone**: the same model, settings and prompt
   (greedy, ``ignore_eos``, fixed length) in pairs of adjacent runs, each side first in
   half the pairs; decode tok/s as the receiving thread sees it (first to last delta). The
   figure is the median of the per-pair ratios — adjacent runs share the machine's state,
   which single runs on a shared 2-core machine vary by ±10 %. Goal: GUI ≥ 97 % of
   EngineClient alone. Measured with the app's default engine threads and with the engine
   on every logical CPU. Also printed: this process's CPU time per second of decoding on
   each side (what the GUI adds, free of the machine's noise).
   **Edit workload** (``--decode-workload edit``): a source file sent back with one change
   (``bench_speculative.py``'s requests, greedy, to the end of the reply), with prompt
   lookup — the default — through the GUI and through EngineClient alone, and through the
   GUI without it (``speculative="off"``), in alternated triples: the tok/s a person sees
   in the window when the reply copies its prompt.
3. **Launch to a usable window** (no model): a fresh process, from start to the window on
   screen with the message box focused. Goal ≤ 1.0 s.
4. **Opening a conversation of 500 messages**. Goal ≤ 0.5 s.

Run: ``.venv/bin/python tests/benchmarks/bench_chat_gui.py [MODEL.gguf] [--runs N] [--decode-runs N]``
(offscreen unless ``DISPLAY`` and ``QT_QPA_PLATFORM=xcb`` are set). Timings on a shared
machine are noisy: run it alone.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

TOKENS, RATE = 4_200, 250  # scripted reply length and tokens per second
THINKING_TOKENS = 3_200  # the thinking before the answer in the reasoning runs
DECODE_TOKENS = 256

PARAGRAPH = ("The **engine** streams tokens while the window stays responsive; each "
             "paragraph has `inline code`, a [link](https://example.com) and *emphasis*. ")
CODE = ("```python\ndef fibonacci(n: int) -> list[int]:\n    \"\"\"The first n numbers.\"\"\"\n"
        "    values = [0, 1]\n    while len(values) < n:\n        values.append(values[-1] + values[-2])\n"
        "    return values[:n]\n```\n\n")
TABLE = "| name | value |\n|---|---|\n| alpha | 1 |\n| beta | 2 |\n\n"


def scripted_tokens(count: int) -> list[str]:
    """Markdown with paragraphs, lists, tables and code, cut into ~4-character tokens."""
    text, parts = "", 0
    while len(text) < count * 4:
        parts += 1
        text += f"## Part {parts}\n\n" + PARAGRAPH * 3 + "\n\n- one item\n- another item\n\n"
        text += CODE if parts % 2 else TABLE
    return [text[i:i + 4] for i in range(0, count * 4, 4)]


THOUGHT = ("Let me think about how the engine and the window share the machine: decoding "
           "uses the cores, the window needs a few milliseconds per tick, so the thinking "
           "text should cost nothing while folded. Wait, check the other case too.\n\n")


def scripted_reasoning_tokens(thinking: int, answer: int) -> list[str]:
    """``<think>``, ``thinking`` tokens of plain reasoning, ``</think>``, then a Markdown
    answer of ``answer`` tokens (tags whole, as Qwen3's vocabulary has them)."""
    text = THOUGHT * (thinking * 4 // len(THOUGHT) + 1)
    return (["<think>", "\n"] + [text[i:i + 4] for i in range(0, thinking * 4, 4)]
            + ["</think>", "\n\n"] + scripted_tokens(answer))


def wait_until(app, condition, timeout=300.0) -> None:
    deadline = time.perf_counter() + timeout
    while not condition():
        app.processEvents()
        time.sleep(0.002)
        if time.perf_counter() > deadline:
            raise TimeoutError("benchmark step timed out")


def bench_stall(app, thinking: int = 0, unfolded: bool = False) -> dict:
    """Stream a scripted reply into the transcript (with ``thinking`` tokens of reasoning
    first, its section ``unfolded`` or not); the GUI thread's lateness and work."""
    from PySide6.QtCore import QTimer, QUrl

    from app.ui.chat.page import TICK_MS
    from app.ui.chat.transcript import STREAMING, TranscriptView
    from models.engine.reasoning import ReasoningSplitter

    from app.ui.chat.markdown import warm_up

    view = TranscriptView()
    view.resize(900, 700)
    view.show()
    warm_up()  # what the page does when it starts (in a worker)
    view.warm_up()
    tokens = scripted_reasoning_tokens(thinking, TOKENS) if thinking else scripted_tokens(TOKENS)
    buffer: list[str] = []  # answer deltas
    thoughts: list[str] = []  # reasoning deltas
    done = threading.Event()
    splitter = ReasoningSplitter()

    def produce() -> None:  # the engine worker's role: split and append deltas at RATE
        start = time.perf_counter()
        for i, token in enumerate(tokens + [None]):
            delay = start + i / RATE - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            reasoning, answer = splitter.feed(token) if token is not None else splitter.finish()
            if reasoning:
                thoughts.append(reasoning)
            if answer:
                buffer.append(answer)
        done.set()

    work: list[float] = []
    phases: list[str] = []  # what each render did: "thinking", "answer", or "first answer"

    def taken(parts: list[str]) -> str:
        count = len(parts)
        text = "".join(parts[:count])
        del parts[:count]
        return text

    def take() -> None:  # ChatEngine.take_text + the page's _take_text
        if buffer or thoughts:
            begun = time.thread_time()  # this thread's CPU: our work, not the scheduler's
            reasoning, text = taken(thoughts), taken(buffer)
            if reasoning:
                view.add_reasoning(reasoning)
                if unfolded and not view._stream_unfolded:  # opened at its first token
                    view.anchorClicked.emit(QUrl(f"qd:think:{STREAMING}"))
            phase = "thinking" if reasoning else "answer"
            if text:
                if view.thinking:
                    view.end_reasoning(splitter.seconds)
                    phase = "first answer"
                view.add_text(text)  # Qt paints the change on its next update, as in the window
            work.append(time.thread_time() - begun)
            phases.append(phase)

    lateness: list[float] = []
    last = [time.perf_counter()]

    def beat() -> None:
        now = time.perf_counter()
        lateness.append(max(0.0, now - last[0] - 0.010))
        last[0] = now

    heartbeat = QTimer(interval=10)
    heartbeat.setTimerType(heartbeat.timerType().PreciseTimer)
    heartbeat.timeout.connect(beat)
    tick = QTimer(interval=TICK_MS)
    tick.timeout.connect(take)
    collections: list[tuple[int, float]] = []  # Python's garbage collections meanwhile
    collecting: list[float] = []

    def on_collect(stage: str, info: dict) -> None:
        if stage == "start":
            collecting[:] = [time.perf_counter()]
        elif collecting:
            collections.append((info["generation"], time.perf_counter() - collecting[0]))

    view.begin_reply()
    view.viewport().repaint()  # on screen before the reply, as in the window
    app.processEvents()
    gc.callbacks.append(on_collect)
    started = time.perf_counter()
    threading.Thread(target=produce, daemon=True).start()
    heartbeat.start()
    tick.start()
    wait_until(app, lambda: done.is_set() and not buffer and not thoughts)
    elapsed = time.perf_counter() - started
    heartbeat.stop()
    tick.stop()
    gc.callbacks.remove(on_collect)
    ordered = sorted(lateness[5:])
    longest = max(range(len(work)), key=work.__getitem__)
    return {"tokens": len(tokens), "rate": len(tokens) / elapsed,
            "worst_ms": 1000 * ordered[-1], "p99_ms": 1000 * ordered[int(0.99 * (len(ordered) - 1))],
            "chars": len(view.streamed_text), "tick_max_ms": 1000 * max(work),
            "tick_median_ms": 1000 * statistics.median(work),
            "tick_max_phase": phases[longest],
            "gc_max_ms": 1000 * max((t for _g, t in collections), default=0.0),
            "gc_count": len(collections),
            "thinking_chars": len(view.streamed_reasoning)}


def bench_decode(app, model: Path, runs: int, threads: int | None, workload: str = "free") -> dict:
    from PySide6.QtCore import QEventLoop

    from app.ui.main_window import MainWindow
    from models.engine import ChatOptions, EngineClient, LoadSettings

    edit = workload == "edit"
    settings = LoadSettings(threads=threads, context_length=4096 if edit else 1024)
    options = ChatOptions(temperature=0.0, max_tokens=DECODE_TOKENS, ignore_eos=True)
    plain = None
    client = EngineClient()
    client.load(model, settings)
    window = MainWindow()
    window.show()
    page = window.show_page("Chat")
    page.ensure_started()
    page.engine.use_client(client)
    page.engine.report, page.engine.model_path, page.engine.settings = client.last_load, model, settings
    outcomes = []
    page.engine.reply_done.connect(outcomes.append)
    speeds = {"alone": [], "gui": [], "gui_plain": []}
    cpu = {"alone": [], "gui": [], "gui_plain": []}  # this process's CPU per second of decoding

    def through_client(messages) -> tuple[float, float]:
        reply = client.chat(messages, options)
        reply.wait()
        return reply.stats.completion_tokens, time.perf_counter() - reply.first_delta_at

    def through_gui(messages, chosen=None) -> tuple[float, float]:
        page.transcript.begin_reply()
        page.engine.start_reply(messages, chosen or options, None)
        # The window's own event loop, as app.exec() runs it: polling with processEvents
        # here would add the benchmark's work to the GUI thread it measures.
        loop = QEventLoop()
        page.engine.reply_done.connect(loop.quit)
        loop.exec()
        page.engine.reply_done.disconnect(loop.quit)
        outcome = outcomes[-1]
        return outcome.reply.stats.completion_tokens, outcome.finished_at - outcome.reply.first_delta_at

    order = (("alone", through_client), ("gui", through_gui))
    if edit:
        from tests.benchmarks.bench_speculative import edit_messages

        order += (("gui_plain", lambda messages: through_gui(messages, plain)),)
    for run in range(runs):  # pairs with one prompt; each side goes first in half of them
        messages = [{"role": "user", "content": f"Run {run}: write about rivers, mountains and seas."}]
        if edit:
            messages, budget = edit_messages(run)
            options = ChatOptions(temperature=0.0, max_tokens=budget)
            plain = ChatOptions(temperature=0.0, max_tokens=budget, speculative="off")
        for side, produce in (order if run % 2 == 0 else order[::-1]):
            cpu_before = time.process_time()
            tokens, seconds = produce(messages)
            speeds[side].append((tokens - 1) / seconds)
            cpu[side].append((time.process_time() - cpu_before) / seconds)
    window.close()
    client.shutdown()
    pairs = [gui / alone for gui, alone in zip(speeds["gui"], speeds["alone"])]
    quartiles = statistics.quantiles(pairs, n=4) if len(pairs) > 1 else pairs * 3
    if edit:
        over_plain = [gui / p for gui, p in zip(speeds["gui"], speeds["gui_plain"])]
        return {"alone": statistics.median(speeds["alone"]), "gui": statistics.median(speeds["gui"]),
                "gui_plain": statistics.median(speeds["gui_plain"]),
                "ratio": statistics.median(pairs), "over_plain": statistics.median(over_plain),
                "over_plain_range": (min(over_plain), max(over_plain))}
    return {"alone": statistics.median(speeds["alone"]), "gui": statistics.median(speeds["gui"]),
            "ratio": statistics.median(pairs), "q1": quartiles[0], "q3": quartiles[2],
            "cpu_alone": statistics.median(cpu["alone"]), "cpu_gui": statistics.median(cpu["gui"])}


LAUNCH = r"""
import time
start = time.perf_counter()
import sys
sys.path.insert(0, sys.argv[1])
from app.ui.application import create_application
from app.ui.main_window import MainWindow
app = create_application()
window = MainWindow()
window.show()
page = window.show_page("Chat")
while not (window.windowHandle() is not None and window.windowHandle().isExposed()
           and page.box.hasFocus() or time.perf_counter() - start > 30):
    app.processEvents()
usable = time.perf_counter() - start
while not page.started:
    app.processEvents()
print(usable, time.perf_counter() - start)
"""


def bench_launch(runs: int) -> dict:
    usable, built, wall = [], [], []
    for _ in range(runs):
        env = dict(os.environ, QUANTDESK_HOME=tempfile.mkdtemp())
        started = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", LAUNCH, str(REPO)], env=env, capture_output=True,
                             text=True, timeout=120)
        wall.append(time.perf_counter() - started)
        first, second = map(float, out.stdout.split()[-2:])
        usable.append(first)
        built.append(second)
    return {"usable": min(usable), "built": min(built), "process_wall": min(wall)}


def bench_open_500(app) -> dict:
    from app.core.conversations import ConversationStore
    from app.ui.main_window import MainWindow

    store = ConversationStore()
    conversation = store.create(title="Long")
    reply = "## Answer\n\n" + PARAGRAPH * 2 + "\n\n" + CODE + "- a\n- b\n\n" + TABLE
    for i in range(250):
        store.add_messages(conversation.id, [
            {"role": "user", "content": f"Question {i}: how does this work?"},
            {"role": "assistant", "content": reply, "stats": {"completion_tokens": 120,
                                                              "decode_tokens_per_second": 50.0}}])
    window = MainWindow()
    window.show()
    page = window.show_page("Chat")
    page.ensure_started()
    app.processEvents()
    started = time.perf_counter()
    page.open_conversation(conversation.id)
    app.processEvents()
    opened = time.perf_counter() - started
    started = time.perf_counter()
    page.transcript.action.emit("earlier", 0)  # "Show earlier messages": all 500
    app.processEvents()
    everything = time.perf_counter() - started
    window.close()
    return {"open": opened, "all_500": everything}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", type=Path, default=None)
    parser.add_argument("--runs", type=int, default=3, help="launch runs")
    parser.add_argument("--decode-runs", type=int, default=9, help="alternated decode pairs per setting")
    parser.add_argument("--no-engine", action="store_true", help="skip the decode comparison")
    parser.add_argument("--decode-only", action="store_true", help="only the decode comparison")
    parser.add_argument("--stall-only", action="store_true", help="only the streaming stalls")
    parser.add_argument("--decode-workload", default="free", choices=("free", "edit"),
                        help="free writing (fixed length), or bench_speculative's edit requests")
    parser.add_argument("--decode-threads", default="default,all",
                        help="engine thread settings to compare: default (half the CPUs), all")
    args = parser.parse_args()
    os.environ["QUANTDESK_HOME"] = tempfile.mkdtemp()
    from app.ui.application import create_application

    app = create_application()
    from app.ui.chat.page import TICK_MS

    if not args.decode_only:
        for label, thinking, unfolded in (("", 0, False),
                                          (", after a folded thinking section", THINKING_TOKENS, False),
                                          (", after a thinking section unfolded", THINKING_TOKENS, True)):
            stall = bench_stall(app, thinking, unfolded)
            print(f"stream {stall['tokens']} scripted tokens{label} at {stall['rate']:.0f} tok/s into the "
                  f"transcript: heartbeat lateness worst {stall['worst_ms']:.1f} ms, p99 {stall['p99_ms']:.1f} ms "
                  f"(goal worst <= 50 ms); GUI-thread CPU per {1000 / TICK_MS:.0f} Hz render (before its paint): "
                  f"median {stall['tick_median_ms']:.1f} ms, longest {stall['tick_max_ms']:.1f} ms "
                  f"({stall['tick_max_phase']}); {stall['gc_count']} garbage collections, longest "
                  f"{stall['gc_max_ms']:.1f} ms"
                  + (f"; {stall['thinking_chars']:,} characters of thinking" if thinking else ""), flush=True)
        if args.stall_only:
            return
        opened = bench_open_500(app)
        print(f"open a 500-message conversation: {opened['open'] * 1000:.0f} ms (last 40 rendered; "
              f"goal <= 500 ms); rendering all 500: {opened['all_500'] * 1000:.0f} ms", flush=True)
        launch = bench_launch(args.runs)
        print(f"launch to usable window (best of {args.runs}): {launch['usable']:.2f} s from interpreter "
              f"start (goal <= 1.0 s); side panel built at {launch['built']:.2f} s; process wall "
              f"{launch['process_wall']:.2f} s", flush=True)
    if args.no_engine:
        return
    model = args.model
    if model is None:
        from tests.conftest import cached_models_dir, fetch_smollm2

        model = fetch_smollm2(cached_models_dir())
    # The app's default engine threads (half the logical CPUs, llama.cpp's own default,
    # which leaves the GUI a core), then every logical CPU: the engine's threads then
    # share the cores with the GUI thread, and any work it does shows in decode speed.
    choices = {"default": (None, "the app's default threads (half the logical CPUs)"),
               "all": (os.cpu_count() or 1, f"threads = all {os.cpu_count()} logical CPUs")}
    for threads, label in (choices[name] for name in args.decode_threads.split(",")):
        decode = bench_decode(app, model, args.decode_runs, threads, args.decode_workload)
        if args.decode_workload == "edit":
            low, high = decode["over_plain_range"]
            print(f"edit workload, {label}, {args.decode_runs} triples: through the GUI with prompt "
                  f"lookup {decode['gui']:.1f} tok/s, without {decode['gui_plain']:.1f} tok/s, "
                  f"EngineClient alone with it {decode['alone']:.1f} tok/s (medians); GUI with / "
                  f"without per triple: median {decode['over_plain']:.2f} ({low:.2f}-{high:.2f}); "
                  f"GUI / alone: median {decode['ratio']:.1%}", flush=True)
            continue
        print(f"decode {DECODE_TOKENS} tokens, {label}, {args.decode_runs} pairs: EngineClient alone "
              f"{decode['alone']:.1f} tok/s, through the GUI {decode['gui']:.1f} tok/s (medians); "
              f"GUI / alone per pair: median {decode['ratio']:.1%}, quartiles {decode['q1']:.1%}-"
              f"{decode['q3']:.1%} (goal >= 97%); this process's CPU per second of decoding: alone "
              f"{decode['cpu_alone']:.1%}, through the GUI {decode['cpu_gui']:.1%} of a core", flush=True)


if __name__ == "__main__":
    main()
