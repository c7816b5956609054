"""The size/quality trade-off of one source's quants, drawn by pyqtgraph.

One point per measured file: its size (MiB) across, its mean KL divergence from the source
up (a log scale: Q8_0 and Q2_K differ by three orders of magnitude), with the KLD's
uncertainty as a bar and the type's name beside it. Files made with an importance matrix
are diamonds, the others circles, so the two recipes of one type can be told apart. The
smallest file whose point is low enough is the one to pick.

pyqtgraph (a fast, well-kept Qt plotting library) is imported when the first chart is
drawn, not when the window opens. Its colours follow the app's palette and are set again
when the theme changes.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

from PySide6.QtCore import QEvent, QTimer
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.core.quality_checks import QualityRow
from app.ui.theme import color

#: KLDs at or below this (a file against itself) are drawn here on the log scale.
KLD_FLOOR = 1e-6


def _mib(n: int) -> float:
    return n / 2**20


class QualityChart(QWidget):
    """Size against mean KLD for :class:`~app.core.quality_checks.QualityRow` rows."""

    def __init__(self, parent: Optional[QWidget] = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Quality and size chart")
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(0, 0, 0, 0)
        self._empty = QLabel("Check the quality of some quants to see their size against their KL divergence here.")
        self._empty.setWordWrap(True)
        self._layout.addWidget(self._empty)
        self.plot = None  # a pyqtgraph PlotWidget, made for the first rows
        self.rows: list[QualityRow] = []
        self._restyle_queued = False

    def set_rows(self, rows: Sequence[QualityRow]) -> None:
        """Draw ``rows`` (replacing what was drawn)."""
        self.rows = list(rows)
        if not self.rows and self.plot is None:
            return
        if self.plot is None:
            self._make_plot()
        self._draw()

    def points(self) -> list[tuple[str, float, float]]:
        """What is drawn: (type, size in MiB, mean KLD) per point (tests and assistive text)."""
        return [(r.type_name, _mib(r.size), r.mean_kld) for r in self.rows]

    def _make_plot(self) -> None:
        import pyqtgraph as pg

        self._empty.hide()
        self.plot = pg.PlotWidget()
        self.plot.setAccessibleName("Quality and size chart")
        self.plot.setMenuEnabled(False)
        self.plot.setLogMode(x=False, y=True)
        self.plot.showGrid(x=True, y=True, alpha=0.25)
        self.plot.setLabel("bottom", "File size (MiB)")
        self.plot.setLabel("left", "Mean KL divergence")
        for name in ("bottom", "left"):
            self.plot.getAxis(name).enableAutoSIPrefix(False)  # not "(x0.001)" on a log axis
        # room for the type names right of the points
        self.plot.getViewBox().setDefaultPadding(0.12)
        self.plot.setMinimumHeight(220)
        self._layout.addWidget(self.plot)
        self._style()

    def _style(self) -> None:
        """Background, axes and text in the palette's colours."""
        if self.plot is None:
            return
        palette = self.palette()
        self.plot.setBackground(palette.color(QPalette.ColorRole.Base))
        text = palette.color(QPalette.ColorRole.Text)
        for name in ("bottom", "left"):
            axis = self.plot.getAxis(name)
            axis.setPen(text)
            axis.setTextPen(text)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt's name)
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange and self.plot is not None and not self._restyle_queued:
            # Not now: the change arrives while Qt re-polishes every widget for the new
            # style sheet, and replacing the plot's items then crashes Qt.
            self._restyle_queued = True
            QTimer.singleShot(0, self._restyle)

    def _restyle(self) -> None:
        self._restyle_queued = False
        if self.plot is not None:
            self._style()
            self._draw()

    def _draw(self) -> None:
        import pyqtgraph as pg

        plot = self.plot
        plot.clear()
        if plot.plotItem.legend is not None:
            plot.plotItem.legend.scene().removeItem(plot.plotItem.legend)
            plot.plotItem.legend = None
        # top right: big files sit low on the right, small ones high on the left (a model
        # whose source is already near a small type has points in the bottom left too)
        legend = plot.addLegend(offset=(-10, 10))
        text_color = self.palette().color(QPalette.ColorRole.Text)
        legend.setLabelTextColor(text_color)
        series = (("without an importance matrix", "o", color("info_border"), False),
                  ("with an importance matrix", "d", color("accent"), True))
        for name, symbol, colour, with_imatrix in series:
            rows = [r for r in self.rows if bool(r.imatrix) == with_imatrix]
            if not rows:
                continue
            xs = [_mib(r.size) for r in rows]
            ys = [max(r.mean_kld, KLD_FLOOR) for r in rows]
            # the uncertainty as a vertical bar: pairs of points joined pairwise
            bar_x, bar_y = [], []
            for x, r in zip(xs, rows):
                spread = float(r.stats.get("mean_kld_uncertainty", 0.0))
                bar_x += [x, x]
                bar_y += [max(r.mean_kld - spread, KLD_FLOOR), max(r.mean_kld + spread, KLD_FLOOR)]
            plot.addItem(pg.PlotDataItem(bar_x, bar_y, connect="pairs", pen=pg.mkPen(colour, width=1)))
            plot.addItem(pg.PlotDataItem(xs, ys, pen=None, symbol=symbol, symbolSize=11,
                                         symbolBrush=colour, symbolPen=pg.mkPen(colour), name=name))
            for x, y, r in zip(xs, ys, rows):
                label = pg.TextItem(r.type_name, color=text_color, anchor=(-0.15, 0.5))
                label.setPos(x, math.log10(y))  # the view's y is log10 in log mode
                plot.addItem(label)
        plot.enableAutoRange()
