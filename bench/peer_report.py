"""peers_bench.py's report: markdown tables of each peer's medians and siltlake's ratios over them."""

from __future__ import annotations

import statistics


def median(samples: dict, name: str) -> float | None:
    return statistics.median(samples[name]) if samples.get(name) else None


def ratio(mine: float | None, theirs: float | None) -> str:
    return f"{mine / theirs:.2f}x" if mine and theirs else "-"


def seconds_cell(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else "-"


def peer_table(title: str, samples: dict, labels: dict[str, str], base: str = "siltlake") -> list[str]:
    """One row per peer: its median wall (and CPU) seconds, and `base`'s medians over the peer's (cold over
    cold, warm over warm); the warm columns only where a peer ran warm."""
    kinds = [kind for kind in ("cold", "warm") if any(name.endswith(f" {kind}") for name in samples)]
    lines = [f"#### {title}", ""]
    lines.append("| peer | " + " | ".join(f"{kind}: wall s (CPU s)" for kind in kinds) + " | ")
    lines[-1] += " | ".join(f"{base} / peer, {kind}: wall (CPU)" for kind in kinds) + " |"
    lines.append("|---|" + "---:|" * 2 * len(kinds))
    for key, label in labels.items():
        names = [f"{key} {kind}" for kind in kinds]
        if all(median(samples, name) is None for name in names):
            continue
        cells = []
        for name in names:
            wall, cpu = median(samples, name), median(samples, f"{name} cpu")
            cells.append(f"{seconds_cell(wall)} ({cpu:.2f})" if wall is not None and cpu is not None else "-")
        for kind, name in zip(kinds, names, strict=True):
            wall_ratio = ratio(median(samples, f"{base} {kind}"), median(samples, name))
            cpu_ratio = ratio(median(samples, f"{base} {kind} cpu"), median(samples, f"{name} cpu"))
            cells.append(f"{wall_ratio} ({cpu_ratio})" if wall_ratio != "-" else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


def forked_table(title: str, samples: dict, labels: dict[str, str]) -> list[str]:
    """The peers again, against `silt` run through a fork server started before the rounds (its CPU column is
    the client process's only: the command runs in the server's fork)."""
    if "siltlake-forked cold" not in samples:
        return []
    others = {key: label for key, label in labels.items() if key != "siltlake"}
    forked = {"siltlake-forked": "siltlake through `silt forkserver` (CPU: the client only)", **others}
    return peer_table(f"{title}, siltlake through its fork server", samples, forked, base="siltlake-forked")


def runs_lines(title: str, samples: dict) -> list[str]:
    lines = [f"{title}, every round (s):", ""]
    lines += [f"- {name}: {', '.join(f'{s:.3f}' for s in values)}" for name, values in samples.items()]
    return [*lines, ""]
