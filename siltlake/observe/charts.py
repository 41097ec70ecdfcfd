"""Line charts as inline SVG, drawn on the server: the dashboard needs no script and fetches nothing."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")
WIDTH, HEIGHT = 460, 170
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 26, 28


@dataclass
class Series:
    name: str  # also the data-series attribute the browser test looks for
    label: str
    points: Sequence[tuple[dt.datetime, float | None]]  # None: no value at that time (a gap)


# Tick steps: seconds for durations and the time axis, 1-2-5 multiples for counts and bytes.
DURATION_STEPS = (
    1,
    2,
    5,
    10,
    15,
    30,
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    10800,
    21600,
    43200,
    86400,
    172800,
    604800,
)
TIME_STEPS = (60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800, 2592000)
Y_TICKS, X_TICKS = 4, 6


def _steps(top: float, unit: str) -> float:
    """The smallest step that covers `top` in at most Y_TICKS intervals."""
    if unit == "s" and top >= 1:
        return next((step for step in DURATION_STEPS if step * Y_TICKS >= top), DURATION_STEPS[-1])
    if unit == "B" and top >= 1024:  # 1-2-5 steps of the binary unit the labels are written in
        size = max(size for size in (1 << 10, 1 << 20, 1 << 30) if size <= top)
        return _steps(top / size, "") * size
    magnitude = 10 ** math.floor(math.log10(top / Y_TICKS)) if top > 0 else 1
    return next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude * Y_TICKS >= top)


def _number(value: float, unit: str, step: float = 0.0) -> str:
    """A tick label with its unit, precise enough that ticks `step` apart read differently."""

    def plain(number: float, resolution: float) -> str:
        decimals = 0 if resolution >= 1 or resolution == 0 else min(3, -math.floor(math.log10(resolution)))
        return f"{number:.{decimals}f}"

    if unit == "s":
        for suffix, size in (("d", 86400), ("h", 3600), ("m", 60)):
            if value >= size:
                return f"{plain(value / size, step / size)}{suffix}"
        return f"{plain(value, step)}s"
    if unit == "B":
        for suffix, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= size:
                return f"{plain(value / size, step / size)}{suffix}"
        return f"{value:.0f}B"
    if value >= 10_000:
        return f"{plain(value / 1000, step / 1000)}k"
    return plain(value, step)


def _time_ticks(start: dt.datetime, end: dt.datetime) -> tuple[list[dt.datetime], str]:
    """Round times (UTC) along [start, end], at most X_TICKS of them, and the strftime format that tells them apart."""
    span = max((end - start).total_seconds(), 1.0)
    step = next((step for step in TIME_STEPS if span / step <= X_TICKS), TIME_STEPS[-1])
    epoch = dt.datetime(1970, 1, 1, tzinfo=start.tzinfo)
    first = math.ceil((start - epoch).total_seconds() / step) * step
    ticks = [epoch + dt.timedelta(seconds=first + i * step) for i in range(int(span // step) + 1)]
    ticks = [tick for tick in ticks if tick <= end]
    if step >= 86400:
        return ticks, "%m-%d"
    days = {tick.date() for tick in ticks}
    return ticks, ("%H:%M" if len(days) <= 1 else "%m-%d %H:%M")


def line_chart(
    chart: str,
    table: str,
    title: str,
    series: Sequence[Series],
    *,
    unit: str = "",
    start: dt.datetime,
    end: dt.datetime,
) -> str:
    """An SVG line chart of the series over [start, end]; each series a <polyline data-series=...> whose
    data-points attribute counts its points."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    values = [v for s in series for _, v in s.points if v is not None]
    highest = max(values) if values else 0.0
    step = _steps(highest, unit) if highest > 0 else 1.0
    top = step * max(math.ceil(highest / step), 1)
    span = max((end - start).total_seconds(), 1.0)

    def x(moment: dt.datetime) -> float:
        return LEFT + plot_w * min(max((moment - start).total_seconds() / span, 0.0), 1.0)

    def y(value: float) -> float:
        return TOP + plot_h * (1 - value / top)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{escape(chart)}" '
        f'data-table="{escape(table)}" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{escape(title)} of {escape(table)}">',
        f'<text x="{LEFT}" y="16" class="title">{escape(title)}</text>',
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" class="frame"/>',
    ]
    for index in range(round(top / step) + 1):
        value = index * step
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(value):.1f}" y2="{y(value):.1f}" class="grid"/>')
        parts.append(
            f'<text x="{LEFT - 4}" y="{y(value) + 4:.1f}" class="axis ytick" text-anchor="end">'
            f"{escape(_number(value, unit, step))}</text>"
        )
    ticks, form = _time_ticks(start, end)
    half_label = 2.9 * len(end.strftime(form))  # 10px text: about 5.8px a character
    for tick in ticks:
        if x(tick) - half_label < LEFT - 2 or x(tick) + half_label > WIDTH:
            continue  # its label would run into the "UTC" under the y-axis or off the chart
        parts.append(
            f'<line x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="{TOP + plot_h}" y2="{TOP + plot_h + 3}" '
            f'class="frame"/><text x="{x(tick):.1f}" y="{HEIGHT - 10}" class="axis xtick" '
            f'text-anchor="middle">{tick.strftime(form)}</text>'
        )
    parts.append(f'<text x="{LEFT - 4}" y="{HEIGHT - 10}" class="axis" text-anchor="end">UTC</text>')
    legend_x = float(WIDTH - RIGHT - 7 * sum(len(one.label) + 2 for one in series))  # right-aligned legend
    for index, one in enumerate(series):
        colour = COLOURS[index % len(COLOURS)]
        points = [(x(moment), y(value)) for moment, value in one.points if value is not None]
        coordinates = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
        parts.append(
            f'<polyline data-series="{escape(one.name)}" data-points="{len(points)}" fill="none" '
            f'stroke="{colour}" stroke-width="1.8" points="{coordinates}"/>'
        )
        if len(points) == 1:
            parts.append(f'<circle cx="{points[0][0]:.1f}" cy="{points[0][1]:.1f}" r="2.5" fill="{colour}"/>')
        parts.append(f'<text x="{legend_x}" y="16" class="legend" fill="{colour}">{escape(one.label)}</text>')
        legend_x += 7 * (len(one.label) + 2)
    if not values:
        parts.append(
            f'<text x="{LEFT + plot_w / 2}" y="{TOP + plot_h / 2}" class="empty" text-anchor="middle">'
            "no samples yet in this window</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
