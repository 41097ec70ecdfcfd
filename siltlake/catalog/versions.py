"""Versions (docs/design.md): publishing partition states (switch, close, live and merged versions) and updates.
What readers see of them is catalog.version_reads."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence

import sqlalchemy as sa

from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore, rows_values
from siltlake.catalog.rows import (
    ListedObject,
    LiveCandidate,
    PublishedVersion,
    RangeRow,
    SwitchedPartition,
    UpdateBase,
    UpdateWrite,
    WriteRequest,
)
from siltlake.catalog.update_commits import commit_updates_in
from siltlake.catalog.version_reads import newest_versions
from siltlake.errors import NotFoundError

# Merged versions published per transaction: bounds how long a publish run holds partition row locks
# (PostgreSQL) or the write lock (SQLite), and the bound parameters of one statement (4 per partition).
MERGED_CAS_BATCH = 500

_IDS_PER_STATEMENT = 1000  # ids per IN (...) list


class Versions:
    """Reached as catalog.versions."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core

    def switch_partitions(self) -> list[int]:
        """Switch closed partitions whose live objects are all merged (and that were merged at least once)."""
        p, t = s.partitions, s.tables
        with self._core.tx() as c:
            # One UPDATE ... RETURNING: no id list to send back (SQLite caps bound parameters).
            switched = c.execute(
                p.update()
                .where(
                    p.c.switched.is_(False),
                    p.c.last_live_object_id.is_not(None),
                    p.c.desired_manifest_version > 0,
                    p.c.desired_manifest_version >= p.c.last_live_object_id,
                )
                .values(switched=True)
                .returning(p.c.id, p.c.table_id)
            ).all()
            per_table = Counter(row.table_id for row in switched)
            for table_id in sorted(per_table):  # in id order, as every writer of tables rows
                c.execute(
                    t.update()
                    .where(t.c.id == table_id)
                    .values(switched_partitions=t.c.switched_partitions + per_table[table_id])
                )
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
        largest = (
            sa.select(sa.func.coalesce(sa.func.max(so.c.id), 0)).where(so.c.partition_id == p.c.id).scalar_subquery()
        )
        ended = sa.or_(
            *(sa.and_(p.c.table_id == table_id, p.c.partition_date < date) for table_id, date in before.items())
        )
        with self._core.tx() as c:
            self._core.ordering_lock(c)  # the stream holds it while it decides live or delayed
            return sorted(
                c.execute(
                    p.update()
                    .where(p.c.last_live_object_id.is_(None), ended)
                    .values(last_live_object_id=largest)
                    .returning(p.c.id)
                ).scalars()
            )

    def live_to_publish(self) -> list[LiveCandidate]:
        """Each not-switched partition with live objects beyond its newest version, and the live objects
        its append version adds to its newest version's file list (read in one snapshot, two queries)."""
        p, so = s.partitions, s.small_objects
        # Only the newest versions of partitions not switched (a partial index finds them): a table's switched
        # past days, nearly all of its partitions, are not read.
        newest = newest_versions(
            s.partition_versions.c.partition_id.in_(sa.select(p.c.id).where(p.c.switched.is_(False)))
        )
        beyond = (
            p.c.switched.is_(False),
            so.c.delayed.is_(False),
            so.c.id > sa.func.coalesce(newest.c.live_watermark, 0),
        )
        joined = p.join(so, so.c.partition_id == p.c.id).outerjoin(newest, newest.c.partition_id == p.c.id)
        with self._core.snapshot() as c:
            rows = c.execute(
                sa.select(
                    p.c.id,
                    p.c.table_id,
                    p.c.partition_date,
                    p.c.partition_values,
                    p.c.current_manifest_version,
                    sa.func.max(so.c.id).label("watermark"),
                    sa.func.sum(so.c.row_count).label("rows"),
                    sa.func.sum(so.c.content_length).label("bytes"),
                    newest.c.version,
                    newest.c.row_count.label("base_rows"),
                    newest.c.byte_count.label("base_bytes"),
                    newest.c.manifest_key,
                    newest.c.covered_upper,
                    newest.c.file_list_key,
                    newest.c.live_watermark.label("base_watermark"),
                )
                .select_from(joined)
                .where(*beyond)
                .group_by(
                    p.c.id,
                    p.c.table_id,
                    p.c.partition_date,
                    p.c.partition_values,
                    p.c.current_manifest_version,
                    newest.c.version,
                    newest.c.row_count,
                    newest.c.byte_count,
                    newest.c.manifest_key,
                    newest.c.covered_upper,
                    newest.c.file_list_key,
                    newest.c.live_watermark,
                )
            ).all()
            # The objects each list adds: above the newest version's watermark when it has a file list, else
            # above what its manifest holds; read by the candidates' ids (an id list, in chunks: a condition
            # over the joined rows would make the plan read every small object).
            lowers = {
                row.id: (row.base_watermark or 0)
                if row.file_list_key is not None
                else (row.covered_upper or 0)
                if row.manifest_key is not None
                else 0
                for row in rows
            }
            objects: dict[int, list[tuple[int, int]]] = {}
            ordered = sorted(lowers)
            for start in range(0, len(ordered), _IDS_PER_STATEMENT):
                chunk = ordered[start : start + _IDS_PER_STATEMENT]
                for pid, oid, size in rows_values(
                    c.execute(
                        sa.select(so.c.partition_id, so.c.id, so.c.content_length)
                        .where(
                            so.c.partition_id.in_(chunk),
                            so.c.delayed.is_(False),
                            so.c.id > min(lowers[pid] for pid in chunk),
                        )
                        .order_by(so.c.id)
                    )
                ):
                    if oid > lowers[pid]:
                        objects.setdefault(pid, []).append((oid, size))
        return [
            LiveCandidate(
                partition_id=row.id,
                table_id=row.table_id,
                partition_date=row.partition_date,
                partition_values=row.partition_values,
                first=row.current_manifest_version < 0,
                base_version=row.version,
                manifest_key=row.manifest_key,
                covered_upper=row.covered_upper,
                watermark=row.watermark,
                row_count=int(row.rows) + (row.base_rows or 0),
                byte_count=int(row.bytes) + (row.base_bytes or 0),
                base_file_list_key=row.file_list_key,
                objects=tuple((oid, size) for oid, size in objects.get(row.id, ()) if oid <= row.watermark),
            )
            for row in rows
        ]

    def merged_to_publish(self) -> list[SwitchedPartition]:
        """Switched partitions whose desired merged version is ahead of the published one."""
        p, r = s.partitions, s.merge_ranges
        behind = (p.c.switched.is_(True), p.c.current_manifest_version < p.c.desired_manifest_version)
        with self._core.tx() as c:
            rows = c.execute(
                sa.select(
                    p.c.id,
                    p.c.table_id,
                    p.c.partition_date,
                    p.c.partition_values,
                    p.c.current_manifest_version,
                    p.c.desired_manifest_version,
                ).where(*behind)
            ).all()
            ranges: dict[int, list] = {}
            if rows:
                # The same condition as a subquery, not an id list: same transaction, no parameter cap.
                for rr in c.execute(
                    sa.select(
                        r.c.partition_id,
                        r.c.lower_bound,
                        r.c.upper_bound,
                        r.c.content_length,
                        r.c.row_count,
                        r.c.object_key,
                    )
                    .where(r.c.partition_id.in_(sa.select(p.c.id).where(*behind)), r.c.lower_bound.is_not(None))
                    .order_by(r.c.partition_id, r.c.upper_bound)
                ):
                    ranges.setdefault(rr.partition_id, []).append(
                        RangeRow(rr.lower_bound, rr.upper_bound, rr.content_length, rr.row_count, rr.object_key)
                    )
            # An upsert's merge version published after the merge job planned holds ids above desired: the
            # compaction lists those small objects after its ranges ("reorder as compaction + merge", conflict matrix).
            beyond: dict[int, list[ListedObject]] = {}
            if rows:
                so, newest = (
                    s.small_objects,
                    newest_versions(s.partition_versions.c.partition_id.in_(sa.select(p.c.id).where(*behind))),
                )
                for pid, oid, delayed, size, count in rows_values(
                    c.execute(
                        sa.select(so.c.partition_id, so.c.id, so.c.delayed, so.c.content_length, so.c.row_count)
                        .select_from(
                            so.join(p, p.c.id == so.c.partition_id).join(
                                newest, newest.c.partition_id == so.c.partition_id
                            )
                        )
                        .where(
                            *behind,
                            newest.c.manifest_key.is_not(None),
                            so.c.id > p.c.desired_manifest_version,
                            so.c.id <= newest.c.covered_upper,
                        )
                        .order_by(so.c.id)
                    )
                ):
                    beyond.setdefault(pid, []).append(ListedObject(oid, delayed, size, count))
        return [
            SwitchedPartition(
                partition_id=row.id,
                table_id=row.table_id,
                partition_date=row.partition_date,
                partition_values=row.partition_values,
                current=row.current_manifest_version,
                desired=row.desired_manifest_version,
                ranges=tuple(x for x in ranges.get(row.id, []) if x.upper <= row.desired_manifest_version),
                beyond=tuple(beyond.get(row.id, ())),
            )
            for row in rows
        ]

    def publish_merged(
        self, partition: SwitchedPartition, manifest_key: str, now: dt.datetime
    ) -> PublishedVersion | None:
        """Publish the manifest of `partition.desired`, unless a merge or another publisher moved it meanwhile."""
        published = self.publish_merged_many([(partition, manifest_key)], now)
        return published[0] if published else None

    def publish_merged_many(
        self, items: Sequence[tuple[SwitchedPartition, str]], now: dt.datetime, *, given: bool = False
    ) -> list[PublishedVersion]:
        """publish_merged for many partitions, in one transaction per MERGED_CAS_BATCH of them; a
        partition whose current or desired moved since it was read is left out (the next run publishes
        it), the others are not."""
        published: list[PublishedVersion] = []
        for start in range(0, len(items), MERGED_CAS_BATCH):
            published += self.commit([], items[start : start + MERGED_CAS_BATCH], now, given=given)[1]
        return published

    def commit(
        self,
        live: Sequence[tuple[LiveCandidate, str | None]],
        merged: Sequence[tuple[SwitchedPartition, str]],
        now: dt.datetime,
        *,
        given: bool = False,
    ) -> tuple[list[PublishedVersion], list[PublishedVersion]]:
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
                    chunk = ids[start : start + _IDS_PER_STATEMENT]
                    # In id order: two runs locking overlapping partitions never wait on each other crosswise.
                    lock = sa.select(p.c.id, p.c.switched).where(p.c.id.in_(chunk)).order_by(p.c.id)
                    if self._core.dialect == "postgresql":
                        lock = lock.with_for_update()
                    switched |= {row.id for row in c.execute(lock) if row.switched}
                    newest.update(
                        c.execute(
                            sa.select(v.c.partition_id, sa.func.max(v.c.version))
                            .where(v.c.partition_id.in_(chunk))
                            .group_by(v.c.partition_id)
                        ).all()
                    )
                kept_live = [
                    (x, key)
                    for x, key in live
                    if x.partition_id not in switched and newest.get(x.partition_id) == x.base_version
                ]
            moved: set[int] = set()
            newest_merged: dict[int, int] = {}
            if merged:
                # An upsert committed since the read (its merge version holds ids above what this version would):
                # left out, the next run lists its objects. Under the row locks upserts take, in id order.
                lock = sa.select(p.c.id).where(p.c.id.in_(sorted(by_id))).order_by(p.c.id)
                if self._core.dialect == "postgresql":
                    c.execute(lock.with_for_update())
                ahead = {
                    pid
                    for pid, covered in rows_values(
                        c.execute(
                            sa.select(v.c.partition_id, sa.func.max(v.c.covered_upper))
                            .where(v.c.partition_id.in_(sorted(by_id)), v.c.commit_op == "merge")
                            .group_by(v.c.partition_id)
                        )
                    )
                    if covered is not None and covered > by_id[pid][0].upper
                }
                cas = [(x.partition_id, x.current, x.desired) for x, _ in merged if x.partition_id not in ahead]
                moved = (
                    set(
                        c.execute(
                            p.update()
                            .where(
                                p.c.id.in_([pid for pid, _, _ in cas]),
                                sa.tuple_(p.c.id, p.c.current_manifest_version, p.c.desired_manifest_version).in_(cas),
                            )
                            .values(current_manifest_version=p.c.desired_manifest_version)
                            .returning(p.c.id)
                        ).scalars()
                    )
                    if cas
                    else set()
                )
                if moved:
                    newest_merged = dict(
                        c.execute(
                            sa.select(v.c.partition_id, sa.func.max(v.c.version))
                            .where(v.c.partition_id.in_(list(moved)))
                            .group_by(v.c.partition_id)
                        ).all()
                    )
            changed = sorted(
                {x.table_id for x, _ in kept_live} | {x.table_id for x, _ in merged if x.partition_id in moved}
            )
            if not changed:
                return [], []
            table_versions = self._core.new_table_versions(c, changed, now, given=given)
            for x, key in kept_live:
                number, stamp = table_versions[x.table_id]
                published_live.append(
                    PublishedVersion(
                        partition_id=x.partition_id,
                        version=x.version,
                        commit_op="append",
                        live_watermark=x.watermark,
                        manifest_key=x.manifest_key,
                        created_at=stamp,
                        row_count=x.row_count,
                        byte_count=x.byte_count,
                        covered_upper=x.covered_upper,
                        table_version=number,
                        file_list_key=key,
                    )
                )
            for m, key in merged:
                if m.partition_id in moved:
                    number, stamp = table_versions[m.table_id]
                    published_merged.append(
                        PublishedVersion(
                            partition_id=m.partition_id,
                            version=newest_merged.get(m.partition_id, 0) + 1,
                            commit_op="compaction",
                            live_watermark=None,
                            manifest_key=key,
                            created_at=stamp,
                            row_count=sum(r.row_count for r in m.ranges) + sum(o.row_count for o in m.beyond),
                            byte_count=sum(r.content_length for r in m.ranges)
                            + sum(o.content_length for o in m.beyond),
                            covered_upper=m.upper,
                            table_version=number,
                            file_list_key=key,
                        )
                    )
            published: list[tuple[LiveCandidate | SwitchedPartition, str | None]] = [*kept_live, *merged]
            table_of = {x.partition_id: x.table_id for x, _ in published}
            c.execute(
                v.insert(),
                [
                    dict(
                        partition_id=x.partition_id,
                        table_id=table_of[x.partition_id],
                        version=x.version,
                        commit_op=x.commit_op,
                        live_watermark=x.live_watermark,
                        manifest_key=x.manifest_key,
                        covered_upper=x.covered_upper,
                        created_at=x.created_at,
                        row_count=x.row_count,
                        byte_count=x.byte_count,
                        table_version=x.table_version,
                        file_list_key=x.file_list_key,
                    )
                    for x in published_live + published_merged
                ],
            )
            first = [x.partition_id for x, _ in kept_live if x.first]
            for start in range(0, len(first), _IDS_PER_STATEMENT):
                c.execute(
                    p.update()
                    .where(p.c.id.in_(first[start : start + _IDS_PER_STATEMENT]), p.c.switched.is_(False))
                    .values(current_manifest_version=0)
                )
        return published_live, published_merged

    # --- updates (docs/design.md, "Updates and concurrent writers") --------------------------------------------------

    def update_base(self, table_id: int, partition_date: dt.date, values: str = "") -> UpdateBase:
        """Everything one partition holds, as an update reads it (one snapshot)."""
        p, so = s.partitions, s.small_objects
        with self._core.snapshot() as c:
            partition = c.execute(
                sa.select(p.c.id).where(
                    p.c.table_id == table_id, p.c.partition_date == partition_date, p.c.partition_values == values
                )
            ).first()
            if partition is None:
                named = f"{partition_date}/{values}" if values else str(partition_date)
                raise NotFoundError(f"the table has no partition {named}; nothing to update")
            newest = c.execute(sa.select(newest_versions(s.partition_versions.c.partition_id == partition.id))).first()
            covered = (newest.covered_upper or 0) if newest is not None and newest.manifest_key else 0
            objects = c.execute(
                sa.select(so.c.id, so.c.delayed)
                .where(so.c.partition_id == partition.id, so.c.id > covered)
                .order_by(so.c.id)
            ).all()
        return UpdateBase(
            partition_id=partition.id,
            partition_date=partition_date,
            partition_values=values,
            version=newest.version if newest is not None else None,
            manifest_key=newest.manifest_key if newest is not None else None,
            covered_upper=covered,
            objects=tuple((row.id, row.delayed) for row in objects),
            upper=objects[-1].id if objects else covered,
        )

    def commit_updates(
        self,
        writes: Sequence[UpdateWrite],
        now: dt.datetime,
        *,
        given: bool = False,
        request: tuple[WriteRequest, str] | None = None,
    ) -> list[PublishedVersion]:
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
            rows = c.execute(
                sa.select(v).where(v.c.partition_id.in_(list(partition_ids))).order_by(v.c.partition_id, v.c.version)
            ).all()
        return [_version(r) for r in rows]

    def stamped(
        self,
        table_id: int,
        after: int,
        upto: int,
    ) -> list[tuple[dt.date, PublishedVersion, PublishedVersion | None]]:
        """The partition versions of table versions in (after, upto], each with its partition's date and the
        partition's version before it (None: the partition's first), ordered by table version then date:
        what each commit changed, for the change feed."""
        return [(date, version, before) for date, _, version, before in self.stamped_partitions(table_id, after, upto)]

    def stamped_partitions(
        self,
        table_id: int,
        after: int,
        upto: int,
    ) -> list[tuple[dt.date, str, PublishedVersion, PublishedVersion | None]]:
        """stamped, with each partition's values below dt ("" for a table partitioned by dt alone) after its date;
        ordered by table version, date, then values."""
        p, v = s.partitions, s.partition_versions
        with self._core.snapshot() as c:
            rows = c.execute(
                sa.select(p.c.partition_date, p.c.partition_values, v)
                .join(p, p.c.id == v.c.partition_id)
                .where(v.c.table_id == table_id, v.c.table_version > after, v.c.table_version <= upto)
                .order_by(v.c.table_version, p.c.partition_date, p.c.partition_values)
            ).all()
            wanted = sorted({(r.partition_id, r.version - 1) for r in rows if r.version > 1})
            before: dict[tuple[int, int], PublishedVersion] = {}
            for start in range(0, len(wanted), _IDS_PER_STATEMENT):
                chunk = wanted[start : start + _IDS_PER_STATEMENT]
                for r in c.execute(sa.select(v).where(sa.tuple_(v.c.partition_id, v.c.version).in_(chunk))):
                    before[(r.partition_id, r.version)] = _version(r)
        return [
            (r.partition_date, r.partition_values, _version(r), before.get((r.partition_id, r.version - 1)))
            for r in rows
        ]


def _version(row) -> PublishedVersion:  # a partition_versions Row
    return PublishedVersion(
        partition_id=row.partition_id,
        version=row.version,
        commit_op=row.commit_op,
        live_watermark=row.live_watermark,
        manifest_key=row.manifest_key,
        created_at=row.created_at,
        row_count=row.row_count,
        byte_count=row.byte_count,
        covered_upper=row.covered_upper,
        table_version=row.table_version,
        file_list_key=row.file_list_key,
    )
