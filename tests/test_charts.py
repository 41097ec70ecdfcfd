"""The dashboard's charts: tick labels that differ and carry units, time ticks along the x-axis, and empty states
that are not alarms."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from siltlake.observe.charts import Series, line_chart
from siltlake.observe.dashboard import WINDOWS, _table

END = dt.datetime(2026, 11, 26, 17, 8, tzinfo=dt.UTC)


def chart(values: list[float], unit: str, hours: float = 1.0) -> str:
    start = END - dt.timedelta(hours=hours)
    points = [(start + (END - start) * i / max(len(values) - 1, 1), value) for i, value in enumerate(values)]
    return line_chart("c", "web.access", "title", [Series("s", "s", points)], unit=unit, start=start, end=END)


def ticks(svg: str, axis: str) -> list[str]:
    return re.findall(rf'class="axis {axis}"[^>]*>([^<]*)<', svg)


@pytest.mark.parametrize(
    ("values", "unit", "suffixes"),
    [
        ([0.2, 1.0, 0.5], "s", ("s",)),
        ([0.1, 0.45], "s", ("s",)),
        ([40, 130], "s", ("s", "m")),
        ([600, 7000], "s", ("s", "m", "h")),
        ([0, 3], "", ("",)),
        ([0.05, 0.3], "", ("",)),
        ([12345], "", ("", "k")),
        ([5e6, 1e6], "B", ("B", "MiB")),
        ([900], "B", ("B",)),
    ],
)
def test_y_labels_are_distinct_start_at_zero_cover_the_values_and_carry_units(values, unit, suffixes) -> None:
    labels = ticks(chart(values, unit), "ytick")
    assert len(labels) >= 2 and len(set(labels)) == len(labels), labels
    assert re.fullmatch(r"0(\.0+)?\D*", labels[0]), labels
    assert all(label.endswith(suffixes) or label.rstrip("0123456789.").endswith(suffixes) for label in labels)
    if unit:
        assert all(re.search(r"[a-zA-Z]$", label) for label in labels), labels


def test_the_old_fault_is_gone_one_second_charts_no_longer_read_1s_0s_0s() -> None:
    labels = ticks(chart([0.3, 1.0], "s"), "ytick")
    assert labels.count("0s") <= 1 and len(set(labels)) == len(labels)


@pytest.mark.parametrize(("hours", "least"), [(0.25, 3), (1, 4), (6, 4), (24, 3), (168, 3)])
def test_time_ticks_run_along_the_x_axis_for_every_window(hours: float, least: int) -> None:
    svg = chart([1, 2, 3], "", hours)
    labels = ticks(svg, "xtick")
    assert least <= len(labels) <= 7 and len(set(labels)) == len(labels), labels
    xs = [float(x) for x in re.findall(r'<text x="([\d.]+)"[^>]*class="axis xtick"', svg)]
    assert xs == sorted(xs) and xs[-1] - xs[0] > 150
    assert ">UTC<" in svg


def test_the_page_offers_windows_from_fifteen_minutes() -> None:
    assert WINDOWS[0] == (0.25, "15m") and [h for h, _ in WINDOWS] == sorted(h for h, _ in WINDOWS)


def test_an_empty_table_is_not_drawn_as_an_alarm() -> None:
    empty = _table(["a"], [], "failures bad", "no failed merge attempts")
    assert "bad" not in empty and "no failed merge attempts" in empty
    assert 'class="failures bad"' in _table(["a"], [["x"]], "failures bad", "")
    assert "no samples yet in this window" in chart([], "s")
