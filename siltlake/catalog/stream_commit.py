"""The stream's commit of small objects (StreamCommit): partitions and small-object rows added, staging
objects marked processed, in one transaction."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from siltlake.catalog import requests as applied_requests
from siltlake.catalog import schema as s
from siltlake.catalog.consumption import record_all_consumed, record_consumed, release_pending
from siltlake.catalog.core import CatalogCore
from siltlake.catalog.many_rows import execute_many
from siltlake.catalog.rows import (
    ListedObject,
    MergeBase,
    PartitionKey,
    PartitionRow,
    PublishedVersion,
    VersionRef,
    WriteRequest,
)
from siltlake.catalog.stream_batch import REWRITES, StreamBatch, partition_row, read_batch, staging_counts
from siltlake.errors import CatalogError


class StreamCommit:
    """Operations inside one small-object commit (see Partitions.stream_commit).

    Each call reads or writes at once, unless batch() started a batch: then the reads the per-object
    calls make come from a few set-based queries made up front, and their writes wait for flush(), which
    makes them in two statements. Whatever one object does, the catalog statements of a chunk of objects
    stay a handful (a per-object round trip was most of the stream's commit time; docs/design.md)."""

    def __init__(self, core: CatalogCore, connection: Connection) -> None:
        self._core = core
        self._c = connection
        self._batch: StreamBatch | None = None
        # (table id, objects, records in, bad records) this commit adds to the running staging totals, made at its
        # end (Partitions.stream_commit); a part undone by a savepoint drops its own.
        self._totals: list[tuple[int, int, int, int]] = []

    def staging_totals(self) -> dict[int, tuple[int, int, int]]:
        sums: dict[int, tuple[int, int, int]] = {}
        for table_id, objects, records_in, bad_records in self._totals:  # (objects, records in, bad records)
            before = sums.get(table_id, (0, 0, 0))
            sums[table_id] = (before[0] + objects, before[1] + records_in, before[2] + bad_records)
        return sums

    def _set_processed(self, rows: list[dict], now: dt.datetime, old: dict[int, sa.Row] | None = None) -> None:
        """Mark these staging objects processed (rows: id, records_in, bad_records and maybe error_uri) in one
        statement, and count what that changes of their tables' totals from their rows as they were (`old`, by
        id, else read here first: exact whatever a row held)."""
        so = s.staging_objects
        ids = [row["id"] for row in rows]
        if old is None:
            old = staging_counts(self._c, ids)
        # One executemany of a statement compiled once (SQLAlchemy caches it): a statement holding every row's
        # values in CASE lists was compiled afresh for each batch, a third of a commit's CPU.
        columns = ["records_in", "bad_records", *(["error_uri"] if all("error_uri" in row for row in rows) else [])]
        statement = (
            so.update()
            .where(so.c.id == sa.bindparam("row_id"))
            .values(
                processed_time=sa.bindparam("row_now", type_=so.c.processed_time.type),
                **{column: sa.bindparam(f"row_{column}", type_=so.c[column].type) for column in columns},
            )
        )
        execute_many(
            self._c,
            statement,
            [
                {"row_id": row["id"], "row_now": now, **{f"row_{column}": row[column] for column in columns}}
                for row in rows
            ],
        )
        self._totals += [
            (
                old[row["id"]].table_id,
                0,
                row["records_in"] - (old[row["id"]].records_in or 0),
                row["bad_records"] - (old[row["id"]].bad_records or 0),
            )
            for row in rows
            if row["id"] in old
        ]

    @contextmanager
    def batch(
        self, staging_object_ids: Collection[int], keys: Collection[PartitionKey], id_count: int, mark: int
    ) -> Iterator[None]:
        """A batched part of the commit for these staging objects, the (table id, date, values) partitions they add
        to and the small-object ids they need (`mark`: the version mark updated_since is asked about).

        The per-object calls inside read from a few queries made up front and hold their writes, made at
        the end in two statements. An exception undoes the whole part (one savepoint) and propagates."""
        counted = len(self._totals)
        try:
            with self._c.begin_nested():
                self._prepare(staging_object_ids, keys, id_count, mark)
                try:
                    yield
                    self.flush()
                finally:
                    self._batch = None
        except BaseException:
            del self._totals[counted:]
            raise

    def _prepare(
        self, staging_object_ids: Collection[int], keys: Collection[PartitionKey], id_count: int, mark: int
    ) -> None:
        self._batch = read_batch(self._core, self._c, staging_object_ids, keys, self.allocate_ids(id_count), mark)

    def flush(self) -> None:
        """Make the writes a batch holds (two statements) and end it (the totals follow at the commit's end)."""
        batch, self._batch = self._batch, None
        if batch is None or not (batch.small_objects or batch.processed):
            return
        if batch.small_objects:
            try:
                with self._c.begin_nested():
                    execute_many(self._c, s.small_objects.insert(), batch.small_objects)
                    if batch.sources:
                        execute_many(self._c, s.small_object_sources.insert(), batch.sources)
            except IntegrityError:
                raise CatalogError(
                    "a staging object of this commit already has a small object in a partition it adds to"
                ) from None
        for now in sorted({row["now"] for row in batch.processed}):  # one time in practice: the chunk's
            self._set_processed([row for row in batch.processed if row["now"] == now], now, batch.counts)
        if batch.positions:
            record_all_consumed(self._core, self._c, batch.positions)

    def is_processed(self, staging_object_id: int) -> bool:
        batch = self._batch
        if batch is not None and staging_object_id in batch.staging_ids:
            return staging_object_id not in batch.pending
        row = self._c.execute(
            sa.select(s.staging_objects.c.processed_time).where(s.staging_objects.c.id == staging_object_id)
        ).one_or_none()
        return row is None or row.processed_time is not None

    def partition(self, table_id: int, partition_date: dt.date, values: str = "") -> PartitionRow | None:
        batch = self._batch
        key = (table_id, partition_date, values)
        if batch is not None and key in batch.keys:
            return batch.partitions.get(key)
        return self._read_partition(key)

    def _read_partition(self, key: PartitionKey) -> PartitionRow | None:
        table_id, partition_date, values = key
        row = self._c.execute(
            sa.select(s.partitions).where(
                s.partitions.c.table_id == table_id,
                s.partitions.c.partition_date == partition_date,
                s.partitions.c.partition_values == values,
            )
        ).first()
        return partition_row(row) if row else None

    def partition_for(
        self, table_id: int, partition_date: dt.date, merge_interval: int, now: dt.datetime, values: str = ""
    ) -> PartitionRow:
        """The partition row (created with the first object), with a waiting merge job.

        A partition always has a waiting job while it holds unmerged objects: the first object's
        schedules the first merge merge_interval later; one arriving while no job waits (the last
        one finished, or is running) schedules the next merge the same way.
        """
        batch = self._batch
        key = (table_id, partition_date, values)
        found = self.partition(*key)
        if found is None:
            p = s.partitions
            # A day closes whole: a partition below dt first seen after its siblings closed starts closed, so
            # its objects are delayed as theirs are (shown once merged).
            closed = (
                values
                and self._c.execute(
                    sa.select(p.c.id).where(
                        p.c.table_id == table_id,
                        p.c.partition_date == partition_date,
                        p.c.last_live_object_id.is_not(None),
                    )
                ).first()
                is not None
            )
            self._c.execute(
                p.insert().values(
                    table_id=table_id,
                    partition_date=partition_date,
                    partition_values=values,
                    create_time=now,
                    last_live_object_id=0 if closed else None,
                )
            )
            found = self._read_partition(key)
            assert found is not None
            if batch is not None:
                batch.keys.add(key)
                batch.partitions[key] = found
        if batch is not None and found.id in batch.waiting:
            return found
        # advance=False: a job waiting out a failure's backoff keeps its later time.
        self._core.schedule_waiting(self._c, found.id, now + dt.timedelta(seconds=merge_interval), advance=False)
        if batch is not None:
            batch.waiting.add(found.id)
        return found

    def updated_since(self, partition_id: int, mark: int) -> int | None:
        """The version number of an update or upsert (`merge`) published to the partition after `mark`
        (Versions.mark): an append that started before it must not commit (the conflict matrix: update or
        merge vs append, the later fails; docs/design.md, "Updates and concurrent writers")."""
        batch = self._batch
        if batch is not None and mark == batch.mark and any(p.id == partition_id for p in batch.partitions.values()):
            return batch.updated.get(partition_id)
        v = s.partition_versions
        return self._c.execute(
            sa.select(sa.func.min(v.c.version)).where(
                v.c.partition_id == partition_id, v.c.id > mark, v.c.commit_op.in_(REWRITES)
            )
        ).scalar_one()

    def allocate_ids(self, count: int) -> list[int]:
        if count <= 0:
            return []
        batch = self._batch
        if batch is not None and len(batch.ids) >= count:
            return [batch.ids.popleft() for _ in range(count)]
        if self._core.dialect == "postgresql":
            return list(
                self._c.execute(
                    sa.select(sa.func.nextval("small_object_id_seq")).select_from(sa.func.generate_series(1, count))
                ).scalars()
            )
        last: int = self._c.execute(
            s.id_counters.update()
            .where(s.id_counters.c.name == "small_objects")
            .values(last_value=s.id_counters.c.last_value + count)
            .returning(s.id_counters.c.last_value)
        ).scalar_one()
        return list(range(last - count + 1, last + 1))

    def add_small_object(
        self,
        *,
        object_id: int,
        staging_object_id: int,
        partition_id: int,
        delayed: bool,
        content_length: int,
        row_count: int,
        min_event_time: dt.datetime,
        max_event_time: dt.datetime,
        upload_start_time: dt.datetime,
        sources: Sequence[tuple[int, int, int]] = (),
    ) -> None:
        """`sources`: for an object written for several staging objects, each one's (id, first row, rows);
        `staging_object_id` is then the first of them."""
        source_rows = [
            dict(small_object_id=object_id, staging_object_id=source, first_row=first, row_count=count)
            for source, first, count in sources
        ]
        if self._batch is not None:
            self._batch.sources.extend(source_rows)
            self._batch.small_objects.append(
                dict(
                    id=object_id,
                    staging_object_id=staging_object_id,
                    partition_id=partition_id,
                    delayed=delayed,
                    content_length=content_length,
                    row_count=row_count,
                    min_event_time=min_event_time,
                    max_event_time=max_event_time,
                    upload_start_time=upload_start_time,
                )
            )
            return
        try:
            with self._c.begin_nested():
                self._c.execute(
                    s.small_objects.insert().values(
                        id=object_id,
                        staging_object_id=staging_object_id,
                        partition_id=partition_id,
                        delayed=delayed,
                        content_length=content_length,
                        row_count=row_count,
                        min_event_time=min_event_time,
                        max_event_time=max_event_time,
                        upload_start_time=upload_start_time,
                    )
                )
                if source_rows:
                    self._c.execute(s.small_object_sources.insert(), source_rows)
        except IntegrityError:
            raise CatalogError(
                f"staging object {staging_object_id} already has a small object in partition {partition_id}"
            ) from None

    def mark_processed(
        self, staging_object_id: int, *, records_in: int, bad_records: int, error_uri: str | None, now: dt.datetime
    ) -> None:
        batch = self._batch
        if batch is not None and staging_object_id in batch.staging_ids:
            batch.processed.append(
                dict(id=staging_object_id, records_in=records_in, bad_records=bad_records, error_uri=error_uri, now=now)
            )
            batch.pending.discard(staging_object_id)
            return
        self._set_processed(
            [dict(id=staging_object_id, records_in=records_in, bad_records=bad_records, error_uri=error_uri)], now
        )

    def record_consumed(self, **position: object) -> None:
        """A delivery of an appendable staging file consumed it up to a byte offset (positions.record_consumed);
        in a batch, written at its flush with the others (one statement for the files' first positions)."""
        if self._batch is not None:
            self._batch.positions.append(position)
            return
        record_consumed(self._core, self._c, **position)  # type: ignore[arg-type]

    def release_pending(self, delivery_uri: str, moved: bool = False) -> None:
        """A delivery that read nothing of its file (moved away, gone) frees the position waiting for it (moved:
        a copy's rest gives back what its registration took from its original's position)."""
        release_pending(self._c, delivery_uri, moved)

    def register_loaded(
        self,
        uri: str,
        *,
        table_id: int,
        size: int,
        records_in: int,
        bad_records: int,
        error_uri: str | None,
        now: dt.datetime,
    ) -> int | None:
        """Register one load task's output as a processed staging row (its small objects need one);
        None when the URI is already registered: that task was committed before, so nothing is added."""
        if not self._core.insert_once(
            self._c,
            s.staging_objects,
            "uri",
            dict(
                uri=uri,
                table_id=table_id,
                size=size,
                receive_time=now,
                processed_time=now,
                records_in=records_in,
                bad_records=bad_records,
                error_uri=error_uri,
            ),
        ):
            return None
        self._totals.append((table_id, 1, records_in, bad_records))
        return self._c.execute(sa.select(s.staging_objects.c.id).where(s.staging_objects.c.uri == uri)).scalar_one()

    def check_request(self, request: WriteRequest) -> None:
        """RequestApplied if another commit recorded the write's request id (first thing in the commit)."""
        applied_requests.check_not_applied(self._c, request)

    def record_request(self, request: WriteRequest, table_version: int | None, detail: str, now: dt.datetime) -> None:
        """Record the write's request id in this commit (RequestApplied if another commit holds it)."""
        applied_requests.record_applied(self._core, self._c, request, table_version, detail, now)

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """A part of the commit that can fail alone: an exception undoes its writes and propagates.

        In a batch it drops the writes the batch holds from this part (partitions and merge jobs it created
        stay: they are valid without objects); no statement is made."""
        batch = self._batch
        counted = len(self._totals)
        if batch is None:
            try:
                with self._c.begin_nested():
                    yield
            except BaseException:
                del self._totals[counted:]
                raise
            return
        held = len(batch.small_objects), len(batch.processed), len(batch.positions), len(batch.sources)
        try:
            yield
        except BaseException:
            del self._totals[counted:]
            del batch.small_objects[held[0] :]
            del batch.sources[held[3] :]
            del batch.positions[held[2] :]
            for row in batch.processed[held[1] :]:
                batch.pending.add(row["id"])
            del batch.processed[held[1] :]
            raise

    def record_failure(
        self, staging_object_id: int, reason: str, *, max_failures: int, now: dt.datetime
    ) -> tuple[int, str | None]:
        """Count a failed processing attempt of a pending staging object: (its failures so far, and the unknown
        object's reason once they reach max_failures, when it moves to unknown). (0, None) if no longer pending."""
        so = s.staging_objects
        row = self._c.execute(
            so.update()
            .where(so.c.id == staging_object_id, so.c.processed_time.is_(None))
            .values(failure_count=so.c.failure_count + 1, last_failure=reason, last_failure_time=now)
            .returning(so.c.failure_count, so.c.uri, so.c.size, so.c.table_id)
        ).one_or_none()
        if row is None:
            return 0, None
        if row.failure_count < max_failures:
            return row.failure_count, None
        unknown = f"failed {row.failure_count} times: {reason}"
        self.mark_unknown(staging_object_id, row.uri, unknown, size=row.size, table_id=row.table_id, now=now)
        return row.failure_count, unknown

    def mark_unknown(
        self, staging_object_id: int, uri: str, reason: str, *, size: int, table_id: int, now: dt.datetime
    ) -> None:
        self._core.insert_once(
            self._c,
            s.unknown_staging_objects,
            "uri",
            dict(
                uri=uri,
                reason=reason,
                size=size,
                table_id=table_id,
                detect_time=now,
            ),
        )
        self._set_processed([dict(id=staging_object_id, records_in=0, bad_records=0)], now)
        if self._batch is not None:
            self._batch.pending.discard(staging_object_id)

    def close(self, partition: PartitionRow) -> PartitionRow:
        if partition.closed:
            return partition
        largest: int = self._c.execute(
            sa.select(sa.func.coalesce(sa.func.max(s.small_objects.c.id), 0)).where(
                s.small_objects.c.partition_id == partition.id
            )
        ).scalar_one()
        self._c.execute(
            s.partitions.update().where(s.partitions.c.id == partition.id).values(last_live_object_id=largest)
        )
        closed = self.partition(*partition.key)
        assert closed is not None
        return closed

    # --- upserts (`merge` commits; docs/design.md "Keyed tables") ------------------------------------

    def lock_partition(self, partition_id: int) -> None:
        """Hold the partition row's lock to the end of the commit (PostgreSQL; SQLite's write lock already
        does): a compaction publishing this partition waits, then sees the merge version (Versions.commit)."""
        if self._core.dialect == "postgresql":
            self._c.execute(sa.select(s.partitions.c.id).where(s.partitions.c.id == partition_id).with_for_update())

    def rewritten_since(self, partition_id: int, mark: int) -> VersionRef | None:
        """The first update or merge version of the partition above `mark` (Versions.mark)."""
        v = s.partition_versions
        row = self._c.execute(
            sa.select(v.c.version, v.c.commit_op)
            .where(v.c.partition_id == partition_id, v.c.id > mark, v.c.commit_op.in_(REWRITES))
            .order_by(v.c.version)
            .limit(1)
        ).first()
        return VersionRef(version=row.version, commit_op=row.commit_op) if row is not None else None

    def largest_object_id(self, partition_id: int) -> int:
        """The partition's largest small object id (0: none)."""
        so = s.small_objects
        return self._c.execute(
            sa.select(sa.func.coalesce(sa.func.max(so.c.id), 0)).where(so.c.partition_id == partition_id)
        ).scalar_one()

    def merge_base(self, partition_id: int, upper: int) -> MergeBase:
        """Everything the partition holds up to id `upper`, as a `merge` version lists it: the newest
        version's manifest and every small object above what it holds, live or delayed (like an update's base)."""
        v, so = s.partition_versions, s.small_objects
        newest = self._c.execute(
            sa.select(v).where(v.c.partition_id == partition_id).order_by(v.c.version.desc()).limit(1)
        ).first()
        covered = (newest.covered_upper or 0) if newest is not None and newest.manifest_key else 0
        objects = tuple(
            ListedObject(row.id, row.delayed, row.content_length, row.row_count)
            for row in self._c.execute(
                sa.select(so.c.id, so.c.delayed, so.c.content_length, so.c.row_count)
                .where(so.c.partition_id == partition_id, so.c.id > covered, so.c.id <= upper)
                .order_by(so.c.id)
            )
        )
        # The newest version's counts hold what it shows: its manifest and, for a live version, live objects
        # up to its watermark (a delayed object is above every live watermark).
        counted = covered if newest is None or newest.live_watermark is None else max(covered, newest.live_watermark)
        added = [o for o in objects if o.id > counted]
        return MergeBase(
            partition_id=partition_id,
            version=newest.version if newest is not None else None,
            manifest_key=newest.manifest_key if newest is not None else None,
            covered_upper=covered,
            row_count=newest.row_count if newest is not None else 0,
            byte_count=newest.byte_count if newest is not None else 0,
            objects=objects,
            added_rows=sum(o.row_count for o in added),
            added_bytes=sum(o.content_length for o in added),
        )

    def add_merge_versions(
        self, table_id: int, versions: Collection[tuple[MergeBase, int, str]], now: dt.datetime, given: bool = False
    ) -> list[PublishedVersion]:
        """Publish `merge` versions, (base, upper, manifest key) each, as one new table version: each shows its
        manifest, which lists everything the partition holds up to `upper` (manifest_key = file_list_key)."""
        v = s.partition_versions
        if not versions:
            return []
        table_version, stamp = self._core.new_table_versions(self._c, [table_id], now, given=given)[table_id]
        published = [
            PublishedVersion(
                partition_id=base.partition_id,
                version=(base.version or 0) + 1,
                commit_op="merge",
                live_watermark=upper,
                manifest_key=key,
                created_at=stamp,
                row_count=base.row_count + base.added_rows,
                byte_count=base.byte_count + base.added_bytes,
                covered_upper=upper,
                table_version=table_version,
                file_list_key=key,
            )
            for base, upper, key in versions
        ]
        self._c.execute(
            v.insert(),
            [
                dict(
                    partition_id=x.partition_id,
                    table_id=table_id,
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
                for x in published
            ],
        )
        return published
