"""The transcript: one QTextBrowser holding the whole conversation as a rich-text document.

Why one document and not a widget per message: a 500-message conversation opens in one
pass of appends, selection and Ctrl+F work across messages, and Qt lays out only the
blocks that change. Finished messages are rendered once (Markdown, highlighted code);
the reply being streamed is appended in two parts — its finished segments, rendered
when they close, and the unfinished tail after them, which alone is replaced as new text
arrives (:class:`~app.ui.chat.markdown.StableScanner`); while the tail only grows at its
end, the new text is just inserted (:func:`~app.ui.chat.markdown.tail_growth`). Per tick
the work is bounded by the new text and, at most, the tail — never by the whole reply.

A reasoning model's thinking is a section of its own above the answer, folded by
default: one quiet line, "▸ Thinking…" while it streams and "▸ Thought for 12 s" once the
answer starts, that unfolds (and folds) when clicked, showing the thinking as plain text
in a quiet colour. Folded, streamed thinking costs nothing per tick; unfolded, it is
appended like the plain tail. The answer below is rendered as usual, from its own
Markdown: nothing in the thinking (an unclosed code fence, say) reaches it. Copy copies
the answer; "Copy thinking" on the unfolded section copies the thinking.

Actions are links in the document (``qd:ACTION:SEQ``): copy, edit, regenerate, delete,
and ‹ › between versions; :attr:`TranscriptView.action` carries them to the page.
Folding and copying the thinking are the view's own (``qd:think:SEQ``,
``qd:copythink:SEQ``). Other links open in the browser.
"""

from __future__ import annotations

import hashlib
import html
import json
from typing import Optional

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import (QColor, QGuiApplication, QImage, QPalette, QTextBlockFormat, QTextCharFormat,
                           QTextCursor, QTextDocument)
from PySide6.QtWidgets import QTextBrowser

from app.ui.chat.facts import facts_line
from app.ui.chat.markdown import (CODE_ANCHOR, DocumentWriter, Segment, StableScanner,
                                  split_segments, tail_growth)
from models.engine.reasoning import thought_for

SHOWN_AT_FIRST = 40  # messages rendered when a conversation opens; earlier ones on request
ROLE_NAMES = {"system": "System", "user": "You", "assistant": "Assistant", "tool": "Tool"}
STREAMING = -1  # the key of the reply being streamed, for folding its thinking
REASONING_INDENT = 14  # pixels the unfolded thinking is set in from the answer
PICTURE_SIZE = 160  # pixels a side of a message's pictures in the transcript


def pretty_json(text: str) -> str:
    """A JSON reply indented for reading (the text itself when it does not parse)."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        return text


class TranscriptView(QTextBrowser):
    """The conversation on screen. Emits :attr:`action` ``(name, seq)`` for its links."""

    action = Signal(str, int)
    link_failed = Signal(str)  # a link could not be opened: the sentence for the banner

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setObjectName("transcript")
        self.setAccessibleName("Transcript")
        self.setOpenLinks(False)
        self.setUndoRedoEnabled(False)  # an undo stack of every streamed token is waste
        self.anchorClicked.connect(self._on_anchor)
        self._code: dict[int, str] = {}
        self._contents: dict[int, str] = {}
        self._writer: Optional[DocumentWriter] = None
        self._reply_start = 0
        self._tail_start = 0
        self._scanner = StableScanner()
        self._tail: list[Segment] = []  # the tail's segments as shown
        self._streamed = ""
        self._reasoning: dict[int, str] = {}  # thinking by seq, for unfolding and copying
        self._unfolded: set[int] = set()  # messages whose thinking is shown
        self._shown: tuple[list, str, Optional[int]] = ([], "", None)  # for re-rendering
        self._streaming = False
        self._streamed_reasoning = ""
        self._thought: Optional[str] = None  # "Thought for 12 s" once the thinking ended
        self._stream_unfolded = False  # the streaming reply's thinking is shown
        self._think_shown = False  # the streaming reply's thinking section is on screen
        self._think_line_at = 0  # where that section's line starts
        self.document().setDocumentMargin(16)

    # -- building -----------------------------------------------------------------

    def warm_up(self) -> None:
        """Render and paint a small sample once, off screen, before any reply: Qt's first
        Markdown parse and the first glyphs of each font cost ~30 ms, a stall otherwise
        seen at the start of the first reply."""
        from PySide6.QtGui import QImage, QPainter, QTextDocument

        from app.ui.chat.markdown import DocumentWriter

        document = QTextDocument()
        document.setDefaultFont(self.document().defaultFont())
        writer = DocumentWriter(document, self._dark(), {})
        writer.append(writer.cursor_at_end(), "# A\n\n## B\n\n**b** *i* `c` [l](https://a.b)\n\n"
                                              "| a | b |\n|---|---|\n| 1 | 2 |\n\n```python\nx = 1\n```\n")
        document.setTextWidth(400)
        image = QImage(400, 300, QImage.Format.Format_ARGB32)
        painter = QPainter(image)
        document.drawContents(painter)
        painter.end()

    def _dark(self) -> bool:
        return self.palette().color(QPalette.ColorRole.Base).lightness() < 128

    def _quiet(self) -> str:
        return self.palette().color(QPalette.ColorRole.PlaceholderText).name()

    def writer(self) -> DocumentWriter:
        if self._writer is None or self._writer.dark != self._dark():
            self._writer = DocumentWriter(self.document(), self._dark(), self._code)
        return self._writer

    def clear_messages(self) -> None:
        """An empty transcript."""
        self.clear()
        self._code.clear()
        self._contents.clear()
        self._reasoning.clear()
        self._shown = ([], "", None)
        self._streamed = ""

    def set_messages(self, messages: list, notice: str = "",
                     limit: Optional[int] = SHOWN_AT_FIRST) -> None:
        """Show a branch (:class:`~app.core.conversations.BranchMessage` list) from scratch.

        Only the last ``limit`` messages are rendered, behind a "Show earlier messages"
        link, so a long conversation opens at once; ``None`` renders them all.
        """
        self.setUpdatesEnabled(False)
        try:
            self.clear_messages()
            self._shown = (list(messages), notice, limit)
            cursor = self.writer().cursor_at_end()
            cursor.beginEditBlock()  # one layout pass for the whole conversation
            if limit is not None and len(messages) > limit:
                hidden = len(messages) - limit
                messages = messages[hidden:]
                cursor.insertHtml(f'<a href="qd:earlier:0">Show {hidden} earlier '
                                  f'message{"s" if hidden > 1 else ""}</a>')
            for message in messages:
                self._append_message(cursor, message)
            if notice:
                self._append_note(cursor, notice)
            cursor.endEditBlock()
        finally:
            self.setUpdatesEnabled(True)
        self.scroll_to_bottom()

    def _header(self, cursor: QTextCursor, role: str, seq: Optional[int] = None,
                versions: Optional[list[int]] = None, version: int = 1) -> None:
        links = []
        if seq is not None:
            links.append(f'<a href="qd:copy:{seq}">Copy</a>')
            if role == "user":
                links.append(f'<a href="qd:edit:{seq}">Edit</a>')
            if role == "assistant":
                links.append(f'<a href="qd:regenerate:{seq}">Regenerate</a>')
            links.append(f'<a href="qd:delete:{seq}">Delete</a>')
            if versions and len(versions) > 1:
                index = version - 1
                back = f'<a href="qd:version:{versions[index - 1]}">‹</a>' if index > 0 else "‹"
                ahead = f'<a href="qd:version:{versions[index + 1]}">›</a>' \
                    if index + 1 < len(versions) else "›"
                links.append(f"{back} {version}/{len(versions)} {ahead}")
        writer = self.writer()
        writer.new_block(cursor, top_margin=18)
        cursor.insertHtml(f'<b>{ROLE_NAMES.get(role, role)}</b>'
                          f'&nbsp;&nbsp;&nbsp;<span style="font-size:small; color:{self._quiet()}">'
                          f'{" &nbsp;·&nbsp; ".join(links)}</span>')

    def _append_note(self, cursor: QTextCursor, text: str, colour: Optional[str] = None) -> None:
        self.writer().new_block(cursor)
        cursor.insertHtml(f'<span style="font-size:small; color:{colour or self._quiet()}">'
                          f"{html.escape(text)}</span>")

    def append_message(self, message) -> None:
        """Add one finished message at the end."""
        self._shown[0].append(message)
        follow = self.at_bottom()
        self._append_message(self.writer().cursor_at_end(), message)
        if follow:
            self.scroll_to_bottom()

    def _append_message(self, cursor: QTextCursor, message) -> None:
        self._contents[message.seq] = message.content
        self._header(cursor, message.role, message.seq, message.versions, message.version)
        stats = message.stats or {}
        writer = self.writer()
        reasoning = getattr(message, "reasoning", "")
        if reasoning:
            self._reasoning[message.seq] = reasoning
            self._append_reasoning(cursor, message.seq, thought_for(stats.get("reasoning_seconds")),
                                   reasoning if message.seq in self._unfolded else None)
        if stats.get("valid") is not None:
            self._append_json(cursor, message.content, stats)
        elif message.role == "assistant":
            writer.append(cursor, message.content)
        else:  # what a person typed is shown as typed
            self._append_pictures(cursor, getattr(message, "images", None) or [])
            writer.append_plain(cursor, message.content)
        line = facts_line(stats)
        if line:
            self._append_note(cursor, line)

    def _append_pictures(self, cursor: QTextCursor, pictures: list[bytes]) -> None:
        """A message's pictures as thumbnails (the document keeps each image once)."""
        if not pictures:
            return
        document = self.document()
        tags = []
        for data in pictures:
            name = QUrl("qdimage:" + hashlib.sha256(data).hexdigest())
            if document.resource(QTextDocument.ResourceType.ImageResource, name) is None:
                image = QImage.fromData(data)
                if image.isNull():
                    continue
                document.addResource(QTextDocument.ResourceType.ImageResource, name,
                                     image.scaled(PICTURE_SIZE, PICTURE_SIZE, Qt.AspectRatioMode.KeepAspectRatio,
                                                  Qt.TransformationMode.SmoothTransformation))
            tags.append(f'<img src="{name.toString()}"> ')
        self.writer().new_block(cursor)
        cursor.insertHtml("".join(tags))

    # -- thinking -------------------------------------------------------------------

    def _reasoning_line(self, cursor: QTextCursor, key: int, title: str, unfolded: bool) -> None:
        """The section's one line: the fold link, and "Copy thinking" when unfolded."""
        line = (f'<a href="qd:think:{key}" style="text-decoration:none"><span style="color:'
                f'{self._thinking_colour().name()}">{"▾" if unfolded else "▸"} {html.escape(title)}</span></a>')
        if unfolded and key != STREAMING:
            line += (f'&nbsp;&nbsp;<span style="font-size:small; color:{self._quiet()}">·&nbsp;&nbsp;'
                     f'<a href="qd:copythink:{key}">Copy thinking</a></span>')
        cursor.insertHtml(line)

    def _thinking_colour(self) -> QColor:
        """The thinking's quiet colour: halfway between the text and the background."""
        palette = self.palette()
        text, base = palette.color(QPalette.ColorRole.Text), palette.color(QPalette.ColorRole.Base)
        return QColor((text.red() + base.red()) // 2, (text.green() + base.green()) // 2,
                      (text.blue() + base.blue()) // 2)

    def _reasoning_formats(self) -> tuple[QTextBlockFormat, QTextCharFormat]:
        """The unfolded thinking: set in from the answer, in the thinking's colour."""
        block = QTextBlockFormat()
        block.setLeftMargin(REASONING_INDENT)
        char = QTextCharFormat()
        char.setForeground(self._thinking_colour())
        return block, char

    def forget_folds(self) -> None:
        """Fold every message's thinking again (another conversation is shown: its
        message numbers mean other messages)."""
        self._unfolded.clear()

    def _append_reasoning(self, cursor: QTextCursor, key: int, title: str,
                          text: Optional[str]) -> int:
        """The thinking section at the end: its line, and ``text`` below it when unfolded.
        Returns where its line starts."""
        self.writer().new_block(cursor, top_margin=4)
        line_at = cursor.position()
        self._reasoning_line(cursor, key, title, text is not None)
        if text is not None:
            block, char = self._reasoning_formats()
            cursor.insertBlock(block, char)
            cursor.insertText(text.strip("\n"), char)
        gap = cursor.blockFormat()  # the answer starts a little below the section
        gap.setBottomMargin(6)
        cursor.setBlockFormat(gap)
        return line_at

    def _toggle_reasoning(self, key: int) -> None:
        """Fold or unfold a message's thinking (the reply streaming now: ``STREAMING``)."""
        bar = self.verticalScrollBar()
        kept = bar.value()
        if key == STREAMING:
            self._stream_unfolded = not self._stream_unfolded
            self._render_stream()
        else:
            self._unfolded ^= {key}
            answer = self._streamed
            self.set_messages(*self._shown)
            if self._streaming:  # the reply being written goes on below
                self._reply_start = self.writer().cursor_at_end().position()
                self._streamed = answer
                self._render_stream()
        bar.setValue(min(kept, bar.maximum()))

    def _append_json(self, cursor: QTextCursor, text: str, stats: dict) -> None:
        from app.ui.chat.markdown import Segment

        valid = stats.get("valid")
        from app.ui.theme import color

        good, bad = color("ok"), color("bad")
        badge = "✓ valid JSON" if valid else f"✗ invalid JSON: {stats.get('validation_error', '')}"
        self._append_note(cursor, badge, good if valid else bad)
        self.writer().append_code(cursor, Segment(pretty_json(text), "json"))

    # -- streaming ------------------------------------------------------------------

    def begin_reply(self) -> None:
        """Start showing a reply being generated at the end of the transcript."""
        self._reply_start = self.writer().cursor_at_end().position()
        self._streaming = True
        self._streamed = ""
        self._streamed_reasoning = ""
        self._stream_unfolded = False
        self._thought = None
        self._render_stream()

    def _render_stream(self) -> None:
        """(Re)write the reply being streamed from its start: header, thinking section,
        answer so far (after a fold or unfold; at its start, just the header)."""
        cursor = QTextCursor(self.document())
        cursor.beginEditBlock()
        cursor.setPosition(self._reply_start)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        cursor.endEditBlock()
        cursor = self.writer().cursor_at_end()
        self._header(cursor, "assistant")
        self._think_shown = bool(self._streamed_reasoning)
        if self._think_shown:
            self._think_line_at = self._append_reasoning(
                cursor, STREAMING, self._thought or "Thinking…",
                self._streamed_reasoning if self._stream_unfolded else None)
        self._tail_start = self.writer().cursor_at_end().position()
        answer, self._streamed = self._streamed, ""
        self._scanner = StableScanner()
        self._tail = []
        self.add_text(answer)

    @property
    def thinking(self) -> bool:
        """The reply being streamed is in its thinking (its answer has not started)."""
        return self._streaming and bool(self._streamed_reasoning) and self._thought is None

    def add_reasoning(self, delta: str) -> None:
        """Append streamed thinking: shown at once when its section is unfolded."""
        if not delta:
            return
        self._streamed_reasoning += delta
        if not self._think_shown:  # the first thinking: the section appears
            follow = self.at_bottom()
            self._render_stream()
        elif self._stream_unfolded:
            follow = self.at_bottom()
            block, char = self._reasoning_formats()
            cursor = QTextCursor(self.document())
            cursor.beginEditBlock()
            cursor.movePosition(QTextCursor.MoveOperation.End)
            cursor.insertText(delta, char)
            cursor.endEditBlock()
            self._tail_start = cursor.position()
        else:
            return  # folded: nothing on screen changes
        if follow:
            self.scroll_to_bottom()

    def end_reasoning(self, seconds: Optional[float]) -> None:
        """The thinking has ended (the answer starts): its line says how long it took."""
        if not self.thinking:
            return
        self._thought = thought_for(seconds)
        cursor = QTextCursor(self.document())  # its line alone: the thinking below stays
        cursor.beginEditBlock()
        cursor.setPosition(self._think_line_at)
        cursor.movePosition(QTextCursor.MoveOperation.EndOfBlock, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        self._reasoning_line(cursor, STREAMING, self._thought, self._stream_unfolded)
        cursor.endEditBlock()
        self._tail_start = self.writer().cursor_at_end().position()  # the answer starts here

    def add_text(self, delta: str) -> None:
        """Append streamed text: render what has closed, update the unfinished tail."""
        if not delta:
            return
        follow = self.at_bottom()
        rendered = self._scanner.stable
        self._streamed += delta
        stable = self._scanner.advance(self._streamed)
        tail = split_segments(self._streamed[stable:])
        growth = tail_growth(self._tail, tail) if stable == rendered else None
        cursor = QTextCursor(self.document())
        # One edit block per tick: the document is laid out once, at its end, and cursor
        # moves inside it skip computing their x position (which lays out the block).
        cursor.beginEditBlock()
        if growth is not None:  # the common case: a few more characters of plain text
            cursor.movePosition(QTextCursor.MoveOperation.End)
            DocumentWriter.extend_plain(cursor, growth, monospace=tail[-1].lang is not None)
        else:
            writer = self.writer()
            cursor.setPosition(self._tail_start)
            cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
            cursor.removeSelectedText()
            if stable > rendered:
                writer.append(cursor, self._streamed[rendered:stable])
                self._tail_start = writer.cursor_at_end().position()
            writer.append_tail(cursor, tail)
        cursor.endEditBlock()
        self._tail = tail
        if follow:
            self.scroll_to_bottom()

    def finish_reply(self, message) -> None:
        """Replace the streamed reply with its final rendering (versions, facts line)."""
        follow = self.at_bottom()
        cursor = QTextCursor(self.document())
        cursor.setPosition(self._reply_start)
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        if self._stream_unfolded:
            self._unfolded.add(message.seq)
        self._streaming = False
        self._stream_unfolded = False
        self._shown[0].append(message)
        self._append_message(self.writer().cursor_at_end(), message)
        self._streamed = ""
        self._streamed_reasoning = ""
        if follow:
            self.scroll_to_bottom()

    @property
    def streamed_text(self) -> str:
        """The answer of the reply being streamed so far."""
        return self._streamed

    @property
    def streamed_reasoning(self) -> str:
        """The thinking of the reply being streamed so far."""
        return self._streamed_reasoning

    # -- scrolling and links --------------------------------------------------------

    def at_bottom(self) -> bool:
        """Whether the view shows the end (auto-scroll follows the reply only then)."""
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - 4

    def scroll_to_bottom(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def message_text(self, seq: int) -> str:
        return self._contents.get(seq, "")

    def _on_anchor(self, url: QUrl) -> None:
        link = url.toString()
        if link.startswith(CODE_ANCHOR):
            QGuiApplication.clipboard().setText(self._code.get(int(link[len(CODE_ANCHOR):]), ""))
        elif link.startswith("qd:"):
            _, name, seq = link.split(":", 2)
            if name == "think":
                return self._toggle_reasoning(int(seq))
            if name == "copythink":
                return QGuiApplication.clipboard().setText(self._reasoning.get(int(seq), ""))
            if name == "copy":
                QGuiApplication.clipboard().setText(self._contents.get(int(seq), ""))
            self.action.emit(name, int(seq))
        elif url.scheme() in ("http", "https", "mailto"):
            # Through system_programs, not QDesktopServices: in the frozen app the
            # browser must start without the bundle's libraries on its search path.
            from models.foundation.errors import QuantDeskError
            from models.foundation.system_programs import open_with_default_app

            try:
                open_with_default_app(link)
            except QuantDeskError as exc:
                self.link_failed.emit(exc.user_message)

    def canInsertFromMimeData(self, source) -> bool:  # noqa: N802 - Qt override
        return False if source.hasUrls() else super().canInsertFromMimeData(source)
