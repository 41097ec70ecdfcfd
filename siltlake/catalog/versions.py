"""Versions (docs/design.md): publishing partition states (switch, close, live and merged versions), updates,
and what readers see of them (reader snapshots, table versions)."""

from __future__ import annotations

import datetime as dt
import functools
from collections import Counter
from collections.abc import Callable, Collection, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore, rows_values
from siltlake.catalog.records import (
    ListedObject,
    LiveCandidate,
    PartitionView,
    PublishedVersion,
    RangeRow,
    SwitchedPartition,
    TableBounds,
    UpdateBase,
    UpdateWrite,
    VersionOutOfRange,
    WriteRequest,
)
from siltlake.catalog.update_commits import commit_updates_in
from siltlake.errors import NotFoundError

# Merged versions published per transaction: bounds how long a publish run holds partition row locks
# (PostgreSQL) or the write lock (SQLite), and the bound parameters of one statement (4 per partition).
MERGED_CAS_BATCH = 500

_IDS_PER_STATEMENT = 1000  # ids per IN (...) list

# Up to this many dates are matched in the reader's queries; more (rare) are kept after reading all.
_DATES_IN_QUERY = 500


class Versions:
    """Reached as catalog.versions."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core

    def switch_partitions(self) -> list[int]:
        """Switch closed partitions whose live objects are all merged (and that were merged at least once)."""
        p, t = s.partitions, s.tables
        with self._core.tx() as c:
            # One UPDATE ... RETURNING: no id list to send back (SQLite caps bound parameters).
            switched = c.execute(p.update().where(
                p.c.switched.is_(False), p.c.last_live_object_id.is_not(None),
                p.c.desired_manifest_version > 0, p.c.desired_manifest_version >= p.c.last_live_object_id,
            ).values(switched=True).returning(p.c.id, p.c.table_id)).all()
            per_table = Counter(row.table_id for row in switched)
            for table_id in sorted(per_table):  # in id order, as every writer of tables rows
                c.execute(t.update().where(t.c.id == table_id)
                          .values(switched_partitions=t.c.switched_partitions + per_table[table_id]))
        return sorted(row.id for row in switched)

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
        with self._core.tx() as c:
            self._core.ordering_lock(c)  # the stream holds it while it decides live or delayed
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

    def live_to_publish(self) -> list[LiveCandidate]:
        """Each not-switched partition with live objects beyond its newest version, and the live objects
        its append version adds to its newest version's file list (read in one snapshot, two queries)."""
        p, so = s.partitions, s.small_objects
        # Only the newest versions of partitions not switched (a partial index finds them): a table's switched
        # past days, nearly all of its partitions, are not read.
        newest = self._newest_versions(
            s.partition_versions.c.partition_id.in_(sa.select(p.c.id).where(p.c.switched.is_(False))))
        beyond = (p.c.switched.is_(False), so.c.delayed.is_(False),
                  so.c.id > sa.func.coalesce(newest.c.live_watermark, 0))
        joined = p.join(so, so.c.partition_id == p.c.id).outerjoin(newest, newest.c.partition_id == p.c.id)
        with self._core.snapshot() as c:
            rows = c.execute(
                sa.select(p.c.id, p.c.table_id, p.c.partition_date, p.c.current_manifest_version,
                          sa.func.max(so.c.id).label("watermark"), sa.func.sum(so.c.row_count).label("rows"),
                          sa.func.sum(so.c.content_length).label("bytes"), newest.c.version,
                          newest.c.row_count.label("base_rows"), newest.c.byte_count.label("base_bytes"),
                          newest.c.manifest_key, newest.c.covered_upper, newest.c.file_list_key,
                          newest.c.live_watermark.label("base_watermark"))
                .select_from(joined).where(*beyond)
                .group_by(p.c.id, p.c.table_id, p.c.partition_date, p.c.current_manifest_version, newest.c.version,
                          newest.c.row_count, newest.c.byte_count, newest.c.manifest_key, newest.c.covered_upper,
                          newest.c.file_list_key, newest.c.live_watermark)
            ).all()
            # The objects each list adds: above the newest version's watermark when it has a file list, else
            # above what its manifest holds; read by the candidates' ids (an id list, in chunks: a condition
            # over the joined rows would make the plan read every small object).
            lowers = {row.id: (row.base_watermark or 0) if row.file_list_key is not None else
                      (row.covered_upper or 0) if row.manifest_key is not None else 0 for row in rows}
            objects: dict[int, list[tuple[int, int]]] = {}
            ordered = sorted(lowers)
            for start in range(0, len(ordered), _IDS_PER_STATEMENT):
                chunk = ordered[start:start + _IDS_PER_STATEMENT]
                for pid, oid, size in rows_values(c.execute(
                        sa.select(so.c.partition_id, so.c.id, so.c.content_length)
                        .where(so.c.partition_id.in_(chunk), so.c.delayed.is_(False),
                               so.c.id > min(lowers[pid] for pid in chunk)).order_by(so.c.id))):
                    if oid > lowers[pid]:
                        objects.setdefault(pid, []).append((oid, size))
        return [LiveCandidate(
            partition_id=row.id, table_id=row.table_id, partition_date=row.partition_date,
            first=row.current_manifest_version < 0, base_version=row.version, manifest_key=row.manifest_key,
            covered_upper=row.covered_upper, watermark=row.watermark, row_count=int(row.rows) + (row.base_rows or 0),
            byte_count=int(row.bytes) + (row.base_bytes or 0), base_file_list_key=row.file_list_key,
            objects=tuple((oid, size) for oid, size in objects.get(row.id, ()) if oid <= row.watermark))
            for row in rows]

    def merged_to_publish(self) -> list[SwitchedPartition]:
        """Switched partitions whose desired merged version is ahead of the published one."""
        p, r = s.partitions, s.merge_ranges
        behind = (p.c.switched.is_(True), p.c.current_manifest_version < p.c.desired_manifest_version)
        with self._core.tx() as c:
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
            # An upsert's merge version published after the merge job planned holds ids above desired: the
            # compaction lists those small objects after its ranges ("reorder as compaction + merge", conflict matrix).
            beyond: dict[int, list[ListedObject]] = {}
            if rows:
                so, newest = s.small_objects, self._newest_versions(
                    s.partition_versions.c.partition_id.in_(sa.select(p.c.id).where(*behind)))
                for pid, oid, delayed, size, count in rows_values(c.execute(
                        sa.select(so.c.partition_id, so.c.id, so.c.delayed, so.c.content_length, so.c.row_count)
                        .select_from(so.join(p, p.c.id == so.c.partition_id)
                                     .join(newest, newest.c.partition_id == so.c.partition_id))
                        .where(*behind, newest.c.manifest_key.is_not(None),
                               so.c.id > p.c.desired_manifest_version, so.c.id <= newest.c.covered_upper)
                        .order_by(so.c.id))):
                    beyond.setdefault(pid, []).append(ListedObject(oid, delayed, size, count))
        return [SwitchedPartition(
            partition_id=row.id, table_id=row.table_id, partition_date=row.partition_date,
            current=row.current_manifest_version, desired=row.desired_manifest_version,
            ranges=tuple(x for x in ranges.get(row.id, []) if x.upper <= row.desired_manifest_version),
            beyond=tuple(beyond.get(row.id, ()))) for row in rows]

    def publish_merged(self, partition: SwitchedPartition, manifest_key: str,
                       now: dt.datetime) -> PublishedVersion | None:
        """Publish the manifest of `partition.desired`, unless a merge or another publisher moved it meanwhile."""
        published = self.publish_merged_many([(partition, manifest_key)], now)
        return published[0] if published else None

    def publish_merged_many(self, items: Sequence[tuple[SwitchedPartition, str]],
                            now: dt.datetime, *, given: bool = False) -> list[PublishedVersion]:
        """publish_merged for many partitions, in one transaction per MERGED_CAS_BATCH of them; a
        partition whose current or desired moved since it was read is left out (the next run publishes
        it), the others are not."""
        published: list[PublishedVersion] = []
        for start in range(0, len(items), MERGED_CAS_BATCH):
            published += self.commit([], items[start:start + MERGED_CAS_BATCH], now, given=given)[1]
        return published

    def commit(self, live: Sequence[tuple[LiveCandidate, str | None]],
               merged: Sequence[tuple[SwitchedPartition, str]],
               now: dt.datetime, *, given: bool = False) -> tuple[list[PublishedVersion], list[PublishedVersion]]:
        """Publish append versions (each with its file list's key) and merged versions (each with its
        manifest's key) in one transaction, which is one new table version of every table it changes,
        stamped `now` (CatalogCore.new_table_versions: `given` says the user gave it).

        Each is a compare-and-swap: an append version only if its partition is still not switched and its
        newest version is still the one read (under the partition's row lock, which updates take too); a
        merged version only where current and desired are both still as read (one UPDATE ... RETURNING
        tells which partitions moved). The ones left out are published by the next run.
        """
        p, v = s.partitions, s.partition_versions
        by_id = {partition.partition_id: (partition, key) for partition, key in merged}
        assert len(by_id) == len(merged), "one item per partition"
        published_live: list[PublishedVersion] = []
        published_merged: list[PublishedVersion] = []
        with self._core.tx() as c:
            kept_live: list[tuple[LiveCandidate, str | None]] = []
            if live:
                ids = sorted(x.partition_id for x, _ in live)
                newest: dict[int, int] = {}
                switched: set[int] = set()
                for start in range(0, len(ids), _IDS_PER_STATEMENT):
                    chunk = ids[start:start + _IDS_PER_STATEMENT]
                    # In id order: two runs locking overlapping partitions never wait on each other crosswise.
                    lock = sa.select(p.c.id, p.c.switched).where(p.c.id.in_(chunk)).order_by(p.c.id)
                    if self._core.dialect == "postgresql":
                        lock = lock.with_for_update()
                    switched |= {row.id for row in c.execute(lock) if row.switched}
                    newest.update(c.execute(sa.select(v.c.partition_id, sa.func.max(v.c.version))
                                            .where(v.c.partition_id.in_(chunk)).group_by(v.c.partition_id)).all())
                kept_live = [(x, key) for x, key in live
                             if x.partition_id not in switched and newest.get(x.partition_id) == x.base_version]
            moved: set[int] = set()
            newest_merged: dict[int, int] = {}
            if merged:
                # An upsert committed since the read (its merge version holds ids above what this version would):
                # left out, the next run lists its objects. Under the row locks upserts take, in id order.
                lock = sa.select(p.c.id).where(p.c.id.in_(sorted(by_id))).order_by(p.c.id)
                if self._core.dialect == "postgresql":
                    c.execute(lock.with_for_update())
                ahead = {pid for pid, covered in rows_values(c.execute(
                    sa.select(v.c.partition_id, sa.func.max(v.c.covered_upper))
                    .where(v.c.partition_id.in_(sorted(by_id)), v.c.commit_op == "merge")
                    .group_by(v.c.partition_id))) if covered is not None and covered > by_id[pid][0].upper}
                cas = [(x.partition_id, x.current, x.desired) for x, _ in merged if x.partition_id not in ahead]
                moved = set(c.execute(p.update().where(
                    p.c.id.in_([pid for pid, _, _ in cas]),
                    sa.tuple_(p.c.id, p.c.current_manifest_version, p.c.desired_manifest_version).in_(cas),
                ).values(current_manifest_version=p.c.desired_manifest_version).returning(p.c.id)).scalars()) \
                    if cas else set()
                if moved:
                    newest_merged = dict(c.execute(
                        sa.select(v.c.partition_id, sa.func.max(v.c.version))
                        .where(v.c.partition_id.in_(list(moved))).group_by(v.c.partition_id)).all())
            changed = sorted({x.table_id for x, _ in kept_live}
                             | {x.table_id for x, _ in merged if x.partition_id in moved})
            if not changed:
                return [], []
            table_versions = self._core.new_table_versions(c, changed, now, given=given)
            for x, key in kept_live:
                number, stamp = table_versions[x.table_id]
                published_live.append(PublishedVersion(
                    partition_id=x.partition_id, version=x.version, commit_op="append", live_watermark=x.watermark,
                    manifest_key=x.manifest_key, created_at=stamp, row_count=x.row_count, byte_count=x.byte_count,
                    covered_upper=x.covered_upper, table_version=number, file_list_key=key))
            for m, key in merged:
                if m.partition_id in moved:
                    number, stamp = table_versions[m.table_id]
                    published_merged.append(PublishedVersion(
                        partition_id=m.partition_id, version=newest_merged.get(m.partition_id, 0) + 1,
                        commit_op="compaction", live_watermark=None, manifest_key=key, created_at=stamp,
                        row_count=sum(r.row_count for r in m.ranges) + sum(o.row_count for o in m.beyond),
                        byte_count=sum(r.content_length for r in m.ranges) + sum(o.content_length for o in m.beyond),
                        covered_upper=m.upper, table_version=number, file_list_key=key))
            published: list[tuple[LiveCandidate | SwitchedPartition, str | None]] = [*kept_live, *merged]
            table_of = {x.partition_id: x.table_id for x, _ in published}
            c.execute(v.insert(), [dict(partition_id=x.partition_id, table_id=table_of[x.partition_id],
                                        version=x.version, commit_op=x.commit_op,
                                        live_watermark=x.live_watermark, manifest_key=x.manifest_key,
                                        covered_upper=x.covered_upper, created_at=x.created_at, row_count=x.row_count,
                                        byte_count=x.byte_count, table_version=x.table_version,
                                        file_list_key=x.file_list_key)
                                   for x in published_live + published_merged])
            first = [x.partition_id for x, _ in kept_live if x.first]
            for start in range(0, len(first), _IDS_PER_STATEMENT):
                c.execute(p.update().where(p.c.id.in_(first[start:start + _IDS_PER_STATEMENT]), p.c.switched.is_(False))
                          .values(current_manifest_version=0))
        return published_live, published_merged

    # --- updates (docs/design.md, "Updates and concurrent writers") --------------------------------------------------

    def update_base(self, table_id: int, partition_date: dt.date) -> UpdateBase:
        """Everything one partition holds, as an update reads it (one snapshot)."""
        p, so = s.partitions, s.small_objects
        with self._core.snapshot() as c:
            partition = c.execute(sa.select(p.c.id).where(p.c.table_id == table_id,
                                                          p.c.partition_date == partition_date)).first()
            if partition is None:
                raise NotFoundError(f"the table has no partition {partition_date}; nothing to update")
            newest = c.execute(sa.select(self._newest_versions(s.partition_versions.c.partition_id == partition.id)
                                         )).first()
            covered = (newest.covered_upper or 0) if newest is not None and newest.manifest_key else 0
            objects = c.execute(sa.select(so.c.id, so.c.delayed).where(
                so.c.partition_id == partition.id, so.c.id > covered).order_by(so.c.id)).all()
        return UpdateBase(partition_id=partition.id, partition_date=partition_date,
                          version=newest.version if newest is not None else None,
                          manifest_key=newest.manifest_key if newest is not None else None, covered_upper=covered,
                          objects=tuple((row.id, row.delayed) for row in objects),
                          upper=objects[-1].id if objects else covered)

    def commit_updates(self, writes: Sequence[UpdateWrite], now: dt.datetime, *, given: bool = False,
                       request: tuple[WriteRequest, str] | None = None) -> list[PublishedVersion]:
        """Publish updates of partitions of one table as one table version, in one transaction: all of them
        or, if any partition had anything but compactions since its base was read, none (UpdateConflict; a
        compaction loses: its output becomes garbage for reap). `request` (the write's request id and what it
        did, in words) is recorded in the same transaction (catalog.requests).

        Each object becomes its partition's one merged range (0, upper]: later small objects chain after
        it, and merges extend it like any range.
        """
        if not writes:
            return []
        with self._core.tx() as c:
            return commit_updates_in(self._core, c, writes, now, given=given, request=request)

    def mark(self) -> int:
        """A mark that every later update's version is above (read under the ordering lock an update
        commit holds): an append started at this mark checks it with StreamCommit.updated_since."""
        with self._core.tx() as c:
            self._core.ordering_lock(c)
            return c.execute(sa.select(sa.func.coalesce(sa.func.max(s.partition_versions.c.id), 0))).scalar_one()

    def of_partitions(self, partition_ids: Sequence[int]) -> list[PublishedVersion]:
        v = s.partition_versions
        if not partition_ids:
            return []
        with self._core.tx() as c:
            rows = c.execute(sa.select(v).where(v.c.partition_id.in_(list(partition_ids)))
                             .order_by(v.c.partition_id, v.c.version)).all()
        return [_version(r) for r in rows]

    def stamped(self, table_id: int, after: int, upto: int,
                ) -> list[tuple[dt.date, PublishedVersion, PublishedVersion | None]]:
        """The partition versions of table versions in (after, upto], each with its partition's date and the
        partition's version before it (None: the partition's first), ordered by table version then date:
        what each commit changed, for the change feed."""
        p, v = s.partitions, s.partition_versions
        with self._core.snapshot() as c:
            rows = c.execute(
                sa.select(p.c.partition_date, v).join(p, p.c.id == v.c.partition_id)
                .where(v.c.table_id == table_id, v.c.table_version > after, v.c.table_version <= upto)
                .order_by(v.c.table_version, p.c.partition_date)).all()
            wanted = sorted({(r.partition_id, r.version - 1) for r in rows if r.version > 1})
            before: dict[tuple[int, int], PublishedVersion] = {}
            for start in range(0, len(wanted), _IDS_PER_STATEMENT):
                chunk = wanted[start:start + _IDS_PER_STATEMENT]
                for r in c.execute(sa.select(v).where(sa.tuple_(v.c.partition_id, v.c.version).in_(chunk))):
                    before[(r.partition_id, r.version)] = _version(r)
        return [(r.partition_date, _version(r), before.get((r.partition_id, r.version - 1))) for r in rows]

    def table_range(self, c: Connection, table_id: int) -> tuple[int, int, dt.datetime | None]:
        """(oldest readable, newest) table version and the oldest one's time (None: no versions yet).

        A table version is readable while every partition still has the versions it showed then: the
        oldest readable one is the newest of the first retained versions of partitions whose earlier
        versions were reaped (a partition that never had earlier versions showed nothing before)."""
        v, tc = s.partition_versions, s.table_changes
        newest = _newest(c, table_id)
        # Kept on the table row by reap as it deletes versions (Reaping.delete_version_rows): not a scan of every
        # partition's versions at each read of an older version.
        oldest = max(1, c.execute(sa.select(s.tables.c.readable_from).where(s.tables.c.id == table_id))
                     .scalar_one_or_none() or 1)
        if not newest:
            return oldest, newest, None
        # A version is a publish (partition versions) or a definition change (a table change): the earlier stamp.
        times: list[dt.datetime | None] = [c.execute(sa.select(sa.func.min(v.c.created_at)).where(
                     v.c.table_id == table_id, v.c.table_version == oldest)).scalar_one_or_none(),
                 c.execute(sa.select(sa.func.min(tc.c.created_at)).where(
                     tc.c.table_id == table_id, tc.c.table_version == oldest)).scalar_one_or_none()]
        found = [t for t in times if t is not None]
        return oldest, newest, min(found) if found else None

    def reader_snapshot(self, table_id: int, *, as_of_version: int | None = None,
                        as_of: dt.datetime | None = None, table_name: str = "the table",
                        dates: Collection[dt.date] | None = None,
                        date_filter: Callable[[list[dt.date]], Collection[dt.date]] | None = None,
                       ) -> list[PartitionView]:
        """Every partition's visible state, read in one snapshot with a constant number of queries; only
        that of the partitions dated `dates`, and of those `date_filter` keeps of the table's partition
        dates (given them all, read in the same snapshot, it returns the dates to read).

        A version shows its file list (the manifest of exactly its files); a version published before
        file lists shows its manifest's objects (ids <= covered_upper) and the live objects above them up
        to its live watermark. Current state: each partition's newest version, except that a partition
        not switched shows its live objects up to the largest small object id at the start of the read.
        A switched partition without a merged version yet (published later in the same run) stays live.
        As of a table version (each partition's newest version published in it or before) or a time
        (newest created at or before it): that version exactly; partitions without one are left out.
        A table version outside the readable range, or a time before the oldest readable version's (the first
        version's too: the table had no version then), raises VersionOutOfRange naming the range.
        """
        p = s.partitions
        pinned = as_of_version is not None or as_of is not None
        values: dict[str, object] = {"table_id": table_id, "as_of_version": as_of_version, "as_of": as_of}
        with self._core.snapshot() as c:
            if pinned:
                self._check_in_range(c, table_id, table_name, as_of_version, as_of)
            if date_filter is not None:
                present: list[dt.date] = list(
                    c.execute(sa.select(p.c.partition_date).where(p.c.table_id == table_id)).scalars())
                kept = set(date_filter(present))
                dates = kept if dates is None else kept & set(dates)
            if dates is not None:
                dates = set(dates)
                # In the queries, so that reading a day of a long table touches that day's rows only.
                values["dates"] = sorted(dates) if len(dates) <= _DATES_IN_QUERY else None
            watermark_query, rows_query = _reader_queries(as_of_version is not None, as_of is not None,
                                                          values.get("dates") is not None)
            watermark: int = c.execute(watermark_query).scalar_one()
            rows = c.execute(rows_query, values).all()
            if dates is not None:
                rows = [row for row in rows if row.partition_date in dates]
            # (lower, upper]: the live object ids each partition shows beside its manifest.
            live: dict[int, tuple[int, int]] = {}
            for row in rows:
                lower = row.covered_upper or 0
                if pinned:
                    if row.version is not None and row.file_list_key is None and (row.live_watermark or 0) > lower:
                        live[row.id] = (lower, row.live_watermark)
                elif not row.switched or row.manifest_key is None:
                    live[row.id] = (lower, watermark)
            objects: dict[int, list[int]] = {}
            if live:
                # One query over the widest span; each partition's own bounds are applied here (a CASE with a
                # branch per partition costs more to build than the rows it saves).
                lowest = min(lower for lower, _ in live.values())
                highest = max(upper for _, upper in live.values())
                for pid, oid in rows_values(c.execute(_live_objects_query(), {
                        "partition_ids": list(live), "lowest": lowest, "highest": highest})):
                    lower, upper = live[pid]
                    if lower < oid <= upper:
                        objects.setdefault(pid, []).append(oid)
        views = []
        for row in rows:
            if pinned and row.version is None:
                continue
            if pinned and row.file_list_key is not None:
                views.append(PartitionView(row.partition_date, row.version, manifest_key=row.file_list_key,
                                           table_version=row.table_version))
                continue
            if row.manifest_key is None and row.id not in live:
                continue  # switched without a version
            views.append(PartitionView(row.partition_date, row.version,
                                       live_object_ids=tuple(objects.get(row.id, ())),
                                       manifest_key=row.manifest_key, table_version=row.table_version))
        return views

    def _check_in_range(self, c: Connection, table_id: int, table_name: str, as_of_version: int | None,
                        as_of: dt.datetime | None) -> None:
        oldest, newest, oldest_time = self.table_range(c, table_id)
        if as_of_version is not None:
            if newest == 0:
                raise VersionOutOfRange(f"{table_name} has no published versions yet, so it has no version "
                                        f"{as_of_version}; run `silt publish --once`, or read its current state")
            if not oldest <= as_of_version <= newest and not _tagged(c, table_id, as_of_version, newest):
                raise VersionOutOfRange(
                    f"{table_name} has no version {as_of_version}: its readable versions are {oldest} to {newest}"
                    + (f" (versions before {oldest} were reaped)" if oldest > 1 else ""))
        if as_of is None:
            return
        # Before the first version there is no table version to read: refused as as_of_version=0 is, not an
        # empty read that looks like a table without rows.
        if newest == 0:
            raise VersionOutOfRange(f"{table_name} cannot be read as of {as_of.isoformat(sep=' ')} UTC: it has no "
                                    "published versions yet; run `silt publish --once`, or read its current state")
        if oldest_time is not None and as_of < oldest_time:
            if oldest > 1:
                raise VersionOutOfRange(
                    f"{table_name} cannot be read as of {as_of.isoformat(sep=' ')} UTC: versions before {oldest} "
                    f"(published {oldest_time.isoformat(sep=' ')} UTC) were reaped; read as of a later time")
            raise VersionOutOfRange(
                f"{table_name} cannot be read as of {as_of.isoformat(sep=' ')} UTC: its first version (1) was "
                f"published {oldest_time.isoformat(sep=' ')} UTC, and it had no version before; read as of a later "
                "time")

    def version_at(self, table_id: int, as_of: dt.datetime) -> int | None:
        """The newest table version published at or before `as_of` (data or definition; None: none was)."""
        p, v, tc = s.partitions, s.partition_versions, s.table_changes
        with self._core.snapshot() as c:
            data: int | None = c.execute(sa.select(sa.func.max(v.c.table_version)).where(
                v.c.partition_id.in_(sa.select(p.c.id).where(p.c.table_id == table_id)),
                v.c.created_at <= as_of)).scalar_one_or_none()
            definition: int | None = c.execute(sa.select(sa.func.max(tc.c.table_version)).where(
                tc.c.table_id == table_id, tc.c.created_at <= as_of)).scalar_one_or_none()
        found = [n for n in (data, definition) if n is not None]
        return max(found) if found else None

    def version_times(self, table_id: int, after: int, upto: int) -> dict[int, dt.datetime]:
        """When each table version in (after, upto] became readable (naive UTC): the first of its partition versions
        and table changes, the instant from which version_at finds it."""
        p, v, tc = s.partitions, s.partition_versions, s.table_changes
        data = (sa.select(v.c.table_version.label("version"), sa.func.min(v.c.created_at).label("at"))
                .where(v.c.partition_id.in_(sa.select(p.c.id).where(p.c.table_id == table_id)),
                       v.c.table_version > after, v.c.table_version <= upto).group_by(v.c.table_version))
        definition = (sa.select(tc.c.table_version.label("version"), sa.func.min(tc.c.created_at).label("at"))
                      .where(tc.c.table_id == table_id, tc.c.table_version > after, tc.c.table_version <= upto)
                      .group_by(tc.c.table_version))
        times: dict[int, dt.datetime] = {}
        with self._core.snapshot() as c:
            for row in [*c.execute(data), *c.execute(definition)]:
                times[row.version] = min(times.get(row.version, row.at), row.at)
        return times

    def newest(self, table_id: int) -> int:
        """The table's newest table version (0: none yet)."""
        with self._core.tx() as c:
            return _newest(c, table_id)

    def current_state(self, table_id: int, dates: Collection[dt.date] | None = None) -> tuple[int, int]:
        """What the current state of the table (of its partitions `dates`) depends on, in one statement: its newest
        table version and the largest small object id of its partitions not switched. Equal pairs, equal
        reader_snapshot (new live objects raise the id; anything else publishes a version)."""
        if dates is None or not dates or len(dates) > _DATES_IN_QUERY:
            return self._core.read_row(_state_query(None), {"table_id": table_id})
        # Date parameters in powers of two (the last date repeated): a few statements compiled, not one per count.
        dated = sorted(dates)
        count = 1 << (len(dated) - 1).bit_length()
        values = {f"date_{i}": dated[min(i, len(dated) - 1)] for i in range(count)}
        return self._core.read_row(_state_query(count), {"table_id": table_id, **values})

    def table_bounds(self, table_id: int) -> TableBounds:
        """The oldest readable and the newest table version; (1, 0) for a table without versions."""
        with self._core.snapshot() as c:
            oldest, newest, _ = self.table_range(c, table_id)
        return TableBounds(oldest=oldest, newest=newest)


def _version(row) -> PublishedVersion:  # a partition_versions Row
    return PublishedVersion(
        partition_id=row.partition_id, version=row.version, commit_op=row.commit_op, live_watermark=row.live_watermark,
        manifest_key=row.manifest_key, created_at=row.created_at, row_count=row.row_count, byte_count=row.byte_count,
        covered_upper=row.covered_upper, table_version=row.table_version, file_list_key=row.file_list_key)


def _tagged(c: Connection, table_id: int, version: int, newest: int) -> bool:
    """Whether a tag names the version: reap kept what it shows, readable_from notwithstanding (catalog.tags)."""
    t = s.version_tags
    return 1 <= version <= newest and c.execute(sa.select(t.c.id).where(
        t.c.table_id == table_id, t.c.table_version == version).limit(1)).first() is not None


def _newest(c: Connection, table_id: int) -> int:
    t = s.tables
    return c.execute(sa.select(t.c.version).where(t.c.id == table_id)).scalar_one_or_none() or 0


@functools.cache
def _reader_queries(version_pinned: bool, time_pinned: bool, dated: bool) -> tuple[sa.Select, sa.Select]:
    """reader_snapshot's statements (the catalog's largest small object id; each partition of a table with its
    newest version), built once per shape: building them costs more than running them on a day's read.
    Parameters: table_id, and as_of_version, as_of, dates (a list) as the shape has them."""
    p, v, so = s.partitions, s.partition_versions, s.small_objects
    of_table = [p.c.table_id == sa.bindparam("table_id")]
    if dated:
        of_table.append(p.c.partition_date.in_(sa.bindparam("dates", expanding=True)))
    pins = []
    if version_pinned:
        pins.append(v.c.table_version <= sa.bindparam("as_of_version"))
    if time_pinned:
        pins.append(v.c.created_at <= sa.bindparam("as_of"))
    newest = Versions._newest_versions(v.c.partition_id.in_(sa.select(p.c.id).where(*of_table)), *pins)
    rows = (sa.select(p.c.id, p.c.partition_date, p.c.switched, newest.c.version, newest.c.live_watermark,
                      newest.c.manifest_key, newest.c.covered_upper, newest.c.file_list_key, newest.c.table_version)
            .select_from(p.outerjoin(newest, newest.c.partition_id == p.c.id))
            .where(*of_table).order_by(p.c.partition_date))
    return sa.select(sa.func.coalesce(sa.func.max(so.c.id), 0)), rows


@functools.cache
def _state_query(date_count: int | None) -> sa.Select:
    """current_state's statement, over all partitions or those of `date_count` dates (date_0, date_1, ...; each
    its own parameter, as CatalogCore.read_row runs it)."""
    p, so, t = s.partitions, s.small_objects, s.tables
    live = [p.c.table_id == sa.bindparam("table_id"), p.c.switched.is_(False)]
    if date_count is not None:
        live.append(p.c.partition_date.in_([sa.bindparam(f"date_{i}", type_=sa.Date) for i in range(date_count)]))
    largest = sa.select(sa.func.coalesce(sa.func.max(so.c.id), 0)).where(so.c.partition_id.in_(
        sa.select(p.c.id).where(*live)))
    version = sa.select(sa.func.coalesce(t.c.version, 0)).where(t.c.id == sa.bindparam("table_id"))
    return sa.select(version.scalar_subquery(), largest.scalar_subquery())


@functools.cache
def _live_objects_query() -> sa.Select:
    """The live (not delayed) small objects of partitions `partition_ids` with ids in (lowest, highest]."""
    so = s.small_objects
    return (sa.select(so.c.partition_id, so.c.id)
            .where(so.c.partition_id.in_(sa.bindparam("partition_ids", expanding=True)), so.c.delayed.is_(False),
                   so.c.id > sa.bindparam("lowest"), so.c.id <= sa.bindparam("highest"))
            .order_by(so.c.id))
