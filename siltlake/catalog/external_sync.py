"""What external catalogs (publish targets) were told: tables, their names and columns, partition locations."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore
from siltlake.catalog.records import PartitionToSync, SyncedTable
from siltlake.clock import utcnow


class ExternalSync:
    """Reached as catalog.external_sync."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core

    def synced_tables(self, target: str) -> dict[int, SyncedTable]:
        e, t = s.external_tables, s.tables
        with self._core.tx() as c:
            rows = c.execute(sa.select(e, t.c.dropped_time).select_from(e.join(t, t.c.id == e.c.table_id))
                             .where(e.c.target == target)).all()
        return {r.table_id: SyncedTable(r.table_id, r.database_name, r.table_name,
                                        tuple((name, kind) for name, kind in json.loads(r.columns)),
                                        r.dropped_time is not None) for r in rows}

    def record_table(self, target: str, table_id: int, database_name: str, table_name: str,
                     columns: Sequence[tuple[str, str]], *, forget_partitions: bool = False) -> None:
        """Remember what the target now has; forget_partitions: it has none of the table's partitions (recreated)."""
        e = s.external_tables
        with self._core.tx() as c:
            c.execute(e.delete().where(e.c.target == target, e.c.table_id == table_id))
            c.execute(e.insert().values(target=target, table_id=table_id, database_name=database_name,
                                        table_name=table_name, columns=json.dumps([list(x) for x in columns]),
                                        sync_time=utcnow()))
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
        x, p = s.external_partitions, s.partitions
        c.execute(x.delete().where(x.c.target == target, x.c.partition_id.in_(
            sa.select(p.c.id).where(p.c.table_id == table_id))))

    def partitions_to_sync(self, target: str) -> list[PartitionToSync]:
        """Partitions with a published version, of tables the target has, whose newest version's file list
        is not the one the target points at (every new version moves the partition, live ones included)."""
        p, v, x, e = s.partitions, s.partition_versions, s.external_partitions, s.external_tables
        newest = sa.select(v.c.partition_id, sa.func.max(v.c.version).label("version")).group_by(
            v.c.partition_id).subquery()
        with self._core.tx() as c:
            rows = c.execute(
                sa.select(p.c.id, p.c.table_id, p.c.partition_date, v.c.file_list_key)
                .select_from(
                    p.join(e, sa.and_(e.c.table_id == p.c.table_id, e.c.target == target))
                    .join(newest, newest.c.partition_id == p.c.id)
                    .join(v, sa.and_(v.c.partition_id == p.c.id, v.c.version == newest.c.version))
                    .outerjoin(x, sa.and_(x.c.partition_id == p.c.id, x.c.target == target)))
                .where(sa.or_(x.c.partition_id.is_(None), x.c.manifest_key.is_distinct_from(v.c.file_list_key)))
                .order_by(p.c.table_id, p.c.partition_date)
            ).all()
        return [PartitionToSync(r.id, r.table_id, r.partition_date, r.file_list_key) for r in rows]

    def published_dates(self, target: str) -> dict[int, set[dt.date]]:
        """The dates of the partitions with a published version, of each table the target has: what it may
        show (a partition reap removed past its TTL, or recreated by a late object and not yet published, is
        not among them)."""
        p, v, e = s.partitions, s.partition_versions, s.external_tables
        dates: dict[int, set[dt.date]] = {}
        with self._core.tx() as c:
            for table_id, date in c.execute(
                    sa.select(p.c.table_id, p.c.partition_date)
                    .select_from(p.join(e, sa.and_(e.c.table_id == p.c.table_id, e.c.target == target)))
                    .where(sa.exists().where(v.c.partition_id == p.c.id))):
                dates.setdefault(table_id, set()).add(date)
        return dates

    def partition_manifests(self, target: str, partition_ids: Sequence[int]) -> dict[int, str | None]:
        """The file list key (None: a live directory) the target points each of these partitions at, for
        those it has."""
        x = s.external_partitions
        if not partition_ids:
            return {}
        with self._core.tx() as c:
            rows = c.execute(sa.select(x.c.partition_id, x.c.manifest_key).where(
                x.c.target == target, x.c.partition_id.in_(list(partition_ids)))).all()
        return {r.partition_id: r.manifest_key for r in rows}

    def record_partitions(self, target: str, synced: Sequence[tuple[int, str | None, str]]) -> None:
        """(partition_id, file list key or None for a live directory, location) rows the target now points at."""
        if not synced:
            return
        x = s.external_partitions
        now = utcnow()
        with self._core.tx() as c:
            c.execute(x.delete().where(x.c.target == target, x.c.partition_id.in_([pid for pid, _, _ in synced])))
            c.execute(x.insert(), [dict(target=target, partition_id=pid, manifest_key=key, location=location,
                                        sync_time=now) for pid, key, location in synced])
