"""The Chat page's messages and replies: sending (or sending an edited message as a new
branch), regenerating, streaming the reply into the transcript at a bounded rate,
storing each turn, stopping, and the actions on a message (edit, delete, versions).

A mixin of :class:`~app.ui.chat.page.ChatPage` over its ``engine``, ``transcript``,
``composer`` and ``store``.
"""

from __future__ import annotations

import time
from typing import Optional

from app.ui.chat.engine import ReplyOutcome
from models.foundation.errors import QuantDeskError

# The GUI renders streamed text when it arrives, at most 20 times a second: smooth for
# reading, and the GUI thread's share of a core while a reply streams stays ~2.5% (at 30 Hz
# it was ~4%), which the engine feels when its threads use every core (bench_chat_gui:
# decode through the GUI vs alone).
TICK_MS = 50


class Replies:
    """Sending, streaming, storing and acting on messages."""

    def options(self):
        """The ChatOptions on the panel. Raises QuantDeskError for a bad schema."""
        from dataclasses import replace

        options = self.panel.sampling.options()
        return replace(options, thinking=self.panel.sampling.thinking_choice(),
                       **self.panel.json_mode.output_fields())

    def _history(self, before_seq: Optional[int] = None) -> list[dict]:
        """System prompt and the branch's messages (up to, not including, ``before_seq``).
        Past thinking goes back to the model only when its template reads it back."""
        messages = []
        system = self.panel.system_prompt.toPlainText().strip()
        if system and not any(m.role == "system" for m in self.branch):
            messages.append({"role": "system", "content": system})
        thinking = self.engine.thinking
        for message in self.branch:
            if message.seq == before_seq:
                break
            messages.append(thinking.history_message(message.role, message.message["content"],
                                                     message.reasoning))
        return messages

    def _refuse_while_streaming(self) -> bool:
        if self.engine.streaming:
            self.composer.show_note("A reply is still being written — press Esc to stop it first.")
            self.focus_message_box()
            return True
        return False

    def send(self) -> None:
        """Send the message box's text (as a new branch when a message is being edited)."""
        text = self.box.toPlainText().strip()
        pictures = self.composer.attachments.images
        if not (text or pictures) or self._refuse_while_streaming():
            return
        self.ensure_started()
        if self.engine.loading and not self.engine.ready:
            return self.composer.show_note("The model is still loading; send again when it is ready.")
        editing = self.editing
        parts = [{"type": "image", "data": p} for p in pictures] + [{"type": "text", "text": text}] \
            if pictures else None
        user = {"role": "user", "content": parts if parts else text}
        parent = editing.parent if editing is not None else None
        history = self._history(editing.seq if editing is not None else None)
        if not self._start_reply(history + [user], parent_for_reply=None):
            return
        if editing is not None:  # the new branch starts where the edited message was
            self.branch = self.branch[:self._index_of(editing.seq)]
        user_seq = self._store_messages([user], parent)
        from app.core.conversations import ROOT, BranchMessage

        message = BranchMessage(user_seq if user_seq is not None else -2 - len(self.branch),
                                parent if parent is not None else
                                (self.branch[-1].seq if self.branch else ROOT),
                                "user", text, 0.0, None, 1, [], parts=parts)
        self._reply_parent = message.seq
        if self.stored:
            self.branch = self.store.branch(self.conversation_id)
        else:
            self.branch.append(message)
        self.box.clear()
        self.composer.attachments.take()
        self._cancel_edit()
        if editing is not None:
            self.transcript.set_messages(self.branch)
        else:
            self.transcript.append_message(self.branch[-1])
        self.transcript.begin_reply()
        self.conversations.refresh()
        self.sidebar.select(self.conversation_id)

    def _index_of(self, seq: int) -> int:
        return next((i for i, m in enumerate(self.branch) if m.seq == seq), len(self.branch))

    def regenerate(self, seq: int) -> None:
        """Answer the same question again; the old answer stays as a version."""
        if self._refuse_while_streaming():
            return
        index = self._index_of(seq)
        if index >= len(self.branch):
            return
        parent = self.branch[index].parent
        history = self._history(seq)
        if not self._start_reply(history, parent_for_reply=parent):
            return
        self.branch = self.branch[:index]
        self.transcript.set_messages(self.branch)
        self.transcript.begin_reply()

    def _start_reply(self, messages: list[dict], parent_for_reply: Optional[int]) -> bool:
        try:
            options = self.options()
            self.engine.start_reply(messages, options, self.conversation_id)
        except QuantDeskError as exc:
            self.composer.show_note(exc.user_message)
            self.focus_message_box()
            return False
        self.composer.show_note("")
        self.composer.set_streaming(True)
        self._reply_parent = parent_for_reply
        self._reply_model = str(self.engine.model_path) if self.engine.model_path else None
        self._clear_model_notice()  # the chat goes on with the model that is loaded
        self.focus_message_box()
        return True

    def _store_messages(self, messages: list[dict], parent: Optional[int],
                        model: Optional[str] = None) -> Optional[int]:
        """Store messages (creating the conversation at its first); the last one's seq.
        ``model``: the model that wrote the reply among them, recorded as the
        conversation's model (the one reopening it brings back)."""
        if self.store is None:
            return None
        try:
            if not self.stored:
                loaded = str(self.engine.model_path) if self.engine.model_path else None
                self.store.create(model=loaded, conversation_id=self.conversation_id)
                self.stored = True
                self.store.set_settings(self.conversation_id, self.conversation_settings())
            return self.store.add_messages(self.conversation_id, messages, parent, model)[-1]
        except QuantDeskError as exc:
            self.banner.show_message(f"This message was not saved: {exc.user_message}", "error")
            return None

    def _text_arrived(self) -> None:
        """Render the new text now, or when TICK_MS have passed since the last render."""
        wait_ms = TICK_MS - 1000 * (time.perf_counter() - self._last_take)
        if wait_ms <= 0:
            self._take_text()
        elif not self._tick.isActive():
            self._tick.start(int(wait_ms) + 1)

    def _take_text(self) -> None:
        self._last_take = time.perf_counter()
        reasoning, text = self.engine.take_text()
        if reasoning:
            self.transcript.add_reasoning(reasoning)
        if text:
            if self.transcript.thinking:
                self.transcript.end_reasoning(self.engine.parts.seconds)
            self.transcript.add_text(text)

    def _reply_done(self, outcome: ReplyOutcome) -> None:
        from app.core.conversations import BranchMessage

        self._tick.stop()
        self._take_text()
        self.composer.set_streaming(False)
        text, reasoning, stats = outcome.text, outcome.reasoning, outcome.stats()
        parent = self._reply_parent
        if parent is None and self.branch:
            parent = self.branch[-1].seq
        seq = self._store_messages([{"role": "assistant", "content": text, "reasoning": reasoning,
                                     "stats": stats}], parent, self._reply_model)
        if self.stored and seq is not None:
            self.branch = self.store.branch(self.conversation_id)
            message = self.branch[-1]
        else:
            message = BranchMessage(-2 - len(self.branch), parent if parent is not None else -1,
                                    "assistant", text, 0.0, stats, 1, [], reasoning)
            self.branch.append(message)
        self.transcript.finish_reply(message)
        self.conversations.refresh()
        self.sidebar.select(self.conversation_id)
        if outcome.crashed:
            self.banner.show_message(outcome.error.user_message, "error", "Reload model",
                                     self.reload_model)
        elif outcome.error is not None:
            self.banner.show_message(outcome.error.user_message, "error")
        self.focus_message_box()

    def stop(self) -> None:
        """Stop the reply (Stop button, Esc); the text so far is kept and marked."""
        self.engine.stop()
        self.focus_message_box()

    def escape(self) -> None:
        """Esc: stop a reply; else leave editing; else close the find bar."""
        if self.engine.streaming:
            self.stop()
        elif self.editing is not None:
            self._cancel_edit()
        elif self.find_bar.isVisible():
            self.find_bar.hide()
        self.focus_message_box()

    def _message_action(self, name: str, seq: int) -> None:
        if name == "earlier":
            return self._reload_branch(limit_all=True)
        if name in ("copy",):
            return
        if name == "regenerate":
            return self.regenerate(seq)
        if self._refuse_while_streaming():
            return
        if name == "edit":
            message = self.branch[self._index_of(seq)]
            self.editing = message
            self.box.setPlainText(message.content)
            self.composer.attachments.replace(message.images)  # kept unless removed
            pictures = " Click a picture to remove it." if message.images else ""
            self.composer.show_note("Editing your message: Enter sends it as a new branch "
                                    f"(the old one stays under ‹ ›); Esc cancels.{pictures}")
            self.focus_message_box()
        elif name == "delete" and self.stored:
            self.store.hide(self.conversation_id, seq)
            self._reload_branch()
        elif name == "version" and self.stored:
            self.select_version(seq)

    def select_version(self, seq: int) -> None:
        """Show the version (and the branch after it) of message ``seq``."""
        self.store.select(self.conversation_id, seq)
        self._reload_branch()

    def _cancel_edit(self) -> None:
        if self.editing is not None:
            self.editing = None
            self.box.clear()
            self.composer.attachments.take()
        self.composer.show_note("")
