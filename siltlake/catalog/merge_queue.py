"""The merge job queue and merge ranges (docs/design.md, "Merge"): claim, heartbeat, commit, fail, park, status.

The claim's body is merge_claims's, the status reports' merge_status's: the methods here stay the one way in."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import merge_statements as statements
from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore, row_values, rows_values
from siltlake.catalog.merge_claims import ClaimedJobs, claim_jobs
from siltlake.catalog.merge_shares import FAIR_LEVELS
from siltlake.catalog.merge_status import TableQueueStatus, table_jobs, table_statuses
from siltlake.catalog.rows import (
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


class MergeQueue:
    """Reached as catalog.merge_queue."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core

    # --- claiming --------------------------------------------------------------------------------

    def claim(
        self,
        owner: str,
        *,
        limit: int,
        now: dt.datetime,
        timeout: float,
        per_table_limit: int,
        table_ids: Sequence[int] | None = None,
        local: LocalHost | None = None,
        partition_ids: Sequence[int] | None = None,
        fair_levels: Sequence[str] = FAIR_LEVELS,
        per_schema_limit: int = 0,
    ) -> ClaimedJobs:
        """Claim up to `limit` due jobs for `owner`, fairly and within the caps (merge_claims.claim_jobs)."""
        return claim_jobs(
            self._core,
            owner,
            limit=limit,
            now=now,
            timeout=timeout,
            per_table_limit=per_table_limit,
            table_ids=table_ids,
            local=local,
            partition_ids=partition_ids,
            fair_levels=fair_levels,
            per_schema_limit=per_schema_limit,
        )

    def heartbeat(self, job_ids: Sequence[int], owner: str, now: dt.datetime) -> set[int]:
        """Refresh the heartbeat of our running jobs; returns the ids that are no longer ours."""
        if not job_ids:
            return set()
        j = s.merge_jobs
        with self._core.tx() as c:
            c.execute(
                j.update()
                .where(j.c.id.in_(list(job_ids)), j.c.owner == owner, j.c.ongoing_mark == j.c.id)
                .values(heartbeat_time=now)
            )
            still: set[int] = set(
                c.execute(
                    sa.select(j.c.id).where(j.c.id.in_(list(job_ids)), j.c.owner == owner, j.c.ongoing_mark == j.c.id)
                ).scalars()
            )
        return set(job_ids) - still

    # --- planning inputs ---------------------------------------------------------------------------

    def ranges(self, partition_id: int) -> list[RangeRow]:
        r = s.merge_ranges
        with self._core.tx() as c:
            rows = c.execute(
                sa.select(r.c.lower_bound, r.c.upper_bound, r.c.content_length, r.c.row_count, r.c.object_key)
                .where(r.c.partition_id == partition_id)
                .order_by(r.c.upper_bound)
            ).all()
        return [RangeRow(*row_values(row)) for row in rows]

    def range_stats(
        self,
        table_id: int,
        dates: Collection[dt.date] | None = None,
    ) -> dict[tuple[dt.date, int, int], FileStats]:
        """Of each merge range of the table's partitions (those dated `dates`; None: all) whose object is named
        by its bounds, by (date, lower, upper): content length, row count, and the min and max event time of
        the small objects it merged (lower < id <= upper), in one query. The event times are the object's only
        where a merge keeps every row: not for a keyed table's ranges."""
        p, r, so = s.partitions, s.merge_ranges, s.small_objects
        query = (
            sa.select(
                p.c.partition_date,
                r.c.lower_bound,
                r.c.upper_bound,
                r.c.content_length,
                r.c.row_count,
                sa.func.min(so.c.min_event_time),
                sa.func.max(so.c.max_event_time),
            )
            .select_from(
                r.join(p, p.c.id == r.c.partition_id).join(
                    so,
                    sa.and_(
                        so.c.partition_id == r.c.partition_id, so.c.id > r.c.lower_bound, so.c.id <= r.c.upper_bound
                    ),
                )
            )
            .where(p.c.table_id == table_id, r.c.lower_bound.is_not(None), r.c.object_key.is_(None))
            .group_by(r.c.id, p.c.partition_date, r.c.lower_bound, r.c.upper_bound, r.c.content_length, r.c.row_count)
        )
        if dates is not None and len(dates) <= _DATES_IN_QUERY:
            query = query.where(p.c.partition_date.in_(sorted(dates)))
        with self._core.snapshot() as c:
            rows = c.execute(query).all()
        return {
            (day, lower, upper): FileStats(size, count, low, high)
            for day, lower, upper, size, count, low, high in rows_values(rows)
            if dates is None or day in dates
        }

    def unmerged_objects(
        self, partition_id: int, limit: int
    ) -> tuple[RangeRow | None, int | None, list[UnmergedObject]]:
        """The partition's last range (None if none but the sentinel), the largest upper bound (None without
        any range row: what commit checks), and up to `limit` small objects after it."""
        with self._core.tx() as c:
            last = c.execute(statements.last_range(), {"partition_id": partition_id}).first()
            after = last.upper_bound if last is not None else 0
            rows = c.execute(statements.objects_after(limit), {"partition_id": partition_id, "after": after}).all()
        last_range = RangeRow(*row_values(last)) if last is not None and last.lower_bound is not None else None
        return (
            last_range,
            (last.upper_bound if last is not None else None),
            [UnmergedObject(*row_values(row)) for row in rows],
        )

    # --- finishing ---------------------------------------------------------------------------------

    def _own_job(self, c: Connection, job: ClaimedJob, owner: str):  # a Row
        row = c.execute(
            statements.own_job(self._core.dialect == "postgresql"), {"job_id": job.id, "owner": owner}
        ).first()
        if row is None:
            raise LostMergeJob(f"merge job {job.id} is no longer held by {owner}; another worker took it over")
        return row

    def _write_log(
        self,
        c: Connection,
        job: ClaimedJob,
        outcome: str,
        result: JobOutcome,
        now: dt.datetime,
        error: str | None = None,
    ) -> None:
        c.execute(
            s.merge_job_log.insert(),
            dict(
                job_id=job.id,
                partition_id=job.partition_id,
                mode=result.mode,
                objects_in=result.objects_in,
                bytes_in=result.bytes_in,
                bytes_out=result.bytes_out,
                rows_out=result.rows_out,
                bytes_decoded=result.bytes_decoded,
                start_time=result.start_time or now,
                end_time=now,
                outcome=outcome,
                error=error,
                note=result.note,
            ),
        )

    def commit(
        self,
        job: ClaimedJob,
        owner: str,
        *,
        base_upper: int | None,
        writes: Sequence[RangeWrite],
        continuing: bool,
        result: JobOutcome,
        now: dt.datetime,
    ) -> None:
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
                c.execute(
                    r.insert(),
                    dict(
                        partition_id=job.partition_id,
                        lower_bound=None,
                        upper_bound=0,
                        content_length=0,
                        row_count=0,
                        create_time=now,
                        update_time=now,
                    ),
                )
            for write in writes:
                if write.old_upper is not None:
                    updated = c.execute(
                        statements.extend_range(),
                        {
                            "range_partition": job.partition_id,
                            "lower": write.lower,
                            "old_upper": write.old_upper,
                            "new_upper": write.upper,
                            "new_length": write.content_length,
                            "new_rows": write.row_count,
                            "updated_at": now,
                        },
                    ).rowcount
                    if updated != 1:
                        raise MergeConflict(
                            f"range ({write.lower}, {write.old_upper}] of partition {job.partition_id} is gone"
                        )
                else:
                    c.execute(
                        r.insert(),
                        dict(
                            partition_id=job.partition_id,
                            lower_bound=write.lower,
                            upper_bound=write.upper,
                            content_length=write.content_length,
                            row_count=write.row_count,
                            create_time=now,
                            update_time=now,
                        ),
                    )
            if writes:
                c.execute(
                    statements.raise_desired_version(), {"partition_id": job.partition_id, "desired": writes[-1].upper}
                )
            c.execute(statements.delete_job(), {"job_id": job.id})
            self._write_log(c, job, "continuing" if continuing else "finished", result, now)
            if continuing:
                self._core.schedule_waiting(c, job.partition_id, now, continued_from=job.id)

    def fail(
        self,
        job: ClaimedJob,
        owner: str,
        error: str,
        *,
        result: JobOutcome,
        now: dt.datetime,
        max_attempts: int,
        backoff: float,
    ) -> bool:
        """Log a failed attempt; retry later (backoff doubles per attempt) or park. True when parked."""
        j = s.merge_jobs
        with self._core.tx() as c:
            row = self._own_job(c, job, owner)
            self._write_log(c, job, "failed", result, now, error=error)
            if row.attempts >= max_attempts:
                c.execute(
                    j.update()
                    .where(j.c.id == job.id)
                    .values(
                        ongoing_mark=-job.id,
                        owner=None,
                        owner_host=None,
                        owner_pid=None,
                        heartbeat_time=None,
                        last_error=error,
                    )
                )
                return True
            # This job already covers every unmerged object: a waiting job added meanwhile is redundant.
            c.execute(j.delete().where(j.c.partition_id == job.partition_id, j.c.ongoing_mark == 0))
            delay = backoff * 2 ** (row.attempts - 1)
            c.execute(
                j.update()
                .where(j.c.id == job.id)
                .values(
                    ongoing_mark=0,
                    owner=None,
                    owner_host=None,
                    owner_pid=None,
                    heartbeat_time=None,
                    last_error=error,
                    schedule_time=now + dt.timedelta(seconds=min(delay, 3600.0)),
                )
            )
            return False

    def release(
        self,
        job: ClaimedJob,
        owner: str,
        now: dt.datetime,
        *,
        due: dt.datetime | None = None,
        error: str | None = None,
        result: JobOutcome | None = None,
    ) -> None:
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
            c.execute(
                j.update()
                .where(j.c.id == job.id)
                .values(
                    ongoing_mark=0,
                    owner=None,
                    owner_host=None,
                    owner_pid=None,
                    heartbeat_time=None,
                    attempts=j.c.attempts - 1,
                    schedule_time=due or now,
                    **values,
                )
            )

    def schedule_unqueued(self, now: dt.datetime, table_ids: Sequence[int] | None = None) -> list[int]:
        """Give a waiting job, due now, to each partition of a live table that holds small objects above its
        merged ranges but has no job at all (waiting, running or parked); their ids. siltlake itself leaves no
        such partition (CatalogCore.lock_waiting_jobs): this is the merge worker's periodic check that it stays
        so, and mends a catalog that an older siltlake or a hand edit left so (one query, an index seek a
        partition)."""
        p, so, r, j, t = s.partitions, s.small_objects, s.merge_ranges, s.merge_jobs, s.tables
        largest = sa.select(sa.func.max(so.c.id)).where(so.c.partition_id == p.c.id).scalar_subquery()
        merged = (
            sa.select(sa.func.coalesce(sa.func.max(r.c.upper_bound), 0))
            .where(r.c.partition_id == p.c.id)
            .scalar_subquery()
        )
        query = (
            sa.select(p.c.id)
            .select_from(p.join(t, t.c.id == p.c.table_id))
            .where(t.c.dropped_time.is_(None), ~sa.exists().where(j.c.partition_id == p.c.id), largest > merged)
            .order_by(p.c.id)
        )
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
                c.execute(
                    j.update()
                    .where(j.c.id == row.id)
                    .values(ongoing_mark=0, attempts=0, schedule_time=now, last_error=None)
                )
        return len(parked)

    def _waiting_later(
        self,
        now: dt.datetime,
        table_ids: Sequence[int] | None,  # a where clause
        partition_ids: Sequence[int] | None = None,
    ):
        j, p = s.merge_jobs, s.partitions
        where = sa.and_(j.c.ongoing_mark == 0, j.c.schedule_time > now)
        if table_ids is not None:
            where = sa.and_(where, j.c.partition_id.in_(sa.select(p.c.id).where(p.c.table_id.in_(list(table_ids)))))
        if partition_ids is not None:
            where = sa.and_(where, j.c.partition_id.in_(list(partition_ids)))
        return where

    def advance(
        self, now: dt.datetime, table_ids: Sequence[int] | None = None, partition_ids: Sequence[int] | None = None
    ) -> int:
        """Make every waiting job scheduled after `now` (merge interval, retry backoff) due at `now`, of the
        tables and partitions given (None: all)."""
        with self._core.tx() as c:
            return c.execute(
                s.merge_jobs.update()
                .where(self._waiting_later(now, table_ids, partition_ids))
                .values(schedule_time=now)
            ).rowcount

    def scheduled(self, now: dt.datetime, table_ids: Sequence[int] | None = None) -> tuple[int, dt.datetime | None]:
        """Waiting jobs not due yet at `now`: how many, and when the first falls due."""
        j = s.merge_jobs
        with self._core.tx() as c:
            count, first = row_values(
                c.execute(
                    sa.select(sa.func.count(), sa.func.min(j.c.schedule_time)).where(
                        self._waiting_later(now, table_ids)
                    )
                ).one()
            )
        return count, first

    # --- reporting ---------------------------------------------------------------------------------

    def jobs(self, partition_id: int) -> list[dict]:
        with self._core.tx() as c:
            return [
                r._asdict()
                for r in c.execute(sa.select(s.merge_jobs).where(s.merge_jobs.c.partition_id == partition_id))
            ]

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
        """Per live table: partitions, unmerged small objects and jobs by state, parked errors (a running job is
        stale after `timeout` without a heartbeat; merge_status.table_statuses)."""
        return table_statuses(self._core, now, timeout, local)

    def of_table(self, table_id: int, now: dt.datetime, timeout: float, local: LocalHost | None = None) -> list[dict]:
        """A table's jobs in the queue, by id, each with its state as status counts them (merge_status.table_jobs)."""
        return table_jobs(self._core, table_id, now, timeout, local)
