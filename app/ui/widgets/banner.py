"""An inline message bar: errors and notices shown in the page, never as a modal box.

Modal boxes block keyboard use and scripted checks, and hide the very window the
message is about. A :class:`MessageBanner` sits at the top of a page (or the window),
says one sentence with a level (error, warning, info), offers at most one action
("Reload model", "Open Settings") and can be dismissed.

The sentences name files ("SmolLM2-360M-Instruct-Q4_K_M.gguf"), and Qt wraps lines after
hyphens, which cut such a name in two where nothing shows it is one. So the *shown* text
has the hyphens of file names replaced by non-breaking hyphens (U+2011; Qt's rich text
ignores ``white-space: nowrap`` and ``<nobr>`` for hyphen breaks), while
:meth:`MessageBanner.text` and everything copied from the banner (Ctrl+C, the context
menu) give the real characters: a name pasted into a terminal or file dialog must work.
The action button's text is elided in the middle past :data:`ACTION_TEXT_WIDTH` pixels
(the end of a model name, its quant type, tells models apart); its tooltip and
accessible name keep it whole. The button sits beside the sentence while the sentence
keeps :data:`READABLE_TEXT_WIDTH` pixels, and under it in a narrower page, so a whole
file name and the button never make the banner (and the page) wider than the window.
"""

from __future__ import annotations

import re
from typing import Callable, Optional

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QGuiApplication, QKeySequence
from PySide6.QtWidgets import QFrame, QGridLayout, QLabel, QMenu, QPushButton, QToolButton, QWidget

LEVELS = ("error", "warning", "info")
NON_BREAKING_HYPHEN = "\u2011"
ACTION_TEXT_WIDTH = 200  # pixels of the action button's text before it is elided
READABLE_TEXT_WIDTH = 320  # the sentence's least width with the action button beside it

# A file name: a run without spaces or path separators that ends in an extension
# (".gguf", ".Q4_K_M.gguf"), before any closing punctuation of the sentence.
_FILE_NAME = re.compile(r"[^\s/\\]*-[^\s/\\]*\.[A-Za-z0-9_]+(?=[.,;:!?)\]»”’'\"]*(?:\s|$))")


def keep_file_names_whole(text: str) -> str:
    """``text`` as shown: the hyphens of file names made non-breaking (the last part of a
    path included; its folders may still break, so a long path fits a narrow banner)."""
    return _FILE_NAME.sub(lambda m: m.group().replace("-", NON_BREAKING_HYPHEN), text)


class MessageBanner(QFrame):
    """A hidden-until-needed bar with a sentence, an optional action and a close button.

    The frame's ``level`` property (``error`` / ``warning`` / ``info``) selects its
    colours in the style sheet.
    """

    dismissed = Signal()

    def __init__(self, parent: Optional[QWidget] = None) -> None:
        super().__init__(parent)
        self.setObjectName("messageBanner")
        self.setProperty("level", "info")
        self.setAccessibleName("Message banner")
        layout = QGridLayout(self)
        layout.setContentsMargins(12, 8, 8, 8)
        layout.setColumnStretch(0, 1)
        self._layout = layout
        self._action_beside: Optional[bool] = None
        self.label = QLabel()
        self.label.setObjectName("bannerText")
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.label.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.label.customContextMenuRequested.connect(self._context_menu)
        self._copy_filter = _CopyRealText(self)
        self.label.installEventFilter(self._copy_filter)
        self._text = ""
        self.action_button = QPushButton()
        self.action_button.setObjectName("bannerAction")
        self.action_button.hide()
        self.close_button = QToolButton()
        self.close_button.setText("✕")
        self.close_button.setAccessibleName("Dismiss message")
        self.close_button.setAutoRaise(True)
        self.close_button.clicked.connect(self._dismiss)
        layout.addWidget(self.label, 0, 0)
        layout.addWidget(self.close_button, 0, 2, Qt.AlignmentFlag.AlignTop)
        self._arrange()
        self._on_action: Optional[Callable[[], None]] = None
        self.action_button.clicked.connect(self._run_action)
        self.hide()

    def show_message(self, text: str, level: str = "error", action_text: Optional[str] = None,
                     on_action: Optional[Callable[[], None]] = None) -> None:
        """Show ``text``; with ``action_text`` and ``on_action``, a button that runs it."""
        if level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}, not {level!r}")
        self.setProperty("level", level)
        self.style().unpolish(self)
        self.style().polish(self)
        self._text = text
        self.label.setText(keep_file_names_whole(text) if NON_BREAKING_HYPHEN not in text else text)
        self._on_action = on_action
        self.action_button.setVisible(bool(action_text and on_action))
        if action_text:
            metrics = self.action_button.fontMetrics()
            shown = metrics.elidedText(action_text, Qt.TextElideMode.ElideMiddle, ACTION_TEXT_WIDTH)
            self.action_button.setText(shown)
            self.action_button.setToolTip(action_text if shown != action_text else "")
            self.action_button.setAccessibleName(action_text)
        self._arrange()
        self.show()

    def action_beside_text(self) -> bool:
        """Whether the action button is beside the sentence (else under it)."""
        return bool(self._action_beside)

    def resizeEvent(self, event) -> None:  # noqa: N802 - Qt
        self._arrange()
        super().resizeEvent(event)

    def _arrange(self) -> None:
        """Put the action button beside the sentence or under it, by the width there is,
        and hold the banner's least width to the narrower arrangement (the sentence's
        longest word, or the button, beside the close button)."""
        margins = self._layout.contentsMargins()
        spacing = max(self._layout.horizontalSpacing(), 0)
        frame = margins.left() + margins.right() + spacing + self.close_button.sizeHint().width()
        button = self.action_button.sizeHint().width() if self.action_button.isVisibleTo(self) else 0
        longest_word = self.label.minimumSizeHint().width()
        self.setMinimumWidth(frame + max(longest_word, button))
        beside = self.width() >= frame + max(READABLE_TEXT_WIDTH, longest_word) + spacing + button
        if beside == self._action_beside:
            return
        self._action_beside = beside
        self._layout.removeWidget(self.action_button)
        if beside:
            self._layout.addWidget(self.action_button, 0, 1, Qt.AlignmentFlag.AlignVCenter)
        else:
            self._layout.addWidget(self.action_button, 1, 0, Qt.AlignmentFlag.AlignLeft)

    def text(self) -> str:
        """The sentence on show, as given ("" when hidden)."""
        return "" if self.isHidden() else self._text

    def selected_text(self) -> str:
        """The part of the sentence selected with the mouse, with its real characters."""
        selected = self.label.selectedText()
        return selected.replace(NON_BREAKING_HYPHEN, "-") if NON_BREAKING_HYPHEN not in self._text else selected

    def copy_selection(self) -> None:
        """Copy the selected part (Ctrl+C, the context menu's Copy), real characters."""
        if self.label.hasSelectedText():
            QGuiApplication.clipboard().setText(self.selected_text())

    def copy_message(self) -> None:
        """Copy the whole sentence, as given."""
        QGuiApplication.clipboard().setText(self._text)

    def _context_menu(self, pos) -> None:
        menu = QMenu(self)
        copy = menu.addAction("Copy", self.copy_selection)
        copy.setEnabled(self.label.hasSelectedText())
        menu.addAction("Copy message", self.copy_message)
        menu.popup(self.label.mapToGlobal(pos))

    def level(self) -> str:
        """``error``, ``warning`` or ``info``."""
        return str(self.property("level"))

    def clear(self) -> None:
        """Hide the banner and forget its action."""
        self._on_action = None
        self._text = ""
        self.label.clear()
        self.hide()

    def _dismiss(self) -> None:
        self.clear()
        self.dismissed.emit()

    def _run_action(self) -> None:
        action = self._on_action
        self.clear()
        if action is not None:
            action()


class _CopyRealText(QObject):
    """Ctrl+C on the banner's sentence copies the real characters (see the module)."""

    def __init__(self, banner: MessageBanner) -> None:
        super().__init__(banner)
        self._banner = banner

    def eventFilter(self, watched, event) -> bool:  # noqa: N802 - Qt
        if event.type() in (QEvent.Type.ShortcutOverride, QEvent.Type.KeyPress) \
                and event.matches(QKeySequence.StandardKey.Copy):
            if event.type() == QEvent.Type.KeyPress:
                self._banner.copy_selection()
            event.accept()
            return True
        return False
