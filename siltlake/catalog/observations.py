"""What operators watch, read from the catalog: the numbers behind the metrics and the dashboard, and the
metric history the daemons sample (docs/operations.md).

Every number here is derived from catalog rows, so every daemon that reports it reports the same value.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore

# The history columns a sample holds besides its time and table (each a number or null).
HISTORY_COLUMNS = (
    "pending_objects",
    "pending_bytes",
    "unmerged_objects",
    "unmerged_bytes",
    "merged_objects",
    "merged_bytes",
    "records_loaded",
    "bad_records",
    "freshness_p50_seconds",
    "freshness_p99_seconds",
    "freshness_max_seconds",
    "jobs_waiting",
    "jobs_running",
    "jobs_failed",
)


def quantile(values: Sequence[float], q: float) -> float | None:
    """The q-quantile (nearest rank) of values, None without any."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 1))))
    return ordered[rank - 1]


class Observations:
    """Read-only counts for metrics and the dashboard, and the metric_history samples."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core

    def _seconds(self, start: sa.ColumnElement, end: sa.ColumnElement) -> sa.ColumnElement:
        """end - start in seconds, in this database's dialect."""
        if self._core.dialect == "postgresql":
            return sa.func.extract("epoch", end - start)
        return (sa.func.julianday(end) - sa.func.julianday(start)) * 86400.0

    def _table_names(self, c: Connection) -> dict[int, str]:
        t = s.tables
        return {
            row.id: f"{row.schema_name}.{row.table_name}"
            for row in c.execute(sa.select(t.c.id, t.c.schema_name, t.c.table_name).where(t.c.dropped_time.is_(None)))
        }

    # --- staging -----------------------------------------------------------------------------------

    def staging(self) -> list[dict]:
        """Per live table: staging objects pending and processed, pending bytes, failing ones, records
        loaded and bad records (of every processed object, those whose rows reap pruned included).

        Constant cost in the staging history: the running totals (one row per table, kept by every write of
        staging rows) and the pending rows (a partial index)."""
        totals = s.staging_totals
        with self._core.tx() as c:
            names = self._table_names(c)
            waiting = self._backlog(c)
            counted = {
                row.table_id: row
                for row in c.execute(
                    sa.select(totals.c.table_id, totals.c.objects, totals.c.records_in, totals.c.bad_records)
                )
            }
        result = []
        for table_id, name in sorted(names.items(), key=lambda item: item[1]):
            row, wait = counted.get(table_id), waiting.get(table_id)
            registered = int(row.objects) if row else 0
            records_in = int(row.records_in) if row else 0
            bad_records = int(row.bad_records) if row else 0
            pending_count = int(wait.pending) if wait else 0
            result.append(
                {
                    "table": name,
                    "registered": registered,
                    "pending": pending_count,
                    "processed": registered - pending_count,
                    "pending_bytes": int(wait.pending_bytes) if wait else 0,
                    "failing": int(wait.failing) if wait else 0,
                    "records_loaded": records_in - bad_records,
                    "bad_records": bad_records,
                }
            )
        return result

    def backlog(self) -> dict[str, dict]:
        """Per live table: its pending staging objects, their bytes, and how many of them failed at least once.
        Reads the pending rows only (what the history sample needs every slot)."""
        with self._core.tx() as c:
            names = self._table_names(c)
            waiting = self._backlog(c)
        result = {}
        for table_id, name in sorted(names.items(), key=lambda item: item[1]):
            row = waiting.get(table_id)
            result[name] = {
                "pending": int(row.pending) if row else 0,
                "pending_bytes": int(row.pending_bytes) if row else 0,
                "failing": int(row.failing) if row else 0,
            }
        return result

    def _backlog(self, c: Connection) -> dict[int, Row]:
        # Pending rows are few and the partial index ix_staging_objects_pending finds them; processed ones,
        # nearly all of the table, are not read.
        so = s.staging_objects
        return {
            row.table_id: row
            for row in c.execute(
                sa.select(
                    so.c.table_id,
                    sa.func.count(so.c.id).label("pending"),
                    sa.func.coalesce(sa.func.sum(so.c.size), 0).label("pending_bytes"),
                    sa.func.coalesce(sa.func.sum(sa.case((so.c.failure_count > 0, 1), else_=0)), 0).label("failing"),
                )
                .where(so.c.processed_time.is_(None))
                .group_by(so.c.table_id)
            )
        }

    def unknown_count(self) -> int:
        with self._core.tx() as c:
            return c.execute(sa.select(sa.func.count()).select_from(s.unknown_staging_objects)).scalar_one()

    # --- small-file debt ---------------------------------------------------------------------------

    def small_file_debt(self) -> list[dict]:
        """Per partition of a live table with small objects no merge range covers yet: their count, bytes
        and the oldest one's upload time."""
        p, so, r = s.partitions, s.small_objects, s.merge_ranges
        merged_upto = (
            sa.select(r.c.partition_id, sa.func.max(r.c.upper_bound).label("upper"))
            .group_by(r.c.partition_id)
            .subquery()
        )
        with self._core.tx() as c:
            names = self._table_names(c)
            rows = c.execute(
                sa.select(
                    p.c.table_id,
                    p.c.partition_date,
                    sa.func.count(so.c.id).label("objects"),
                    sa.func.coalesce(sa.func.sum(so.c.content_length), 0).label("bytes"),
                    sa.func.min(so.c.upload_start_time).label("oldest"),
                )
                .select_from(
                    so.join(p, so.c.partition_id == p.c.id).outerjoin(merged_upto, merged_upto.c.partition_id == p.c.id)
                )
                .where(so.c.id > sa.func.coalesce(merged_upto.c.upper, 0))
                .group_by(p.c.table_id, p.c.partition_date)
                .order_by(p.c.table_id, p.c.partition_date)
            ).all()
        return [
            {
                "table": names[row.table_id],
                "date": row.partition_date,
                "objects": int(row.objects),
                "bytes": int(row.bytes),
                "oldest": row.oldest,
            }
            for row in rows
            if row.table_id in names
        ]

    # --- merges ------------------------------------------------------------------------------------

    def merge_log_totals(self) -> list[dict]:
        """Per live table, merge mode (where it ran) and outcome: jobs logged, their seconds, objects and
        bytes in and out (merge_job_log)."""
        log, p = s.merge_job_log, s.partitions
        seconds = self._seconds(log.c.start_time, log.c.end_time)
        mode = sa.func.coalesce(log.c.mode, "none")
        with self._core.tx() as c:
            names = self._table_names(c)
            rows = c.execute(
                sa.select(
                    p.c.table_id,
                    mode.label("mode"),
                    log.c.outcome,
                    sa.func.count(log.c.id).label("jobs"),
                    sa.func.coalesce(sa.func.sum(seconds), 0).label("seconds"),
                    sa.func.coalesce(sa.func.sum(log.c.objects_in), 0).label("objects_in"),
                    sa.func.coalesce(sa.func.sum(log.c.bytes_in), 0).label("bytes_in"),
                    sa.func.coalesce(sa.func.sum(log.c.bytes_out), 0).label("bytes_out"),
                )
                .select_from(log.join(p, log.c.partition_id == p.c.id))
                .group_by(p.c.table_id, mode, log.c.outcome)
            ).all()
        return [
            {
                "table": names[row.table_id],
                "mode": row.mode,
                "outcome": row.outcome,
                "jobs": int(row.jobs),
                "seconds": float(row.seconds),
                "objects_in": int(row.objects_in),
                "bytes_in": int(row.bytes_in),
                "bytes_out": int(row.bytes_out),
            }
            for row in rows
            if row.table_id in names
        ]

    def merge_durations(self, buckets: Sequence[float]) -> list[dict]:
        """Per merge mode and outcome: how many logged jobs took at most each bucket's seconds (cumulative,
        as a Prometheus histogram counts), their count and their total seconds."""
        log = s.merge_job_log
        seconds = self._seconds(log.c.start_time, log.c.end_time)
        mode = sa.func.coalesce(log.c.mode, "none")
        columns = [
            sa.func.coalesce(sa.func.sum(sa.case((seconds <= bound, 1), else_=0)), 0).label(f"b{i}")
            for i, bound in enumerate(buckets)
        ]
        with self._core.tx() as c:
            rows = c.execute(
                sa.select(
                    mode.label("mode"),
                    log.c.outcome,
                    sa.func.count(log.c.id).label("jobs"),
                    sa.func.coalesce(sa.func.sum(seconds), 0).label("seconds"),
                    *columns,
                ).group_by(mode, log.c.outcome)
            ).all()
        return [
            {
                "mode": row.mode,
                "outcome": row.outcome,
                "count": int(row.jobs),
                "sum": float(row.seconds),
                "buckets": [int(getattr(row, f"b{i}")) for i in range(len(buckets))],
            }
            for row in rows
        ]

    def recent_failures(self, limit: int = 20) -> list[dict]:
        """The newest failed merge attempts (merge_job_log) and the failing staging objects, newest first."""
        log, p = s.merge_job_log, s.partitions
        so = s.staging_objects
        with self._core.tx() as c:
            names = self._table_names(c)
            merges = c.execute(
                sa.select(p.c.table_id, p.c.partition_date, log.c.job_id, log.c.end_time, log.c.error)
                .select_from(log.join(p, log.c.partition_id == p.c.id))
                .where(log.c.outcome == "failed")
                .order_by(log.c.id.desc())
                .limit(limit)
            ).all()
            staging = c.execute(
                sa.select(so.c.table_id, so.c.uri, so.c.failure_count, so.c.last_failure_time, so.c.last_failure)
                .where(so.c.failure_count > 0, so.c.last_failure_time.is_not(None))
                .order_by(so.c.last_failure_time.desc())
                .limit(limit)
            ).all()
        failures = [
            {
                "time": row.end_time,
                "kind": "merge",
                "table": names.get(row.table_id, "?"),
                "what": f"{row.partition_date} job {row.job_id}",
                "reason": row.error or "",
            }
            for row in merges
        ]
        failures += [
            {
                "time": row.last_failure_time,
                "kind": "stream",
                "table": names.get(row.table_id, "?"),
                "what": f"{row.uri} ({row.failure_count} failures)",
                "reason": row.last_failure or "",
            }
            for row in staging
        ]
        return sorted(failures, key=lambda item: item["time"], reverse=True)[:limit]

    # --- freshness ---------------------------------------------------------------------------------

    def freshness(self, since: dt.datetime, until: dt.datetime) -> dict[str, list[float]]:
        """Per live table: the seconds from each staging object's put (its send time, else when it was
        registered) to the first published version showing its rows, for the small objects first shown
        in (since, until]."""
        so, st, p, v = s.small_objects, s.staging_objects, s.partitions, s.partition_versions
        shows = sa.or_(sa.and_(sa.not_(so.c.delayed), v.c.live_watermark >= so.c.id), v.c.covered_upper >= so.c.id)
        visible = (
            sa.select(sa.func.min(v.c.created_at))
            .where(v.c.partition_id == so.c.partition_id, shows)
            .correlate(so)
            .scalar_subquery()
        )
        put = sa.func.coalesce(st.c.send_time, st.c.receive_time)
        inner = (
            sa.select(p.c.table_id, put.label("put"), visible.label("visible"))
            .select_from(so.join(st, so.c.staging_object_id == st.c.id).join(p, so.c.partition_id == p.c.id))
            # Objects written before `since` minus a day cannot be first shown after it in practice; the
            # bound keeps the scan to recent objects.
            .where(so.c.upload_start_time > since - dt.timedelta(days=1))
            .subquery()
        )
        with self._core.tx() as c:
            names = self._table_names(c)
            rows = c.execute(
                sa.select(inner.c.table_id, inner.c.put, inner.c.visible).where(
                    inner.c.visible > since, inner.c.visible <= until
                )
            ).all()
        result: dict[str, list[float]] = {name: [] for name in names.values()}
        for row in rows:
            if row.table_id in names:
                result[names[row.table_id]].append(max(0.0, (row.visible - row.put).total_seconds()))
        return result

    def activity(self, since: dt.datetime, until: dt.datetime) -> dict[str, dict]:
        """Per live table, what happened in (since, until]: small objects and bytes merged (finished and
        continuing jobs), records loaded and bad records of the staging objects processed."""
        log, p, so = s.merge_job_log, s.partitions, s.staging_objects
        with self._core.tx() as c:
            names = self._table_names(c)
            merges = c.execute(
                sa.select(
                    p.c.table_id,
                    sa.func.coalesce(sa.func.sum(log.c.objects_in), 0).label("objects"),
                    sa.func.coalesce(sa.func.sum(log.c.bytes_out), 0).label("bytes"),
                )
                .select_from(log.join(p, log.c.partition_id == p.c.id))
                .where(log.c.outcome != "failed", log.c.end_time > since, log.c.end_time <= until)
                .group_by(p.c.table_id)
            ).all()
            loads = c.execute(
                sa.select(
                    so.c.table_id,
                    sa.func.coalesce(sa.func.sum(so.c.records_in), 0).label("records"),
                    sa.func.coalesce(sa.func.sum(so.c.bad_records), 0).label("bad"),
                )
                .where(so.c.processed_time > since, so.c.processed_time <= until)
                .group_by(so.c.table_id)
            ).all()
        result = {
            name: {"merged_objects": 0, "merged_bytes": 0, "records_loaded": 0, "bad_records": 0}
            for name in names.values()
        }
        for row in merges:
            if row.table_id in names:
                result[names[row.table_id]].update(merged_objects=int(row.objects), merged_bytes=int(row.bytes))
        for row in loads:
            if row.table_id in names:
                result[names[row.table_id]].update(records_loaded=int(row.records - row.bad), bad_records=int(row.bad))
        return result

    # --- history -----------------------------------------------------------------------------------

    def record_sample(self, sample_time: dt.datetime, rows: dict[str, dict]) -> int:
        """Store one sample per table at sample_time (a slot several daemons share: the first one's wins);
        how many rows were new."""
        values = [
            {
                "sample_time": sample_time,
                "table_name": table,
                **{column: numbers.get(column) for column in HISTORY_COLUMNS},
            }
            for table, numbers in rows.items()
        ]
        if not values:
            return 0
        with self._core.tx() as c:
            return self._core.insert_once(c, s.metric_history, ("sample_time", "table_name"), values)

    def has_sample(self, sample_time: dt.datetime) -> bool:
        h = s.metric_history
        with self._core.tx() as c:
            return c.execute(sa.select(h.c.id).where(h.c.sample_time == sample_time).limit(1)).first() is not None

    def history(self, since: dt.datetime) -> dict[str, list[dict]]:
        """Per table, its samples since `since` in time order."""
        h = s.metric_history
        with self._core.tx() as c:
            rows = c.execute(
                sa.select(h).where(h.c.sample_time >= since).order_by(h.c.table_name, h.c.sample_time)
            ).all()
        history: dict[str, list[dict]] = {}
        for row in rows:
            values = row._asdict()
            history.setdefault(values.pop("table_name"), []).append(values)
        return history

    def prune_history(self, before: dt.datetime) -> int:
        """Delete samples older than `before`; how many."""
        h = s.metric_history
        with self._core.tx() as c:
            return c.execute(h.delete().where(h.c.sample_time < before)).rowcount
