"""Prometheus metrics (docs/operations.md lists each one).

CatalogCollector reads the catalog at each scrape, so `silt run` and every daemon pointed at one catalog
report the same numbers; the process's own run durations (stream rounds, publish and reap runs) are
histograms and counters kept in the process beside it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.hosts import local_host
from siltlake.logs import event

log = logging.getLogger(__name__)

# Seconds: from a one-second in-driver merge to an hour-long Spark stage; freshness from seconds to a day.
DURATION_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
FRESHNESS_BUCKETS = (5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 21600, 86400)

# --- the process's own metrics -------------------------------------------------------------------------

STREAM_ROUND = Histogram(
    "siltlake_stream_round_seconds",
    "Seconds of this process's stream rounds that found work (discovery, the Spark stage, the commit)",
    buckets=DURATION_BUCKETS,
    registry=None,
)
STREAM_RECORDS = Counter("siltlake_stream_records", "Records this process's stream rounds loaded", registry=None)
STREAM_DROPPED_FIELDS = Counter(
    "siltlake_stream_dropped_fields",
    "Values of fields that are no column of their "
    "table, dropped from the rows this process's stream rounds loaded (unknown_fields = "
    '"ignore")',
    ["table"],
    registry=None,
)
PUBLISH_RUN = Histogram(
    "siltlake_publish_run_seconds", "Seconds of this process's publish runs", buckets=DURATION_BUCKETS, registry=None
)
REAP_RUN = Histogram(
    "siltlake_reap_run_seconds", "Seconds of this process's reap runs", buckets=DURATION_BUCKETS, registry=None
)
REAP_DELETED_OBJECTS = Counter(
    "siltlake_reap_deleted_objects", "Objects this process's reap runs deleted", ["reason"], registry=None
)
REAP_DELETED_BYTES = Counter(
    "siltlake_reap_deleted_bytes", "Bytes this process's reap runs deleted", ["reason"], registry=None
)
MERGE_BATCHES = Counter(
    "siltlake_merge_batches",
    "Batches of merge jobs this process ran, by where: 'driver' (on "
    "the worker's own threads, at most merge.in_driver_bytes) or 'spark' (a Spark stage)",
    ["where"],
    registry=None,
)
ROUND_ERRORS = Counter(
    "siltlake_round_errors", "Rounds of this process's loops that failed (and were retried)", ["loop"], registry=None
)
STREAM_APPENDED = Counter(
    "siltlake_stream_appended_deliveries",
    "Tails of local staging files appended to that this process's stream rounds registered as new deliveries",
    registry=None,
)
STREAM_REWRITTEN = Counter(
    "siltlake_stream_rewritten_files",
    "Local staging files this process's stream rounds found "
    "changed other than by appending (reported once, not loaded)",
    registry=None,
)
STREAM_NOTIFICATIONS = Counter(
    "siltlake_stream_notifications",
    "What this process's stream rounds read from the "
    "stream.notifications queue, by kind: 'object' (an object-created record under the "
    "staging root), 'foreign' (another bucket or prefix: ignored), 'ignored' (test "
    "events, other event types), 'malformed' (a message left for the queue's redrive "
    "policy), 'unavailable' (a round that could not read the queue and relied on its "
    "listing)",
    ["kind"],
    registry=None,
)
PROCESS_METRICS = (
    STREAM_ROUND,
    STREAM_RECORDS,
    STREAM_DROPPED_FIELDS,
    STREAM_APPENDED,
    STREAM_REWRITTEN,
    STREAM_NOTIFICATIONS,
    PUBLISH_RUN,
    REAP_RUN,
    REAP_DELETED_OBJECTS,
    REAP_DELETED_BYTES,
    MERGE_BATCHES,
    ROUND_ERRORS,
)
# A merge worker's report adds up over its run: what was counted of each, by id.
_merge_seen: dict[int, tuple[int, int]] = {}


def observe_report(loop: str, report: Any) -> None:
    """Count a finished round of a loop: "stream", "publish", "reap", or "merge" (a worker's report, which adds
    up over its run; the merge jobs themselves are counted from the catalog)."""
    if loop == "merge":
        driver, spark = _merge_seen.get(id(report), (0, 0))
        MERGE_BATCHES.labels("driver").inc(report.in_driver - driver)
        MERGE_BATCHES.labels("spark").inc(report.stages - spark)
        _merge_seen[id(report)] = (report.in_driver, report.stages)
    elif loop == "stream":
        _observe_notifications(report.notifications)
        STREAM_APPENDED.inc(report.appended)
        STREAM_REWRITTEN.inc(len(report.rewritten))
        if report.processed or report.registered:
            STREAM_ROUND.observe(report.seconds)
            STREAM_RECORDS.inc(report.records_loaded)
            for dropped in report.dropped_by_object:
                STREAM_DROPPED_FIELDS.labels(dropped.table).inc(dropped.values)
    elif loop == "publish":
        PUBLISH_RUN.observe(report.seconds)
    elif loop == "reap":
        REAP_RUN.observe(report.seconds)
        for reason, totals in report.reasons.items():
            if totals.objects:
                REAP_DELETED_OBJECTS.labels(reason).inc(totals.objects)
                REAP_DELETED_BYTES.labels(reason).inc(totals.bytes)


def _settling(summary: list, now) -> Iterator[Metric]:  # catalog.waits' SettleSummary rows
    """Local staging files still being written, and files rewritten in place, per staging root."""
    waiting = GaugeMetricFamily(
        "siltlake_staging_unsettled_files",
        "Local staging files still being written, waiting to settle (stream.settle_time)",
        labels=["staging_root"],
    )
    oldest = GaugeMetricFamily(
        "siltlake_staging_unsettled_oldest_seconds",
        "How long the longest-waiting of them has waited",
        labels=["staging_root"],
    )
    rewritten = GaugeMetricFamily(
        "siltlake_staging_rewritten_files",
        "Local staging files changed other than by appending: their new bytes are not loaded",
        labels=["staging_root"],
    )
    stopped = GaugeMetricFamily(
        "siltlake_staging_stopped_files",
        "Local staging files whose following stopped "
        "(rewritten in place, or a delivery of theirs is an unknown object): nothing more of "
        "them loads until `silt staging resume`",
        labels=["staging_root"],
    )
    for row in summary:
        waiting.add_metric([row.staging_root], row.waiting)
        oldest.add_metric(
            [row.staging_root],
            (now - row.oldest_first_seen).total_seconds() if row.oldest_first_seen is not None else 0.0,
        )
        rewritten.add_metric([row.staging_root], row.rewritten)
        stopped.add_metric([row.staging_root], row.rewritten)
    yield from (waiting, oldest, rewritten, stopped)


def _observe_notifications(tally: Any) -> None:
    """Count what a stream round read from its notification queue (a NotificationTally; None: no queue)."""
    if tally is None:
        return
    for kind, count in (
        ("object", tally.objects),
        ("foreign", tally.foreign),
        ("ignored", tally.ignored),
        ("malformed", tally.malformed),
        ("unavailable", int(tally.error is not None)),
    ):
        if count:
            STREAM_NOTIFICATIONS.labels(kind).inc(count)


def observe_error(loop: str) -> None:
    ROUND_ERRORS.labels(loop).inc()


# --- the catalog's numbers -----------------------------------------------------------------------------


def _add_histogram(
    family: HistogramMetricFamily,
    labels: list[str],
    bounds: tuple[float, ...],
    cumulative: list[int],
    count: int,
    total: float,
) -> None:
    buckets = [(f"{bound:g}", value) for bound, value in zip(bounds, cumulative, strict=True)]
    family.add_metric(labels, [*buckets, ("+Inf", count)], total)


def freshness_buckets(values: list[float], bounds: tuple[float, ...] = FRESHNESS_BUCKETS) -> list[int]:
    return [sum(1 for value in values if value <= bound) for bound in bounds]


class CatalogCollector(Collector):
    """The deployment's state as Prometheus metrics, read from its catalog at each scrape.

    Scrapes less than `reuse_seconds` apart (several Prometheus servers, a dashboard reload) share one
    reading of the catalog."""

    def __init__(self, deployment: Deployment, reuse_seconds: float = 5.0) -> None:
        self.deployment = deployment
        self.reuse_seconds = reuse_seconds
        self._last: tuple[float, list[Metric]] | None = None
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if self._last is None or time.monotonic() - self._last[0] >= self.reuse_seconds:
                self._last = (time.monotonic(), self._read())
            families = self._last[1]
        yield from families

    def _read(self) -> list[Metric]:
        started = time.monotonic()
        up = GaugeMetricFamily("siltlake_catalog_up", "1 when the last scrape could read the catalog, else 0")
        try:
            families = list(self._families())
        except Exception as exc:  # a scrape must answer even when the catalog is down
            event(log, "metrics.scrape_failed", logging.WARNING, reason=f"{type(exc).__name__}: {exc}")
            up.add_metric([], 0)
            return [up]
        up.add_metric([], 1)
        seconds = GaugeMetricFamily(
            "siltlake_catalog_scrape_seconds", "Seconds the catalog queries of this scrape took"
        )
        seconds.add_metric([], time.monotonic() - started)
        return [up, *families, seconds]

    def _families(self) -> Iterator[Metric]:
        catalog, config = self.deployment.catalog, self.deployment.config
        now = utcnow()
        observations = catalog.observations

        staging = observations.staging()
        gauges = {
            "pending": GaugeMetricFamily(
                "siltlake_staging_objects_pending",
                "Staging objects registered and not processed yet (the backlog)",
                labels=["table"],
            ),
            "pending_bytes": GaugeMetricFamily(
                "siltlake_staging_pending_bytes", "Bytes of the pending staging objects", labels=["table"]
            ),
            "registered": GaugeMetricFamily(
                "siltlake_staging_objects_registered",
                "Staging objects registered, processed or not (rows reap pruned included)",
                labels=["table"],
            ),
            "failing": GaugeMetricFamily(
                "siltlake_staging_objects_failing",
                "Pending staging objects whose processing failed at least once",
                labels=["table"],
            ),
        }
        loaded = CounterMetricFamily(
            "siltlake_records_loaded", "Records loaded from processed staging objects", labels=["table"]
        )
        bad = CounterMetricFamily(
            "siltlake_bad_records",
            "Bad records of processed staging objects (dropped or kept in error files)",
            labels=["table"],
        )
        for row in staging:
            for key, family in gauges.items():
                family.add_metric([row["table"]], row[key])
            loaded.add_metric([row["table"]], row["records_loaded"])
            bad.add_metric([row["table"]], row["bad_records"])
        yield from gauges.values()
        yield loaded
        yield bad

        unknown = GaugeMetricFamily(
            "siltlake_unknown_objects", "Staging objects set aside as unknown (`silt unknown list`)"
        )
        unknown.add_metric([], observations.unknown_count())
        yield unknown
        yield from _settling(catalog.waits.summary(now), now)

        status = catalog.merge_queue.status(now, config.merge.job_timeout, local_host())
        partitions = GaugeMetricFamily(
            "siltlake_partitions",
            "Partitions by state (new, live, closed, switched; a derived table's built, stale)",
            labels=["table", "state"],
        )
        jobs = GaugeMetricFamily(
            "siltlake_merge_jobs",
            "Merge jobs by state: scheduled (waiting), due, running, "
            "stale (heartbeat lost), continuing, failed (parked)",
            labels=["table", "state"],
        )
        unmerged = GaugeMetricFamily(
            "siltlake_unmerged_objects", "Small objects no merge range covers yet", labels=["table"]
        )
        unmerged_bytes = GaugeMetricFamily(
            "siltlake_unmerged_bytes", "Bytes of the unmerged small objects", labels=["table"]
        )
        oldest = GaugeMetricFamily(
            "siltlake_oldest_unmerged_age_seconds", "Age of the oldest unmerged small object", labels=["table"]
        )
        for entry in status:
            for state, count in entry["partitions"].items():
                partitions.add_metric([entry["table"], state], count)
            for state, count in entry["jobs"].items():
                jobs.add_metric([entry["table"], state], count)
            unmerged.add_metric([entry["table"]], entry["unmerged_objects"])
            unmerged_bytes.add_metric([entry["table"]], entry["unmerged_bytes"])
            oldest.add_metric([entry["table"]], entry["oldest_unmerged_age_seconds"] or 0.0)
        yield from (partitions, jobs, unmerged, unmerged_bytes, oldest)

        debt = GaugeMetricFamily(
            "siltlake_small_file_debt_objects", "Small objects not merged yet, per partition", labels=["table", "date"]
        )
        debt_bytes = GaugeMetricFamily(
            "siltlake_small_file_debt_bytes",
            "Bytes of the small objects not merged yet, per partition",
            labels=["table", "date"],
        )
        for row in observations.small_file_debt():
            debt.add_metric([row["table"], row["date"].isoformat()], row["objects"])
            debt_bytes.add_metric([row["table"], row["date"].isoformat()], row["bytes"])
        yield debt
        yield debt_bytes

        merge_seconds = CounterMetricFamily(
            "siltlake_merge_seconds",
            "Seconds merge jobs ran, by where they ran (mode) and outcome",
            labels=["table", "mode", "outcome"],
        )
        merged_objects = CounterMetricFamily(
            "siltlake_merged_objects",
            "Small objects merge jobs took in (finished and continuing jobs)",
            labels=["table", "mode"],
        )
        merged_bytes = CounterMetricFamily(
            "siltlake_merged_bytes", "Bytes merge jobs wrote (finished and continuing jobs)", labels=["table", "mode"]
        )
        merged: dict[tuple[str, str], list[int]] = {}
        for row in observations.merge_log_totals():
            merge_seconds.add_metric([row["table"], row["mode"], row["outcome"]], row["seconds"])
            if row["outcome"] != "failed":
                totals = merged.setdefault((row["table"], row["mode"]), [0, 0])
                totals[0] += row["objects_in"]
                totals[1] += row["bytes_out"]
        for (table, mode), (objects, size) in sorted(merged.items()):
            merged_objects.add_metric([table, mode], objects)
            merged_bytes.add_metric([table, mode], size)
        yield from (merge_seconds, merged_objects, merged_bytes)

        durations = HistogramMetricFamily(
            "siltlake_merge_job_duration_seconds",
            "Seconds each logged merge attempt took, by where it ran (mode) and outcome",
            labels=["mode", "outcome"],
        )
        for row in observations.merge_durations(DURATION_BUCKETS):
            _add_histogram(
                durations, [row["mode"], row["outcome"]], DURATION_BUCKETS, row["buckets"], row["count"], row["sum"]
            )
        yield durations

        window = config.observe.freshness_window
        freshness = HistogramMetricFamily(
            "siltlake_freshness_seconds",
            f"Seconds from a staging object's put to its rows being visible to "
            f"readers, for the objects made visible in the last observe.freshness_window ({window}s)",
            labels=["table"],
        )
        for table, values in sorted(observations.freshness(now - timedelta(seconds=window), now).items()):
            _add_histogram(
                freshness, [table], FRESHNESS_BUCKETS, freshness_buckets(values), len(values), float(sum(values))
            )
        yield freshness


def registry_for(deployment: Deployment, reuse_seconds: float = 5.0) -> CollectorRegistry:
    """A registry of the catalog's metrics and this process's own."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CatalogCollector(deployment, reuse_seconds))
    for metric in PROCESS_METRICS:
        registry.register(metric)
    return registry


def summary_line(deployment: Deployment) -> str:
    """One line of what a scrape of /metrics says now, summed over the tables."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[str, float] = {}
    jobs: dict[str, float] = {}
    text = generate_latest(registry_for(deployment)).decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "siltlake_merge_jobs":
                jobs[sample.labels["state"]] = jobs.get(sample.labels["state"], 0) + sample.value
            elif not sample.name.endswith(("_bucket", "_created")):
                totals[sample.name] = totals.get(sample.name, 0) + sample.value

    def total(name: str) -> int:
        return int(totals.get(name, 0))

    merged = total("siltlake_merged_objects_total")
    return (
        f"{total('siltlake_records_loaded_total'):,} records loaded ({total('siltlake_bad_records_total'):,} bad), "
        f"{total('siltlake_staging_objects_pending'):,} staging objects pending, "
        f"{total('siltlake_unknown_objects'):,} unknown, {total('siltlake_unmerged_objects'):,} small objects not "
        f"merged, {merged:,} merged in {total('siltlake_merge_job_duration_seconds_count'):,} merge attempts; "
        f"merge jobs {int(jobs.get('running', 0))} running, {int(jobs.get('stale', 0))} stale, "
        f"{int(jobs.get('failed', 0))} failed"
    )
