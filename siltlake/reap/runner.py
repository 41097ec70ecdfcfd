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
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from siltlake.catalog import ReapRun
from siltlake.clock import to_naive_utc, utcnow
from siltlake.deployment import Deployment, InstanceKeyRefused
from siltlake.derived.reap import reap_derived
from siltlake.errors import SiltError
from siltlake.logs import event
from siltlake.reap.incremental import RUN_HISTORY, list_scope, scope_of, table_scope
from siltlake.reap.plan import ReapPlan, plan_deletions
from siltlake.reap.report import ReapReport
from siltlake.reap.staging_rows import prune_staging_rows
from siltlake.storage import keys
from siltlake.storage.filesystem import ObjectInfo

DAY = 86400
MIN_RETENTION = DAY
MIN_GRACE = 3600


class ReapRefused(SiltError):
    """Reap will not run: the instance key is not provably this deployment's, or a setting is unsafe."""


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


def _delete_all(
    deployment: Deployment,
    key: str,
    infos: Sequence[ObjectInfo],
    recheck: set[str],
    young_after: dt.datetime,
    workers: int,
    guard: Callable[[str], None],
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
                    if now_info is not None and (now_info.mtime is None or to_naive_utc(now_info.mtime) > young_after):
                        skipped.append(info.key)
                        continue
                lake.delete(info.key, missing_ok=True)
                done.append(info.key)
            except Exception as exc:  # reported; the next run retries the object
                failed.append((info.key, f"{type(exc).__name__}: {exc}"))
        return done, failed, skipped

    size = max(1, min(1000, len(infos) // (workers * 4) + 1))
    chunks = [infos[i : i + size] for i in range(0, len(infos), size)]
    deleted: set[str] = set()
    failures: list[tuple[str, str]] = []
    skipped: set[str] = set()
    with ThreadPoolExecutor(max(1, min(workers, len(chunks)))) as pool:
        for done, failed, kept in pool.map(batch, chunks):
            deleted.update(done)
            failures += failed
            skipped.update(kept)
    return deleted, failures, skipped


def reap_once(
    deployment: Deployment,
    now: dt.datetime | None = None,
    *,
    dry_run: bool = False,
    retention: int | None = None,
    grace: int | None = None,
    force: bool = False,
    workers: int = 16,
    full: bool | None = None,
    table_id: int | None = None,
) -> ReapReport:
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
        raise ReapRefused(
            f"retention {retention}s is below one day: readers and time travel could lose objects "
            "they are reading; use at least 1d, or --force"
        )
    if grace < MIN_GRACE and not force:
        raise ReapRefused(
            f"grace {grace}s is below one hour: objects being written now could be taken for "
            "orphans; use at least 1h, or --force"
        )
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
        raise ReapRefused(
            f"refusing to reap: instance key {key!r} is registered to another deployment in this "
            "catalog's instances registry; give this deployment its own key"
        )

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
    plan = plan_deletions(
        deployment, key, view, listed, report, now=now, retention=retention, grace=grace, workers=workers
    )
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
            from siltlake.publish.iceberg.reap import needed_keys

            _count_iceberg(
                report,
                _iceberg_unneeded(
                    key,
                    listed,
                    needed_keys(deployment, catalog.tables.list()),
                    report,
                    now - dt.timedelta(seconds=grace),
                ),
            )
        report.derived = reap_derived(deployment, now, grace=grace, dry_run=True, expiring=set(plan.expired_versions))
        report.seconds = time.monotonic() - started
        return report

    # 3b. Iceberg: no snapshot may list an object about to go (expire those snapshots first).
    iceberg = "iceberg" in deployment.config.publish.targets
    if iceberg:
        from siltlake.publish.iceberg.reap import reap_iceberg

        records = catalog.tables.list()
        reap_iceberg(deployment, records, {info.key for infos in plan.keys.values() for info in infos}, {})

    # 4. Objects, in parallel batches.
    t0 = time.monotonic()
    everything = [info for infos in plan.keys.values() for info in infos]
    young_after = now - dt.timedelta(seconds=grace)
    deleted, report.failed, skipped = _delete_all(
        deployment, key, everything, plan.recheck, young_after, workers, guard
    )
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
    ttl = [
        pid
        for pid, (prefix, dated) in plan.ttl_partitions.items()
        if not any(k.startswith(prefix) and dated in k for k in failed)
    ]
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
        catalog.reaping.record_run(
            ReapRun(now, report.full_sweep, retention, view.max_small_object_id), utcnow(), keep_after=now - RUN_HISTORY
        )
    report.seconds = time.monotonic() - started
    event(
        log,
        "reap.run",
        full_sweep=report.full_sweep,
        prefixes=report.prefixes_listed,
        listed=report.listed,
        objects=sum(r.objects for r in report.reasons.values()),
        bytes=sum(r.bytes for r in report.reasons.values()),
        failed=len(report.failed),
        history_pruned=pruned,
        staging_rows_pruned=report.staging_rows,
        request_ids_pruned=report.request_ids,
        seconds=report.seconds,
    )
    for object_key, error in report.failed:
        event(log, "reap.delete_failed", logging.WARNING, key=object_key, reason=error)
    return report


log = logging.getLogger(__name__)


def _reap_iceberg_metadata(
    deployment: Deployment,
    key: str,
    listed: Sequence[ObjectInfo],
    plan: ReapPlan,
    report: ReapReport,
    young_after: dt.datetime,
    workers: int,
    guard: Callable[[str], None],
) -> None:
    """Expire the Iceberg snapshots of table versions reaped above, then delete the Iceberg metadata no
    remaining snapshot needs (older than the grace period: a publish run may be committing the newest)."""
    from siltlake.publish.iceberg.reap import reap_iceberg

    catalog = deployment.catalog
    records = catalog.tables.list()
    oldest = {record.id: catalog.version_reads.table_bounds(record.id).oldest for record in records}
    doomed = _iceberg_unneeded(
        key, listed, reap_iceberg(deployment, records, set(), oldest).retained, report, young_after
    )
    deleted, failed, skipped = _delete_all(
        deployment, key, doomed, {i.key for i in doomed}, young_after, workers, guard
    )
    report.failed += failed
    report.kept_young += len(skipped)
    _count_iceberg(report, [info for info in doomed if info.key in deleted])


def _iceberg_unneeded(
    key: str, listed: Sequence[ObjectInfo], needed: set[str], report: ReapReport, young_after: dt.datetime
) -> list[ObjectInfo]:
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
