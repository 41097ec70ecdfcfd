"""Reap's plan: which listed objects nothing retained needs, by reason, and the rows that go with them."""

from __future__ import annotations

import datetime as dt
import time
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from siltlake.catalog import ReapTable, ReapVersion, ReapView
from siltlake.clock import to_naive_utc
from siltlake.deployment import Deployment
from siltlake.reap.incremental import ttl_cutoff
from siltlake.reap.report import ReapReport
from siltlake.reap.retention import retained_versions
from siltlake.storage import keys
from siltlake.storage.filesystem import ObjectInfo
from siltlake.storage.keys import TableLayout
from siltlake.storage.manifests import read_manifest


@dataclass
class ReapPlan:
    """What one run deletes: object keys by reason, and the rows to delete once their objects are gone."""

    keys: dict[str, list[ObjectInfo]] = field(default_factory=lambda: defaultdict(list))
    recheck: set[str] = field(default_factory=set)  # orphans: stat again right before deleting
    covered_rows: dict[int, str] = field(default_factory=dict)  # small object id -> its key
    expired_versions: dict[int, tuple[str, ...]] = field(default_factory=dict)  # version row id -> manifest keys
    ttl_partitions: dict[int, tuple[str, str]] = field(default_factory=dict)  # id -> (table prefix, dt segment)
    dropped_tables: dict[int, str] = field(default_factory=dict)  # table id -> its prefix
    tmp_runs: set[str] = field(default_factory=set)  # _tmp/<run> prefixes whose every file goes


def _manifest_objects(
    deployment: Deployment, manifest_keys: Sequence[str], workers: int
) -> tuple[dict[str, list[str]], set[str]]:
    """The object keys each JSON manifest lists, and the manifests that could not be read."""
    lake = deployment.lake
    prefix = lake.root + "/"

    def one(key: str) -> list[str] | None:
        try:
            return [uri.removeprefix(prefix) for uri, _ in read_manifest(lake, key)]
        except (FileNotFoundError, OSError, ValueError, KeyError):
            return None

    listed: dict[str, list[str]] = {}
    unreadable: set[str] = set()
    with ThreadPoolExecutor(max(1, min(workers, len(manifest_keys)))) as pool:
        for key, objects in zip(manifest_keys, pool.map(one, manifest_keys), strict=True):
            if objects is None:
                unreadable.add(key)
            else:
                listed[key] = objects
    return listed, unreadable


def plan_deletions(
    deployment: Deployment,
    key: str,
    view: ReapView,
    listed: list[ObjectInfo],
    report: ReapReport,
    *,
    now: dt.datetime,
    retention: int,
    grace: int,
    workers: int,
) -> ReapPlan:
    plan = ReapPlan()
    retention_cutoff = now - dt.timedelta(seconds=retention)
    young_after = now - dt.timedelta(seconds=grace)
    job_fresh_after = now - dt.timedelta(seconds=deployment.config.merge.job_timeout)

    # A reaped dropped table's name starts with '#' (forget_dropped_table): its prefix is no table's now.
    tables: dict[str, ReapTable] = {
        keys.table_segment(t.physical_schema_name, t.physical_table_name): t
        for t in view.tables
        if not t.physical_table_name.startswith("#")
    }
    layouts = {t.id: TableLayout(key, t.physical_schema_name, t.physical_table_name) for t in tables.values()}
    by_id = {t.id: t for t in tables.values()}
    partitions = {(p.table_id, p.partition_date, p.partition_values): p for p in view.partitions}
    partition_table = {p.id: p.table_id for p in view.partitions}
    gone_tables = {t.id for t in tables.values() if t.dropped_time is not None and t.dropped_time <= young_after}
    for table_id in gone_tables:
        plan.dropped_tables[table_id] = layouts[table_id].prefix
    past_ttl = ttl_cutoff(now)
    for p in view.partitions:
        table = by_id.get(p.table_id)
        if table is None or table.id in gone_tables or table.ttl_days is None:
            continue
        if p.partition_date < past_ttl(table):
            segment = keys.partition_segment(p.partition_date, p.partition_values)
            plan.ttl_partitions[p.id] = layouts[table.id].prefix + "/", f"/{segment}/"
    settled = set(plan.ttl_partitions) | {pid for pid, tid in partition_table.items() if tid in gone_tables}

    # Versions: retained or expired; what the retained ones show.
    versions: dict[int, list[ReapVersion]] = defaultdict(list)
    for v in view.versions:
        versions[v.partition_id].append(v)
    retained_manifests: set[str] = set()
    named_manifests: set[str] = {v.manifest_key for v in view.versions if v.manifest_key}
    # A live version's file list names its manifest's objects and its live objects, both kept below by
    # what the version shows: the list itself is kept, not read.
    retained_file_lists: set[str] = set()
    live_windows: dict[int, list[tuple[int, int]]] = defaultdict(list)
    covered_upper: dict[int, int] = {}
    expired: list[ReapVersion] = []
    for partition_id, history in versions.items():
        if partition_id in settled:
            continue
        kept, gone = retained_versions(history, retention_cutoff, view.tagged.get(partition_table[partition_id], ()))
        expired += gone
        newest = history[-1]
        covered_upper[partition_id] = (newest.covered_upper or 0) if newest.manifest_key else 0
        for v in kept:
            if v.manifest_key:
                retained_manifests.add(v.manifest_key)
            if v.file_list_key:
                retained_file_lists.add(v.file_list_key)
            if v.live_watermark is not None and v.live_watermark > (v.covered_upper or 0):
                live_windows[partition_id].append((v.covered_upper or 0, v.live_watermark))
    started = time.monotonic()
    manifest_objects, unreadable = _manifest_objects(deployment, sorted(retained_manifests), workers)
    report.catalog_seconds += time.monotonic() - started  # reading manifests is part of refreshing references
    referenced: set[str] = {k for objects in manifest_objects.values() for k in objects}
    kept_manifests = retained_manifests | retained_file_lists
    referenced |= kept_manifests | {keys.symlink_key(k) for k in kept_manifests}
    referenced |= view.error_keys
    referenced.add(keys.instance_marker(key))
    guarded_dirs = set()  # merged/dt=D of partitions whose retained manifest is unreadable: keep them whole
    for manifest in unreadable:
        guarded_dirs.add(keys.merged_directory_of(manifest))
        report.warnings.append(
            f"retained manifest {manifest} cannot be read; the merged objects of its partition are kept"
        )
    for v in expired:
        manifests = {k for k in (v.manifest_key, v.file_list_key) if k}
        doomed = sorted(manifests | {keys.symlink_key(k) for k in manifests})
        plan.expired_versions[v.id] = tuple(k for k in doomed if k not in referenced)

    # Merge ranges: their objects are read by future merges and publishes.
    max_upper: dict[int, int] = defaultdict(int)
    dates = {p.id: p.partition_date for p in view.partitions}
    values_of = {p.id: p.partition_values for p in view.partitions}
    for r in view.ranges:
        max_upper[r.partition_id] = max(max_upper[r.partition_id], r.upper)
        if r.lower is None or r.partition_id in settled or partition_table.get(r.partition_id) not in layouts:
            continue
        if r.object_key is not None:
            referenced.add(r.object_key)
        else:
            referenced.add(
                layouts[partition_table[r.partition_id]].merged_object(
                    dates[r.partition_id], r.lower, r.upper, values_of[r.partition_id]
                )
            )
    running = {pid for pid, beat in view.running_jobs if beat is not None and beat >= job_fresh_after}

    # Small objects: covered by the newest manifest and shown live by no retained version.
    small = {o.id: o for o in view.small_objects}
    for o in view.small_objects:
        if o.partition_id in settled or o.id > covered_upper.get(o.partition_id, 0):
            continue
        if not o.delayed and any(low < o.id <= high for low, high in live_windows.get(o.partition_id, ())):
            continue
        table_id = partition_table[o.partition_id]
        if table_id in layouts:
            plan.covered_rows[o.id] = layouts[table_id].small_object(
                dates[o.partition_id], o.id, o.delayed, values_of[o.partition_id]
            )
    covered_keys = {k: oid for oid, k in plan.covered_rows.items()}
    expired_keys = {k for doomed in plan.expired_versions.values() for k in doomed}

    tmp_files: dict[str, list[bool]] = defaultdict(list)
    for info in listed:
        parts = keys.split_key(key, info.key)
        if parts is None:
            continue  # never: listed under our key only
        reason: str | None = None
        orphan_candidate = False
        job_partition: int | None = None
        table = tables.get(parts.owner) if parts.owner is not None else None
        area = parts.area
        date, values = parts.partition_date, parts.partition_values
        partition = partitions.get((table.id, date, values)) if table is not None and date is not None else None
        object_depth = 4 + (values.count("/") + 1 if values else 0)  # <table>/<area>/dt=<date>/<values>/<name>
        # Whole tables and partitions first: nothing in them is kept, referenced or not.
        if table is not None and table.id in gone_tables:
            reason = "dropped"
        elif partition is not None and partition.id in plan.ttl_partitions:
            reason = "ttl"
        elif table is not None and table.dropped_time is not None:
            report.kept_young += 1  # dropped inside the grace period: a writer may still be finishing
            continue
        elif info.key in referenced:
            continue
        elif parts.is_temporary:
            orphan_candidate = True
        elif table is not None:
            name = parts.name
            if area in (keys.LIVE, keys.DELAYED) and parts.depth == object_depth:
                if info.key in covered_keys:
                    reason = "covered"
                else:
                    object_id = keys.small_object_id(name)
                    row = small.get(object_id) if object_id is not None else None
                    if (
                        row is not None
                        and partition is not None
                        and row.partition_id == partition.id
                        and row.delayed == (area == keys.DELAYED)
                    ):
                        continue  # referenced: not covered yet, or shown by a retained version
                    orphan_candidate = True
            elif area == keys.MERGED and parts.depth == object_depth:
                if parts.directory in guarded_dirs:
                    report.kept_unreadable += 1
                    continue
                part, update = keys.merge_range_of(name), keys.update_label_of(name)
                if part and partition is not None and part[1] <= max_upper[partition.id]:
                    # No merge can still commit it: a job commits only above the largest upper bound.
                    reason = "superseded"
                elif update and parts.update_manifest_key(update) in named_manifests:
                    reason = "superseded"  # a committed update's object, replaced since
                else:
                    orphan_candidate = True
                    job_partition = partition.id if partition is not None and part else None
            elif area == keys.MANIFESTS and parts.depth >= 4:
                if info.key in expired_keys:
                    reason = "expired"
                else:
                    orphan_candidate = True
            elif area == keys.ERRORS and parts.depth == 3:
                orphan_candidate = True
            else:
                continue  # not a key siltlake writes: leave it alone
        elif parts.owner is not None and keys.is_table_segment(parts.owner):
            orphan_candidate = True  # a table prefix no table owns any more (written after its reap)
        else:
            continue  # not a key siltlake writes: leave it alone
        if orphan_candidate:
            mtime = to_naive_utc(info.mtime) if info.mtime is not None else None
            young = mtime is None or mtime > young_after
            if parts.temporary_run is not None:
                tmp_files[parts.temporary_run].append(not young)
            if young:
                report.kept_young += 1
                continue
            if job_partition is not None and job_partition in running:
                report.kept_running += 1  # a live merge job may commit this very object
                continue
            reason = "orphan"
            plan.recheck.add(info.key)
        assert reason is not None
        plan.keys[reason].append(info)
    plan.tmp_runs = {run for run, old in tmp_files.items() if all(old)}
    return plan
