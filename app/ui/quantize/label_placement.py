"""Where a scatter chart's point labels go so that none covers another, a point or the edge.

Pure geometry in pixels (y grows downwards), no Qt: the chart measures its labels and
points on screen, asks :func:`place_labels` where each label fits, and hides the ones that
fit nowhere (their point stays, and its tooltip and the table still name it).
:func:`label_order` decides who gets the first choice of room: the points a person is most
likely to pick.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Collection, Optional, Sequence

#: (left, top, right, bottom) in pixels.
Box = tuple[float, float, float, float]

#: Stock recommendations: a sensible default and a near-lossless one.
RECOMMENDED = ("Q4_K_M", "Q8_0")


def _overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _inside(box: Box, area: Box) -> bool:
    return area[0] <= box[0] and box[2] <= area[2] and area[1] <= box[1] and box[3] <= area[3]


def candidate_boxes(x: float, y: float, width: float, height: float, gap: float) -> list[tuple[Box, bool]]:
    """The positions tried for a ``width`` × ``height`` label of the point at (``x``, ``y``),
    best first: right of it, left, above, below, then the four diagonals, each ``gap``
    pixels clear of the point's centre; with each, whether it is a diagonal (a label
    there is nearer to the point's neighbours, so it gets a short leader line)."""
    d = gap * 0.75  # diagonal: about the same distance from the point
    tops = {"middle": y - height / 2, "above": y - gap - height, "below": y + gap,
            "up": y - d - height, "down": y + d}
    lefts = {"right": x + gap, "left": x - gap - width, "centre": x - width / 2,
             "diag_right": x + d, "diag_left": x - d - width}
    order = [("right", "middle"), ("left", "middle"), ("centre", "above"), ("centre", "below"),
             ("diag_right", "up"), ("diag_right", "down"), ("diag_left", "up"), ("diag_left", "down")]
    return [((lefts[h], tops[v], lefts[h] + width, tops[v] + height), h.startswith("diag")) for h, v in order]


def nearest_point(x: float, y: float, box: Box) -> tuple[float, float]:
    """The point of ``box`` nearest to (``x``, ``y``): where a leader line from the point ends."""
    return min(max(x, box[0]), box[2]), min(max(y, box[1]), box[3])


def _segment_crosses(p: tuple[float, float], q: tuple[float, float], box: Box) -> bool:
    steps = 12
    return any(box[0] < p[0] + (q[0] - p[0]) * k / steps < box[2] and box[1] < p[1] + (q[1] - p[1]) * k / steps < box[3]
               for k in range(steps + 1))


@dataclass(frozen=True)
class Placement:
    """Where one label went: its box, and whether a leader line joins it to its point (a
    label moved away from a crowded point, or set diagonally beside it)."""

    box: Box
    leader: bool = False


def place_labels(anchors: Sequence[tuple[float, float]], sizes: Sequence[tuple[float, float]],
                 order: Sequence[int], area: Box, obstacles: Sequence[Box] = (),
                 gap: float = 8.0, margin: float = 1.0, far: Collection[int] = (),
                 texts: Optional[Sequence[str]] = None, same_within: float = 0.0) -> list[Optional[Placement]]:
    """Choose a place for each label, or ``None`` where none fits.

    Args:
        anchors: Each label's point, in pixels.
        sizes: Each label's (width, height), in pixels.
        order: Label indices in the order they choose (the first gets its best spot).
        area: Where labels may go (the plot's inside: nothing is clipped).
        obstacles: Boxes no label may cover (the points' markers, a legend).
        gap: How far from its point's centre a label starts (more than a marker's radius).
        margin: Space kept between two labels, and between a label and an obstacle.
        far: Labels that may also go further out (two and four times ``gap``) with a leader
            line, where every place beside the point is taken; the line crosses no other label
            and no obstacle but the point's own.
        texts: Each label's text, with ``same_within``: a label is left out when one with the
            same text is already placed for a point closer than that many pixels (two
            points drawn on top of each other need one name).

    Returns one entry per label: its :class:`Placement`, or ``None`` (every position was
    taken or outside ``area``).
    """
    def grown(b: Box) -> Box:
        return b[0] - margin, b[1] - margin, b[2] + margin, b[3] + margin

    blocked = [grown(b) for b in obstacles]
    labels: list[Box] = []
    placed: list[Optional[Placement]] = [None] * len(anchors)
    for i in order:
        (x, y), (width, height) = anchors[i], sizes[i]
        if texts is not None and any(
                p is not None and texts[j] == texts[i] and math.dist(anchors[j], (x, y)) < same_within
                for j, p in enumerate(placed)):
            continue
        rings = [(gap, False)] + ([(gap * 2.2, True), (gap * 4.0, True)] if i in far else [])
        for distance, far_out in rings:
            for box, diagonal in candidate_boxes(x, y, width, height, distance):
                leader = far_out or diagonal
                if not _inside(box, area) or any(_overlaps(box, t) for t in blocked + labels):
                    continue
                end = nearest_point(x, y, box)
                if leader and any(_segment_crosses((x, y), end, t) for t in labels + blocked
                                  if not t[0] <= x <= t[2] or not t[1] <= y <= t[3]):
                    continue  # a line across another label or point would name the wrong one
                placed[i] = Placement(box, leader)
                labels.append(grown(box))
                break
            if placed[i] is not None:
                break
    return placed


def pareto_front(points: Sequence[tuple[float, float]]) -> set[int]:
    """Indices of the (size, loss) points no other point beats on both: nothing is as small
    and as good with one of the two strictly better. The ones worth picking."""
    front = set()
    for i, (size, loss) in enumerate(points):
        if not any((s <= size and q <= loss) and (s < size or q < loss) for s, q in points):
            front.add(i)
    return front


def label_order(recommended: Sequence[bool], points: Sequence[tuple[float, float]]) -> list[int]:
    """The order labels choose their place: the stock recommendations (``recommended``, see
    :data:`RECOMMENDED`), then the Pareto front of (size, loss) smallest first, then the
    rest smallest first."""
    front = pareto_front(points)
    return sorted(range(len(points)),
                  key=lambda i: (not recommended[i], i not in front, points[i][0], points[i][1], i))
