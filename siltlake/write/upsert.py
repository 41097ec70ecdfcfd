"""Upserts (`merge` commits) of keyed tables: rows that replace the rows of the same (dt, key).

An upsert is an append of small objects, one per partition date it touches, plus one `merge` version per
touched partition listing everything the partition holds up to the upsert's object, all in one catalog
transaction under the stream's ordering lock. Readers take, of the rows of one key, the last in file order
(siltlake.records.keyed), so the upsert's objects, the newest ids, win: a merge-on-read delta, no rewrite.
Rows whose delete column is true write a delete marker (DELETE_MARKER), which removes their key.

Conflicts (docs/design.md "Upserts"): an append or an update/merge committed to a touched partition while the
upsert ran makes it fail with UpdateConflict; a compaction does not.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from siltlake.catalog import AppliedRequest, PublishedVersion, RequestApplied, TableRecord, UpdateConflict, WriteRequest
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.errors import SiltError, did_you_mean
from siltlake.partspec import row_values
from siltlake.records.coerce import partition_dates
from siltlake.records.keyed import DELETE_MARKER
from siltlake.records.writer import ObjectWriter, WrittenPart
from siltlake.storage.keys import merge_label, small_object_id, temporary_run
from siltlake.storage.manifests import read_manifest, write_manifests

_DATE = "__silt_date"
_POSITION = "__silt_position"


@dataclass(frozen=True)
class UpsertedPartition:
    partition_date: dt.date
    rows: int  # rows written, delete markers included
    deleted_keys: int  # rows whose delete column was true
    version: PublishedVersion | None  # None: a dry run, which publishes nothing
    delayed: bool | None  # its day closed: the object went to delayed/ (the merge version shows it); None: a dry run
    partition_values: str = ""  # below dt, for a table with partition_by


def _place(part: WrittenPart) -> str:
    """A written part's partition as the upsert counts it: its date (ISO), then its values below dt if any."""
    values = part.get("values", "")
    return f"{part['date']}/{values}" if values else part["date"]


@dataclass(frozen=True)
class UpsertReport:
    table: str
    partitions: tuple[UpsertedPartition, ...]
    seconds: float
    request_id: str | None = None
    applied_before: AppliedRequest | None = None  # a retry whose id was committed already: nothing was upserted

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.partitions)

    @property
    def table_version(self) -> int | None:
        """The table version the upsert published (None: a dry run or a retry, which publish nothing)."""
        return next((p.version.table_version for p in self.partitions if p.version is not None), None)

    @property
    def message(self) -> str | None:
        """What a retry was told, None for an upsert that ran."""
        from siltlake.write.requests import already_applied

        return already_applied(self.applied_before) if self.applied_before is not None else None


def _record(deployment: Deployment, name: str) -> TableRecord:
    record = deployment.catalog.tables.get(name)
    if record.definition.kind == "derived":
        raise SiltError(
            f"{record.qualified_name} is a derived table: its rows come from its query; change the "
            "tables it reads and build it again (`silt derived build`)"
        )
    if not record.definition.keyed:
        raise SiltError(
            f"cannot upsert into {record.qualified_name}: it has no primary_key (an upsert replaces "
            "the rows of a key); use `silt delete` or an overwrite for tables without a key"
        )
    return record


def shaped_rows(record: TableRecord, rows: pa.Table, delete_column: str | None, action: str = "upsert") -> pa.Table:
    """The rows as the table's columns (cast to its types; missing nullable ones null), plus DELETE_MARKER
    when deletes were asked for; raises SiltError, naming what is wrong, for rows that cannot be written
    (`action`: the write, as the message names it)."""
    definition = record.definition
    where = f"cannot {action} into {definition.qualified_name}"
    names = {c.name for c in definition.columns}
    extra = sorted(set(rows.column_names) - names - {delete_column})
    missing = [c.name for c in definition.columns if c.name not in rows.column_names and not c.nullable]
    if extra or missing:
        unused = [c.name for c in definition.columns if c.name not in rows.column_names]
        named = ", ".join(name + did_you_mean(name, unused) for name in extra)
        problems = (
            [f"columns not in the table: {named} (its columns are {', '.join(c.name for c in definition.columns)})"]
            if extra
            else []
        ) + ([f"required columns missing: {', '.join(missing)}"] if missing else [])
        raise SiltError(f"{where}: {'; '.join(problems)}; nothing was changed")
    if delete_column is not None:
        if delete_column not in rows.column_names:
            raise SiltError(
                f"{where}: the delete column {delete_column!r} is not among the rows' columns; nothing was changed"
            )
        if not pa.types.is_boolean(rows.schema.field(delete_column).type):
            raise SiltError(
                f"{where}: the delete column {delete_column!r} has type "
                f"{rows.schema.field(delete_column).type}; it must be boolean; nothing was changed"
            )
    columns, fields = [], []
    for field in definition.arrow_schema():
        if field.name not in rows.column_names:
            columns.append(pa.nulls(rows.num_rows, field.type))
        else:
            column = rows.column(field.name)
            try:
                columns.append(column if column.type.equals(field.type) else column.cast(field.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise SiltError(
                    f"{where}: column {field.name!r} ({column.type}) cannot be read as "
                    f"{field.type}: {exc}; nothing was changed"
                ) from None
        fields.append(field)
        if not field.nullable and columns[-1].null_count:
            raise SiltError(
                f"{where}: column {field.name!r} holds {columns[-1].null_count} nulls, and it is "
                f"{'a primary_key column' if field.name in definition.primary_key else 'not nullable'}"
                "; nothing was changed"
            )
    if delete_column is not None:
        columns.append(pc.fill_null(rows.column(delete_column), False))  # null: not a delete
        fields.append(pa.field(DELETE_MARKER, pa.bool_(), nullable=False))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _check_unique(record: TableRecord, shaped: pa.Table, dates: pa.Array) -> None:
    """Refuse two rows of one (dt, key): which of them should win is the caller's to say."""
    keys = list(record.definition.primary_key)
    grouped = (
        shaped.select(keys)
        .append_column(_DATE, dates)
        .append_column(_POSITION, pa.array(range(shaped.num_rows), pa.int64()))
        .group_by([_DATE, *keys], use_threads=False)
        .aggregate([(_POSITION, "count"), (_POSITION, "min")])
    )
    repeated = grouped.filter(pc.greater(grouped.column(f"{_POSITION}_count"), 1))
    if repeated.num_rows:
        first = repeated.sort_by(f"{_POSITION}_min").slice(0, 1).to_pylist()[0]
        key = ", ".join(f"{name}={first[name]!r}" for name in keys)
        raise SiltError(
            f"cannot upsert into {record.qualified_name}: the key {key} appears "
            f"{first[f'{_POSITION}_count']} times on dt={first[_DATE]} (first at row "
            f"{first[f'{_POSITION}_min'] + 1}; {repeated.num_rows} keys repeat); give each key once a "
            "date; nothing was changed"
        )


class PreparedUpsert:
    """An upsert whose objects are written under temporary keys and whose start state is read; commit()
    publishes it (or raises UpdateConflict). Split in two so that tests can interleave other writers."""

    def __init__(
        self,
        deployment: Deployment,
        record: TableRecord,
        run_id: str,
        parts: list[WrittenPart],
        deleted: dict[str, int],
        mark: int,
        start_ids: dict[tuple[dt.date, str], int],
        started: float,
        now: dt.datetime | None,
    ) -> None:
        self.deployment = deployment
        self.record = record
        self.run_id = run_id
        self.parts = parts  # the writer's, one per date: date, tmp_key, rows, bytes, min_time, max_time
        self.deleted = deleted  # date (ISO) -> rows with the delete column true
        self.mark = mark
        self.start_ids = start_ids  # (date, values) -> the partition's largest small object id at the start
        self.started = started
        self.now = now
        self.prepared_at = utcnow()
        self.request: WriteRequest | None = None  # recorded in the commit (catalog.requests)

    def discard(self) -> None:
        """Delete the temporary objects (a committed upsert's were moved already)."""
        self.deployment.lake.delete_prefix(temporary_run(self.deployment.instance_key, self.run_id))

    def commit(self) -> UpsertReport:
        """Publish; a concurrent attempt with the same request id that committed first makes this one a no-op."""
        from siltlake.publish.iceberg.follow import follow
        from siltlake.stream.commit import commit_parts
        from siltlake.write.requests import applied_before

        request_id = self.request.request_id if self.request is not None else None
        try:
            outcome = self._commit(commit_parts)
        except RequestApplied:
            return UpsertReport(
                self.record.qualified_name,
                (),
                time.monotonic() - self.started,
                request_id,
                applied_before(self.deployment, self.request),
            )
        finally:
            self.discard()  # moved, or never to be committed: an upsert that failed is run again whole
        follow(self.deployment, self.record)  # its Iceberg snapshot, at once
        return UpsertReport(self.record.qualified_name, outcome, time.monotonic() - self.started, request_id)

    def _commit(self, commit_parts) -> tuple[UpsertedPartition, ...]:  # stream.commit's
        deployment, record = self.deployment, self.record
        lake, layout = deployment.lake, record.layout(deployment.instance_key)
        name = record.qualified_name
        with deployment.catalog.partitions.stream_commit() as tx:
            now = self.now or utcnow()
            if self.request is not None:
                tx.check_request(self.request)
            for part in self.parts:
                date, values = dt.date.fromisoformat(part["date"]), part.get("values", "")
                partition = tx.partition(record.id, date, values)
                if partition is None:
                    continue  # created by this commit: nothing there to conflict with
                tx.lock_partition(partition.id)
                # An upsert's own object would also read as appended: name the version first.
                rewritten = tx.rewritten_since(partition.id, self.mark)
                if rewritten is not None:
                    raise UpdateConflict(
                        f"{name} dt={date} changed while the upsert ran: version {rewritten.version} "
                        f"({rewritten.commit_op}) was published after the upsert started; run the "
                        "upsert again"
                    )
                appended = tx.largest_object_id(partition.id)
                if appended > self.start_ids.get((date, values), 0):
                    raise UpdateConflict(
                        f"{name} dt={date} changed while the upsert ran: small object {appended} "
                        "was appended after the upsert started; run the upsert again"
                    )
            placed: list[tuple[WrittenPart, str, bool]] = []
            for part in self.parts:
                staging_id = tx.register_loaded(
                    f"upsert:{self.run_id}/{_place(part)}",
                    table_id=record.id,
                    size=part["bytes"],
                    records_in=part["rows"],
                    bad_records=0,
                    error_uri=None,
                    now=now,
                )
                if staging_id is None:
                    raise SiltError(f"this upsert into {name} was committed already")
                moves: list[tuple[str, str]] = []
                (delayed,) = commit_parts(
                    tx, lake, record, layout, staging_id, [part], self.prepared_at.isoformat(), now, moves
                )
                placed.append((part, moves[0][1], delayed))
            versions = []
            for part, key, _ in placed:
                date, values = dt.date.fromisoformat(part["date"]), part.get("values", "")
                partition = tx.partition(record.id, date, values)
                assert partition is not None
                upper = small_object_id(key.rsplit("/", 1)[-1])
                assert upper is not None
                base = tx.merge_base(partition.id, upper)
                # Written inside the transaction: if it aborts, the manifest is garbage no version names (reap).
                listed = read_manifest(lake, base.manifest_key) if base.manifest_key else []
                objects = [(layout.small_object(date, o.id, o.delayed, values), o.content_length) for o in base.objects]
                label = merge_label((base.version or 0) + 1, upper)
                manifest, _ = write_manifests(
                    lake, layout, date, upper, objects, label=label, listed=listed, values=values
                )
                versions.append((base, upper, manifest))
            published = tx.add_merge_versions(record.id, versions, now, given=self.now is not None)
            if self.request is not None:
                tx.record_request(
                    self.request,
                    published[0].table_version,
                    f"upserted "
                    f"{sum(p['rows'] for p in self.parts)} rows into "
                    f"{', '.join(_place(p) for p in self.parts)}",
                    published[0].created_at,
                )
        return tuple(
            UpsertedPartition(
                dt.date.fromisoformat(part["date"]),
                part["rows"],
                self.deleted.get(_place(part), 0),
                version,
                delayed,
                part.get("values", ""),
            )
            for (part, _, delayed), version in zip(placed, published, strict=True)
        )


def prepare_upsert(
    deployment: Deployment, name: str, rows: pa.Table, delete_column: str | None = None, now: dt.datetime | None = None
) -> PreparedUpsert:
    """Check `rows` (the table's columns; nullable ones may be missing; `delete_column`, when given, a boolean
    column whose true rows delete their key), read the start state and write one object per date under
    temporary keys. `now` (naive UTC) stamps the versions, as publish's does."""
    started = time.monotonic()
    record, shaped, dates, deleted = _checked(deployment, name, rows, delete_column)
    definition = record.definition
    catalog = deployment.catalog
    # Read before writing: an append or update committed from here on is one the upsert conflicts with.
    mark = catalog.versions.mark()
    wanted = set(pc.unique(dates).to_pylist())
    start_ids = catalog.partitions.largest_ids(record.id, wanted)
    run_id = f"upsert-{uuid.uuid4().hex}"
    writer = ObjectWriter(
        definition,
        deployment.lake,
        record.layout(deployment.instance_key),
        run_id,
        0,
        deployment.config.stream.spill_bytes,
        schema=shaped.schema,
    )
    try:
        writer.add(shaped)
        parts = writer.finish()
    except BaseException:
        writer.discard()
        raise
    return PreparedUpsert(deployment, record, run_id, parts, deleted, mark, start_ids, started, now)


def _checked(
    deployment: Deployment,
    name: str,
    rows: pa.Table,
    delete_column: str | None,
) -> tuple[TableRecord, pa.Table, pa.Array, dict[str, int]]:
    """The table, the rows shaped as its columns (SiltError for rows it cannot take), each row's partition date
    and the rows with the delete column true per partition (its date, ISO, then "/" and its values if any)."""
    record = _record(deployment, name)
    definition = record.definition
    shaped = shaped_rows(record, rows, delete_column)
    dates = partition_dates(shaped.column(definition.time_column), definition.timezone)
    _check_unique(record, shaped, dates)
    deleted: dict[str, int] = {}
    if delete_column is not None:
        places = pc.cast(dates, pa.string())
        if definition.partition_fields:
            places = pc.binary_join_element_wise(places, row_values(definition.partition_fields, shaped), "/")
        counted = pa.table({"d": places, "m": shaped.column(DELETE_MARKER)}).group_by("d").aggregate([("m", "sum")])
        deleted = {
            d: int(m or 0)
            for d, m in zip(counted.column("d").to_pylist(), counted.column("m_sum").to_pylist(), strict=True)
        }
    return record, shaped, dates, deleted


def plan_upsert(
    deployment: Deployment, name: str, rows: pa.Table, delete_column: str | None = None
) -> list[tuple[dt.date, int, int]]:
    """What an upsert of `rows` would do (a dry run: the rows are checked, nothing is written): (date, rows,
    of them deleting their key) per partition date."""
    _, _, dates, deleted = _checked(deployment, name, rows, delete_column)
    counted = pa.table({"d": dates}).group_by("d").aggregate([("d", "count")])
    by_date: dict[str, int] = {}
    for place, count in deleted.items():  # a partition below dt counts toward its date
        by_date[place.split("/", 1)[0]] = by_date.get(place.split("/", 1)[0], 0) + count
    return sorted(
        (day, int(count), by_date.get(day.isoformat(), 0))
        for day, count in zip(counted.column("d").to_pylist(), counted.column("d_count").to_pylist(), strict=True)
    )


def upsert(
    deployment: Deployment,
    name: str,
    rows: pa.Table,
    delete_column: str | None = None,
    now: dt.datetime | None = None,
    request_id: str | None = None,
    dry_run: bool = False,
) -> UpsertReport:
    """Upsert `rows` into the keyed table `name`: one `merge` version per partition date they fall on; once per
    `request_id` (a retry with an id committed already changes nothing and its report says so). A dry run checks
    the rows and reports, per date, the rows and deleted keys it would write (no version, nothing written)."""
    from siltlake.write.requests import applied_before, write_request

    started = time.monotonic()
    if dry_run:  # the rows' plan even for a request id applied already: what `silt upsert --dry-run` has always shown
        planned = tuple(
            UpsertedPartition(day, count, deleted, None, None)
            for day, count, deleted in plan_upsert(deployment, name, rows, delete_column)
        )
        return UpsertReport(_record(deployment, name).qualified_name, planned, time.monotonic() - started, request_id)
    request = write_request(_record(deployment, name), request_id, "upsert")
    applied = applied_before(deployment, request)
    if applied is not None:
        return UpsertReport(
            deployment.catalog.tables.get(name).qualified_name, (), time.monotonic() - started, request_id, applied
        )
    prepared = prepare_upsert(deployment, name, rows, delete_column, now)
    prepared.request = request
    return prepared.commit()
