"""``quantdesk chat MODEL``: talk to a model in the terminal.

Replies stream as they are generated. Ctrl+C stops the current reply (the text so far
stays in the conversation); at the prompt, Ctrl+C, Ctrl+D or ``/exit`` quits and
``/reset`` starts a new conversation. The model runs in the engine process, so a crash
of llama.cpp ends one reply, not the session.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Optional

from app.commands.engine_args import add_load_arguments, load_settings_from_args
from models.foundation.errors import QuantDeskError

log = logging.getLogger(__name__)

HELP = ("Type a message. /image FILE attaches a picture to the next one, /exit quits, /reset "
        "starts a new conversation, Ctrl+C stops a reply.")


def read_image(path: Path) -> dict:
    """An image file as a message content part, or a sentence saying why not."""
    from models.images import image_part

    try:
        data = Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise QuantDeskError(f"Could not read the image {path}: {exc.strerror}.",
                             "Give the path of a PNG, JPEG, GIF or BMP file.") from None
    return image_part(data)


def user_message(text: str, images: list[dict]) -> dict:
    """The user's message: text, or the pictures first and the text after them."""
    if not images:
        return {"role": "user", "content": text}
    return {"role": "user", "content": images + [{"type": "text", "text": text}]}


def _stats_line(reply) -> str:
    s = reply.stats
    note = {"cancelled": ", stopped", "length": ", hit max tokens",
            "context_full": ", context full"}.get(s.stop_reason, "")
    if s.draft_tokens:
        note += (f", {s.accepted_tokens}/{s.draft_tokens} drafted tokens accepted, "
                 f"{s.tokens_per_pass:.2f} tokens per pass")
    if s.images:
        note += f", {s.images_encoded} of {s.images} images encoded ({s.image_encode_seconds:.2f} s)"
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
    import json

    if args.schema is not None:
        text = _read_text(args.schema, "JSON schema")
        try:
            schema = json.loads(text)
        except json.JSONDecodeError as exc:
            raise QuantDeskError(f"The JSON schema file {args.schema} is not valid JSON "
                                 f"(line {exc.lineno}, column {exc.colno}: {exc.msg}).",
                                 "Fix the file, or check it in a JSON validator.") from None
        from models.structured import constraint_for_schema

        # Generating anyway: say what the grammar does not enforce (each reply is checked),
        # and where it is narrower than the schema (keys it does not list).
        constraint = constraint_for_schema(schema, allow_unsupported=args.allow_unsupported)
        for problem in constraint.not_enforced:
            print(f"Note: not enforced while generating: {problem}", file=sys.stderr)
        for note in constraint.restrictions:
            print(f"Note: at {note.pointer or '/'}, {note.message}", file=sys.stderr)
        return dict(response_format="json_schema", schema=schema,
                    allow_unsupported=args.allow_unsupported)
    if args.grammar is not None:
        return dict(response_format="grammar", grammar=_read_text(args.grammar, "grammar"))
    return dict(response_format="json" if args.json else "text")


def stream_reply(client, messages: list[dict], options, out=sys.stdout,
                 conversation_id: Optional[str] = None):
    """Print one reply as it streams; Ctrl+C (SIGINT) cancels it. Returns the reply."""
    import signal
    import threading

    reply = client.chat(messages, options, conversation_id=conversation_id)
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


class _SavedChat:
    """The conversation being typed, saved turn by turn in the conversation store.

    Stored at its first reply (a session with no reply leaves nothing behind), under the
    id its replies already used as the engine's KV-session id, so ``--resume`` reopens it
    without reading it again.
    """

    def __init__(self, store, model: str, system: Optional[str], resume: Optional[str]) -> None:
        from app.core.conversations import new_conversation_id

        self.store, self.model, self._new_id = store, model, new_conversation_id
        self.start = [{"role": "system", "content": system}] if system else []
        self.stored = False
        self.id: Optional[str] = new_conversation_id() if store is not None else None
        self.history = list(self.start)
        if resume is not None and store is not None:
            conversation = store.get(resume)
            self.id, self.history, self.stored = conversation.id, conversation.messages, True
            turns = sum(1 for m in self.history if m["role"] == "user")
            print(f"(reopened \"{conversation.title}\": {turns} messages from you)", file=sys.stderr)
            last = next((m for m in reversed(self.history) if m["role"] == "assistant"), None)
            if last is not None:
                print(last["content"])

    def record(self, user: dict, reply, opened: bool = False) -> None:
        """Store a finished turn (a stopped reply keeps what it had). A reasoning model's
        thinking is stored apart from its answer (``opened``: its prompt opened the
        thinking), and only the answer goes back to the model in later turns."""
        from models.engine.reasoning import split_reasoning

        reasoning, answer = split_reasoning(reply.text, opened)
        self.history += [user, {"role": "assistant", "content": answer}]
        if self.store is None:
            return
        new = []
        if not self.stored:
            self.store.create(model=self.model, conversation_id=self.id)
            self.stored, new = True, list(self.start)
            print(f"(saved as conversation {self.id[:8]}; reopen it with --resume {self.id[:8]})",
                  file=sys.stderr)
        self.store.add_messages(self.id, new + [user, {"role": "assistant", "content": answer,
                                                       "reasoning": reasoning,
                                                       "stats": reply.stats.to_dict()}],
                                model=self.model)

    def reset(self) -> None:
        self.history, self.stored = list(self.start), False
        self.id = self._new_id() if self.store is not None else None


def run(args: argparse.Namespace) -> int:
    from app.core.console import ConsoleProgress
    from app.core.conversations import ConversationStore
    from models.engine import ChatOptions, EngineClient
    from models.engine.options import validate_options
    from models.engine.reasoning import reply_opens_reasoning

    settings = load_settings_from_args(args)
    if settings.mmproj is None:  # an image-text model reads images with the mmproj beside it
        from dataclasses import replace

        from models.projector import find_projector

        projector = find_projector(args.model)
        settings = replace(settings, mmproj=str(projector) if projector else None)
    attached = [read_image(path) for path in args.image or ()]  # a bad file stops here
    options = ChatOptions(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                          min_p=args.min_p, repeat_penalty=args.repeat_penalty, seed=args.seed,
                          max_tokens=args.max_tokens, speculative=args.speculative,
                          fast_forward=not args.no_fast_forward, **output_options(args))
    validate_options(options)  # a schema the grammar cannot enforce is refused before loading
    if args.no_save and args.resume:
        raise QuantDeskError("--resume and --no-save cannot be used together.",
                             "Leave out --no-save to continue a saved conversation.")
    # The absolute path: the form the GUI's model picker and the Library know, so the
    # window reopens the conversation with its model from any working directory.
    model_path = str(Path(args.model).expanduser().resolve())
    chat = _SavedChat(None if args.no_save else ConversationStore(), model_path,
                      args.system, args.resume)
    with EngineClient() as client:
        print(f"Loading {args.model} ...", file=sys.stderr, flush=True)
        report = client.load(args.model, settings, progress=ConsoleProgress())
        print(report.summary(), file=sys.stderr)
        log.info("model loaded: %s", report.details())
        print(HELP, file=sys.stderr, flush=True)
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
                chat.reset()
                print("(new conversation)", file=sys.stderr)
                continue
            if text.startswith("/image "):
                try:
                    attached.append(read_image(Path(text[len("/image "):].strip())))
                    print(f"(picture {len(attached)} will go with your next message)", file=sys.stderr)
                except QuantDeskError as exc:
                    print(exc.user_message, file=sys.stderr)
                continue
            user, attached = user_message(text, attached), []
            opened = options.response_format == "text" and reply_opens_reasoning(
                report.model.chat_template, chat.history + [user], options.thinking)
            try:
                reply = stream_reply(client, chat.history + [user], options, conversation_id=chat.id)
            except QuantDeskError as exc:  # EngineCrashed too: the message can be sent again
                print(exc.user_message, file=sys.stderr)
                continue
            print(_stats_line(reply), file=sys.stderr, flush=True)
            try:
                chat.record(user, reply, opened)
            except QuantDeskError as exc:  # the turn stays in this session's memory
                print(f"This turn was not saved: {exc.user_message}", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("chat", help="chat with a GGUF model in the terminal")
    add_load_arguments(parser)
    sampling = parser.add_argument_group("sampling")
    sampling.add_argument("--system", default=None, help="a system message to start with")
    sampling.add_argument("--image", type=Path, action="append", metavar="FILE",
                          help="a picture to send with your first message (repeat for several; "
                               "the model needs its vision encoder, see --mmproj)")
    saving = parser.add_argument_group("saved conversations")
    saving.add_argument("--resume", metavar="ID", default=None,
                        help="continue a saved conversation (its id or first characters, "
                             "from `quantdesk chats`); its saved state makes it instant")
    saving.add_argument("--no-save", action="store_true", help="do not save this conversation")
    sampling.add_argument("--temperature", type=float, default=0.7)
    sampling.add_argument("--top-p", type=float, default=0.95)
    sampling.add_argument("--top-k", type=int, default=40)
    sampling.add_argument("--min-p", type=float, default=0.05)
    sampling.add_argument("--repeat-penalty", type=float, default=1.0)
    sampling.add_argument("--seed", type=int, default=None)
    sampling.add_argument("--max-tokens", type=int, default=1024)
    sampling.add_argument("--speculative", default="prompt_lookup",
                          choices=["off", "prompt_lookup", "draft_model"],
                          help="prompt_lookup (default): guess tokens copied from the "
                               "conversation, drafting less where that fails; draft_model: have "
                               "--draft-model guess them")
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
