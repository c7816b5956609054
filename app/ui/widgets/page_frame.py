"""The frame every built page shares: margins, a bold heading and a one-line summary."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QVBoxLayout, QWidget


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
