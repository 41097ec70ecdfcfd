"""One publish run: the five steps of docs/design.md, "Publish and readers", in order."""

from __future__ import annotations

import datetime as dt
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from siltlake.catalog import Catalog, LiveCandidate, PublishedVersion, SwitchedPartition
from siltlake.catalog.core import CATALOG_OUTAGES, catalog_unavailable
from siltlake.catalog.versions import MERGED_CAS_BATCH
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.errors import ConfigError
from siltlake.logs import event
from siltlake.publish.registry import configured_targets
from siltlake.publish.targets import SomeTablesFailed
from siltlake.storage.keys import beyond_label, live_label
from siltlake.storage.manifests import read_manifest, write_manifests

# Manifest writes are small and mostly wait on storage (an object store's latency): a few threads.
MANIFEST_WRITERS = 8


@dataclass
class PublishReport:
    switched: list[int] = field(default_factory=list)
    closed: list[int] = field(default_factory=list)
    live_versions: list[PublishedVersion] = field(default_factory=list)
    merged_versions: list[PublishedVersion] = field(default_factory=list)
    skipped_merged: int = 0  # a merge moved desired while the manifest was written: next run
    seconds: float = 0.0
    external: list[str] = field(default_factory=list)  # statements issued to external catalogs, "target: ..."
    target_errors: list[str] = field(default_factory=list)  # a failed target is retried by the next run


def local_date(now: dt.datetime, zone) -> dt.date:  # a ZoneInfo
    """The calendar date in `zone` of a naive UTC time."""
    return now.replace(tzinfo=dt.UTC).astimezone(zone).date()


def _write_merged_manifests(deployment: Deployment, tables: dict, partition: SwitchedPartition) -> str:
    """Write the manifests of the partition's desired merged version; returns the JSON manifest's key."""
    layout = tables[partition.table_id].layout(deployment.instance_key)
    date, values = partition.partition_date, partition.partition_values
    objects = [(r.key(layout, date, values), r.content_length) for r in partition.ranges]
    # Small objects an upsert's merge version already shows beyond the ranges: listed after them, in id order.
    objects += [(layout.small_object(date, o.id, o.delayed, values), o.content_length) for o in partition.beyond]
    label = beyond_label(partition.desired, partition.upper) if partition.beyond else None
    return write_manifests(
        deployment.lake, layout, date, partition.desired, objects, label=label, values=values
    ).json_key


def _write_live_manifests(deployment: Deployment, tables: dict, candidate: LiveCandidate) -> str:
    """Write the file list of an append version: what its newest version's list names (older live objects,
    an update's object) and its new live objects; returns the JSON manifest's key."""
    layout = tables[candidate.table_id].layout(deployment.instance_key)
    lake = deployment.lake
    base = candidate.base_file_list_key or candidate.manifest_key
    listed = read_manifest(lake, base) if base else []
    objects = [
        (layout.small_object(candidate.partition_date, object_id, False, candidate.partition_values), size)
        for object_id, size in candidate.objects
    ]
    return write_manifests(
        lake,
        layout,
        candidate.partition_date,
        candidate.version,
        objects,
        label=live_label(candidate.version, candidate.watermark),
        listed=listed,
        values=candidate.partition_values,
    ).json_key


def _target_failure(catalog: Catalog, target: str, exc: Exception, done: str = "") -> str:
    """What a target's failure says in the report. A catalog database that could not be used is an outage, never
    the target's bug: when siltlake's own catalog is the one down (a target reads it too, and the Iceberg catalog
    lives in it by default), the run fails as in any other step, `done` (what the run committed) in a note (`silt
    publish --once` exits 2 with the outage's line, the daemon backs off and retries); else it is the target's own
    database, said without its SQL."""
    if not catalog_unavailable(exc):
        return str(exc)
    try:
        catalog.revision()  # one query
    except CATALOG_OUTAGES:
        if done:
            exc.add_note(done)
        raise exc from None
    cause = str(getattr(exc, "orig", None) or exc)
    first = next((line.strip() for line in cause.splitlines() if line.strip()), type(exc).__name__)
    setting = " (publish.iceberg.catalog_url)" if target == "iceberg" else ""
    return (
        f"its catalog database could not be used ({first}); check that its server is up and its URL{setting} "
        "is right: the next run retries"
    )


def publish_once(deployment: Deployment, now: dt.datetime | None = None) -> PublishReport:
    """Switch, close, (sync definitions: with external catalogs), publish live and merged versions.

    `now` (naive UTC) replaces the clock, to drive the lifecycle in tests, the demo and scripts.
    """
    started = time.monotonic()
    given = now is not None  # a time the caller gave is refused if the newest version is later, not moved past it
    now = now or utcnow()
    catalog = deployment.catalog
    catalog.check_ready()
    deployment.check_instance("publish")
    report = PublishReport()
    # 1. Switch first: a partition closed in this run switches at the earliest in the next one.
    report.switched = catalog.versions.switch_partitions()
    # 2. Close the days that ended in each table's time zone.
    tables = {table.id: table for table in catalog.tables.list()}
    # A derived table's partitions are built, not streamed: no later object is delayed, none closes.
    report.closed = catalog.versions.close_partitions(
        {
            table_id: local_date(now, table.definition.zone)
            for table_id, table in tables.items()
            if table.definition.kind == "log"
        }
    )
    # 3. Table definitions (new, renamed, dropped tables; added and widened columns) to external catalogs.
    # A target that fails is reported and retried next run; versions are still published (4, 5).
    targets = []
    for target in configured_targets(deployment):
        try:
            report.external += [f"{target.name}: {s}" for s in target.sync_tables(list(tables.values()))]
            targets.append(target)
        except ConfigError:
            raise
        except Exception as exc:  # one line for the report; the catalog is unaffected
            report.external += [f"{target.name}: {s}" for s in target.statements]  # issued before it failed
            report.target_errors.append(f"{target.name}: {_target_failure(catalog, target.name, exc)}")
            if isinstance(exc, SomeTablesFailed):  # the other tables were synced: their partitions follow
                targets.append(target)
    # 4, 5. Append versions for partitions not switched, merged versions for switched ones: every version's
    # manifest (its exact file list) first, then its row, a compare-and-swap per partition. The first
    # transaction holds the append versions and the first MERGED_CAS_BATCH merged ones, so a run is one
    # table version of each table it changes unless it publishes more merged versions than that.
    live = [x for x in catalog.versions.live_to_publish() if x.table_id in tables]
    pending = [p for p in catalog.versions.merged_to_publish() if p.table_id in tables]  # dropped: reap
    with ThreadPoolExecutor(MANIFEST_WRITERS) as pool:
        live_keys = list(pool.map(lambda candidate: _write_live_manifests(deployment, tables, candidate), live))
        for start in range(0, max(len(pending), 1), MERGED_CAS_BATCH):
            batch = pending[start : start + MERGED_CAS_BATCH]
            keys = list(pool.map(lambda partition: _write_merged_manifests(deployment, tables, partition), batch))
            appending = list(zip(live, live_keys, strict=True)) if start == 0 else []
            if not appending and not batch:
                break
            appended, published = catalog.versions.commit(
                appending, list(zip(batch, keys, strict=True)), now, given=given
            )
            report.live_versions += appended
            report.merged_versions += published
            report.skipped_merged += len(batch) - len(published)
    # Partition locations last, so a partition switched in this run points at the manifest of step 5.
    for target in targets:
        try:
            report.external += [f"{target.name}: {s}" for s in target.sync_partitions(tables)]
        except ConfigError:
            raise
        except Exception as exc:
            report.external += [f"{target.name}: {s}" for s in target.statements]
            done = (
                f"this run had published {len(report.live_versions)} live and {len(report.merged_versions)} "
                f"merged versions; {target.name} follows in the next run"
            )
            report.target_errors.append(f"{target.name}: {_target_failure(catalog, target.name, exc, done)}")
    report.seconds = time.monotonic() - started
    if report.switched or report.closed or report.live_versions or report.merged_versions:
        event(
            log,
            "publish.run",
            switched=len(report.switched),
            closed=len(report.closed),
            live_versions=len(report.live_versions),
            merged_versions=len(report.merged_versions),
            skipped_merged=report.skipped_merged,
            seconds=report.seconds,
        )
    for error in report.target_errors:
        event(log, "publish.target_failed", logging.WARNING, reason=error)
    return report


log = logging.getLogger(__name__)
