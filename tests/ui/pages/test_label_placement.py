"""Where the quality chart's labels go (pure geometry, no Qt)."""

from __future__ import annotations

import itertools

from app.ui.quantize.label_placement import label_order, pareto_front, place_labels

AREA = (0.0, 0.0, 300.0, 200.0)
SIZE = (40.0, 12.0)


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _marker(x, y, r=5.5):
    return (x - r, y - r, x + r, y + r)


def test_a_lone_label_goes_right_of_its_point():
    (placed,) = place_labels([(100.0, 100.0)], [SIZE], [0], AREA, gap=8.0)
    assert placed.box == (108.0, 94.0, 148.0, 106.0) and not placed.leader


def test_near_the_right_edge_it_goes_left_and_never_leaves_the_area():
    (placed,) = place_labels([(290.0, 100.0)], [SIZE], [0], AREA, gap=8.0)
    assert placed.box == (242.0, 94.0, 282.0, 106.0)
    (corner,) = place_labels([(295.0, 5.0)], [SIZE], [0], AREA, gap=8.0)
    assert corner.box[2] <= 300 and corner.box[1] >= 0 and corner.box[3] <= 200


def test_crowded_labels_never_overlap_each_other_or_a_point_and_the_first_in_order_wins():
    # a row of points 6 px apart: far fewer labels fit than points
    anchors = [(50.0 + 6 * i, 100.0 + (i % 3) * 4) for i in range(30)]
    markers = [_marker(x, y) for x, y in anchors]
    order = [17] + [i for i in range(30) if i != 17]
    placed = place_labels(anchors, [SIZE] * 30, order, AREA, markers, gap=8.0)
    boxes = [p.box for p in placed if p is not None]
    assert placed[17] is not None and 4 <= len(boxes) < 30
    assert not any(_overlap(a, b) for a, b in itertools.combinations(boxes, 2))
    assert not any(_overlap(box, m) for box in boxes for m in markers)
    assert all(AREA[0] <= b[0] and b[2] <= AREA[2] and AREA[1] <= b[1] and b[3] <= AREA[3] for b in boxes)


def test_far_labels_get_a_leader_that_crosses_no_other_label_or_point():
    # a point boxed in by four neighbours whose labels sit beside them
    centre = (150.0, 100.0)
    around = [(150.0 + dx, 100.0 + dy) for dx, dy in ((14, 0), (-14, 0), (0, 14), (0, -14))]
    anchors = around + [centre]
    markers = [_marker(x, y) for x, y in anchors]
    near_only = place_labels(anchors, [(20.0, 10.0)] * 5, [0, 1, 2, 3, 4], AREA, markers, gap=8.0)
    assert near_only[4] is None
    with_far = place_labels(anchors, [(20.0, 10.0)] * 5, [0, 1, 2, 3, 4], AREA, markers, gap=8.0, far={4})
    assert with_far[4] is not None and with_far[4].leader
    assert not any(_overlap(with_far[4].box, p.box) for p in with_far[:4] if p is not None)


def test_a_label_with_the_same_text_at_the_same_spot_is_left_out():
    anchors = [(100.0, 100.0), (101.0, 103.0), (200.0, 100.0)]
    placed = place_labels(anchors, [SIZE] * 3, [0, 1, 2], AREA, texts=["Q8_0", "Q8_0", "Q8_0"], same_within=11)
    assert placed[0] is not None and placed[1] is None and placed[2] is not None


def test_the_pareto_front_and_the_order_labels_choose_in():
    # (size, loss): C is beaten by B (smaller and better); D ties A's size but is worse
    points = [(80.0, 1.0), (85.0, 0.2), (90.0, 0.5), (80.0, 2.0), (100.0, 0.05), (140.0, 0.06)]
    assert pareto_front(points) == {0, 1, 4}
    recommended = [False, False, False, False, False, True]
    assert label_order(recommended, points) == [5, 0, 1, 4, 3, 2]
