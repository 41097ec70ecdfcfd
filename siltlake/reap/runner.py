"""One reap run (docs/design.md, "Reap"): refresh what is referenced, delete what nothing retained needs, rows last.

Order: (1) check that the instance key is ours; (2) read every reference in one catalog snapshot and the
manifests of the retained versions; (3) list the objects under our key and classify each; (4) delete
objects in parallel batches; (5) delete catalog rows, only for what was deleted. A run cut short anywhere
leaves rows that still describe the objects left, so running reap again finishes the work.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from siltlake.catalog import ReapRun, ReapTable, ReapVersion, ReapView
from siltlake.clock import to_naive_utc, utcnow
from siltlake.deployment import Deployment, InstanceKeyRefused
from siltlake.derived.reap import DerivedReapReport, reap_derived
from siltlake.errors import SiltError
from siltlake.logs import event
from siltlake.reap.incremental import RUN_HISTORY, list_scope, scope_of, table_scope, ttl_cutoff
from siltlake.reap.retention import retained_versions
from siltlake.reap.staging_rows import prune_staging_rows
from siltlake.storage import keys
from siltlake.storage.filesystem import ObjectInfo
from siltlake.storage.keys import TableLayout
from siltlake.storage.manifests import read_manifest

DAY = 86400
MIN_RETENTION = DAY
MIN_GRACE = 3600

# (reason, what the report calls it, what its catalog rows are)
REASONS = (
    ("covered", "small objects in the current manifest", "small objects"),
    ("superseded", "superseded merged objects", ""),
    ("expired", "expired versions' manifests", "versions"),
    ("orphan", "orphans past the grace period", ""),
    ("ttl", "partitions past their TTL", "partitions"),
    ("dropped", "dropped tables", "tables"),
)

class ReapRefused(SiltError):
    """Reap will not run: the instance key is not provably this deployment's, or a setting is unsafe."""


@dataclass
class ReasonTotals:
    objects: int = 0
    bytes: int = 0
    rows: int = 0  # catalog rows of the reason's kind (see REASONS)


@dataclass
class ReapReport:
    instance_key: str
    now: dt.datetime
    dry_run: bool
    reasons: dict[str, ReasonTotals] = field(default_factory=lambda: {r[0]: ReasonTotals() for r in REASONS})
    kept_young: int = 0  # unreferenced objects still inside the grace period
    kept_running: int = 0  # unreferenced merged objects of a partition a live merge job works on
    kept_unreadable: int = 0  # merged objects kept because a retained manifest could not be read
    failed: list[tuple[str, str]] = field(default_factory=list)  # (key, error): retried by the next run
    warnings: list[str] = field(default_factory=list)
    other_instances: list[str] = field(default_factory=list)
    derived: DerivedReapReport = field(default_factory=DerivedReapReport)  # derived table builds
    listed: int = 0
    staging_rows: int = 0  # processed staging rows pruned past stream.staging_retention (reap.staging_rows)
    request_ids: int = 0  # request ids of committed writes pruned past reap.request_id_retention
    full_sweep: bool = True  # False: listed only what changed since the last run
    prefixes_listed: int = 1
    catalog_seconds: float = 0.0
    list_seconds: float = 0.0
    delete_seconds: float = 0.0
    seconds: float = 0.0

    @property
    def objects(self) -> int:
        return sum(r.objects for r in self.reasons.values())

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.reasons.values())

    def as_dict(self) -> dict:
        return {
            "instance_key": self.instance_key, "now": self.now.isoformat(), "dry_run": self.dry_run,
            "reasons": {name: {"objects": t.objects, "bytes": t.bytes, "catalog_rows": t.rows}
                        for name, t in self.reasons.items()},
            "objects": self.objects, "bytes": self.bytes, "kept_young": self.kept_young,
            "kept_running": self.kept_running, "kept_unreadable": self.kept_unreadable,
            "failed": [{"key": k, "error": e} for k, e in self.failed], "warnings": self.warnings,
            "other_instances": self.other_instances, "derived": self.derived.as_dict(), "listed": self.listed,
            "staging_rows_pruned": self.staging_rows, "request_ids_pruned": self.request_ids,
            "full_sweep": self.full_sweep,
            "prefixes_listed": self.prefixes_listed,
            "catalog_seconds": round(self.catalog_seconds, 3), "list_seconds": round(self.list_seconds, 3),
            "delete_seconds": round(self.delete_seconds, 3), "seconds": round(self.seconds, 3),
        }


@dataclass
class _Plan:
    """What one run deletes: object keys by reason, and the rows to delete once their objects are gone."""

    keys: dict[str, list[ObjectInfo]] = field(default_factory=lambda: defaultdict(list))
    recheck: set[str] = field(default_factory=set)  # orphans: stat again right before deleting
    covered_rows: dict[int, str] = field(default_factory=dict)  # small object id -> its key
    expired_versions: dict[int, tuple[str, ...]] = field(default_factory=dict)  # version row id -> manifest keys
    ttl_partitions: dict[int, tuple[str, str]] = field(default_factory=dict)  # id -> (table prefix, dt segment)
    dropped_tables: dict[int, str] = field(default_factory=dict)  # table id -> its prefix
    tmp_runs: set[str] = field(default_factory=set)  # _tmp/<run> prefixes whose every file goes


def check_instance(deployment: Deployment) -> None:
    """Refuse unless the instance key provably belongs to this deployment's catalog (no reaping of another's)."""
    try:
        deployment.check_instance("reap")
    except InstanceKeyRefused as exc:
        raise ReapRefused(str(exc)) from None


def register_other_instances(deployment: Deployment, key: str) -> list[str]:
    """Record in the `instances` registry every other deployment's key found at the storage root."""
    lake, catalog = deployment.lake, deployment.catalog
    found = []
    for name in lake.subdirectories():
        if name == key:
            continue
        marker = keys.instance_marker(name)
        try:
            data = json.loads(lake.read_bytes(marker))
        except (FileNotFoundError, ValueError):
            continue
        if not isinstance(data, dict) or data.get("instance_key") != name:
            continue
        catalog.instances.register(name, lake.root, is_self=False, description=str(data.get("catalog", "")))
        found.append(name)
    return found


def _manifest_objects(deployment: Deployment, manifest_keys: Sequence[str], workers: int
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


def _plan(deployment: Deployment, key: str, view: ReapView, listed: list[ObjectInfo], report: ReapReport, *,
          now: dt.datetime, retention: int, grace: int, workers: int) -> _Plan:
    plan = _Plan()
    retention_cutoff = now - dt.timedelta(seconds=retention)
    young_after = now - dt.timedelta(seconds=grace)
    job_fresh_after = now - dt.timedelta(seconds=deployment.config.merge.job_timeout)

    # A reaped dropped table's name starts with '#' (forget_dropped_table): its prefix is no table's now.
    tables: dict[str, ReapTable] = {keys.table_segment(t.physical_schema_name, t.physical_table_name): t
                                    for t in view.tables if not t.physical_table_name.startswith("#")}
    layouts = {t.id: TableLayout(key, t.physical_schema_name, t.physical_table_name) for t in tables.values()}
    by_id = {t.id: t for t in tables.values()}
    partitions = {(p.table_id, p.partition_date): p for p in view.partitions}
    partition_table = {p.id: p.table_id for p in view.partitions}
    gone_tables = {t.id for t in tables.values()
                   if t.dropped_time is not None and t.dropped_time <= young_after}
    for table_id in gone_tables:
        plan.dropped_tables[table_id] = layouts[table_id].prefix
    past_ttl = ttl_cutoff(now)
    for p in view.partitions:
        table = by_id.get(p.table_id)
        if table is None or table.id in gone_tables or table.ttl_days is None:
            continue
        if p.partition_date < past_ttl(table):
            plan.ttl_partitions[p.id] = layouts[table.id].prefix + "/", f"/{keys.partition_segment(p.partition_date)}/"
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
        report.warnings.append(f"retained manifest {manifest} cannot be read; the merged objects of its "
                               "partition are kept")
    for v in expired:
        manifests = {k for k in (v.manifest_key, v.file_list_key) if k}
        doomed = sorted(manifests | {keys.symlink_key(k) for k in manifests})
        plan.expired_versions[v.id] = tuple(k for k in doomed if k not in referenced)

    # Merge ranges: their objects are read by future merges and publishes.
    max_upper: dict[int, int] = defaultdict(int)
    dates = {p.id: p.partition_date for p in view.partitions}
    for r in view.ranges:
        max_upper[r.partition_id] = max(max_upper[r.partition_id], r.upper)
        if r.lower is None or r.partition_id in settled or partition_table.get(r.partition_id) not in layouts:
            continue
        if r.object_key is not None:
            referenced.add(r.object_key)
        else:
            referenced.add(layouts[partition_table[r.partition_id]].merged_object(dates[r.partition_id], r.lower,
                                                                                  r.upper))
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
            plan.covered_rows[o.id] = layouts[table_id].small_object(dates[o.partition_id], o.id, o.delayed)
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
        date = parts.partition_date
        partition = partitions.get((table.id, date)) if table is not None and date is not None else None
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
            if area in (keys.LIVE, keys.DELAYED) and parts.depth == 4:
                if info.key in covered_keys:
                    reason = "covered"
                else:
                    object_id = keys.small_object_id(name)
                    row = small.get(object_id) if object_id is not None else None
                    if row is not None and partition is not None and row.partition_id == partition.id \
                            and row.delayed == (area == keys.DELAYED):
                        continue  # referenced: not covered yet, or shown by a retained version
                    orphan_candidate = True
            elif area == keys.MERGED and parts.depth == 4:
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


def _delete_all(deployment: Deployment, key: str, infos: Sequence[ObjectInfo], recheck: set[str],
                young_after: dt.datetime, workers: int, guard: Callable[[str], None]
                ) -> tuple[set[str], list[tuple[str, str]], set[str]]:
    """Delete objects in parallel batches; returns (deleted or already missing, failures, skipped)."""
    lake = deployment.lake

    def batch(chunk: Sequence[ObjectInfo]) -> tuple[list[str], list[tuple[str, str]], list[str]]:
        done, failed, skipped = [], [], []
        for info in chunk:
            try:
                guard(info.key)
                if info.key in recheck:
                    # An orphan could have been rewritten since it was listed (a retried merge, a reused id):
                    # look again, so only an object still older than the grace period goes.
                    now_info = lake.info(info.key)
                    if now_info is not None and (now_info.mtime is None
                                                 or to_naive_utc(now_info.mtime) > young_after):
                        skipped.append(info.key)
                        continue
                lake.delete(info.key, missing_ok=True)
                done.append(info.key)
            except Exception as exc:  # reported; the next run retries the object
                failed.append((info.key, f"{type(exc).__name__}: {exc}"))
        return done, failed, skipped

    size = max(1, min(1000, len(infos) // (workers * 4) + 1))
    chunks = [infos[i:i + size] for i in range(0, len(infos), size)]
    deleted: set[str] = set()
    failures: list[tuple[str, str]] = []
    skipped: set[str] = set()
    with ThreadPoolExecutor(max(1, min(workers, len(chunks)))) as pool:
        for done, failed, kept in pool.map(batch, chunks):
            deleted.update(done)
            failures += failed
            skipped.update(kept)
    return deleted, failures, skipped


def reap_once(deployment: Deployment, now: dt.datetime | None = None, *, dry_run: bool = False,
              retention: int | None = None, grace: int | None = None, force: bool = False,
              workers: int = 16, full: bool | None = None, table_id: int | None = None) -> ReapReport:
    """Delete what no retained version, merge range or writer in flight needs, under this deployment's key.

    `now` (naive UTC) replaces the clock as in publish; retention and grace are seconds (defaults from
    `[reap]`); below one day of retention or one hour of grace it refuses unless `force`. `full` forces a full
    sweep; otherwise one runs only when none completed within reap.full_sweep_interval (reap.incremental).
    `table_id`: that table's partitions only (Table.maintenance.expire), a run not recorded as one.
    """
    started = time.monotonic()
    config = deployment.config.reap
    retention = config.retention if retention is None else retention
    grace = config.grace if grace is None else grace
    if retention < MIN_RETENTION and not force:
        raise ReapRefused(f"retention {retention}s is below one day: readers and time travel could lose objects "
                          "they are reading; use at least 1d, or --force")
    if grace < MIN_GRACE and not force:
        raise ReapRefused(f"grace {grace}s is below one hour: objects being written now could be taken for "
                          "orphans; use at least 1h, or --force")
    now = now or utcnow()
    catalog = deployment.catalog
    catalog.check_ready()
    key = deployment.instance_key
    report = ReapReport(instance_key=key, now=now, dry_run=dry_run)

    # 1. Whose key is this? Only ours, proven by the marker `silt init` wrote, and no other deployment's.
    check_instance(deployment)
    report.other_instances = register_other_instances(deployment, key)
    foreign = catalog.instances.foreign()
    if key in foreign:
        raise ReapRefused(f"refusing to reap: instance key {key!r} is registered to another deployment in this "
                          "catalog's instances registry; give this deployment its own key")

    def guard(object_key: str) -> None:
        # Every delete re-checks the key's instance against the registry (the reg_key check).
        owner = keys.instance_of(object_key)
        if owner != key or owner in foreign:
            raise ReapRefused(f"refusing to delete {object_key}: it is not under this deployment's key {key!r}")

    # 2. Refresh what is referenced, in one snapshot; 3. list and classify.
    t0 = time.monotonic()
    scope = scope_of(deployment, now, retention=retention, full=full) if table_id is None else table_scope(table_id)
    view = catalog.reaping.view(scope)
    if table_id is not None:  # no other table is judged: not its drop, not its prefix
        view.tables = [t for t in view.tables if t.id == table_id]
    report.catalog_seconds += time.monotonic() - t0
    t0 = time.monotonic()
    if scope is None:
        listed = list(deployment.lake.list(keys.instance_prefix(key)))
    else:
        listed, report.prefixes_listed = list_scope(deployment, key, view, workers, whole=table_id is None)
        report.full_sweep = False
    report.listed = len(listed)
    report.list_seconds = time.monotonic() - t0
    plan = _plan(deployment, key, view, listed, report, now=now, retention=retention, grace=grace,
                 workers=workers)
    listed_keys = {info.key for info in listed}

    if dry_run:
        for reason, infos in plan.keys.items():
            report.reasons[reason].objects = len(infos)
            report.reasons[reason].bytes = sum(i.size for i in infos)
        report.reasons["covered"].rows = len(plan.covered_rows)
        report.reasons["expired"].rows = len(plan.expired_versions)
        report.reasons["ttl"].rows = len(plan.ttl_partitions)
        report.reasons["dropped"].rows = len(plan.dropped_tables)
        if "iceberg" in deployment.config.publish.targets:  # before any snapshot expires: a real run may free more
            from siltlake.publish.iceberg_reap import needed_keys

            _count_iceberg(report, _iceberg_unneeded(key, listed, needed_keys(deployment, catalog.tables.list()),
                                                     report, now - dt.timedelta(seconds=grace)))
        report.derived = reap_derived(deployment, now, grace=grace, dry_run=True, expiring=set(plan.expired_versions))
        report.seconds = time.monotonic() - started
        return report

    # 3b. Iceberg: no snapshot may list an object about to go (expire those snapshots first).
    iceberg = "iceberg" in deployment.config.publish.targets
    if iceberg:
        from siltlake.publish.iceberg_reap import reap_iceberg

        records = catalog.tables.list()
        reap_iceberg(deployment, records, {info.key for infos in plan.keys.values() for info in infos}, {})

    # 4. Objects, in parallel batches.
    t0 = time.monotonic()
    everything = [info for infos in plan.keys.values() for info in infos]
    young_after = now - dt.timedelta(seconds=grace)
    deleted, report.failed, skipped = _delete_all(deployment, key, everything, plan.recheck, young_after, workers,
                                                  guard)
    report.kept_young += len(skipped)
    for reason, infos in plan.keys.items():
        gone = [i for i in infos if i.key in deleted]
        report.reasons[reason].objects = len(gone)
        report.reasons[reason].bytes = sum(i.size for i in gone)
    report.delete_seconds = time.monotonic() - t0

    # 5. Catalog rows, only for what is gone (a failed delete keeps its row, so the next run retries it).
    failed = {k for k, _ in report.failed}
    t0 = time.monotonic()
    rows = [oid for oid, k in plan.covered_rows.items() if k in deleted or k not in listed_keys]
    if rows:
        report.reasons["covered"].rows = catalog.reaping.delete_small_object_rows(rows)
    versions = [vid for vid, doomed in plan.expired_versions.items() if not any(k in failed for k in doomed)]
    if versions:
        report.reasons["expired"].rows = catalog.reaping.delete_version_rows(versions)
    ttl = [pid for pid, (prefix, dated) in plan.ttl_partitions.items()
           if not any(k.startswith(prefix) and dated in k for k in failed)]
    if ttl:
        catalog.reaping.delete_partitions(ttl)
        report.reasons["ttl"].rows = len(ttl)
    for dropped_id, prefix in plan.dropped_tables.items():
        if any(k.startswith(prefix + "/") for k in failed):
            continue
        catalog.reaping.forget_dropped_table(dropped_id)
        report.reasons["dropped"].rows += 1
        guard(prefix + "/")
        deployment.lake.delete_prefix(prefix)  # the empty directories left behind (local file systems)
    for run in plan.tmp_runs:
        if not any(k.startswith(run + "/") for k in failed | skipped):
            guard(run + "/")
            deployment.lake.delete_prefix(run)
    report.catalog_seconds += time.monotonic() - t0
    if iceberg:
        _reap_iceberg_metadata(deployment, key, listed, plan, report, young_after, workers, guard)
    if table_id is not None:  # the rest is the whole lake's, and only a whole run is one to start the next from
        report.seconds = time.monotonic() - started
        return report
    # Derived builds last: the versions that expired above no longer protect the builds they showed.
    report.derived = reap_derived(deployment, now, grace=grace)
    pruned = catalog.observations.prune_history(now - dt.timedelta(seconds=deployment.config.observe.history_retention))
    report.staging_rows = prune_staging_rows(deployment, now)
    report.request_ids = catalog.requests.prune(now - dt.timedelta(seconds=deployment.config.reap.request_id_retention))
    if not report.failed:
        # Only a run that deleted all it planned is one the next incremental run may start from: an object
        # whose delete failed lies in a partition that may never change again.
        catalog.reaping.record_run(ReapRun(now, report.full_sweep, retention, view.max_small_object_id),
                                   utcnow(), keep_after=now - RUN_HISTORY)
    report.seconds = time.monotonic() - started
    event(log, "reap.run", full_sweep=report.full_sweep, prefixes=report.prefixes_listed,
          listed=report.listed, objects=sum(r.objects for r in report.reasons.values()),
          bytes=sum(r.bytes for r in report.reasons.values()), failed=len(report.failed), history_pruned=pruned,
          staging_rows_pruned=report.staging_rows, request_ids_pruned=report.request_ids,
          seconds=report.seconds)
    for object_key, error in report.failed:
        event(log, "reap.delete_failed", logging.WARNING, key=object_key, reason=error)
    return report


log = logging.getLogger(__name__)


def _reap_iceberg_metadata(deployment: Deployment, key: str, listed: Sequence[ObjectInfo], plan: _Plan,
                           report: ReapReport, young_after: dt.datetime, workers: int,
                           guard: Callable[[str], None]) -> None:
    """Expire the Iceberg snapshots of table versions reaped above, then delete the Iceberg metadata no
    remaining snapshot needs (older than the grace period: a publish run may be committing the newest)."""
    from siltlake.publish.iceberg_reap import reap_iceberg

    catalog = deployment.catalog
    records = catalog.tables.list()
    oldest = {record.id: catalog.versions.table_bounds(record.id).oldest for record in records}
    doomed = _iceberg_unneeded(key, listed, reap_iceberg(deployment, records, set(), oldest).retained, report,
                               young_after)
    deleted, failed, skipped = _delete_all(deployment, key, doomed, {i.key for i in doomed}, young_after, workers,
                                           guard)
    report.failed += failed
    report.kept_young += len(skipped)
    _count_iceberg(report, [info for info in doomed if info.key in deleted])


def _iceberg_unneeded(key: str, listed: Sequence[ObjectInfo], needed: set[str], report: ReapReport,
                      young_after: dt.datetime) -> list[ObjectInfo]:
    """The files under the Iceberg area no snapshot needs, older than the grace period."""
    area = keys.iceberg_warehouse(key) + "/"
    doomed = []
    for info in listed:
        if not info.key.startswith(area) or info.key in needed:
            continue
        mtime = to_naive_utc(info.mtime) if info.mtime is not None else None
        if mtime is None or mtime > young_after:
            report.kept_young += 1
            continue
        doomed.append(info)
    return doomed


def _count_iceberg(report: ReapReport, gone: Sequence[ObjectInfo]) -> None:
    for info in gone:  # metadata no remaining snapshot needs; anything else (data/) no snapshot ever listed
        reason = "expired" if keys.iceberg_metadata_file(info.key) else "orphan"
        report.reasons[reason].objects += 1
        report.reasons[reason].bytes += info.size
