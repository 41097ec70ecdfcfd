"""Reap's part in the Iceberg target (docs/design.md, "Iceberg target" and "Reap"): before reap deletes objects, no
snapshot may list one; after, only the metadata files the remaining snapshots need stay."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from siltlake.clock import utcnow
from siltlake.publish.iceberg.catalog import (
    REAP_PROPERTY,
    TARGET,
    VERSION_PROPERTY,
    identifier,
    lake_key,
    retried_on_conflict,
)
from siltlake.publish.iceberg.deletes import DeleteChange, dates_of, snapshot_deletes, target_of
from siltlake.publish.iceberg.manifests import expire_snapshots
from siltlake.publish.iceberg.snapshots import snapshot_files, synced_version, version_hint_key, write_version_hint
from siltlake.publish.iceberg.target import IcebergTarget

if TYPE_CHECKING:
    from pyiceberg.table import Table as IcebergTable

    from siltlake.catalog import TableRecord
    from siltlake.deployment import Deployment


@dataclass
class IcebergReap:
    """What reap did to the Iceberg tables, and the metadata files the remaining snapshots need."""

    expired: int = 0  # snapshots expired
    removed: int = 0  # files taken out of current snapshots (reaped partitions)
    retained: set[str] = field(default_factory=set)  # keys under the metadata area that stay


def reap_iceberg(
    deployment: Deployment, records: Iterable[TableRecord], doomed: set[str], oldest_versions: Mapping[int, int]
) -> IcebergReap:
    """Before reap deletes `doomed` object keys: take them out of current snapshots (a partition past its
    TTL), expire every other snapshot that lists one, and the snapshots of table versions older than
    `oldest_versions[table id]`; then name the metadata files the remaining snapshots need."""
    result = IcebergReap()
    target = IcebergTarget(deployment)
    records = list(records)
    live = {record.id for record in records}
    for old in deployment.catalog.external_sync.synced_tables(TARGET).values():
        if old.dropped or old.table_id not in live:  # its files go now: no Iceberg table may list them
            target.drop((old.database_name, old.table_name), old.table_id)
            deployment.catalog.external_sync.forget_table(TARGET, old.table_id)
    for record in records:
        # Another reap (or a publish run) may commit the table meanwhile: a lost race is decided again from the
        # table it left, where what the other already removed or expired is simply not there any more.
        retried_on_conflict(
            record.qualified_name,
            functools.partial(_reap_table, deployment, target, record, doomed, oldest_versions, result),
        )
    return result


def needed_keys(deployment: Deployment, records: Iterable[TableRecord]) -> set[str]:
    """The files under the Iceberg area the tables need as they are (a dry run's view: nothing expired)."""
    target = IcebergTarget(deployment)
    needed: set[str] = set()
    for record in records:
        table = target.load(identifier(deployment, record))
        if table is not None and target.owned(table, record.id):
            needed |= _metadata_keys(deployment, table, {})
    return needed


def _reap_table(
    deployment: Deployment,
    target: IcebergTarget,
    record: TableRecord,
    doomed: set[str],
    oldest_versions: Mapping[int, int],
    result: IcebergReap,
) -> None:
    from pyiceberg.exceptions import CommitFailedException

    table = target.load(identifier(deployment, record))
    if table is None or not target.owned(table, record.id):
        return
    # A tagged version stays readable in siltlake however old (reap keeps what it shows): its snapshot stays too.
    tagged = {tag.table_version for tag in deployment.catalog.tags.list(record.id)}
    try:
        _reap_snapshots(deployment, table, doomed, oldest_versions.get(record.id, 0), tagged, result)
    except FileNotFoundError as exc:
        # Another reap expired snapshots this one still lists and deleted their manifests: a lost race when the
        # table has moved on since it was read (then decided again from the new table), else a file really gone.
        now = target.load(identifier(deployment, record))
        if now is None or now.metadata_location != table.metadata_location:
            raise CommitFailedException(
                f"Iceberg table {'.'.join(table.name())} was changed by another commit while reap read it: {exc}"
            ) from exc
        raise


def _reap_snapshots(
    deployment: Deployment, table: IcebergTable, doomed: set[str], oldest: int, tagged: set[int], result: IcebergReap
) -> None:
    cache: dict[str, list[Any]] = {}
    current = table.current_snapshot()
    if current is not None:
        gone = [f for f in snapshot_files(table, current, cache) if lake_key(deployment, f.file_path) in doomed]
        if gone:
            # A keyed partition's delete files go with the data files they apply to.
            paths = {f.file_path for f in gone}
            stale = [f for f in snapshot_deletes(table, current, dates_of(gone)) if target_of(f) in paths]
            IcebergTarget.commit(
                table,
                gone,
                [],
                {VERSION_PROPERTY: str(synced_version(table)), REAP_PROPERTY: utcnow().isoformat() + "Z"},
                deletes=DeleteChange(stale),
            )
            result.removed += len(gone)
            current = table.current_snapshot()
    expire = []
    for snapshot in table.snapshots():
        if current is not None and snapshot.snapshot_id == current.snapshot_id:
            continue
        version = int(snapshot.summary.get(VERSION_PROPERTY) or "0") if snapshot.summary is not None else 0
        if (version < oldest and version not in tagged) or any(
            lake_key(deployment, f.file_path) in doomed for f in snapshot_files(table, snapshot, cache)
        ):
            expire.append(snapshot.snapshot_id)
    if expire:
        expire_snapshots(table, expire)
        result.expired += len(expire)
    write_version_hint(deployment, table)
    result.retained |= _metadata_keys(deployment, table, cache)


def _metadata_keys(deployment: Deployment, table: IcebergTable, cache: dict[str, list[Any]]) -> set[str]:
    """The files under the table's location it needs: its metadata file and those its log names, its statistics
    files, every manifest list and manifest of its snapshots, and the data and delete files they list that lie
    there (an engine's commit through the catalog writes them under `data/`; siltlake's own objects lie
    elsewhere). Whatever else lies there no snapshot reads: a refused or failed writer's files."""
    metadata = table.metadata
    paths = {
        table.metadata_location,
        *(entry.metadata_file for entry in metadata.metadata_log),
        *(stats.statistics_path for stats in (*metadata.statistics, *metadata.partition_statistics)),
    }
    for snapshot in table.snapshots():
        paths.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):  # the list read once (snapshot_files would read it again)
            paths.add(manifest.manifest_path)
            if manifest.manifest_path not in cache:  # snapshot_files' cache: each manifest's live files
                cache[manifest.manifest_path] = [e.data_file for e in manifest.fetch_manifest_entry(table.io)]
            paths |= {f.file_path for f in cache[manifest.manifest_path]}
    keys = {key for key in (lake_key(deployment, path) for path in paths) if key is not None}
    hint = version_hint_key(deployment, table)
    return keys | ({hint} if hint is not None else set())
