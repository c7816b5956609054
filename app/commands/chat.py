"""``quantdesk chat MODEL``: talk to a model in the terminal.

Replies stream as they are generated. Ctrl+C stops the current reply (the text so far
stays in the conversation); at the prompt, Ctrl+C, Ctrl+D or ``/exit`` quits and
``/reset`` starts a new conversation. The model runs in the engine process, so a crash
of llama.cpp ends one reply, not the session.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

from app.commands.engine_args import add_load_arguments, load_settings_from_args
from app.core.errors import QuantDeskError

HELP = "Type a message. /exit quits, /reset starts a new conversation, Ctrl+C stops a reply."


def _stats_line(reply) -> str:
    s = reply.stats
    note = {"cancelled": ", stopped", "length": ", hit max tokens",
            "context_full": ", context full"}.get(s.stop_reason, "")
    if s.draft_tokens:
        note += (f", {s.accepted_tokens}/{s.draft_tokens} drafted tokens accepted, "
                 f"{s.tokens_per_pass:.2f} tokens per pass")
    if s.valid is not None:
        note += f", {s.forced_tokens} forced"
        note += ", valid" if s.valid else f"; NOT VALID: {s.validation_error}"
        if s.closed_at_budget:
            note += " (closed at the token limit: the model had not finished)"
    return (f"[{s.completion_tokens} tokens, {s.decode_tokens_per_second:.1f} tok/s, first token "
            f"after {s.time_to_first_token:.2f} s, prompt {s.prompt_tokens_evaluated} new + "
            f"{s.prompt_tokens_reused} cached tokens{note}]")


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise QuantDeskError(f"Could not read the {what} file {path}: {exc}.",
                             f"Give the path of a UTF-8 text file with the {what}.") from None


def output_options(args: argparse.Namespace) -> dict:
    """ChatOptions fields for --json / --schema / --grammar (at most one of them)."""
    if args.schema is not None:
        text = _read_text(args.schema, "JSON schema")
        try:
            schema = json.loads(text)
        except json.JSONDecodeError as exc:
            raise QuantDeskError(f"The JSON schema file {args.schema} is not valid JSON "
                                 f"(line {exc.lineno}, column {exc.colno}: {exc.msg}).",
                                 "Fix the file, or check it in a JSON validator.") from None
        return dict(response_format="json_schema", schema=schema,
                    allow_unsupported=args.allow_unsupported)
    if args.grammar is not None:
        return dict(response_format="grammar", grammar=_read_text(args.grammar, "grammar"))
    return dict(response_format="json" if args.json else "text")


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
    from models.engine.options import validate_options

    settings = load_settings_from_args(args)
    options = ChatOptions(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                          min_p=args.min_p, repeat_penalty=args.repeat_penalty, seed=args.seed,
                          max_tokens=args.max_tokens, speculative=args.speculative,
                          fast_forward=not args.no_fast_forward, **output_options(args))
    validate_options(options)  # a schema the grammar cannot enforce is refused before loading
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
    sampling.add_argument("--speculative", default="off",
                          choices=["off", "prompt_lookup", "draft_model"],
                          help="prompt_lookup: guess tokens copied from the conversation; "
                               "draft_model: have --draft-model guess them")
    output = parser.add_argument_group("structured output")
    choice = output.add_mutually_exclusive_group()
    choice.add_argument("--json", action="store_true", help="replies are any valid JSON")
    choice.add_argument("--schema", type=Path, default=None,
                        help="replies are JSON matching this JSON Schema file")
    choice.add_argument("--grammar", type=Path, default=None,
                        help="replies follow this GBNF grammar file (rule root)")
    output.add_argument("--allow-unsupported", action="store_true",
                        help="generate even if the schema has features the grammar cannot "
                             "enforce (replies are still validated)")
    output.add_argument("--no-fast-forward", action="store_true",
                        help="sample every token, even the ones the grammar forces")
    parser.set_defaults(func=run)
