"""What external catalogs (publish targets) were told: tables, their names and columns, partition locations."""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore, rows_values
from siltlake.catalog.rows import PartitionToSync, Removals, SyncedTable
from siltlake.clock import utcnow


class ExternalSync:
    """Reached as catalog.external_sync."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core

    def synced_tables(self, target: str) -> dict[int, SyncedTable]:
        e, t = s.external_tables, s.tables
        with self._core.tx() as c:
            rows = c.execute(
                sa.select(e, t.c.dropped_time)
                .select_from(e.join(t, t.c.id == e.c.table_id))
                .where(e.c.target == target)
            ).all()
        return {
            r.table_id: SyncedTable(
                table_id=r.table_id,
                database_name=r.database_name,
                table_name=r.table_name,
                columns=tuple((name, kind) for name, kind in json.loads(r.columns)),
                dropped=r.dropped_time is not None,
                synced_version=r.synced_version,
                syncing_version=r.syncing_version,
            )
            for r in rows
        }

    def record_table(
        self,
        target: str,
        table_id: int,
        database_name: str,
        table_name: str,
        columns: Sequence[tuple[str, str]],
        *,
        forget_partitions: bool = False,
    ) -> None:
        """Remember what the target now has; forget_partitions: it has none of the table's partitions (recreated)."""
        e = s.external_tables
        with self._core.tx() as c:
            # One statement: two publish runs recording the same table at once must not both insert its row.
            described = ("database_name", "table_name", "columns", "sync_time")
            self._core.upsert(
                c,
                e,
                ("target", "table_id"),
                [
                    {
                        "target": target,
                        "table_id": table_id,
                        "database_name": database_name,
                        "table_name": table_name,
                        "columns": json.dumps([list(x) for x in columns]),
                        "sync_time": utcnow(),
                        "synced_version": 0,
                        "syncing_version": 0,
                    }
                ],
                (*described, "synced_version", "syncing_version") if forget_partitions else described,
            )
            if forget_partitions:
                self._forget_partitions(c, target, table_id)

    def forget_table(self, target: str, table_id: int) -> None:
        """The target no longer has the table (dropped there)."""
        e = s.external_tables
        with self._core.tx() as c:
            self._forget_partitions(c, target, table_id)
            c.execute(e.delete().where(e.c.target == target, e.c.table_id == table_id))

    @staticmethod
    def _forget_partitions(c: Connection, target: str, table_id: int) -> None:
        x, p, r = s.external_partitions, s.partitions, s.external_removals
        c.execute(
            x.delete().where(
                x.c.target == target, x.c.partition_id.in_(sa.select(p.c.id).where(p.c.table_id == table_id))
            )
        )
        c.execute(r.delete().where(r.c.target == target, r.c.table_id == table_id))

    def partitions_to_sync(self, target: str) -> tuple[list[PartitionToSync], dict[int, int]]:
        """The partitions of tables the target has whose newest version, of the table versions published since
        the target's synced version, shows another file list than the one the target points at (every new
        version moves the partition, live ones included); and the table version read of each table behind
        (record_partitions records it). Reads the versions since the synced one only (by table version)."""
        e, t, v, p = s.external_tables, s.tables, s.partition_versions, s.partitions
        found: list[PartitionToSync] = []
        upto: dict[int, int] = {}
        with self._core.snapshot() as c:
            behind = c.execute(
                sa.select(e.c.table_id, e.c.synced_version, t.c.version)
                .select_from(e.join(t, t.c.id == e.c.table_id))
                .where(e.c.target == target, e.c.synced_version < t.c.version, t.c.dropped_time.is_(None))
                .order_by(e.c.table_id)
            ).all()
            for table_id, synced, newest in rows_values(behind):
                upto[table_id] = newest
                rows = c.execute(
                    sa.select(v.c.partition_id, p.c.partition_date, p.c.partition_values, v.c.file_list_key)
                    .select_from(v.join(p, p.c.id == v.c.partition_id))
                    .where(v.c.table_id == table_id, v.c.table_version > synced, v.c.table_version <= newest)
                    .order_by(v.c.partition_id, v.c.version)
                ).all()
                newest_of = {r.partition_id: r for r in rows}  # the last row of each partition: its newest
                shown = self._manifests(c, target, sorted(newest_of))
                found += sorted(
                    (
                        PartitionToSync(r.partition_id, table_id, r.partition_date, r.file_list_key, r.partition_values)
                        for r in newest_of.values()
                        if r.partition_id not in shown or shown[r.partition_id] != r.file_list_key
                    ),
                    key=lambda x: (x.partition_date, x.partition_values),
                )
        return found, upto

    def removals(self, target: str) -> dict[int, Removals]:
        """Per table, the partitions reap removed since the target last dropped what it was told."""
        r = s.external_removals
        with self._core.tx() as c:
            rows = c.execute(
                sa.select(r.c.id, r.c.table_id, r.c.partition_date, r.c.partition_values)
                .where(r.c.target == target)
                .order_by(r.c.id)
            ).all()
        found: dict[int, Removals] = {}
        for table_id in sorted({row.table_id for row in rows}):
            mine = [row for row in rows if row.table_id == table_id]
            found[table_id] = Removals(
                tuple(row.id for row in mine),
                tuple(sorted({row.partition_date for row in mine})),
                tuple(sorted({(row.partition_date, row.partition_values) for row in mine})),
            )
        return found

    def start_sync(self, target: str, table_id: int, upto: int) -> None:
        """A run is about to tell the target about the table's versions up to `upto` (record_partitions says
        when it has)."""
        e = s.external_tables
        with self._core.tx() as c:
            c.execute(e.update().where(e.c.target == target, e.c.table_id == table_id).values(syncing_version=upto))

    def forget_removals(self, ids: Sequence[int]) -> None:
        """The target dropped these removed partitions."""
        r = s.external_removals
        if ids:
            with self._core.tx() as c:
                c.execute(r.delete().where(r.c.id.in_(list(ids))))

    def partition_manifests(self, target: str, partition_ids: Sequence[int]) -> dict[int, str | None]:
        """The file list key (None: a live directory) the target points each of these partitions at, for
        those it has."""
        with self._core.tx() as c:
            return self._manifests(c, target, partition_ids)

    @staticmethod
    def _manifests(c: Connection, target: str, partition_ids: Sequence[int]) -> dict[int, str | None]:
        x = s.external_partitions
        if not partition_ids:
            return {}
        return dict(
            c.execute(
                sa.select(x.c.partition_id, x.c.manifest_key).where(
                    x.c.target == target, x.c.partition_id.in_(list(partition_ids))
                )
            ).all()
        )

    def record_partitions(
        self, target: str, synced: Sequence[tuple[int, str | None, str]], upto: tuple[int, int] | None = None
    ) -> None:
        """(partition_id, file list key or None for a live directory, location) rows the target now points at;
        with `upto` (table id, table version), the table version the target is now synced up to, in the same
        transaction."""
        x, e = s.external_partitions, s.external_tables
        now = utcnow()
        with self._core.tx() as c:
            if synced:
                c.execute(x.delete().where(x.c.target == target, x.c.partition_id.in_([pid for pid, _, _ in synced])))
                c.execute(
                    x.insert(),
                    [
                        dict(target=target, partition_id=pid, manifest_key=key, location=location, sync_time=now)
                        for pid, key, location in synced
                    ],
                )
            if upto is not None:
                c.execute(
                    e.update()
                    .where(e.c.target == target, e.c.table_id == upto[0], e.c.synced_version < upto[1])
                    .values(synced_version=upto[1])
                )


def record_removals(c: Connection, partition_ids: Sequence[int]) -> None:
    """Before reap deletes these partitions: each target that points at one is told to drop it."""
    x, p, r = s.external_partitions, s.partitions, s.external_removals
    c.execute(
        r.insert().from_select(
            ["target", "table_id", "partition_date", "partition_values"],
            sa.select(x.c.target, p.c.table_id, p.c.partition_date, p.c.partition_values)
            .select_from(x.join(p, p.c.id == x.c.partition_id))
            .where(x.c.partition_id.in_(list(partition_ids))),
        )
    )
