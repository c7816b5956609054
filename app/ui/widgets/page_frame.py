"""The frame every built page shares (a heading, a summary, a scrolling body) and its form rows."""

from __future__ import annotations

from PySide6.QtCore import Qt
from typing import Callable

from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QLineEdit, QPushButton, QScrollArea, QVBoxLayout, QWidget


def page_layout(page: QWidget, title: str, summary: str = "") -> QVBoxLayout:
    """Give ``page`` its heading (and summary) and return the layout for its body.

    The body scrolls when the window is smaller than it needs, so no page sets a minimum
    size on the window (a person can make it as small as they like).
    """
    outer = QVBoxLayout(page)
    outer.setContentsMargins(0, 0, 0, 0)
    scroll = QScrollArea(page)
    scroll.setObjectName("pageScroll")
    scroll.setWidgetResizable(True)
    scroll.setFrameShape(QFrame.Shape.NoFrame)
    body = QWidget()
    body.setObjectName("pageBody")
    scroll.setWidget(body)
    outer.addWidget(scroll)
    layout = QVBoxLayout(body)
    layout.setContentsMargins(24, 18, 24, 18)
    layout.setSpacing(10)
    heading = QLabel(title)
    heading.setObjectName("pageTitle")
    font = heading.font()
    font.setPointSize(font.pointSize() + 6)
    font.setBold(True)
    heading.setFont(font)
    layout.addWidget(heading)
    if summary:
        body = QLabel(summary)
        body.setWordWrap(True)
        body.setObjectName("pageSummary")
        body.setAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop)
        layout.addWidget(body)
    return layout


def field_with_button(edit: QLineEdit, name: str, button_text: str, button_name: str,
                      on_click: Callable[[], None], placeholder: str = "") -> QHBoxLayout:
    """A form row: ``edit`` (named ``name`` for assistive tools) and a button beside it."""
    edit.setAccessibleName(name)
    if placeholder:
        edit.setPlaceholderText(placeholder)
    button = QPushButton(button_text)
    button.setAccessibleName(button_name)
    button.clicked.connect(lambda _checked=False: on_click())
    row = QHBoxLayout()
    row.addWidget(edit, 1)
    row.addWidget(button)
    return row
