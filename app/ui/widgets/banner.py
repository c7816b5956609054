"""An inline message bar: errors and notices shown in the page, never as a modal box.

Modal boxes block keyboard use and scripted checks, and hide the very window the
message is about. A :class:`MessageBanner` sits at the top of a page (or the window),
says one sentence with a level (error, warning, info), offers at most one action
("Reload model", "Open Settings") and can be dismissed.
"""

from __future__ import annotations

from typing import Callable, Optional

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget

LEVELS = ("error", "warning", "info")


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
        layout = QHBoxLayout(self)
        layout.setContentsMargins(12, 8, 8, 8)
        self.label = QLabel()
        self.label.setObjectName("bannerText")
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.action_button = QPushButton()
        self.action_button.setObjectName("bannerAction")
        self.action_button.hide()
        self.close_button = QToolButton()
        self.close_button.setText("✕")
        self.close_button.setAccessibleName("Dismiss message")
        self.close_button.setAutoRaise(True)
        self.close_button.clicked.connect(self._dismiss)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.action_button)
        layout.addWidget(self.close_button)
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
        self.label.setText(text)
        self._on_action = on_action
        self.action_button.setVisible(bool(action_text and on_action))
        if action_text:
            self.action_button.setText(action_text)
            self.action_button.setAccessibleName(action_text)
        self.show()

    def text(self) -> str:
        """The sentence on show ("" when hidden)."""
        return "" if self.isHidden() else self.label.text()

    def level(self) -> str:
        """``error``, ``warning`` or ``info``."""
        return str(self.property("level"))

    def clear(self) -> None:
        """Hide the banner and forget its action."""
        self._on_action = None
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
