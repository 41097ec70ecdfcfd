"""The year benchmark's figures: the per-day table, how flat each cost stays, and the SVG plot."""

from __future__ import annotations

import statistics
from pathlib import Path

COLUMNS = [
    ("day", "day", "{:>3}"),
    ("staging files", "objects_in_staging", "{:>13,}"),
    ("rows", "staging_rows", "{:>10,}"),
    ("pruned", "staging_rows_pruned", "{:>9,}"),
    ("sweep pass s", "full_listing_round_seconds", "{:>14.2f}"),
    ("reap s", "reap_seconds", "{:>7.2f}"),
    ("idle s", "idle_round_seconds", "{:>7.4f}"),
    ("100 new s", "new_round_seconds", "{:>9.3f}"),
    ("sample ms", "history_sample_ms", "{:>9.1f}"),
    ("catalog MB", "catalog_mb", "{:>10.1f}"),
    ("load", "load_avg_1m", "{:>5.1f}"),
]


def table_line(row: dict) -> str:
    return " ".join(form.format(row[key]) for _, key, form in COLUMNS)


def flatness(days: list[dict], first: int) -> dict:
    """Over the days from `first` on: each series' min, max, max/min, least-squares slope per day as a share of
    its mean, and the median of the later half of those days over that of the earlier half (which a few days of
    a loaded machine move less than max/min)."""
    window = [row for row in days if row["day"] >= first]
    if len(window) < 2:
        return {}
    result = {}
    xs = [row["day"] for row in window]
    mean_x = statistics.fmean(xs)
    for key in (
        "idle_round_seconds",
        "new_round_seconds",
        "full_listing_round_seconds",
        "history_sample_ms",
        "catalog_mb",
        "staging_rows",
        "reap_seconds",
    ):
        ys = [row[key] for row in window]
        mean_y = statistics.fmean(ys)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum(
            (x - mean_x) ** 2 for x in xs
        )
        early, late = statistics.median(ys[: len(ys) // 2]), statistics.median(ys[len(ys) // 2 :])
        result[key] = {
            "min": min(ys),
            "max": max(ys),
            "max_over_min": round(max(ys) / min(ys), 2) if min(ys) else None,
            "slope_per_day_of_mean": round(slope / mean_y, 4) if mean_y else None,
            "late_over_early_median": round(late / early, 2) if early else None,
        }
    return result


def svg_plot(days: list[dict], path: Path, title: str) -> None:
    """Small multiples, one panel per series against the day (no plotting library on this machine)."""
    panels = [
        ("idle round (s)", "idle_round_seconds"),
        ("round with 100 new objects, discovery (s)", "new_round_seconds"),
        ("rolling sweep pass, all its rounds (s)", "full_listing_round_seconds"),
        ("history sample (ms)", "history_sample_ms"),
        ("catalog on disk (MB)", "catalog_mb"),
        ("staging_objects rows", "staging_rows"),
    ]
    width, height, pad = 340, 190, 44
    last = max(row["day"] for row in days)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{3 * width}" height="{2 * height + 30}" '
        'font-family="sans-serif" font-size="11">',
        f'<text x="10" y="18" font-size="13">{title}</text>',
    ]
    for n, (label, key) in enumerate(panels):
        left, top = (n % 3) * width, 30 + (n // 3) * height
        top_value = max(row[key] for row in days) * 1.1 or 1
        plot_w, plot_h = width - pad - 12, height - pad - 16

        def point(
            row: dict,
            left: int = left,
            top: int = top,
            top_value: float = top_value,
            plot_w: int = plot_w,
            plot_h: int = plot_h,
            key: str = key,
        ) -> str:
            x = left + pad + plot_w * (row["day"] - 1) / max(last - 1, 1)
            y = top + 16 + plot_h * (1 - row[key] / top_value)
            return f"{x:.1f},{y:.1f}"

        x8 = left + pad + plot_w * 7 / max(last - 1, 1)
        out += [
            f'<text x="{left + pad}" y="{top + 10}">{label}</text>',
            f'<rect x="{left + pad}" y="{top + 16}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>',
            f'<line x1="{x8:.1f}" y1="{top + 16}" x2="{x8:.1f}" y2="{top + 16 + plot_h}" stroke="#ccc" '
            'stroke-dasharray="3,3"/>',
            f'<text x="{left + 4}" y="{top + 24}">{top_value:.3g}</text>',
            f'<text x="{left + 4}" y="{top + 16 + plot_h}">0</text>',
            f'<text x="{left + pad}" y="{top + 30 + plot_h}">day 1</text>',
            f'<text x="{left + pad + plot_w - 30}" y="{top + 30 + plot_h}">day {last}</text>',
            f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" '
            f'points="{" ".join(point(row) for row in days)}"/>',
        ]
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")
