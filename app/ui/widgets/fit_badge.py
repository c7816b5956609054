"""The fits / tight / won't-fit badge: a coloured dot and a word, used on every page."""

from __future__ import annotations

import functools
from typing import Optional

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPixmap

#: The theme's colour name for each verdict (``app.ui.theme.COLORS``).
FIT_COLOUR_NAMES = {"fits": "ok", "tight": "tight", "won't fit": "bad"}


def fit_colour(verdict: Optional[str]) -> str:
    """The verdict's colour in the scheme on screen (grey when unknown)."""
    from app.ui.theme import color

    name = FIT_COLOUR_NAMES.get(verdict or "")
    return color(name) if name else "#8a8a8a"


def fit_icon(verdict: Optional[str]) -> QIcon:
    """A round dot in the verdict's colour."""
    return _dot(fit_colour(verdict))


@functools.lru_cache(maxsize=16)
def _dot(colour: str) -> QIcon:
    pixmap = QPixmap(12, 12)
    pixmap.fill(Qt.GlobalColor.transparent)
    painter = QPainter(pixmap)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setBrush(QColor(colour))
    painter.setPen(Qt.PenStyle.NoPen)
    painter.drawEllipse(1, 1, 10, 10)
    painter.end()
    return QIcon(pixmap)


def fit_word(verdict: Optional[str]) -> str:
    """The badge's word: ``fits``, ``tight``, ``won't fit`` or ``fit unknown``."""
    return verdict or "fit unknown"
