"""``quantdesk chats``: the saved conversations — list, show, rename, delete.

``quantdesk chat MODEL`` saves every conversation; ``quantdesk chat MODEL --resume ID``
continues one. Ids may be shortened to their first characters, as listed here.
Deleting a conversation deletes its saved KV-cache state too.
"""

from __future__ import annotations

import argparse
import time


def _when(timestamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))


def run(args: argparse.Namespace) -> int:
    from app.core.conversations import ConversationStore
    from models.foundation.errors import QuantDeskError

    store = ConversationStore()
    if args.action == "list":
        conversations = store.list()
        if not conversations:
            print("No saved conversations yet: `quantdesk chat MODEL` saves them.")
        for c in conversations:
            print(f"{c.id[:8]}  {_when(c.updated)}  {c.message_count:>4} msgs  {c.title}")
        return 0
    if args.id is None:
        raise QuantDeskError(f"`quantdesk chats {args.action}` needs a conversation id.",
                             "Run `quantdesk chats` to list them, then give an id (its first characters will do).")
    if args.action == "rename" and not " ".join(args.title).strip():
        raise QuantDeskError("`quantdesk chats rename` needs the new title.",
                             "Write it after the id, e.g. quantdesk chats rename 3f2a9c1b Trip plans.")
    if args.action == "show":
        conversation = store.get(args.id)
        print(f"# {conversation.title} ({conversation.id}, {conversation.model or 'no model'})")
        for message in store.branch(conversation.id):  # the current branch, as the GUI shows it
            version = f", version {message.version}/{len(message.versions)}" \
                if len(message.versions) > 1 else ""
            if message.reasoning:  # a reasoning model's thinking, before its answer
                print(f"\n[{message.role} thinking{version}]\n{message.reasoning}")
            print(f"\n[{message.role}{version}]\n{message.content}")
    elif args.action == "rename":
        store.rename(args.id, " ".join(args.title))
    elif args.action == "rm":
        full_id = store.resolve(args.id)
        store.delete(full_id)
        print(f"Deleted conversation {full_id[:8]} and its saved state.")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("chats", help="list, show, rename or delete saved conversations")
    parser.add_argument("action", nargs="?", default="list", choices=["list", "show", "rename", "rm"])
    parser.add_argument("id", nargs="?", default=None, help="conversation id (its first characters will do)")
    parser.add_argument("title", nargs="*", help="the new title (rename)")
    parser.set_defaults(func=run)
