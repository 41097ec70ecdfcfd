"""Restore (Table.restore, `silt restore`): one new table version whose partitions show what an older version
showed (docs/design.md "Request ids and restore").

A partition that shows now what it showed then (the same version, nothing appended since) is left alone. Each
other one is rewritten, as an update rewrites a partition, into one object holding the rows the old version
showed (read from that version's files, a keyed table's merged on read); a partition that showed nothing then
is rewritten empty. All of them commit as one `update` table version, guarded as an update is: a concurrent
append, update or upsert of a partition makes the restore fail with UpdateConflict, a compaction loses.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

from siltlake.catalog import PartitionRow, PublishedVersion, TableRecord, VersionOutOfRange
from siltlake.clock import to_naive_utc
from siltlake.defbase import format_duration
from siltlake.deployment import Deployment
from siltlake.errors import SiltError
from siltlake.write.requests import UpdatesReport, applied_before, commit_updates, write_request
from siltlake.write.update import PreparedUpdate, PreparedUpdates, updatable_table


class VersionReaped(VersionOutOfRange):
    """The version to restore is older than what reap keeps: its files may be gone."""


def restore_version(deployment: Deployment, record: TableRecord, version: int | None, as_of: dt.datetime | None) -> int:
    """The table version to restore: `version`, or the newest published at or before `as_of`; refused, naming
    the readable range and reap.retention, when reap removed it (a tagged version it keeps)."""
    if (version is None) == (as_of is None):
        raise SiltError(
            f"restore {record.qualified_name}: give the version to restore (version=N) or a time "
            "(as_of=...), one of them"
        )
    version_reads = deployment.catalog.version_reads
    oldest, newest = version_reads.table_bounds(record.id)
    name = record.qualified_name
    if as_of is not None:
        as_of = to_naive_utc(as_of)
        found = version_reads.version_at(record.id, as_of)
        if found is None:
            raise VersionOutOfRange(
                f"{name} had no version at {as_of.isoformat(sep=' ')} UTC: nothing was published "
                "before it; nothing was changed"
            )
        version = found
    assert version is not None
    if newest == 0 or version > newest or version < 1:
        raise VersionOutOfRange(
            f"{name} has no version {version}: its versions are {oldest} to {newest}; nothing was changed"
        )
    if version < oldest and version not in {t.table_version for t in deployment.catalog.tags.list(record.id)}:
        retention = format_duration(deployment.config.reap.retention)
        raise VersionReaped(
            f"cannot restore {name} to version {version}: reap has removed it (a superseded version stays readable "
            f"for reap.retention = {retention}, then reap may delete its files); its readable versions are {oldest} "
            f"to {newest}; nothing was changed"
        )
    return version


def _unchanged(now: PublishedVersion | None, upper: int, then: PublishedVersion | None) -> bool:
    """Whether a partition shows now what it showed at the old version: the same version, holding nothing above
    what that version shows (no object appended since, live or delayed)."""
    if then is None:
        return now is None and upper == 0
    if now is None or now.version != then.version:
        return False
    return upper <= max(now.covered_upper or 0, now.live_watermark or 0)


def restore(
    deployment: Deployment,
    name: str,
    version: int | None = None,
    as_of: dt.datetime | None = None,
    *,
    request_id: str | None = None,
    now: dt.datetime | None = None,
    dry_run: bool = False,
    progress: Callable[[int, dt.date], None] | None = None,
) -> UpdatesReport:
    """Publish one table version in which every partition shows what it showed at `version` (or at the time
    `as_of`), once per request id; a dry run reports the partitions it would rewrite (rows now -> rows then)."""
    from siltlake.read import objects_frame, spark_schema

    started = time.monotonic()
    record = updatable_table(deployment, name)
    name = record.qualified_name
    target = restore_version(deployment, record, version, as_of)
    request = write_request(record, request_id, "restore")
    applied = applied_before(deployment, request)
    if applied is not None:
        return UpdatesReport(name, (), request_id, applied)
    catalog = deployment.catalog
    then = {
        (view.partition_date, view.partition_values): view
        for view in catalog.version_reads.reader_snapshot(record.id, as_of_version=target, table_name=name)
    }
    partitions: dict[tuple[dt.date, str], PartitionRow] = {
        (p.partition_date, p.partition_values): p for p in catalog.partitions.list(record.id)
    }
    gone = sorted(set(then) - set(partitions))
    if gone:
        raise SiltError(
            f"cannot restore {name} to version {target}: its partitions "
            f"{', '.join('/'.join(filter(None, (d.isoformat(), v))) for d, v in gone)} were removed since (past the "
            "table's TTL), "
            "and their files with them; nothing was changed"
        )
    history: dict[int, dict[int, PublishedVersion]] = {}
    for published in catalog.versions.of_partitions([p.id for p in partitions.values()]):
        history.setdefault(published.partition_id, {})[published.version] = published
    prepared = PreparedUpdates([], now)
    try:
        for place in sorted(partitions):
            partition, date = partitions[place], place[0]
            versions = history.get(partition.id, {})
            newest = versions[max(versions)] if versions else None
            view = then.get(place)
            shown = versions.get(view.version) if view is not None and view.version is not None else None
            base = catalog.versions.update_base(record.id, date, place[1])
            if _unchanged(newest, base.upper, shown):
                continue
            if progress is not None:
                progress(len(prepared.updates), date)
            update = PreparedUpdate(
                deployment, record, base, newest.row_count if newest is not None else 0, started, now
            )
            prepared.updates.append(update)
            if dry_run:
                update.rows_after = shown.row_count if shown is not None else 0
                continue
            spark = deployment.spark()
            if view is None:
                frame = spark.createDataFrame([], spark_schema(record))
            else:
                frame = objects_frame(
                    spark,
                    record,
                    deployment,
                    [view.manifest_key] if view.manifest_key else [],
                    [(date, object_id, False, view.partition_values) for object_id in view.live_object_ids],
                )
            update.write(frame.drop("dt"))
    except BaseException:
        prepared.discard()
        raise
    if dry_run:
        return UpdatesReport(name, tuple(u.report(None) for u in prepared.updates), request_id)
    dates = ", ".join(u.base.partition_date.isoformat() for u in prepared.updates)
    return commit_updates(
        deployment,
        record,
        prepared,
        request,
        f"restored version {target}" + (f" (rewrote {dates})" if dates else " (every partition showed it already)"),
    )
