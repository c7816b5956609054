"""The frame every built page shares: margins, a bold heading and a one-line summary."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget


def page_layout(page: QWidget, title: str, summary: str = "") -> QVBoxLayout:
    """Give ``page`` a vertical layout with its heading (and summary); return it for the body."""
    layout = QVBoxLayout(page)
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
