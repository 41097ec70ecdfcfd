"""Publishing partition states (DESIGN §4): switch, close, live versions, merged versions."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import schema as s
from siltlake.catalog.merge_queue import RangeRow


@dataclass(frozen=True)
class PublishedVersion:
    partition_id: int
    version: int
    commit_op: str
    live_watermark: int | None
    manifest_key: str | None
    created_at: dt.datetime
    row_count: int
    byte_count: int


@dataclass(frozen=True)
class SwitchedPartition:
    """A switched partition whose merged state is not published yet: the ranges it will show."""

    partition_id: int
    table_id: int
    partition_date: dt.date
    current: int
    desired: int
    ranges: tuple[RangeRow, ...]  # the ranges the merged version shows, sentinel left out


@dataclass(frozen=True)
class PartitionView:
    """What a reader sees of one partition: live small objects (ids) or a merged version's manifest."""

    partition_date: dt.date
    version: int | None  # None: never published (a new partition read at the current state)
    live_object_ids: tuple[int, ...] = ()
    manifest_key: str | None = None


class Publishing:
    """Publish operations of Catalog (mixed in; uses its _tx and dialect)."""

    dialect: str

    def _tx(self):  # noqa: ANN202 - provided by Catalog
        raise NotImplementedError

    def _snapshot(self):  # noqa: ANN202 - provided by Catalog
        raise NotImplementedError

    def _next_version(self, c: Connection, partition_id: int) -> int:
        v = s.partition_versions
        return c.execute(sa.select(sa.func.coalesce(sa.func.max(v.c.version), 0))
                         .where(v.c.partition_id == partition_id)).scalar_one() + 1

    def switch_partitions(self) -> list[int]:
        """Switch closed partitions whose live objects are all merged (and that were merged at least once)."""
        p = s.partitions
        with self._tx() as c:
            ready = list(c.execute(sa.select(p.c.id).where(
                p.c.switched.is_(False), p.c.last_live_object_id.is_not(None),
                p.c.desired_manifest_version > 0, p.c.desired_manifest_version >= p.c.last_live_object_id,
            )).scalars())
            if ready:
                c.execute(p.update().where(p.c.id.in_(ready)).values(switched=True))
        return ready

    def close_partitions(self, before: dict[int, dt.date]) -> list[int]:
        """Close open partitions dated before before[table_id]: later objects of those dates are delayed.

        Runs under the stream's ordering lock, so no commit is between deciding live and being counted.
        """
        p, so = s.partitions, s.small_objects
        closed: list[int] = []
        with self._tx() as c:
            if self.dialect == "postgresql":  # the lock the stream holds while it decides live or delayed
                c.execute(sa.select(sa.func.pg_advisory_xact_lock(s.SMALL_OBJECT_LOCK)))
            for table_id, date in before.items():
                for partition_id in c.execute(sa.select(p.c.id).where(
                        p.c.table_id == table_id, p.c.partition_date < date,
                        p.c.last_live_object_id.is_(None))).scalars():
                    largest = c.execute(sa.select(sa.func.coalesce(sa.func.max(so.c.id), 0))
                                        .where(so.c.partition_id == partition_id)).scalar_one()
                    c.execute(p.update().where(p.c.id == partition_id).values(last_live_object_id=largest))
                    closed.append(partition_id)
        return closed

    def publish_live_versions(self, now: dt.datetime) -> list[PublishedVersion]:
        """A new append version for each not-switched partition with live objects beyond its last version."""
        p, so, v = s.partitions, s.small_objects, s.partition_versions
        published: list[PublishedVersion] = []
        with self._tx() as c:
            live = c.execute(
                sa.select(p.c.id, sa.func.max(so.c.id).label("watermark"), sa.func.count(so.c.id).label("objects"),
                          sa.func.sum(so.c.row_count).label("rows"), sa.func.sum(so.c.content_length).label("bytes"))
                .select_from(p.join(so, so.c.partition_id == p.c.id))
                .where(p.c.switched.is_(False), so.c.delayed.is_(False))
                .group_by(p.c.id)
            ).all()
            newest = sa.select(v.c.partition_id, sa.func.max(v.c.version).label("version")).group_by(
                v.c.partition_id).subquery()
            # Each partition's newest version: its number and watermark, read once for every partition.
            last = {row.partition_id: row for row in c.execute(
                sa.select(v.c.partition_id, v.c.version, v.c.live_watermark).select_from(v.join(
                    newest, sa.and_(newest.c.partition_id == v.c.partition_id, newest.c.version == v.c.version))))}
            for row in live:
                newest_row = last.get(row.id)
                if newest_row is not None and newest_row.live_watermark is not None \
                        and newest_row.live_watermark >= row.watermark:
                    continue
                version = newest_row.version + 1 if newest_row is not None else 1
                c.execute(v.insert().values(partition_id=row.id, version=version, commit_op="append",
                                            live_watermark=row.watermark, created_at=now,
                                            row_count=int(row.rows), byte_count=int(row.bytes)))
                c.execute(p.update().where(p.c.id == row.id, p.c.switched.is_(False))
                          .values(current_manifest_version=0))
                published.append(PublishedVersion(row.id, version, "append", row.watermark, None, now,
                                                  int(row.rows), int(row.bytes)))
        return published

    def partitions_to_publish_merged(self) -> list[SwitchedPartition]:
        """Switched partitions whose desired merged version is ahead of the published one."""
        p, r = s.partitions, s.merge_ranges
        with self._tx() as c:
            rows = c.execute(sa.select(p.c.id, p.c.table_id, p.c.partition_date, p.c.current_manifest_version,
                                       p.c.desired_manifest_version)
                             .where(p.c.switched.is_(True),
                                    p.c.current_manifest_version < p.c.desired_manifest_version)).all()
            ranges: dict[int, list] = {}
            if rows:
                for rr in c.execute(sa.select(r.c.partition_id, r.c.lower_bound, r.c.upper_bound, r.c.content_length,
                                              r.c.row_count, r.c.object_key)
                                    .where(r.c.partition_id.in_([row.id for row in rows]),
                                           r.c.lower_bound.is_not(None))
                                    .order_by(r.c.partition_id, r.c.upper_bound)):
                    ranges.setdefault(rr.partition_id, []).append(
                        RangeRow(rr.lower_bound, rr.upper_bound, rr.content_length, rr.row_count, rr.object_key))
        return [SwitchedPartition(row.id, row.table_id, row.partition_date, row.current_manifest_version,
                                  row.desired_manifest_version,
                                  tuple(x for x in ranges.get(row.id, []) if x.upper <= row.desired_manifest_version))
                for row in rows]

    def publish_merged_version(self, partition: SwitchedPartition, manifest_key: str,
                               now: dt.datetime) -> PublishedVersion | None:
        """Publish the manifest of `partition.desired`, unless a merge or another publisher moved it meanwhile."""
        p, v = s.partitions, s.partition_versions
        with self._tx() as c:
            moved = c.execute(p.update().where(
                p.c.id == partition.partition_id, p.c.current_manifest_version == partition.current,
                p.c.desired_manifest_version == partition.desired,
            ).values(current_manifest_version=partition.desired)).rowcount
            if moved != 1:
                return None
            version = self._next_version(c, partition.partition_id)
            rows = sum(x.row_count for x in partition.ranges)
            size = sum(x.content_length for x in partition.ranges)
            c.execute(v.insert().values(partition_id=partition.partition_id, version=version, commit_op="compaction",
                                        manifest_key=manifest_key, created_at=now, row_count=rows, byte_count=size))
        return PublishedVersion(partition.partition_id, version, "compaction", None, manifest_key, now, rows, size)

    def partition_versions(self, partition_ids: Sequence[int]) -> list[PublishedVersion]:
        v = s.partition_versions
        if not partition_ids:
            return []
        with self._tx() as c:
            rows = c.execute(sa.select(v).where(v.c.partition_id.in_(list(partition_ids)))
                             .order_by(v.c.partition_id, v.c.version)).all()
        return [PublishedVersion(r.partition_id, r.version, r.commit_op, r.live_watermark, r.manifest_key,
                                 r.created_at, r.row_count, r.byte_count) for r in rows]

    def reader_snapshot(self, table_id: int, *, as_of_version: int | None = None,
                        as_of: dt.datetime | None = None) -> list[PartitionView]:
        """Every partition's visible state, read in one snapshot with three queries, whatever the partitions.

        Current state: a partition whose newest version is a merged one shows that manifest; any other
        shows its live objects up to the largest small object id at the start of the read. As of a
        version (each partition's newest version <= it) or a time (newest created at or before it): the
        version's manifest or live watermark; partitions without such a version are left out.
        """
        p, v, so = s.partitions, s.partition_versions, s.small_objects
        pinned = as_of_version is not None or as_of is not None
        with self._snapshot() as c:
            watermark = c.execute(sa.select(sa.func.coalesce(sa.func.max(so.c.id), 0))).scalar_one()
            eligible = sa.select(v.c.partition_id, sa.func.max(v.c.version).label("version")).select_from(
                v.join(p, p.c.id == v.c.partition_id)).where(p.c.table_id == table_id)
            if as_of_version is not None:
                eligible = eligible.where(v.c.version <= as_of_version)
            if as_of is not None:
                eligible = eligible.where(v.c.created_at <= as_of)
            newest = eligible.group_by(v.c.partition_id).subquery()
            rows = c.execute(
                sa.select(p.c.id, p.c.partition_date, v.c.version, v.c.live_watermark, v.c.manifest_key)
                .select_from(p.outerjoin(newest, newest.c.partition_id == p.c.id).outerjoin(
                    v, sa.and_(v.c.partition_id == newest.c.partition_id, v.c.version == newest.c.version)))
                .where(p.c.table_id == table_id).order_by(p.c.partition_date)
            ).all()
            live_limit = {}
            for row in rows:
                if row.manifest_key is not None:
                    continue
                if pinned and row.version is None:
                    continue
                live_limit[row.id] = row.live_watermark if pinned else watermark
            objects: dict[int, list[int]] = {}
            if live_limit:
                # Pinned reads bound each partition by its version's watermark; current reads by one.
                limit = (sa.case(*((so.c.partition_id == pid, bound) for pid, bound in live_limit.items()))
                         if pinned else watermark)
                for pid, oid in c.execute(
                        sa.select(so.c.partition_id, so.c.id).where(
                            so.c.partition_id.in_(list(live_limit)), so.c.delayed.is_(False), so.c.id <= limit)
                        .order_by(so.c.id)):
                    objects.setdefault(pid, []).append(oid)
        views = []
        for row in rows:
            if row.manifest_key is not None:
                views.append(PartitionView(row.partition_date, row.version, manifest_key=row.manifest_key))
            elif row.id in live_limit:
                views.append(PartitionView(row.partition_date, row.version,
                                           live_object_ids=tuple(objects.get(row.id, ()))))
        return views
