"""Incremental reap runs (docs/design.md, "Incremental runs"): whether a run is a full sweep, and what an
incremental run reads from the catalog and lists from the lake.

A full sweep lists the whole instance key. An incremental run lists only the prefixes that can have gained
something deletable since the newest completed run: the dated directories of the partitions the catalog
says changed (ReapScope), every run's temporaries, the prefixes of dropped tables not yet reaped, and the
Iceberg metadata while that target is on. Its catalog view holds the same partitions, so every listed object
is judged against all the rows of its own partition, exactly as in a full sweep.
"""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor
from zoneinfo import ZoneInfo

from siltlake.catalog import ReapScope, ReapTable, ReapView
from siltlake.deployment import Deployment
from siltlake.storage import keys
from siltlake.storage.filesystem import ObjectInfo
from siltlake.storage.keys import TableLayout

# Completed runs are kept this long (and the newest full sweep always): enough to read when the last ran.
RUN_HISTORY = dt.timedelta(days=30)


def local_date(now: dt.datetime, zone: str) -> dt.date:
    return now.replace(tzinfo=dt.UTC).astimezone(ZoneInfo(zone)).date()


def ttl_cutoff(now: dt.datetime):  # a ReapScope.ttl_cutoff
    def cutoff(table: ReapTable) -> dt.date | None:
        if table.ttl_days is None:
            return None
        return local_date(now, table.timezone) - dt.timedelta(days=table.ttl_days)

    return cutoff


def scope_of(deployment: Deployment, now: dt.datetime, *, retention: int, full: bool | None) -> ReapScope | None:
    """The scope of an incremental run, or None for a full sweep: forced (`full`), no run recorded yet, no
    full sweep completed within reap.full_sweep_interval, or `now` before the last run.

    Changes are looked for from the last run's moment minus reap.change_slack: a commit the last run's view
    missed carries a time after that unless its writer recorded a time more than the slack before committing
    (or its clock lagged that much); its garbage then waits for the next full sweep, it is never taken for
    garbage early (an incremental run only ever looks at fewer objects, each against all its partition's rows).
    """
    config = deployment.config.reap
    interval = dt.timedelta(seconds=config.full_sweep_interval)
    last, full_recently = deployment.catalog.reaping.last_runs(now - interval)
    if full is True or last is None or not full_recently or now < last.run_time:
        # A `now` before the last run (a clock set back, a replayed --now) could not tell what changed since.
        return None
    base = last.run_time
    slack = dt.timedelta(seconds=config.change_slack)
    # A version created in [last cutoff, this cutoff) has just made its predecessor expire; the last run's own
    # retention counts too, so a shorter --retention today skips no version.
    crossing_from = min(base - dt.timedelta(seconds=last.retention), base - dt.timedelta(seconds=retention)) - slack
    return ReapScope(
        since=base - slack,
        crossing=(crossing_from, now - dt.timedelta(seconds=retention)),
        small_above=last.max_small_object_id,
        ttl_cutoff=ttl_cutoff(now),
    )


def table_scope(table_id: int) -> ReapScope:
    """The scope of a reap of one table (Table.maintenance.expire): every partition of it, whatever changed."""
    never = dt.datetime.max
    return ReapScope(since=never, crossing=(never, never), small_above=0, ttl_cutoff=lambda _: None, table_id=table_id)


def list_scope(
    deployment: Deployment, key: str, view: ReapView, workers: int, whole: bool = True
) -> tuple[list[ObjectInfo], int]:
    """The objects an incremental run looks at, and how many prefixes it listed; not `whole` (one table's run),
    its partitions' directories only."""
    prefixes = [keys.temporary_area(key)] if whole else []
    if "iceberg" in deployment.config.publish.targets and whole:
        prefixes.append(keys.iceberg_warehouse(key) + "/")
    # A reaped dropped table's name starts with '#': its prefix is no table's any more.
    tables = {t.id: t for t in view.tables if not t.physical_table_name.startswith("#")}
    layouts = {t.id: TableLayout(key, t.physical_schema_name, t.physical_table_name) for t in tables.values()}
    prefixes += [layouts[t.id].prefix + "/" for t in tables.values() if t.dropped_time is not None]
    for p in view.partitions:
        table = tables.get(p.table_id)
        if table is not None and table.dropped_time is None:
            prefixes += layouts[table.id].partition_directories(p.partition_date, p.partition_values)
    lake = deployment.lake
    with ThreadPoolExecutor(max(1, min(workers, len(prefixes)))) as pool:
        listed = [info for infos in pool.map(lambda prefix: list(lake.list(prefix)), prefixes) for info in infos]
    return listed, len(prefixes)
