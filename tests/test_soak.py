"""Soak: stream, merge and publish daemons under a steady rate of staging objects keep a bounded backlog
and flat memory (tests/soak.py; `make soak` runs 10 minutes: SOAK_SECONDS, SOAK_RATE, SOAK_SUMMARY)."""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import pytest

from .soak import MIB, PUBLISH_INTERVAL, STREAM_INTERVAL, soak, thirds

pytestmark = [pytest.mark.spark, pytest.mark.postgres]

SECONDS = float(os.environ.get("SOAK_SECONDS", "30"))
RATE = float(os.environ.get("SOAK_RATE", "4"))
# Backlog bound: a round of each daemon may wait out its interval and then take as long again on a loaded
# machine; ten intervals' worth of objects is far above that and far below unbounded growth.
BOUND_INTERVALS = 10
# Memory margins, last third's median over the middle third's. The driver is Python: allocator arenas
# and caches move a few MiB. The JVM's heap is capped (spark.driver.memory 512m); it commits pages as
# the heap expands toward the cap and keeps them, so RSS rises in steps long after start-up without a
# leak. A real leak would keep growing past any margin over 10 minutes and end at the cap with an
# OutOfMemoryError, which kills the daemon (checked at every sample).
DRIVER_MARGIN = (1.10, 24 * MIB)
JVM_MARGIN = (1.25, 96 * MIB)


def test_backlog_stays_bounded_and_memory_flat(tmp_path: Path, postgres_url: str) -> None:
    report = soak(tmp_path, postgres_url, SECONDS, rate=RATE)
    print()
    print(report.table())
    summary = report.summary()
    print(summary)
    if os.environ.get("SOAK_SUMMARY"):
        report.write(Path(os.environ["SOAK_SUMMARY"]))
    samples = report.samples
    assert len(samples) >= 12, len(samples)
    bounds = {
        "staging": RATE * STREAM_INTERVAL,
        "unpublished": RATE * PUBLISH_INTERVAL,
        "unmerged": RATE * STREAM_INTERVAL,
    }
    for name, per_interval in bounds.items():
        values = [getattr(x, name) for x in samples]
        assert max(values) <= BOUND_INTERVALS * per_interval, (name, values)
        middle, last = thirds(values)
        # Not growing: the last third's mean (rounds make a sawtooth, so a mean, not a median) sits no more
        # than two intervals' worth above the middle third's.
        assert statistics.mean(last) <= statistics.mean(middle) + 2 * per_interval, (name, values)
    for key in samples[0].rss:
        factor, slack = JVM_MARGIN if key.endswith("jvm") else DRIVER_MARGIN
        middle, last = thirds([x.rss[key] for x in samples])
        assert statistics.median(last) <= statistics.median(middle) * factor + slack, (
            key,
            [round(v / MIB) for v in middle],
            [round(v / MIB) for v in last],
        )
