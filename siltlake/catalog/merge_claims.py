"""Claiming merge jobs (docs/design.md "Merge"), the body of MergeQueue.claim: which due jobs a worker takes, under
the per-partition, per-table and per-schema caps, in the fair order of merge_shares."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import merge_statements as statements
from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore, table_record
from siltlake.catalog.merge_shares import FAIR_LEVELS, FairOrder
from siltlake.catalog.rows import ClaimedJob, LocalHost

# Names the PostgreSQL advisory lock that serialises claims (SQLite's write lock does the same there).
_MERGE_CLAIM_LOCK = 0x5117_3E26


class ClaimedJobs(list):
    """The jobs a claim took, and how many of the due jobs it looked at it passed over (its limit reached, a
    partition busy, a table at its cap; it looks one job beyond each table's cap): a worker claims again when
    its own jobs end only if some were passed over."""

    passed_over: int = 0


def _lock_claims(core: CatalogCore, c: Connection) -> None:
    if core.dialect == "postgresql":
        c.execute(sa.select(sa.func.pg_advisory_xact_lock(_MERGE_CLAIM_LOCK)))


def claim_jobs(
    core: CatalogCore,
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
    with core.tx() as c:
        _lock_claims(core, c)
        held = c.execute(statements.held_jobs()).all()
        # Running jobs whose process exited on this host: stale now, whatever their heartbeat says.
        gone = {
            row.ongoing_mark: row
            for row in (local.dead_claims(held) if local is not None else [])
            if row.ongoing_mark > 0
        }
        busy_partitions: set[int] = set()
        running_per_table: dict[int, int] = {}
        running_per_schema: dict[str, int] = {}
        for row in held:
            live = row.ongoing_mark not in gone and (row.heartbeat_time is None or row.heartbeat_time >= stale_before)
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
        candidates = c.execute(
            statements.due_candidates(table_ids is not None, partition_ids is not None, bool(gone)), values
        ).all()
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
            if (
                row.ongoing_mark == 0
                and core.dialect == "postgresql"
                and c.execute(
                    sa.select(j.c.id).where(j.c.id == row.id, j.c.ongoing_mark == 0).with_for_update(skip_locked=True)
                ).first()
                is None
            ):
                continue  # a commit adding objects for it holds it (CatalogCore.lock_waiting_jobs): not yet
            host, pid = (local.name, local.pid) if local else (None, None)
            if row.ongoing_mark == 0:
                updated = c.execute(
                    statements.claim_waiting(),
                    {
                        "job_id": row.id,
                        "claimed_at": now,
                        "claim_owner": owner,
                        "claim_host": host,
                        "claim_pid": pid,
                    },
                ).rowcount
            else:  # taken over: guarded by the claim it was read with, a heartbeat of None included
                updated = c.execute(
                    j.update()
                    .where(
                        j.c.id == row.id,
                        j.c.ongoing_mark == row.ongoing_mark,
                        j.c.heartbeat_time == row.heartbeat_time,
                    )
                    .values(
                        ongoing_mark=row.id,
                        heartbeat_time=now,
                        owner=owner,
                        attempts=j.c.attempts + 1,
                        owner_host=host,
                        owner_pid=pid,
                    )
                ).rowcount
            if updated != 1:
                continue
            if row.table_id not in tables:
                tables[row.table_id] = table_record(c.execute(statements.table_row(), {"table_id": row.table_id}).one())
            busy_partitions.add(row.partition_id)
            running_per_table[row.table_id] = running_per_table.get(row.table_id, 0) + 1
            running_per_schema[row.schema_name] = running_per_schema.get(row.schema_name, 0) + 1
            order.served()
            claimed.append(
                ClaimedJob(
                    id=row.id,
                    partition_id=row.partition_id,
                    partition_date=row.partition_date,
                    partition_values=row.partition_values,
                    table=tables[row.table_id],
                    attempts=row.attempts + 1,
                    taken_over=row.ongoing_mark != 0,
                )
            )
            if row.ongoing_mark != 0:
                dead = gone.get(row.id)
                why = (
                    f"process {dead.owner_pid} ({dead.owner}) exited on this host, last heartbeat "
                    if dead is not None
                    else "no heartbeat since "
                )
                c.execute(
                    s.merge_job_log.insert().values(
                        job_id=row.id,
                        partition_id=row.partition_id,
                        mode=None,
                        start_time=row.heartbeat_time,
                        end_time=now,
                        outcome="failed",
                        error=f"worker lost: {why}{row.heartbeat_time:%Y-%m-%d %H:%M:%S} UTC "
                        f"(timeout {timeout:g} s); taken over by {owner}",
                    )
                )
        order.save(c, core.upsert)
        claimed.passed_over = len(candidates) - len(claimed)
    return claimed
