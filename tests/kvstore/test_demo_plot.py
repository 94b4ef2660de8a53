"""The demo's ``latency.svg``: readable axes and labels (issue 32: a new user saw
two event labels on top of each other, an x axis with one tick, a y axis with
only 0 and the maximum, and one caption naming both axes)."""

from __future__ import annotations

import re

from kvstore.demo import _svg

ROWS = [
    {
        "region": region,
        "operations": 10,
        "ops_per_s": 1.0,
        "read_mean_ms": 30.0,
        "read_p99_ms": 60.0,
        "write_mean_ms": 40.0,
        "write_p50_ms": 38.0,
        "write_p99_ms": 304.0,
    }
    for region in ("CA", "OR", "OH")
]
TIMELINE = [(float(t), 200.0 + (t % 5) * 20) for t in range(41)]
EVENTS = [(20.0, "kill sequencer"), (20.5, "restart")]


def _texts(svg: str) -> list[tuple[float, float, str]]:
    return [
        (float(x), float(y), text)
        for x, y, text in re.findall(r'<text x="([\d.]+)" y="([\d.]+)"[^>]*>([^<]*)</text>', svg)
    ]


def test_both_panels_have_round_ticks_on_every_axis() -> None:
    texts = _texts(_svg(ROWS, TIMELINE, EVENTS))
    numbers = [(x, y, t) for x, y, t in texts if re.fullmatch(r"\d+(\.\d+)?", t)]
    seconds = sorted(float(t) for x, y, t in numbers if y > 500 and x >= 50)  # under the panel
    assert seconds[:3] == [0.0, 5.0, 10.0] and seconds[-1] == 40.0
    left = [float(t) for x, y, t in numbers if x < 50]
    assert {0.0, 100.0, 200.0, 300.0} <= set(left)  # both panels' y ticks, 0 included


def test_each_axis_has_its_own_caption() -> None:
    svg = _svg(ROWS, TIMELINE, EVENTS)
    assert ">time since the start (s)<" in svg
    assert ">operations/s, all regions<" in svg
    assert ">latency (ms)<" in svg


def test_close_events_get_labels_on_different_rows() -> None:
    texts = {t: (x, y) for x, y, t in _texts(_svg(ROWS, TIMELINE, EVENTS))}
    kill, restart = texts["kill sequencer"], texts["restart"]
    assert abs(kill[1] - restart[1]) >= 12  # at least a line of 12 px text apart
