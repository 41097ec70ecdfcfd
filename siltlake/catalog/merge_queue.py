"""The merge job queue and merge ranges (docs/design.md, "Merge"): claim, heartbeat, commit, fail, park, status."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence
from typing import Any, TypedDict

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import merge_statements as statements
from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore, row_values, rows_values, table_record
from siltlake.catalog.derived import derived_table_states
from siltlake.catalog.merge_shares import FAIR_LEVELS, FairOrder
from siltlake.catalog.records import (
    DERIVED_PARTITION_STATES,
    PARTITION_STATES,
    ClaimedJob,
    FileStats,
    JobOutcome,
    LocalHost,
    LostMergeJob,
    MergeConflict,
    RangeRow,
    RangeWrite,
    UnmergedObject,
)

_DATES_IN_QUERY = 500  # dates matched in a query; more are kept after reading the table's rows

# Names the PostgreSQL advisory lock that serialises claims (SQLite's write lock does the same there).
_MERGE_CLAIM_LOCK = 0x5117_3E26


class ClaimedJobs(list):
    """The jobs a claim took, and how many of the due jobs it looked at it passed over (its limit reached, a
    partition busy, a table at its cap; it looks one job beyond each table's cap): a worker claims again when
    its own jobs end only if some were passed over."""

    passed_over: int = 0



class TableQueueStatus(TypedDict):
    """One live table's line of MergeQueue.status."""

    table: str  # schema.name
    partitions: dict[str, int]  # by state: PARTITION_STATES, or a derived table's DERIVED_PARTITION_STATES
    unmerged_objects: int
    unmerged_bytes: int
    oldest_unmerged_age_seconds: float | None
    jobs: dict[str, int]  # by state: scheduled, due, running, stale, continuing, failed
    failed_jobs: list[dict[str, Any]]  # job_id, date, attempts, error

class MergeQueue:
    """Reached as catalog.merge_queue."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core

    def _lock_claims(self, c: Connection) -> None:
        if self._core.dialect == "postgresql":
            c.execute(sa.select(sa.func.pg_advisory_xact_lock(_MERGE_CLAIM_LOCK)))

    # --- claiming --------------------------------------------------------------------------------

    def claim(self, owner: str, *, limit: int, now: dt.datetime, timeout: float,
              per_table_limit: int, table_ids: Sequence[int] | None = None,
              local: LocalHost | None = None, partition_ids: Sequence[int] | None = None,
              fair_levels: Sequence[str] = FAIR_LEVELS, per_schema_limit: int = 0) -> ClaimedJobs:
        """Claim up to `limit` due jobs (or jobs whose worker went silent for `timeout` seconds, or, with
        `local`, whose process on this host is gone); claims record local's host and pid. table_ids and
        partition_ids (None: any) narrow which jobs are claimed.

        Round robin over `fair_levels` (merge_shares.FairOrder: the schema, then the table, served least
        recently first), each table's oldest schedule first; at most one running job per partition, at most
        `per_table_limit` running jobs per table and `per_schema_limit` (0: any number) per schema, none for a
        partition with a parked job. Claims are serialised, and each claim is an UPDATE guarded by the state
        the candidate was read in.
        """
        j = s.merge_jobs
        stale_before = now - dt.timedelta(seconds=timeout)
        with self._core.tx() as c:
            self._lock_claims(c)
            held = c.execute(statements.held_jobs()).all()
            # Running jobs whose process exited on this host: stale now, whatever their heartbeat says.
            gone = {row.ongoing_mark: row for row in (local.dead_claims(held) if local is not None else [])
                    if row.ongoing_mark > 0}
            busy_partitions: set[int] = set()
            running_per_table: dict[int, int] = {}
            running_per_schema: dict[str, int] = {}
            for row in held:
                live = row.ongoing_mark not in gone and (row.heartbeat_time is None
                                                         or row.heartbeat_time >= stale_before)
                if row.ongoing_mark < 0 or live:
                    busy_partitions.add(row.partition_id)  # parked, or running with a live worker
                if row.ongoing_mark > 0 and live and row.heartbeat_time is not None:
                    running_per_table[row.table_id] = running_per_table.get(row.table_id, 0) + 1
                    running_per_schema[row.schema_name] = running_per_schema.get(row.schema_name, 0) + 1
            # Busy partitions may hide a table's first candidates: look a little deeper than the cap.
            values = {"now": now, "stale_before": stale_before, "depth": per_table_limit + len(busy_partitions) + 1}
            for name, narrowing in (("gone", gone or None), ("table_ids", table_ids), ("partition_ids", partition_ids)):
                if narrowing is not None:
                    values[name] = list(narrowing)
            candidates = c.execute(statements.due_candidates(
                table_ids is not None, partition_ids is not None, bool(gone)), values).all()
            tables = {}
            claimed = ClaimedJobs()
            order = FairOrder(c, candidates, fair_levels)
            for row in order:
                if len(claimed) >= limit:
                    break
                if row.partition_id in busy_partitions:
                    continue
                if running_per_table.get(row.table_id, 0) >= per_table_limit:
                    continue
                if 0 < per_schema_limit <= running_per_schema.get(row.schema_name, 0):
                    continue
                if row.ongoing_mark == 0 and self._core.dialect == "postgresql" and c.execute(
                        sa.select(j.c.id).where(j.c.id == row.id, j.c.ongoing_mark == 0)
                        .with_for_update(skip_locked=True)).first() is None:
                    continue  # a commit adding objects for it holds it (CatalogCore.lock_waiting_jobs): not yet
                host, pid = (local.name, local.pid) if local else (None, None)
                if row.ongoing_mark == 0:
                    updated = c.execute(statements.claim_waiting(), {
                        "job_id": row.id, "claimed_at": now, "claim_owner": owner, "claim_host": host,
                        "claim_pid": pid}).rowcount
                else:  # taken over: guarded by the claim it was read with, a heartbeat of None included
                    updated = c.execute(
                        j.update().where(j.c.id == row.id, j.c.ongoing_mark == row.ongoing_mark,
                                         j.c.heartbeat_time == row.heartbeat_time)
                        .values(ongoing_mark=row.id, heartbeat_time=now, owner=owner, attempts=j.c.attempts + 1,
                                owner_host=host, owner_pid=pid)
                    ).rowcount
                if updated != 1:
                    continue
                if row.table_id not in tables:
                    tables[row.table_id] = table_record(
                        c.execute(statements.table_row(), {"table_id": row.table_id}).one())
                busy_partitions.add(row.partition_id)
                running_per_table[row.table_id] = running_per_table.get(row.table_id, 0) + 1
                running_per_schema[row.schema_name] = running_per_schema.get(row.schema_name, 0) + 1
                order.served()
                claimed.append(ClaimedJob(
                    id=row.id, partition_id=row.partition_id, partition_date=row.partition_date,
                    table=tables[row.table_id], attempts=row.attempts + 1, taken_over=row.ongoing_mark != 0,
                ))
                if row.ongoing_mark != 0:
                    dead = gone.get(row.id)
                    why = (f"process {dead.owner_pid} ({dead.owner}) exited on this host, last heartbeat "
                           if dead is not None else "no heartbeat since ")
                    c.execute(s.merge_job_log.insert().values(
                        job_id=row.id, partition_id=row.partition_id, mode=None, start_time=row.heartbeat_time,
                        end_time=now, outcome="failed",
                        error=f"worker lost: {why}{row.heartbeat_time:%Y-%m-%d %H:%M:%S} UTC "
                              f"(timeout {timeout:g} s); taken over by {owner}",
                    ))
            order.save(c, self._core.upsert)
            claimed.passed_over = len(candidates) - len(claimed)
        return claimed

    def heartbeat(self, job_ids: Sequence[int], owner: str, now: dt.datetime) -> set[int]:
        """Refresh the heartbeat of our running jobs; returns the ids that are no longer ours."""
        if not job_ids:
            return set()
        j = s.merge_jobs
        with self._core.tx() as c:
            c.execute(j.update().where(j.c.id.in_(list(job_ids)), j.c.owner == owner, j.c.ongoing_mark == j.c.id)
                      .values(heartbeat_time=now))
            still: set[int] = set(c.execute(sa.select(j.c.id).where(
                j.c.id.in_(list(job_ids)), j.c.owner == owner, j.c.ongoing_mark == j.c.id)).scalars())
        return set(job_ids) - still

    # --- planning inputs ---------------------------------------------------------------------------

    def ranges(self, partition_id: int) -> list[RangeRow]:
        r = s.merge_ranges
        with self._core.tx() as c:
            rows = c.execute(sa.select(r.c.lower_bound, r.c.upper_bound, r.c.content_length, r.c.row_count,
                                       r.c.object_key)
                             .where(r.c.partition_id == partition_id).order_by(r.c.upper_bound)).all()
        return [RangeRow(*row_values(row)) for row in rows]

    def range_stats(self, table_id: int, dates: Collection[dt.date] | None = None,
                    ) -> dict[tuple[dt.date, int, int], FileStats]:
        """Of each merge range of the table's partitions (those dated `dates`; None: all) whose object is named
        by its bounds, by (date, lower, upper): content length, row count, and the min and max event time of
        the small objects it merged (lower < id <= upper), in one query. The event times are the object's only
        where a merge keeps every row: not for a keyed table's ranges."""
        p, r, so = s.partitions, s.merge_ranges, s.small_objects
        query = (
            sa.select(p.c.partition_date, r.c.lower_bound, r.c.upper_bound, r.c.content_length, r.c.row_count,
                      sa.func.min(so.c.min_event_time), sa.func.max(so.c.max_event_time))
            .select_from(r.join(p, p.c.id == r.c.partition_id).join(so, sa.and_(
                so.c.partition_id == r.c.partition_id, so.c.id > r.c.lower_bound, so.c.id <= r.c.upper_bound)))
            .where(p.c.table_id == table_id, r.c.lower_bound.is_not(None), r.c.object_key.is_(None))
            .group_by(r.c.id, p.c.partition_date, r.c.lower_bound, r.c.upper_bound, r.c.content_length,
                      r.c.row_count))
        if dates is not None and len(dates) <= _DATES_IN_QUERY:
            query = query.where(p.c.partition_date.in_(sorted(dates)))
        with self._core.snapshot() as c:
            rows = c.execute(query).all()
        return {(day, lower, upper): FileStats(size, count, low, high)
                for day, lower, upper, size, count, low, high in rows_values(rows) if dates is None or day in dates}

    def unmerged_objects(self, partition_id: int, limit: int
                        ) -> tuple[RangeRow | None, int | None, list[UnmergedObject]]:
        """The partition's last range (None if none but the sentinel), the largest upper bound (None without
        any range row: what commit checks), and up to `limit` small objects after it."""
        with self._core.tx() as c:
            last = c.execute(statements.last_range(), {"partition_id": partition_id}).first()
            after = last.upper_bound if last is not None else 0
            rows = c.execute(statements.objects_after(limit), {"partition_id": partition_id, "after": after}).all()
        last_range = RangeRow(*row_values(last)) if last is not None and last.lower_bound is not None else None
        return (last_range, (last.upper_bound if last is not None else None),
                [UnmergedObject(*row_values(row)) for row in rows])

    # --- finishing ---------------------------------------------------------------------------------

    def _own_job(self, c: Connection, job: ClaimedJob, owner: str):  # a Row
        row = c.execute(statements.own_job(self._core.dialect == "postgresql"),
                        {"job_id": job.id, "owner": owner}).first()
        if row is None:
            raise LostMergeJob(f"merge job {job.id} is no longer held by {owner}; another worker took it over")
        return row

    def _write_log(self, c: Connection, job: ClaimedJob, outcome: str, result: JobOutcome, now: dt.datetime,
                   error: str | None = None) -> None:
        c.execute(s.merge_job_log.insert(), dict(
            job_id=job.id, partition_id=job.partition_id, mode=result.mode, objects_in=result.objects_in,
            bytes_in=result.bytes_in, bytes_out=result.bytes_out, rows_out=result.rows_out,
            bytes_decoded=result.bytes_decoded, start_time=result.start_time or now, end_time=now,
            outcome=outcome, error=error, note=result.note,
        ))


    def commit(self, job: ClaimedJob, owner: str, *, base_upper: int | None, writes: Sequence[RangeWrite],
               continuing: bool, result: JobOutcome, now: dt.datetime) -> None:
        """Record written objects as ranges, raise desired_manifest_version, end the job: one transaction.

        base_upper is the last range's upper bound the job planned from (None: the partition had no
        ranges). If the ranges moved meanwhile, nothing is recorded and MergeConflict is raised.
        """
        r = s.merge_ranges
        postgresql = self._core.dialect == "postgresql"
        with self._core.tx() as c:
            self._own_job(c, job, owner)
            partition = {"partition_id": job.partition_id}
            c.execute(statements.partition_lock(postgresql), partition)
            current: int | None = c.execute(statements.largest_upper(), partition).scalar_one()
            if current != base_upper:
                raise MergeConflict(
                    f"partition {job.partition_id} was merged up to {current} while job {job.id} planned from "
                    f"{base_upper}; its output is left for reap"
                )
            if writes and current is None:
                c.execute(r.insert(), dict(partition_id=job.partition_id, lower_bound=None, upper_bound=0,
                                           content_length=0, row_count=0, create_time=now, update_time=now))
            for write in writes:
                if write.old_upper is not None:
                    updated = c.execute(statements.extend_range(), {
                        "range_partition": job.partition_id, "lower": write.lower, "old_upper": write.old_upper,
                        "new_upper": write.upper, "new_length": write.content_length, "new_rows": write.row_count,
                        "updated_at": now}).rowcount
                    if updated != 1:
                        raise MergeConflict(f"range ({write.lower}, {write.old_upper}] of partition "
                                            f"{job.partition_id} is gone")
                else:
                    c.execute(r.insert(), dict(
                        partition_id=job.partition_id, lower_bound=write.lower, upper_bound=write.upper,
                        content_length=write.content_length, row_count=write.row_count,
                        create_time=now, update_time=now))
            if writes:
                c.execute(statements.raise_desired_version(),
                          {"partition_id": job.partition_id, "desired": writes[-1].upper})
            c.execute(statements.delete_job(), {"job_id": job.id})
            self._write_log(c, job, "continuing" if continuing else "finished", result, now)
            if continuing:
                self._core.schedule_waiting(c, job.partition_id, now, continued_from=job.id)

    def fail(self, job: ClaimedJob, owner: str, error: str, *, result: JobOutcome, now: dt.datetime,
             max_attempts: int, backoff: float) -> bool:
        """Log a failed attempt; retry later (backoff doubles per attempt) or park. True when parked."""
        j = s.merge_jobs
        with self._core.tx() as c:
            row = self._own_job(c, job, owner)
            self._write_log(c, job, "failed", result, now, error=error)
            if row.attempts >= max_attempts:
                c.execute(j.update().where(j.c.id == job.id).values(
                    ongoing_mark=-job.id, owner=None, owner_host=None, owner_pid=None, heartbeat_time=None,
                    last_error=error))
                return True
            # This job already covers every unmerged object: a waiting job added meanwhile is redundant.
            c.execute(j.delete().where(j.c.partition_id == job.partition_id, j.c.ongoing_mark == 0))
            delay = backoff * 2 ** (row.attempts - 1)
            c.execute(j.update().where(j.c.id == job.id).values(
                ongoing_mark=0, owner=None, owner_host=None, owner_pid=None, heartbeat_time=None, last_error=error,
                schedule_time=now + dt.timedelta(seconds=min(delay, 3600.0))))
            return False

    def release(self, job: ClaimedJob, owner: str, now: dt.datetime, *, due: dt.datetime | None = None,
                error: str | None = None, result: JobOutcome | None = None) -> None:
        """Give a claimed job back without counting the attempt: waiting again, due at `due` (default now).

        For a job that did not run through no fault of its own (a conflict, a storage outage); with `error`,
        the attempt is logged as failed and the error kept as the job's last."""
        j = s.merge_jobs
        with self._core.tx() as c:
            try:
                self._own_job(c, job, owner)
            except LostMergeJob:
                return
            values = {}
            if error is not None:
                self._write_log(c, job, "failed", result or JobOutcome(mode=None), now, error=error)
                values["last_error"] = error
            c.execute(j.delete().where(j.c.partition_id == job.partition_id, j.c.ongoing_mark == 0))
            c.execute(j.update().where(j.c.id == job.id).values(
                ongoing_mark=0, owner=None, owner_host=None, owner_pid=None, heartbeat_time=None,
                attempts=j.c.attempts - 1, schedule_time=due or now, **values))

    def schedule_unqueued(self, now: dt.datetime, table_ids: Sequence[int] | None = None) -> list[int]:
        """Give a waiting job, due now, to each partition of a live table that holds small objects above its
        merged ranges but has no job at all (waiting, running or parked); their ids. siltlake itself leaves no
        such partition (CatalogCore.lock_waiting_jobs): this is the merge worker's periodic check that it stays
        so, and mends a catalog that an older siltlake or a hand edit left so (one query, an index seek a
        partition)."""
        p, so, r, j, t = s.partitions, s.small_objects, s.merge_ranges, s.merge_jobs, s.tables
        largest = sa.select(sa.func.max(so.c.id)).where(so.c.partition_id == p.c.id).scalar_subquery()
        merged = sa.select(sa.func.coalesce(sa.func.max(r.c.upper_bound), 0)).where(
            r.c.partition_id == p.c.id).scalar_subquery()
        query = (sa.select(p.c.id).select_from(p.join(t, t.c.id == p.c.table_id))
                 .where(t.c.dropped_time.is_(None), ~sa.exists().where(j.c.partition_id == p.c.id), largest > merged)
                 .order_by(p.c.id))
        if table_ids is not None:
            query = query.where(p.c.table_id.in_(list(table_ids)))
        with self._core.tx() as c:
            found: list[int] = list(c.execute(query).scalars())
            for partition_id in found:
                self._core.schedule_waiting(c, partition_id, now)
        return found

    def retry_parked(self, now: dt.datetime, table_id: int | None = None) -> int:
        """Put parked jobs back in the queue, due now, with their attempts reset."""
        j, p = s.merge_jobs, s.partitions
        with self._core.tx() as c:
            query = sa.select(j.c.id, j.c.partition_id).where(j.c.ongoing_mark < 0)
            if table_id is not None:
                query = query.where(j.c.partition_id.in_(sa.select(p.c.id).where(p.c.table_id == table_id)))
            parked = c.execute(query).all()
            for row in parked:
                c.execute(j.delete().where(j.c.partition_id == row.partition_id, j.c.ongoing_mark == 0))
                c.execute(j.update().where(j.c.id == row.id).values(
                    ongoing_mark=0, attempts=0, schedule_time=now, last_error=None))
        return len(parked)

    def _waiting_later(self, now: dt.datetime, table_ids: Sequence[int] | None,  # a where clause
                       partition_ids: Sequence[int] | None = None):
        j, p = s.merge_jobs, s.partitions
        where = sa.and_(j.c.ongoing_mark == 0, j.c.schedule_time > now)
        if table_ids is not None:
            where = sa.and_(where, j.c.partition_id.in_(sa.select(p.c.id).where(p.c.table_id.in_(list(table_ids)))))
        if partition_ids is not None:
            where = sa.and_(where, j.c.partition_id.in_(list(partition_ids)))
        return where

    def advance(self, now: dt.datetime, table_ids: Sequence[int] | None = None,
                partition_ids: Sequence[int] | None = None) -> int:
        """Make every waiting job scheduled after `now` (merge interval, retry backoff) due at `now`, of the
        tables and partitions given (None: all)."""
        with self._core.tx() as c:
            return c.execute(s.merge_jobs.update().where(self._waiting_later(now, table_ids, partition_ids))
                             .values(schedule_time=now)).rowcount

    def scheduled(self, now: dt.datetime, table_ids: Sequence[int] | None = None
                 ) -> tuple[int, dt.datetime | None]:
        """Waiting jobs not due yet at `now`: how many, and when the first falls due."""
        j = s.merge_jobs
        with self._core.tx() as c:
            count, first = row_values(c.execute(sa.select(sa.func.count(), sa.func.min(j.c.schedule_time))
                                                .where(self._waiting_later(now, table_ids))).one())
        return count, first

    # --- reporting ---------------------------------------------------------------------------------

    def jobs(self, partition_id: int) -> list[dict]:
        with self._core.tx() as c:
            return [r._asdict() for r in c.execute(
                sa.select(s.merge_jobs).where(s.merge_jobs.c.partition_id == partition_id)
            )]

    def log(self, partition_id: int | None = None, limit: int | None = None) -> list[dict]:
        log = s.merge_job_log
        query = sa.select(log).order_by(log.c.id)
        if partition_id is not None:
            query = query.where(log.c.partition_id == partition_id)
        if limit is not None:
            query = query.order_by(None).order_by(log.c.id.desc()).limit(limit)
        with self._core.tx() as c:
            rows = [row._asdict() for row in c.execute(query)]
        return sorted(rows, key=lambda row: row["id"])

    def status(self, now: dt.datetime, timeout: float, local: LocalHost | None = None) -> list[TableQueueStatus]:
        """Per live table: partitions by state (a derived table's by DERIVED_PARTITION_STATES), unmerged small
        objects, jobs by state, parked errors.

        A running job is stale once its heartbeat is older than `timeout`, or (with `local`) at once when
        its process on this host is gone."""
        t, p, so, r, j = s.tables, s.partitions, s.small_objects, s.merge_ranges, s.merge_jobs
        stale_before = now - dt.timedelta(seconds=timeout)
        with self._core.tx() as c:
            tables = c.execute(sa.select(t.c.id, t.c.schema_name, t.c.table_name, t.c.switched_partitions)
                               .where(t.c.dropped_time.is_(None)).order_by(t.c.schema_name, t.c.table_name)).all()
            status: dict[int, TableQueueStatus] = {row.id: {
                "table": f"{row.schema_name}.{row.table_name}",
                "partitions": dict.fromkeys(PARTITION_STATES, 0),
                "unmerged_objects": 0, "unmerged_bytes": 0, "oldest_unmerged_age_seconds": None,
                "jobs": {"scheduled": 0, "due": 0, "running": 0, "stale": 0, "continuing": 0, "failed": 0},
                "failed_jobs": [],
            } for row in tables}
            state = sa.case(
                (p.c.switched, "switched"), (p.c.last_live_object_id.is_not(None), "closed"),
                (p.c.current_manifest_version >= 0, "live"), else_="new",
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
                    entry["partitions"] = {name: counted if name == derived_state else 0
                                           for name in DERIVED_PARTITION_STATES}
            merged_upto = (sa.select(sa.func.coalesce(sa.func.max(r.c.upper_bound), 0))
                           .where(r.c.partition_id == p.c.id).scalar_subquery())
            pending = sa.union(sa.select(p.c.id).where(p.c.switched.is_(False)), sa.select(j.c.partition_id))
            unmerged = c.execute(
                sa.select(p.c.table_id, sa.func.count(so.c.id), sa.func.coalesce(sa.func.sum(so.c.content_length), 0),
                          sa.func.min(so.c.upload_start_time))
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
                sa.select(p.c.table_id, p.c.partition_date, j.c.id, j.c.ongoing_mark, j.c.schedule_time,
                          j.c.heartbeat_time, j.c.continued_from, j.c.attempts, j.c.last_error, j.c.owner_host,
                          j.c.owner_pid)
                .select_from(j.join(p, j.c.partition_id == p.c.id)).order_by(j.c.id)
            ).all()
            for job in jobs:
                if job.table_id not in status:
                    continue
                entry = status[job.table_id]
                kind = _job_state(job, now, stale_before, local)
                if kind == "failed":
                    entry["failed_jobs"].append({"job_id": job.id, "date": job.partition_date.isoformat(),
                                                 "attempts": job.attempts, "error": job.last_error})
                entry["jobs"][kind] += 1
        return list(status.values())

    def of_table(self, table_id: int, now: dt.datetime, timeout: float,
                 local: LocalHost | None = None) -> list[dict]:
        """A table's jobs in the queue, by id: job_id, date, state (as status counts them), schedule_time,
        heartbeat_time, attempts, owner, continued_from, last_error."""
        j, p = s.merge_jobs, s.partitions
        stale_before = now - dt.timedelta(seconds=timeout)
        with self._core.tx() as c:
            jobs = c.execute(
                sa.select(p.c.partition_date, j.c.id, j.c.ongoing_mark, j.c.schedule_time, j.c.heartbeat_time,
                          j.c.continued_from, j.c.attempts, j.c.last_error, j.c.owner, j.c.owner_host, j.c.owner_pid)
                .select_from(j.join(p, j.c.partition_id == p.c.id)).where(p.c.table_id == table_id).order_by(j.c.id)
            ).all()
        return [{"job_id": job.id, "date": job.partition_date, "state": _job_state(job, now, stale_before, local),
                 "schedule_time": job.schedule_time, "heartbeat_time": job.heartbeat_time, "attempts": job.attempts,
                 "owner": job.owner, "continued_from": job.continued_from, "last_error": job.last_error}
                for job in jobs]


def _job_state(job, now: dt.datetime, stale_before: dt.datetime,  # a merge_jobs row
               local: LocalHost | None) -> str:
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
