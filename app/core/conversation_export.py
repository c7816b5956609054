"""A saved conversation as a Markdown or JSON file (File ▸ Export, the sidebar's menu).

Both hold the current branch, as the chat shows it. JSON also carries each reply's
stats and which version of how many a message is, so nothing seen on screen is lost.
A reasoning model's thinking is its own part: a folded ``<details>`` block before the
answer in Markdown (GitHub and most viewers show it closed, as the chat does), a
``reasoning`` field beside ``content`` in JSON. A message's pictures go with it as
``data:`` URIs (Markdown images, an ``images`` list in JSON), so the file stands alone.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

from app.core.conversations import ConversationStore
from models.engine.reasoning import thought_for
from models.foundation.errors import QuantDeskError
from models.foundation.jobs import atomic_output

FORMATS = ("markdown", "json")
_ROLE_NAMES = {"system": "System", "user": "You", "assistant": "Assistant", "tool": "Tool"}


def conversation_markdown(store: ConversationStore, conversation_id: str) -> str:
    """The conversation as Markdown: a title, then one section per message."""
    conversation = store.get(conversation_id)
    lines = [f"# {conversation.title or 'Conversation'}", ""]
    if conversation.model:
        lines += [f"*Model: {Path(conversation.model).name}*", ""]
    for message in store.branch(conversation.id):
        lines += [f"## {_ROLE_NAMES.get(message.role, message.role)}", ""]
        if message.reasoning:
            # Blank lines around the body: Markdown inside <details> is rendered only then.
            seconds = (message.stats or {}).get("reasoning_seconds")
            lines += [f"<details><summary>{thought_for(seconds)}</summary>", "",
                      message.reasoning, "", "</details>", ""]
        lines += [message.content, ""]
        lines += [f"![image {n}]({uri})" for n, uri in enumerate(_image_uris(message), start=1)]
        lines += [""] if message.images else []
    return "\n".join(lines)


def _image_uris(message) -> list[str]:
    from models.images import check_image

    return [f"data:image/{check_image(data).format.lower()};base64,{base64.b64encode(data).decode()}"
            for data in message.images]


def conversation_json(store: ConversationStore, conversation_id: str) -> dict:
    """The conversation as plain JSON values."""
    conversation = store.get(conversation_id)
    return {
        "id": conversation.id, "title": conversation.title, "model": conversation.model,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(conversation.created)),
        "messages": [{"role": m.role, "content": m.content, "stats": m.stats,
                      "version": m.version, "versions": len(m.versions),
                      **({"reasoning": m.reasoning} if m.reasoning else {}),
                      **({"images": _image_uris(m)} if m.images else {})}
                     for m in store.branch(conversation.id)],
    }


def export_conversation(store: ConversationStore, conversation_id: str, path: Path,
                        fmt: str) -> Path:
    """Write the conversation to ``path`` (atomically) as ``markdown`` or ``json``.

    Raises:
        QuantDeskError: Unknown format, or the file could not be written.
    """
    if fmt not in FORMATS:
        raise QuantDeskError(f"Conversations export as {' or '.join(FORMATS)}, not {fmt!r}.")
    text = conversation_markdown(store, conversation_id) if fmt == "markdown" else \
        json.dumps(conversation_json(store, conversation_id), indent=2, ensure_ascii=False)
    path = Path(path)
    try:
        with atomic_output(path) as tmp:
            Path(tmp).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise QuantDeskError(f"Could not write {path}: {exc.strerror}.",
                             "Choose a folder you can write to.") from None
    return path
