"""The size/quality trade-off of one source's quants, drawn by pyqtgraph.

One point per measured file: its size (MiB) across, its mean KL divergence from the source
up (a log scale: Q8_0 and Q2_K differ by three orders of magnitude), with the KLD's
uncertainty as a bar. Files made with an importance matrix are diamonds, the others
circles, so the two recipes of one type can be told apart; the legend says so above the
plot, outside the data. The smallest file whose point is low enough is the one to pick.

Type names sit beside their points where they fit: each label is measured on screen and
placed (:mod:`app.ui.quantize.label_placement`) right, left, above or below its point
where it covers no other label, no point and no edge, the stock recommendations and the
Pareto front choosing first; a label that fits nowhere is left out (where many files
have nearly the same size), and its point's tooltip and the table still name it. The
labels are placed again whenever the view is resized or zoomed. Files that are the same
size and quality (two types that wrote the same file) share one label.

pyqtgraph (a fast, well-kept Qt plotting library) is imported when the first chart is
drawn, not when the window opens. Its colours follow the app's palette and are set again
when the theme changes.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from PySide6.QtCore import QEvent, QPointF, QRectF, QTimer
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from app.core.quality_checks import QualityRow
from app.ui.theme import color

from app.ui.quantize.label_placement import RECOMMENDED, label_order, nearest_point, pareto_front, place_labels

#: KLDs at or below this (a file against itself) are drawn here on the log scale.
KLD_FLOOR = 1e-6
#: The points' marker size in pixels.
MARKER = 11
#: How far from its point's centre a label starts, in pixels (clear of the marker).
LABEL_GAP = 9.0
#: (legend text, pyqtgraph symbol, the symbol as a character, theme colour, with an imatrix)
SERIES = (("without an imatrix", "o", "\u25cf", "info_border", False),
          ("with an imatrix", "d", "\u25c6", "accent", True))


def _mib(n: int) -> float:
    return n / 2**20


def _tip(row: QualityRow) -> str:
    recipe = "with an importance matrix" if row.imatrix else "without an importance matrix"
    return (f"{row.type_name} ({recipe})\n{_mib(row.size):.1f} MiB, mean KLD {row.mean_kld:.5f}, "
            f"same top {row.same_top_percent:.2f} %")


@dataclass
class _Label:
    """One type-name label (a pyqtgraph TextItem), its leader line (a PlotCurveItem, shown
    when the label had to move away) and the point it names: the view's x (MiB) and y
    (log10 KLD), with every type drawn there (several where files coincide)."""

    item: Any
    leader: Any
    names: list[str]
    x: float
    log_y: float


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
        self.legend = QLabel()  # above the plot, so it covers no data
        self.legend.setAccessibleName("Chart legend")
        self.legend.setWordWrap(True)
        self.legend.hide()
        self._layout.addWidget(self.legend)
        self.plot = None  # a pyqtgraph PlotWidget, made for the first rows
        self.rows: list[QualityRow] = []
        self._labels: list[_Label] = []
        self._restyle_queued = False
        self._place_queued = False

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

    def labels(self) -> list[tuple[str, Optional[QRectF]]]:
        """Each label's text and where it is on screen (scene pixels), ``None`` when left out."""
        return [(label.item.toPlainText(), label.item.sceneBoundingRect() if label.item.isVisible() else None)
                for label in self._labels]

    def marker_rects(self) -> list[QRectF]:
        """Each point's marker on screen (scene pixels)."""
        vb = self.plot.getViewBox()
        rects = []
        for r in self.rows:
            centre = vb.mapViewToScene(QPointF(_mib(r.size), math.log10(max(r.mean_kld, KLD_FLOOR))))
            rects.append(QRectF(centre.x() - MARKER / 2, centre.y() - MARKER / 2, MARKER, MARKER))
        return rects

    @property
    def labels_pending(self) -> bool:
        """Whether the labels wait to be placed again (after a resize, zoom or new rows)."""
        return self._place_queued

    def plot_rect(self) -> QRectF:
        """The plot's inside, where points and labels are drawn (scene pixels)."""
        return self.plot.getViewBox().sceneBoundingRect()

    def _make_plot(self) -> None:
        import pyqtgraph as pg

        self._empty.hide()
        self.legend.show()
        self.plot = pg.PlotWidget()
        self.plot.setAccessibleName("Quality and size chart")
        self.plot.setMenuEnabled(False)
        self.plot.setLogMode(x=False, y=True)
        self.plot.showGrid(x=True, y=True, alpha=0.25)
        self.plot.setLabel("bottom", "File size (MiB)")
        self.plot.setLabel("left", "Mean KL divergence")
        for name in ("bottom", "left"):
            self.plot.getAxis(name).enableAutoSIPrefix(False)  # not "(x0.001)" on a log axis
        # room round the outer points, so their labels fit beside them inside the plot
        self.plot.getViewBox().setDefaultPadding(0.08)
        self.plot.setMinimumHeight(220)
        view = self.plot.getViewBox()
        view.sigRangeChanged.connect(self._queue_placing)
        view.sigResized.connect(self._queue_placing)
        self._layout.addWidget(self.plot, 1)
        self._style()

    def _style(self) -> None:
        """Background, axes, text and legend in the palette's colours."""
        if self.plot is None:
            return
        palette = self.palette()
        self.plot.setBackground(palette.color(QPalette.ColorRole.Base))
        text = palette.color(QPalette.ColorRole.Text)
        for name in ("bottom", "left"):
            axis = self.plot.getAxis(name)
            axis.setPen(text)
            axis.setTextPen(text)
        shown = {bool(r.imatrix) for r in self.rows}
        self.legend.setText(" &nbsp; ".join(
            f'<span style="color:{color(colour)}">{char}</span>&nbsp;{html.escape(text)}'
            for text, _symbol, char, colour, with_imatrix in SERIES if with_imatrix in shown))

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
            self._draw()

    def _draw(self) -> None:
        import pyqtgraph as pg

        plot = self.plot
        plot.clear()
        self._style()
        text_color = self.palette().color(QPalette.ColorRole.Text)
        for _text, symbol, _char, colour, with_imatrix in SERIES:
            rows = [r for r in self.rows if bool(r.imatrix) == with_imatrix]
            if not rows:
                continue
            xs = [_mib(r.size) for r in rows]
            ys = [math.log10(max(r.mean_kld, KLD_FLOOR)) for r in rows]  # the view's y is log10
            # the uncertainty as a vertical bar: pairs of points joined pairwise
            bar_x, bar_y = [], []
            for x, r in zip(xs, rows):
                spread = float(r.stats.get("mean_kld_uncertainty", 0.0))
                bar_x += [x, x]
                bar_y += [max(r.mean_kld - spread, KLD_FLOOR), max(r.mean_kld + spread, KLD_FLOOR)]
            plot.addItem(pg.PlotDataItem(bar_x, bar_y, connect="pairs", pen=pg.mkPen(color(colour), width=1)))
            plot.addItem(pg.ScatterPlotItem(xs, ys, data=[_tip(r) for r in rows], symbol=symbol, size=MARKER,
                                            brush=color(colour), pen=pg.mkPen(color(colour)),
                                            hoverable=True, tip=lambda x, y, data: data))
        self._labels = []
        for (x, log_y), names in _coinciding(self.rows).items():
            item = pg.TextItem(", ".join(names), color=text_color, anchor=(0, 0))
            item.textItem.document().setDocumentMargin(1)
            item.hide()  # until placed
            leader = pg.PlotCurveItem(pen=pg.mkPen(text_color, width=1))
            for part in (leader, item):
                plot.addItem(part, ignoreBounds=True)  # labels never widen the view
            self._labels.append(_Label(item, leader, names, x, log_y))
        plot.enableAutoRange()
        self._queue_placing()

    def _queue_placing(self, *_args) -> None:
        if not self._place_queued:
            self._place_queued = True
            QTimer.singleShot(0, self, self.place_labels)  # not after the chart is gone

    def place_labels(self) -> None:
        """Put each label where it fits on screen now, or hide it (after a resize or zoom)."""
        self._place_queued = False
        if self.plot is None or not self._labels:
            return
        vb = self.plot.getViewBox()
        area = self.plot_rect()
        anchors, sizes = [], []
        for label in self._labels:
            centre = vb.mapViewToScene(QPointF(label.x, label.log_y))
            anchors.append((centre.x(), centre.y()))
            size = label.item.textItem.boundingRect()
            sizes.append((size.width(), size.height()))
        markers = [(r.left(), r.top(), r.right(), r.bottom()) for r in self.marker_rects()]
        points = [(label.x, label.log_y) for label in self._labels]
        recommended = [any(name in RECOMMENDED for name in label.names) for label in self._labels]
        far = {i for i, first in enumerate(recommended) if first} | pareto_front(points)
        placements = place_labels(anchors, sizes, label_order(recommended, points),
                                  (area.left(), area.top(), area.right(), area.bottom()), markers,
                                  gap=LABEL_GAP, far=far, texts=[label.item.toPlainText() for label in self._labels],
                                  same_within=MARKER)
        for label, (x, y), placement in zip(self._labels, anchors, placements):
            label.item.setVisible(placement is not None)
            label.leader.setVisible(placement is not None and placement.leader)
            if placement is None:
                continue
            label.item.setPos(vb.mapSceneToView(QPointF(placement.box[0], placement.box[1])))
            if placement.leader:  # from the marker's edge to the label's
                end = nearest_point(x, y, placement.box)
                length = math.dist((x, y), end) or 1.0
                start = (x + (end[0] - x) * (MARKER / 2) / length, y + (end[1] - y) * (MARKER / 2) / length)
                a, b = vb.mapSceneToView(QPointF(*start)), vb.mapSceneToView(QPointF(*end))
                label.leader.setData([a.x(), b.x()], [a.y(), b.y()])


def _coinciding(rows: Sequence[QualityRow]) -> dict[tuple[float, float], list[str]]:
    """Each drawn position (MiB, log10 KLD) and the type names there, once each (a stock
    recommendation first, then in row order)."""
    at: dict[tuple[float, float], list[str]] = {}
    for r in sorted(rows, key=lambda r: r.type_name not in RECOMMENDED):  # "Q8_0, MXFP4_MOE"
        names = at.setdefault((_mib(r.size), math.log10(max(r.mean_kld, KLD_FLOOR))), [])
        if r.type_name not in names:
            names.append(r.type_name)
    return at
