"""The fits / tight / won't-fit badge: a coloured dot and a word, used on every page."""

from __future__ import annotations

import functools
from typing import Optional

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPixmap

FIT_COLOURS = {"fits": "#2e9d4f", "tight": "#d19a00", "won't fit": "#cc3b3b"}


@functools.lru_cache(maxsize=8)
def fit_icon(verdict: Optional[str]) -> QIcon:
    """A round dot in the verdict's colour (grey when unknown)."""
    pixmap = QPixmap(12, 12)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setBrush(QColor(FIT_COLOURS.get(verdict or "", "#8a8a8a")))
    painter.setPen(Qt.PenStyle.NoPen)
    painter.drawEllipse(1, 1, 10, 10)
    painter.end()
    return QIcon(pixmap)


def fit_word(verdict: Optional[str]) -> str:
    """The badge's word: ``fits``, ``tight``, ``won't fit`` or ``fit unknown``."""
    return verdict or "fit unknown"
