"""The metric history the dashboard charts: the daemons sample the catalog every observe.history_interval
seconds into its metric_history table (reap prunes it after observe.history_retention).

Samples fall on slots, multiples of the interval since the epoch: every daemon that samples the same slot
computes the same row, and the first one stored wins, so several daemons on one catalog keep one series.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from typing import TypedDict

from siltlake.catalog.observations import quantile
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.hosts import local_host
from siltlake.logs import event

log = logging.getLogger(__name__)


def slot_of(now: dt.datetime, interval: int) -> dt.datetime:
    """The newest sample slot at or before `now` (naive UTC)."""
    epoch = dt.datetime(1970, 1, 1)
    seconds = int((now - epoch).total_seconds())
    return epoch + dt.timedelta(seconds=seconds - seconds % interval)


class Sample(TypedDict):
    """One slot's sample: the slot's end, and each live table's numbers by name."""

    slot: dt.datetime
    tables: dict[str, dict]


def sample(deployment: Deployment, now: dt.datetime | None = None, interval: int | None = None) -> Sample:
    """Each live table's numbers for the slot ending at or before `now`: the backlog, the small-file debt and
    the merge jobs as they are, and what was merged, loaded and made visible during the slot."""
    catalog, config = deployment.catalog, deployment.config
    interval = interval or config.observe.history_interval or 60
    until = slot_of(now or utcnow(), interval)
    since = until - dt.timedelta(seconds=interval)
    observations = catalog.observations
    rows: dict[str, dict] = {}
    for table, backlog in observations.backlog().items():
        rows[table] = {"pending_objects": backlog["pending"], "pending_bytes": backlog["pending_bytes"]}
    for row in catalog.merge_queue.status(until, config.merge.job_timeout, local_host()):
        jobs = row["jobs"]
        rows.setdefault(row["table"], {}).update(
            unmerged_objects=row["unmerged_objects"],
            unmerged_bytes=row["unmerged_bytes"],
            jobs_waiting=jobs["scheduled"] + jobs["due"] + jobs["continuing"],
            jobs_running=jobs["running"] + jobs["stale"],
            jobs_failed=jobs["failed"],
        )
    for table, numbers in observations.activity(since, until).items():
        rows.setdefault(table, {}).update(numbers)
    for table, values in observations.freshness(since, until).items():
        rows.setdefault(table, {}).update(
            freshness_p50_seconds=quantile(values, 0.5),
            freshness_p99_seconds=quantile(values, 0.99),
            freshness_max_seconds=max(values) if values else None,
        )
    return {"slot": until, "tables": rows}


def record(deployment: Deployment, now: dt.datetime | None = None, interval: int | None = None) -> int:
    """Sample the slot at or before `now` unless another process did; how many rows this stored."""
    interval = interval or deployment.config.observe.history_interval or 60
    slot = slot_of(now or utcnow(), interval)
    if deployment.catalog.observations.has_sample(slot):
        return 0
    taken = sample(deployment, now, interval)
    return deployment.catalog.observations.record_sample(taken["slot"], taken["tables"])


class HistorySampler:
    """A thread that records a sample each observe.history_interval until stopped (none when it is 0).

    A failing sample (the catalog away) is logged and the next slot tried; it never stops the daemon."""

    def __init__(self, deployment: Deployment, stop: threading.Event | None = None) -> None:
        self.deployment = deployment
        self.interval = deployment.config.observe.history_interval
        self.stop_event = stop or threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> HistorySampler:
        if self.interval > 0:
            self.thread = threading.Thread(target=self._run, name="silt-history", daemon=True)
            self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()

    def _run(self) -> None:
        while not self.stop_event.is_set():
            try:
                stored = record(self.deployment, interval=self.interval)
                if stored:
                    event(log, "history.sample", logging.DEBUG, rows=stored)
            except Exception as exc:  # the next slot tries again
                event(log, "history.sample_failed", logging.WARNING, reason=f"{type(exc).__name__}: {exc}")
            now = utcnow()
            next_slot = slot_of(now, self.interval) + dt.timedelta(seconds=self.interval)
            self.stop_event.wait(max(1.0, (next_slot - now).total_seconds() + 1.0))
