"""The merge queue's status by table (MergeQueue.status and of_table): partitions by state, unmerged small objects,
and the queued jobs, running ones counted stale once their worker went silent or its process is gone."""

from __future__ import annotations

import datetime as dt
from typing import Any, TypedDict

import sqlalchemy as sa

from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore, rows_values
from siltlake.catalog.derived import derived_table_states
from siltlake.catalog.rows import DERIVED_PARTITION_STATES, PARTITION_STATES, LocalHost


class TableQueueStatus(TypedDict):
    """One live table's line of MergeQueue.status."""

    table: str  # schema.name
    partitions: dict[str, int]  # by state: PARTITION_STATES, or a derived table's DERIVED_PARTITION_STATES
    unmerged_objects: int
    unmerged_bytes: int
    oldest_unmerged_age_seconds: float | None
    jobs: dict[str, int]  # by state: scheduled, due, running, stale, continuing, failed
    failed_jobs: list[dict[str, Any]]  # job_id, date, attempts, error


def table_statuses(
    core: CatalogCore, now: dt.datetime, timeout: float, local: LocalHost | None = None
) -> list[TableQueueStatus]:
    """Per live table: partitions by state (a derived table's by DERIVED_PARTITION_STATES), unmerged small
    objects, jobs by state, parked errors.

    A running job is stale once its heartbeat is older than `timeout`, or (with `local`) at once when
    its process on this host is gone."""
    t, p, so, r, j = s.tables, s.partitions, s.small_objects, s.merge_ranges, s.merge_jobs
    stale_before = now - dt.timedelta(seconds=timeout)
    with core.tx() as c:
        tables = c.execute(
            sa.select(t.c.id, t.c.schema_name, t.c.table_name, t.c.switched_partitions)
            .where(t.c.dropped_time.is_(None))
            .order_by(t.c.schema_name, t.c.table_name)
        ).all()
        status: dict[int, TableQueueStatus] = {
            row.id: {
                "table": f"{row.schema_name}.{row.table_name}",
                "partitions": dict.fromkeys(PARTITION_STATES, 0),
                "unmerged_objects": 0,
                "unmerged_bytes": 0,
                "oldest_unmerged_age_seconds": None,
                "jobs": {"scheduled": 0, "due": 0, "running": 0, "stale": 0, "continuing": 0, "failed": 0},
                "failed_jobs": [],
            }
            for row in tables
        }
        state = sa.case(
            (p.c.switched, "switched"),
            (p.c.last_live_object_id.is_not(None), "closed"),
            (p.c.current_manifest_version >= 0, "live"),
            else_="new",
        )
        # What is pending only: the switched partitions are a running count per table, the others a
        # partial index; unmerged objects are in those others or in a partition with a merge job (a stream
        # commit schedules one with each object, and a merge leaves one behind while objects remain).
        for row in tables:
            status[row.id]["partitions"]["switched"] = row.switched_partitions
        # Counted here, not by GROUP BY: grouped, SQLite scans every partition by the table's index.
        for row in c.execute(sa.select(p.c.table_id, state.label("state")).where(p.c.switched.is_(False))):
            if row.table_id in status:
                status[row.table_id]["partitions"][row.state] += 1
        # A derived table's partitions are built or stale, never a log table's new, live or closed.
        for table_id, derived_state in derived_table_states(c, now).items():
            if table_id in status:
                entry = status[table_id]
                counted = sum(entry["partitions"].values())
                entry["partitions"] = {
                    name: counted if name == derived_state else 0 for name in DERIVED_PARTITION_STATES
                }
        merged_upto = (
            sa.select(sa.func.coalesce(sa.func.max(r.c.upper_bound), 0))
            .where(r.c.partition_id == p.c.id)
            .scalar_subquery()
        )
        pending = sa.union(sa.select(p.c.id).where(p.c.switched.is_(False)), sa.select(j.c.partition_id))
        unmerged = c.execute(
            sa.select(
                p.c.table_id,
                sa.func.count(so.c.id),
                sa.func.coalesce(sa.func.sum(so.c.content_length), 0),
                sa.func.min(so.c.upload_start_time),
            )
            .select_from(so.join(p, so.c.partition_id == p.c.id))
            .where(p.c.id.in_(pending), so.c.id > merged_upto)
            .group_by(p.c.table_id)
        ).all()
        for table_id, objects, size, oldest in rows_values(unmerged):
            if table_id in status:
                entry = status[table_id]
                entry["unmerged_objects"], entry["unmerged_bytes"] = objects, int(size)
                if oldest is not None:
                    entry["oldest_unmerged_age_seconds"] = max(0.0, (now - oldest).total_seconds())
        jobs = c.execute(
            sa.select(
                p.c.table_id,
                p.c.partition_date,
                j.c.id,
                j.c.ongoing_mark,
                j.c.schedule_time,
                j.c.heartbeat_time,
                j.c.continued_from,
                j.c.attempts,
                j.c.last_error,
                j.c.owner_host,
                j.c.owner_pid,
            )
            .select_from(j.join(p, j.c.partition_id == p.c.id))
            .order_by(j.c.id)
        ).all()
        for job in jobs:
            if job.table_id not in status:
                continue
            entry = status[job.table_id]
            kind = _job_state(job, now, stale_before, local)
            if kind == "failed":
                entry["failed_jobs"].append(
                    {
                        "job_id": job.id,
                        "date": job.partition_date.isoformat(),
                        "attempts": job.attempts,
                        "error": job.last_error,
                    }
                )
            entry["jobs"][kind] += 1
    return list(status.values())


def table_jobs(
    core: CatalogCore, table_id: int, now: dt.datetime, timeout: float, local: LocalHost | None = None
) -> list[dict]:
    """A table's jobs in the queue, by id: job_id, date, state (as table_statuses counts them), schedule_time,
    heartbeat_time, attempts, owner, continued_from, last_error."""
    j, p = s.merge_jobs, s.partitions
    stale_before = now - dt.timedelta(seconds=timeout)
    with core.tx() as c:
        jobs = c.execute(
            sa.select(
                p.c.partition_date,
                j.c.id,
                j.c.ongoing_mark,
                j.c.schedule_time,
                j.c.heartbeat_time,
                j.c.continued_from,
                j.c.attempts,
                j.c.last_error,
                j.c.owner,
                j.c.owner_host,
                j.c.owner_pid,
            )
            .select_from(j.join(p, j.c.partition_id == p.c.id))
            .where(p.c.table_id == table_id)
            .order_by(j.c.id)
        ).all()
    return [
        {
            "job_id": job.id,
            "date": job.partition_date,
            "state": _job_state(job, now, stale_before, local),
            "schedule_time": job.schedule_time,
            "heartbeat_time": job.heartbeat_time,
            "attempts": job.attempts,
            "owner": job.owner,
            "continued_from": job.continued_from,
            "last_error": job.last_error,
        }
        for job in jobs
    ]


def _job_state(job, now: dt.datetime, stale_before: dt.datetime, local: LocalHost | None) -> str:  # a merge_jobs row
    """A queued job's state: failed (parked), running or stale (its worker went silent or its process is
    gone), continuing (takes a finished job's leftovers), due or scheduled (waiting)."""
    if job.ongoing_mark < 0:
        return "failed"
    if job.ongoing_mark > 0:
        fresh = job.heartbeat_time and job.heartbeat_time >= stale_before
        return "running" if fresh and not (local and local.holds_dead_claim(job)) else "stale"
    if job.continued_from is not None:
        return "continuing"
    return "due" if job.schedule_time <= now else "scheduled"
