"""``quantdesk chat MODEL``: talk to a model in the terminal.

Replies stream as they are generated. Ctrl+C stops the current reply (the text so far
stays in the conversation); at the prompt, Ctrl+C, Ctrl+D or ``/exit`` quits and
``/reset`` starts a new conversation. The model runs in the engine process, so a crash
of llama.cpp ends one reply, not the session.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from app.commands.engine_args import add_load_arguments, load_settings_from_args
from app.core.errors import QuantDeskError

HELP = "Type a message. /exit quits, /reset starts a new conversation, Ctrl+C stops a reply."


def _stats_line(reply) -> str:
    s = reply.stats
    note = {"cancelled": ", stopped", "length": ", hit max tokens",
            "context_full": ", context full"}.get(s.stop_reason, "")
    return (f"[{s.completion_tokens} tokens, {s.decode_tokens_per_second:.1f} tok/s, first token "
            f"after {s.time_to_first_token:.2f} s, prompt {s.prompt_tokens_evaluated} new + "
            f"{s.prompt_tokens_reused} cached tokens{note}]")


def stream_reply(client, messages: list[dict], options, out=sys.stdout):
    """Print one reply as it streams; Ctrl+C (SIGINT) cancels it. Returns the reply."""
    reply = client.chat(messages, options)
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, lambda signum, frame: client.cancel())
    try:
        for delta in reply:
            out.write(delta)
            out.flush()
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        out.write("\n")
        out.flush()
    return reply


def run(args: argparse.Namespace) -> int:
    from models.engine import ChatOptions, EngineClient, EngineCrashed

    settings = load_settings_from_args(args)
    options = ChatOptions(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                          min_p=args.min_p, repeat_penalty=args.repeat_penalty, seed=args.seed,
                          max_tokens=args.max_tokens)
    start = [{"role": "system", "content": args.system}] if args.system else []
    with EngineClient() as client:
        print(f"Loading {args.model} ...", file=sys.stderr, flush=True)
        report = client.load(args.model, settings)
        print(report.summary(), file=sys.stderr)
        print(HELP, file=sys.stderr, flush=True)
        history = list(start)
        while True:
            try:
                line = input("> ")
            except (EOFError, KeyboardInterrupt):
                print()
                break
            text = line.strip()
            if not text:
                continue
            if text in ("/exit", "/quit"):
                break
            if text == "/reset":
                history = list(start)
                print("(new conversation)", file=sys.stderr)
                continue
            history.append({"role": "user", "content": text})
            try:
                reply = stream_reply(client, history, options)
            except EngineCrashed as exc:
                print(exc.user_message, file=sys.stderr)
                history.pop()  # the message is sent again, to a new engine, by the user
                continue
            except QuantDeskError as exc:
                print(exc.user_message, file=sys.stderr)
                history.pop()
                continue
            history.append({"role": "assistant", "content": reply.text})
            print(_stats_line(reply), file=sys.stderr, flush=True)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("chat", help="chat with a GGUF model in the terminal")
    add_load_arguments(parser)
    sampling = parser.add_argument_group("sampling")
    sampling.add_argument("--system", default=None, help="a system message to start with")
    sampling.add_argument("--temperature", type=float, default=0.7)
    sampling.add_argument("--top-p", type=float, default=0.95)
    sampling.add_argument("--top-k", type=int, default=40)
    sampling.add_argument("--min-p", type=float, default=0.05)
    sampling.add_argument("--repeat-penalty", type=float, default=1.0)
    sampling.add_argument("--seed", type=int, default=None)
    sampling.add_argument("--max-tokens", type=int, default=1024)
    parser.set_defaults(func=run)
