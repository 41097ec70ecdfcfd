"""Line charts as inline SVG, drawn on the server: the dashboard needs no script and fetches nothing."""

from __future__ import annotations

import datetime as dt
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


def _number(value: float, unit: str) -> str:
    if unit == "s":
        if value >= 3600:
            return f"{value / 3600:.1f}h"
        if value >= 120:
            return f"{value / 60:.0f}m"
        return f"{value:.0f}s"
    if unit == "B":
        for suffix, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
            if value >= size:
                return f"{value / size:.1f}{suffix}"
        return f"{value:.0f}B"
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    return f"{value:g}" if value == int(value) else f"{value:.1f}"


def line_chart(chart: str, table: str, title: str, series: Sequence[Series], *, unit: str = "",
               start: dt.datetime, end: dt.datetime) -> str:
    """An SVG line chart of the series over [start, end]; each series a <polyline data-series=...> whose
    data-points attribute counts its points."""
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    values = [v for s in series for _, v in s.points if v is not None]
    top = max(values) if values else 0.0
    top = top * 1.1 if top > 0 else 1.0
    span = max((end - start).total_seconds(), 1.0)

    def x(moment: dt.datetime) -> float:
        return LEFT + plot_w * min(max((moment - start).total_seconds() / span, 0.0), 1.0)

    def y(value: float) -> float:
        return TOP + plot_h * (1 - value / top)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{escape(chart)}" '
             f'data-table="{escape(table)}" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
             f'role="img" aria-label="{escape(title)} of {escape(table)}">',
             f'<text x="{LEFT}" y="16" class="title">{escape(title)}</text>',
             f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" class="frame"/>']
    for fraction in (0.0, 0.5, 1.0):
        value = top / 1.1 * fraction if values else fraction
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y(value):.1f}" y2="{y(value):.1f}" class="grid"/>')
        parts.append(f'<text x="{LEFT - 4}" y="{y(value) + 4:.1f}" class="axis" text-anchor="end">'
                     f'{escape(_number(value, unit))}</text>')
    parts.append(f'<text x="{LEFT}" y="{HEIGHT - 8}" class="axis">{start:%m-%d %H:%M}</text>')
    parts.append(f'<text x="{LEFT + plot_w}" y="{HEIGHT - 8}" class="axis" text-anchor="end">{end:%m-%d %H:%M} UTC'
                 '</text>')
    legend_x = float(WIDTH - RIGHT - 7 * sum(len(one.label) + 2 for one in series))  # right-aligned legend
    for index, one in enumerate(series):
        colour = COLOURS[index % len(COLOURS)]
        points = [(x(moment), y(value)) for moment, value in one.points if value is not None]
        coordinates = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
        parts.append(f'<polyline data-series="{escape(one.name)}" data-points="{len(points)}" fill="none" '
                     f'stroke="{colour}" stroke-width="1.8" points="{coordinates}"/>')
        if len(points) == 1:
            parts.append(f'<circle cx="{points[0][0]:.1f}" cy="{points[0][1]:.1f}" r="2.5" fill="{colour}"/>')
        parts.append(f'<text x="{legend_x}" y="16" class="legend" fill="{colour}">{escape(one.label)}</text>')
        legend_x += 7 * (len(one.label) + 2)
    if not values:
        parts.append(f'<text x="{LEFT + plot_w / 2}" y="{TOP + plot_h / 2}" class="empty" text-anchor="middle">'
                     'no samples in this period</text>')
    parts.append("</svg>")
    return "".join(parts)
