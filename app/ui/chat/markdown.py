"""Markdown with highlighted code, appended to a QTextDocument piece by piece.

Qt renders the Markdown itself (``QTextDocument.setMarkdown``: CommonMark and GitHub
tables, links, emphasis, lists); pygments highlights code fences (a well-kept lexer for
every language, rather than hand-written rules). A message is cut into *segments* —
runs of Markdown and fenced code blocks — and each segment is appended at the end of
the transcript's document, so streaming can append the segments that are finished and
re-render only the unfinished tail (:class:`StableScanner`).

Math (``$…$``, ``$$…$$``) is not typeset: it is kept verbatim in a monospace code span,
so formulas stay readable and copyable instead of being mangled as emphasis.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from functools import lru_cache

from PySide6.QtGui import (QColor, QFont, QTextBlockFormat, QTextCharFormat, QTextCursor,
                           QTextDocument, QTextDocumentFragment,
                           QTextLength, QTextTableFormat)

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)")
_DISPLAY_MATH = re.compile(r"\$\$(.+?)\$\$", re.DOTALL)
# $x$ with no space just inside the dollars and no digit after the closing one, so
# "costs $5 and $10" stays text.
_INLINE_MATH = re.compile(r"(?<![\\$`])\$(?=\S)([^$\n]+?)(?<=\S)\$(?![\d$])")

CODE_ANCHOR = "qd-copy-code:"


@dataclass(frozen=True)
class Segment:
    """A run of Markdown (``lang is None``) or one fenced code block."""

    text: str
    lang: str | None = None
    closed: bool = True


def _closes(line: str, fence: str) -> bool:
    """Whether ``line`` closes a code block opened with ``fence`` (CommonMark: the same
    character, at least as many, nothing else on the line)."""
    mark = line.strip()
    return len(mark) >= len(fence) and mark == fence[0] * len(mark)


def split_segments(text: str) -> list[Segment]:
    """Cut Markdown into Markdown runs and fenced code blocks (an unclosed fence at the
    end is a code segment with ``closed=False``)."""
    segments: list[Segment] = []
    prose: list[str] = []
    fence = None
    lang = ""
    code: list[str] = []
    for line in text.splitlines(keepends=True):
        match = _FENCE.match(line)
        if fence is None:
            if match:
                if prose:
                    segments.append(Segment("".join(prose)))
                    prose = []
                fence, lang, code = match.group(1), match.group(2), []
            else:
                prose.append(line)
        elif _closes(line, fence):
            segments.append(Segment("".join(code), lang or ""))
            fence = None
        else:
            code.append(line)
    if fence is not None:
        segments.append(Segment("".join(code), lang or "", closed=False))
    elif prose:
        segments.append(Segment("".join(prose)))
    return segments


class StableScanner:
    """Finds how much of a reply being streamed is finished, reading each line once.

    Finished means up to the end of the last closed code fence or of the last paragraph
    followed by a blank line outside a fence; what follows is the unfinished tail, the
    only part re-rendered as tokens arrive. :meth:`advance` resumes where the previous
    call stopped (at the start of the line still being written), so a tick's work is
    bounded by the new text, never by the whole reply.
    """

    def __init__(self) -> None:
        self.stable = 0
        self._position = 0  # where the first line not yet complete starts
        self._fence: str | None = None

    def advance(self, text: str) -> int:
        """The finished length of ``text`` (the whole reply so far, which only grows)."""
        while True:
            end = text.find("\n", self._position)
            if end < 0:
                return self.stable
            line = text[self._position:end + 1]
            self._position = end + 1
            match = _FENCE.match(line)
            if self._fence is None:
                if match:
                    self._fence = match.group(1)
                elif not line.strip():
                    self.stable = self._position
            elif _closes(line, self._fence):
                self._fence = None
                self.stable = self._position


def stable_length(text: str) -> int:
    """How much of ``text`` is finished (see :class:`StableScanner`)."""
    return StableScanner().advance(text)


def tail_growth(before: list[Segment], after: list[Segment]) -> str | None:
    """The text to add at the end when the unfinished tail ``before`` (its segments, as
    :meth:`DocumentWriter.append_tail` rendered them) became ``after`` by new text only
    at the end of its last plain run; ``None`` when it must be rendered again."""
    if not before or len(before) != len(after) or before[:-1] != after[:-1]:
        return None
    old, new = before[-1], after[-1]
    if old.lang != new.lang or old.closed != new.closed or not _plain_in_tail(old) or not old.text:
        return None  # also when nothing was shown for it (append_plain skips empty text)
    shown, now = old.text.rstrip("\n"), new.text.rstrip("\n")
    return now[len(shown):] if now.startswith(shown) else None


def _plain_in_tail(segment: Segment) -> bool:
    """Whether the tail shows ``segment`` as plain text (prose, or an unclosed fence)."""
    return segment.lang is None or not segment.closed


def _math_as_code(markdown: str) -> str:
    markdown = _DISPLAY_MATH.sub(lambda m: "`$$" + m.group(1).replace("\n", " ") + "$$`", markdown)
    return _INLINE_MATH.sub(lambda m: "`$" + m.group(1) + "$`", markdown)


@lru_cache(maxsize=4)
def _formatter(dark: bool):
    from pygments.formatters import HtmlFormatter

    return HtmlFormatter(style="monokai" if dark else "default", noclasses=True, nowrap=True)


@lru_cache(maxsize=64)
def _lexer(lang: str):
    from pygments.lexers import TextLexer, get_lexer_by_name
    from pygments.util import ClassNotFound

    try:
        return get_lexer_by_name(lang) if lang else TextLexer()
    except ClassNotFound:
        return TextLexer()


@lru_cache(maxsize=512)
def highlight_html(code: str, lang: str, dark: bool) -> str:
    """``code`` as HTML spans coloured by pygments (inline styles Qt understands)."""
    from pygments import highlight

    return highlight(code, _lexer(lang.lower()), _formatter(dark))


WARM_LANGUAGES = ("python", "javascript", "typescript", "bash", "json", "c", "cpp", "rust",
                  "go", "java", "sql", "html", "yaml")


def warm_up() -> None:
    """Import pygments' formatter and the common lexers ahead of time (off the GUI
    thread): a first use costs tens of milliseconds, which would otherwise land in the
    middle of a streaming reply as a visible stall."""
    _formatter(False)
    _formatter(True)
    for lang in WARM_LANGUAGES:
        highlight_html("x = 1\n", lang, False)


@lru_cache(maxsize=2)
def _tail_format(monospace: bool) -> QTextCharFormat:
    """The character format of the unfinished tail (made once: this runs every tick)."""
    char_format = QTextCharFormat()
    if monospace:
        char_format.setFontFamilies(["monospace"])
        char_format.setFontStyleHint(QFont.StyleHint.Monospace)
    return char_format


class DocumentWriter:
    """Appends rendered segments at the end of a QTextDocument.

    Args:
        document: The transcript's document.
        dark: Highlight for a dark background.
        code_store: Code block texts by number, for the copy links (``qd-copy-code:N``).
    """

    def __init__(self, document: QTextDocument, dark: bool, code_store: dict[int, str]) -> None:
        self.document = document
        self.dark = dark
        self.code_store = code_store
        self._scratch = QTextDocument()
        self._scratch.setDefaultFont(document.defaultFont())

    def cursor_at_end(self) -> QTextCursor:
        cursor = QTextCursor(self.document)
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return cursor

    def new_block(self, cursor: QTextCursor, top_margin: float = 0) -> None:
        """Start a fresh, plainly formatted block at the end."""
        block = QTextBlockFormat()
        if self.document.isEmpty():  # the document's first block: use it, no gap above
            cursor.setBlockFormat(block)
            cursor.setCharFormat(QTextCharFormat())
            return
        if top_margin:
            block.setTopMargin(top_margin)
        cursor.insertBlock(block, QTextCharFormat())

    def append_markdown(self, cursor: QTextCursor, markdown: str) -> None:
        """Render a Markdown run (no code fences) at ``cursor`` (the end)."""
        if not markdown.strip():
            return
        self._scratch.setMarkdown(_math_as_code(markdown))
        self.new_block(cursor)
        cursor.insertFragment(QTextDocumentFragment(self._scratch))

    def append_code(self, cursor: QTextCursor, segment: Segment) -> None:
        """A code block: a one-cell shaded table with a caption line and a copy link;
        highlighted only when the fence is closed (an open one is plain monospace)."""
        number = len(self.code_store)
        self.code_store[number] = segment.text
        self.new_block(cursor)
        caption = html.escape(segment.lang or "code")
        cursor.insertHtml(f'<span style="font-size:small; color:gray">{caption}</span>'
                          f'&nbsp;&nbsp;<a href="{CODE_ANCHOR}{number}" '
                          f'style="font-size:small">Copy code</a>')
        table_format = QTextTableFormat()
        table_format.setBorder(0)
        table_format.setCellPadding(8)
        table_format.setCellSpacing(0)
        table_format.setWidth(QTextLength(QTextLength.Type.PercentageLength, 100))
        table = cursor.insertTable(1, 1, table_format)
        cell = table.cellAt(0, 0)
        cell_format = cell.format()
        cell_format.setBackground(QColor("#272822" if self.dark else "#f3f4f6"))
        cell.setFormat(cell_format)
        cell_cursor = cell.firstCursorPosition()
        code = segment.text.rstrip("\n")
        if segment.closed:
            body = highlight_html(code, segment.lang or "", self.dark).rstrip("\n")
        else:
            body = html.escape(code)
        cell_cursor.insertHtml(f'<pre style="font-family:monospace">{body}</pre>')
        cursor.movePosition(QTextCursor.MoveOperation.End)

    def append_plain(self, cursor: QTextCursor, text: str, monospace: bool = False) -> None:
        """Unrendered text (the unfinished tail of a streaming reply)."""
        if not text:
            return
        self.new_block(cursor)
        self.extend_plain(cursor, text.rstrip("\n"), monospace)

    @staticmethod
    def extend_plain(cursor: QTextCursor, text: str, monospace: bool = False) -> None:
        """More unrendered text at ``cursor``, in the tail's format."""
        cursor.insertText(text, _tail_format(monospace))

    def append(self, cursor: QTextCursor, text: str) -> None:
        """Render finished Markdown with its code blocks."""
        for segment in split_segments(text):
            if segment.lang is None:
                self.append_markdown(cursor, segment.text)
            else:
                self.append_code(cursor, segment)

    def append_tail(self, cursor: QTextCursor, segments: list[Segment]) -> None:
        """The unfinished tail (its :func:`split_segments`): prose as plain text, an
        open code fence as monospace, a closed one highlighted."""
        for segment in segments:
            if _plain_in_tail(segment):
                self.append_plain(cursor, segment.text, monospace=segment.lang is not None)
            else:
                self.append_code(cursor, segment)
