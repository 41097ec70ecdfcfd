"""Publishing partition states (DESIGN §4): switch, close, live versions, merged versions."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import schema as s
from siltlake.catalog.merge_queue import RangeRow
from siltlake.errors import CatalogError, NotFoundError

# Merged versions published per transaction: bounds how long a publish run holds partition row locks
# (PostgreSQL) or the write lock (SQLite), and the bound parameters of one statement (4 per partition).
MERGED_CAS_BATCH = 500


class UpdateConflict(CatalogError):
    """A concurrent writer changed the partition since this update (or append) read it: run it again."""


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
    covered_upper: int | None = None  # the largest small object id the manifest holds

    def shows(self) -> str:
        """What the version shows, in words."""
        if self.manifest_key is None:
            return f"live objects <= {self.live_watermark}"
        if self.live_watermark is None or self.live_watermark == self.covered_upper:
            return self.manifest_key
        return f"{self.manifest_key} + live objects in ({self.covered_upper}, {self.live_watermark}]"


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
    """What a reader sees of one partition: a manifest's objects (merged or updated), live small objects
    above the ids the manifest holds, or both (objects appended after an update)."""

    partition_date: dt.date
    version: int | None  # None: never published (a new partition read at the current state)
    live_object_ids: tuple[int, ...] = ()
    manifest_key: str | None = None


@dataclass(frozen=True)
class UpdateBase:
    """What an update of one partition reads: its newest version's manifest (ids <= covered_upper) and
    every small object above it, live or delayed, up to the partition's largest id `upper`. Together
    they are everything the partition holds, shown or not yet shown."""

    partition_id: int
    partition_date: dt.date
    version: int | None  # the newest version read (None: never published)
    manifest_key: str | None
    covered_upper: int
    objects: tuple[tuple[int, bool], ...]  # (small object id, delayed)
    upper: int


class Publishing:
    """Publish operations of Catalog (mixed in; uses its _tx and dialect)."""

    dialect: str

    def _tx(self):  # noqa: ANN202 - provided by Catalog
        raise NotImplementedError

    def _snapshot(self):  # noqa: ANN202 - provided by Catalog
        raise NotImplementedError

    def _ordering_lock(self, c: Connection) -> None:
        """The lock stream commits hold while adding small objects (SQLite: its write lock is already held)."""
        if self.dialect == "postgresql":
            c.execute(sa.select(sa.func.pg_advisory_xact_lock(s.SMALL_OBJECT_LOCK)))

    def switch_partitions(self) -> list[int]:
        """Switch closed partitions whose live objects are all merged (and that were merged at least once)."""
        p = s.partitions
        with self._tx() as c:
            # One UPDATE ... RETURNING: no id list to send back (SQLite caps bound parameters).
            return sorted(c.execute(p.update().where(
                p.c.switched.is_(False), p.c.last_live_object_id.is_not(None),
                p.c.desired_manifest_version > 0, p.c.desired_manifest_version >= p.c.last_live_object_id,
            ).values(switched=True).returning(p.c.id)).scalars())

    def close_partitions(self, before: dict[int, dt.date]) -> list[int]:
        """Close open partitions dated before before[table_id]: later objects of those dates are delayed.

        Runs under the stream's ordering lock, so no commit is between deciding live and being counted.
        """
        p, so = s.partitions, s.small_objects
        if not before:
            return []
        # Each partition's largest id, as a correlated subquery: one statement for every partition of
        # every table instead of a max() and an UPDATE per partition.
        largest = (sa.select(sa.func.coalesce(sa.func.max(so.c.id), 0)).where(so.c.partition_id == p.c.id)
                   .scalar_subquery())
        ended = sa.or_(*(sa.and_(p.c.table_id == table_id, p.c.partition_date < date)
                         for table_id, date in before.items()))
        with self._tx() as c:
            self._ordering_lock(c)  # the stream holds it while it decides live or delayed
            return sorted(c.execute(p.update().where(p.c.last_live_object_id.is_(None), ended)
                                    .values(last_live_object_id=largest).returning(p.c.id)).scalars())

    @staticmethod
    def _newest_versions(*where: sa.ColumnElement) -> sa.Subquery:
        """Each partition's newest version row (of the versions matching `where`), as a subquery."""
        v = s.partition_versions
        newest = sa.select(v.c.partition_id, sa.func.max(v.c.version).label("version")).where(*where).group_by(
            v.c.partition_id).subquery()
        return sa.select(v).select_from(v.join(newest, sa.and_(
            newest.c.partition_id == v.c.partition_id, newest.c.version == v.c.version))).subquery()

    def publish_live_versions(self, now: dt.datetime) -> list[PublishedVersion]:
        """A new append version for each not-switched partition with live objects beyond its newest version.

        The new version keeps what the newest one shows (an update's manifest) and extends its live
        watermark; its counts are the newest's plus the new objects', so only new objects are summed.
        """
        p, so, v = s.partitions, s.small_objects, s.partition_versions
        newest = self._newest_versions()
        published: list[PublishedVersion] = []
        with self._tx() as c:
            rows = c.execute(
                sa.select(p.c.id, p.c.current_manifest_version, sa.func.max(so.c.id).label("watermark"),
                          sa.func.sum(so.c.row_count).label("rows"), sa.func.sum(so.c.content_length).label("bytes"),
                          newest.c.version, newest.c.row_count.label("base_rows"),
                          newest.c.byte_count.label("base_bytes"), newest.c.manifest_key, newest.c.covered_upper)
                .select_from(p.join(so, so.c.partition_id == p.c.id)
                             .outerjoin(newest, newest.c.partition_id == p.c.id))
                .where(p.c.switched.is_(False), so.c.delayed.is_(False),
                       so.c.id > sa.func.coalesce(newest.c.live_watermark, 0))
                .group_by(p.c.id, p.c.current_manifest_version, newest.c.version, newest.c.row_count,
                          newest.c.byte_count, newest.c.manifest_key, newest.c.covered_upper)
            ).all()
            for row in rows:
                published.append(PublishedVersion(
                    row.id, (row.version or 0) + 1, "append", row.watermark, row.manifest_key, now,
                    int(row.rows) + (row.base_rows or 0), int(row.bytes) + (row.base_bytes or 0), row.covered_upper))
            if published:
                c.execute(v.insert(), [dict(partition_id=x.partition_id, version=x.version, commit_op=x.commit_op,
                                            live_watermark=x.live_watermark, manifest_key=x.manifest_key,
                                            covered_upper=x.covered_upper, created_at=now, row_count=x.row_count,
                                            byte_count=x.byte_count) for x in published])
                first = [row.id for row in rows if row.current_manifest_version < 0]
                for chunk in range(0, len(first), 1000):
                    c.execute(p.update().where(p.c.id.in_(first[chunk:chunk + 1000]), p.c.switched.is_(False))
                              .values(current_manifest_version=0))
        return published

    def partitions_to_publish_merged(self) -> list[SwitchedPartition]:
        """Switched partitions whose desired merged version is ahead of the published one."""
        p, r = s.partitions, s.merge_ranges
        behind = (p.c.switched.is_(True), p.c.current_manifest_version < p.c.desired_manifest_version)
        with self._tx() as c:
            rows = c.execute(sa.select(p.c.id, p.c.table_id, p.c.partition_date, p.c.current_manifest_version,
                                       p.c.desired_manifest_version).where(*behind)).all()
            ranges: dict[int, list] = {}
            if rows:
                # The same condition as a subquery, not an id list: same transaction, no parameter cap.
                for rr in c.execute(sa.select(r.c.partition_id, r.c.lower_bound, r.c.upper_bound, r.c.content_length,
                                              r.c.row_count, r.c.object_key)
                                    .where(r.c.partition_id.in_(sa.select(p.c.id).where(*behind)),
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
        published = self.publish_merged_versions([(partition, manifest_key)], now)
        return published[0] if published else None

    def publish_merged_versions(self, items: Sequence[tuple[SwitchedPartition, str]],
                                now: dt.datetime) -> list[PublishedVersion]:
        """publish_merged_version for many partitions, in one transaction per MERGED_CAS_BATCH of them; a
        partition whose current or desired moved since it was read is left out (the next run publishes
        it), the others are not.

        Per partition this is the same compare-and-swap: current moves from the value read to desired
        only where both are still as read. One UPDATE ... RETURNING tells which partitions moved; their
        new version numbers are read after it, under its row locks, as the one-partition form did.
        """
        published: list[PublishedVersion] = []
        for start in range(0, len(items), MERGED_CAS_BATCH):
            published += self._publish_merged_batch(items[start:start + MERGED_CAS_BATCH], now)
        return published

    def _publish_merged_batch(self, items: Sequence[tuple[SwitchedPartition, str]],
                              now: dt.datetime) -> list[PublishedVersion]:
        p, v = s.partitions, s.partition_versions
        by_id = {partition.partition_id: (partition, key) for partition, key in items}
        assert len(by_id) == len(items), "one item per partition"
        published: list[PublishedVersion] = []
        with self._tx() as c:
            moved = set(c.execute(p.update().where(
                p.c.id.in_(list(by_id)),
                sa.tuple_(p.c.id, p.c.current_manifest_version, p.c.desired_manifest_version).in_(
                    [(x.partition_id, x.current, x.desired) for x, _ in items]),
            ).values(current_manifest_version=p.c.desired_manifest_version).returning(p.c.id)).scalars())
            if not moved:
                return []
            newest = dict(c.execute(sa.select(v.c.partition_id, sa.func.max(v.c.version))
                                    .where(v.c.partition_id.in_(list(moved))).group_by(v.c.partition_id)).all())
            for partition, manifest_key in items:
                if partition.partition_id not in moved:
                    continue
                published.append(PublishedVersion(
                    partition.partition_id, newest.get(partition.partition_id, 0) + 1, "compaction", None,
                    manifest_key, now, sum(x.row_count for x in partition.ranges),
                    sum(x.content_length for x in partition.ranges), partition.desired))
            c.execute(v.insert(), [dict(partition_id=x.partition_id, version=x.version, commit_op=x.commit_op,
                                        manifest_key=x.manifest_key, covered_upper=x.covered_upper, created_at=now,
                                        row_count=x.row_count, byte_count=x.byte_count) for x in published])
        return published

    # --- updates (DESIGN §6) -----------------------------------------------------------------------

    def update_base(self, table_id: int, partition_date: dt.date) -> UpdateBase:
        """Everything one partition holds, as an update reads it (one snapshot)."""
        p, so = s.partitions, s.small_objects
        with self._snapshot() as c:
            partition = c.execute(sa.select(p.c.id).where(p.c.table_id == table_id,
                                                          p.c.partition_date == partition_date)).first()
            if partition is None:
                raise NotFoundError(f"the table has no partition {partition_date}; nothing to update")
            newest = c.execute(sa.select(self._newest_versions(s.partition_versions.c.partition_id == partition.id)
                                         )).first()
            covered = (newest.covered_upper or 0) if newest is not None and newest.manifest_key else 0
            objects = c.execute(sa.select(so.c.id, so.c.delayed).where(
                so.c.partition_id == partition.id, so.c.id > covered).order_by(so.c.id)).all()
        return UpdateBase(partition.id, partition_date, newest.version if newest is not None else None,
                          newest.manifest_key if newest is not None else None, covered,
                          tuple((row.id, row.delayed) for row in objects), objects[-1].id if objects else covered)

    def commit_update(self, base: UpdateBase, *, object_key: str, manifest_key: str, row_count: int,
                      byte_count: int, now: dt.datetime) -> PublishedVersion:
        """Publish an update's object as the partition's whole content, if nothing but compactions
        happened since `base` was read (a compaction loses: its output becomes garbage for reap).

        The object becomes the partition's one merged range (0, upper]: later small objects chain after
        it, and merges extend it like any range.
        """
        p, so, v, r = s.partitions, s.small_objects, s.partition_versions, s.merge_ranges
        with self._tx() as c:
            self._ordering_lock(c)  # no small object can be committed to the partition meanwhile
            lock = sa.select(p.c.switched).where(p.c.id == base.partition_id)
            switched = c.execute(lock.with_for_update() if self.dialect == "postgresql" else lock).scalar_one()
            since = c.execute(sa.select(v.c.version, v.c.commit_op).where(
                v.c.partition_id == base.partition_id, v.c.version > (base.version or 0)).order_by(v.c.version)).all()
            blocking = [row for row in since if row.commit_op != "compaction"]
            if blocking:
                raise UpdateConflict(
                    f"partition {base.partition_date} changed while the update ran: version {blocking[0].version} "
                    f"({blocking[0].commit_op}) was published after version {base.version or 0}, which the update "
                    "read; run the update again")
            appended = c.execute(sa.select(sa.func.min(so.c.id)).where(
                so.c.partition_id == base.partition_id, so.c.id > base.upper)).scalar_one()
            if appended is not None:
                raise UpdateConflict(
                    f"partition {base.partition_date} changed while the update ran: small object {appended} was "
                    "appended after the update read it; run the update again")
            c.execute(r.delete().where(r.c.partition_id == base.partition_id, r.c.lower_bound.is_not(None)))
            if c.execute(sa.select(r.c.id).where(r.c.partition_id == base.partition_id)).first() is None:
                c.execute(r.insert().values(partition_id=base.partition_id, lower_bound=None, upper_bound=0,
                                            content_length=0, row_count=0, create_time=now, update_time=now))
            c.execute(r.insert().values(partition_id=base.partition_id, lower_bound=0, upper_bound=base.upper,
                                        content_length=byte_count, row_count=row_count, object_key=object_key,
                                        create_time=now, update_time=now))
            c.execute(p.update().where(p.c.id == base.partition_id).values(
                desired_manifest_version=base.upper, current_manifest_version=base.upper if switched else 0))
            version = (since[-1].version if since else (base.version or 0)) + 1
            published = PublishedVersion(base.partition_id, version, "update", base.upper, manifest_key, now,
                                         row_count, byte_count, base.upper)
            c.execute(v.insert().values(partition_id=base.partition_id, version=version, commit_op="update",
                                        live_watermark=base.upper, manifest_key=manifest_key,
                                        covered_upper=base.upper, created_at=now, row_count=row_count,
                                        byte_count=byte_count))
        return published

    def version_mark(self) -> int:
        """A mark that every later update's version is above (read under the ordering lock an update
        commit holds): an append started at this mark checks it with StreamCommit.updated_since."""
        with self._tx() as c:
            self._ordering_lock(c)
            return c.execute(sa.select(sa.func.coalesce(sa.func.max(s.partition_versions.c.id), 0))).scalar_one()

    def partition_versions(self, partition_ids: Sequence[int]) -> list[PublishedVersion]:
        v = s.partition_versions
        if not partition_ids:
            return []
        with self._tx() as c:
            rows = c.execute(sa.select(v).where(v.c.partition_id.in_(list(partition_ids)))
                             .order_by(v.c.partition_id, v.c.version)).all()
        return [_version(r) for r in rows]

    def reader_snapshot(self, table_id: int, *, as_of_version: int | None = None,
                        as_of: dt.datetime | None = None) -> list[PartitionView]:
        """Every partition's visible state, read in one snapshot with three queries, whatever the partitions.

        A version shows its manifest's objects (ids <= covered_upper) and the live objects above them up
        to its live watermark. Current state: each partition's newest version, except that a partition
        not switched shows its live objects up to the largest small object id at the start of the read.
        A switched partition without a merged version yet (published later in the same run) stays live.
        As of a version (each partition's newest version <= it) or a time (newest created at or before
        it): that version exactly; partitions without such a version are left out.
        """
        p, v, so = s.partitions, s.partition_versions, s.small_objects
        pinned = as_of_version is not None or as_of is not None
        where = [v.c.partition_id.in_(sa.select(p.c.id).where(p.c.table_id == table_id))]
        if as_of_version is not None:
            where.append(v.c.version <= as_of_version)
        if as_of is not None:
            where.append(v.c.created_at <= as_of)
        newest = self._newest_versions(*where)
        with self._snapshot() as c:
            watermark = c.execute(sa.select(sa.func.coalesce(sa.func.max(so.c.id), 0))).scalar_one()
            rows = c.execute(
                sa.select(p.c.id, p.c.partition_date, p.c.switched, newest.c.version, newest.c.live_watermark,
                          newest.c.manifest_key, newest.c.covered_upper)
                .select_from(p.outerjoin(newest, newest.c.partition_id == p.c.id))
                .where(p.c.table_id == table_id).order_by(p.c.partition_date)
            ).all()
            # (lower, upper]: the live object ids each partition shows beside its manifest.
            live: dict[int, tuple[int, int]] = {}
            for row in rows:
                lower = row.covered_upper or 0
                if pinned:
                    if row.version is not None and (row.live_watermark or 0) > lower:
                        live[row.id] = (lower, row.live_watermark)
                elif not row.switched or row.manifest_key is None:
                    live[row.id] = (lower, watermark)
            objects: dict[int, list[int]] = {}
            if live:
                # One query over the widest span; each partition's own bounds are applied here (a CASE with a
                # branch per partition costs more to build than the rows it saves).
                lowest = min(lower for lower, _ in live.values())
                highest = max(upper for _, upper in live.values())
                for pid, oid in c.execute(
                        sa.select(so.c.partition_id, so.c.id).where(
                            so.c.partition_id.in_(list(live)), so.c.delayed.is_(False),
                            so.c.id > lowest, so.c.id <= highest)
                        .order_by(so.c.id)):
                    lower, upper = live[pid]
                    if lower < oid <= upper:
                        objects.setdefault(pid, []).append(oid)
        views = []
        for row in rows:
            if row.manifest_key is None and row.id not in live:
                continue  # pinned before its first version, or switched without one
            if pinned and row.version is None:
                continue
            views.append(PartitionView(row.partition_date, row.version,
                                       live_object_ids=tuple(objects.get(row.id, ())),
                                       manifest_key=row.manifest_key))
        return views

def _version(row) -> PublishedVersion:  # noqa: ANN001 - a partition_versions Row
    return PublishedVersion(row.partition_id, row.version, row.commit_op, row.live_watermark, row.manifest_key,
                            row.created_at, row.row_count, row.byte_count, row.covered_upper)
