"""Iceberg snapshots whose data manifests each hold one year of `dt` (docs/design.md, "Iceberg manifests by year").

PyIceberg writes a commit's added files into one manifest and keeps every manifest of the snapshot before. A table
synced whole in one commit (its first snapshot, or a catch-up after reaped versions) then has one manifest holding
every date, and each later overwrite of one date (a merge) reads and rewrites that whole manifest: a merged publish
cost what the table holds. Here a commit's own manifests are split by year, and a year's manifests are merged into
one once a commit leaves more than `YEAR_MANIFESTS` of them, so an overwrite reads and rewrites one year's files
and the manifest list grows with the table's years, not its versions. A commit's manifest of the files it deletes
is left whole and dropped by the next commit (PyIceberg's overwrite would carry it forward).

The producers below are PyIceberg's own (pinned to 0.12 in pyproject.toml) with one step added: the hook PyIceberg
gives a producer to post-process its manifests, which its merge-append uses the same way.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import threading
import time
from collections import defaultdict
from collections.abc import Collection, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

EPOCH = dt.date(1970, 1, 1)  # Iceberg stores a date as days since it

if TYPE_CHECKING:
    from pyiceberg.table import Table as IcebergTable

# A year's manifests are merged into one when a commit would leave more than this many: a live table's minute-by-
# minute appends add one manifest each, and the year's merge reads that year's entries once every few commits.
YEAR_MANIFESTS = 8


class DayBounds(NamedTuple):
    """The first and last `dt` a manifest may hold, as days since 1970-01-01."""

    first: int
    last: int


def day_bounds(manifest: Any) -> DayBounds | None:  # a pyiceberg ManifestFile
    """The first and last `dt` a manifest may hold, from its manifest list entry; None when it does not say."""
    summary = (manifest.partitions or [None])[0]
    if summary is None or summary.lower_bound is None or summary.upper_bound is None:
        return None
    # Iceberg's single-value form of a date: days as a 4-byte little-endian int (read here without PyIceberg's
    # generic conversion, which cost more than the rest of a commit's look at a few hundred manifests).
    return DayBounds(
        first=int.from_bytes(summary.lower_bound, "little", signed=True),
        last=int.from_bytes(summary.upper_bound, "little", signed=True),
    )


def _year(day: int | None) -> int | None:
    return None if day is None else (EPOCH + dt.timedelta(days=day)).year


def partition_date(data_file: Any) -> dt.date | None:  # a pyiceberg DataFile
    """A data file's `dt` (PyIceberg gives a date, or days since 1970-01-01, by how the file was read)."""
    partition = data_file.partition
    value = partition[0] if partition is not None and len(partition) else None
    return value if value is None or isinstance(value, dt.date) else EPOCH + dt.timedelta(days=value)


def _entry_year(entry: Any) -> int | None:  # a pyiceberg ManifestEntry
    date = partition_date(entry.data_file)
    return None if date is None else date.year


def _years(manifest: Any) -> tuple[int | None, int | None]:  # a pyiceberg ManifestFile
    bounds = day_bounds(manifest)
    return (None, None) if bounds is None else (_year(bounds.first), _year(bounds.last))


def by_year(producer: Any, manifests: list[Any]) -> list[Any]:  # a pyiceberg snapshot producer
    """The manifests a commit's snapshot lists, its data manifests regrouped as the module says."""
    from pyiceberg.manifest import ManifestContent, ManifestEntryStatus

    this = producer.snapshot_id
    others = [m for m in manifests if m.content != ManifestContent.DATA]
    data = [
        m
        for m in manifests
        if m.content == ManifestContent.DATA
        and (m.added_snapshot_id == this or m.has_added_files() or m.has_existing_files())
    ]
    spans = {m.manifest_path: _years(m) for m in data}
    # This commit's manifests of live files are split by year; one of only the files it deletes is not (the
    # next commit drops it).
    rewrite = {
        m.manifest_path
        for m in data
        if m.added_snapshot_id == this
        and (m.has_added_files() or m.has_existing_files())
        and (spans[m.manifest_path][0] != spans[m.manifest_path][1] or spans[m.manifest_path][0] is None)
    }
    touched = {spans[m.manifest_path][0] for m in data if m.added_snapshot_id == this} - {None}
    in_year: dict[tuple[int, int], list[Any]] = defaultdict(list)
    for m in data:
        first, last = spans[m.manifest_path]
        if first is not None and first == last and m.manifest_path not in rewrite:
            in_year[(m.partition_spec_id, first)].append(m)
    for (_, year), group in in_year.items():
        if year in touched and len(group) > YEAR_MANIFESTS:
            rewrite.update(m.manifest_path for m in group)
    if not rewrite:
        return manifests
    entries: dict[tuple[int, int | None], list[tuple[str, Any]]] = defaultdict(list)
    for m in data:
        if m.manifest_path not in rewrite:
            continue
        for entry in producer.fetch_manifest_entry(manifest=m, discard_deleted=False):
            if entry.snapshot_id == this and entry.status == ManifestEntryStatus.ADDED:
                kind = "add"
            elif entry.snapshot_id == this and entry.status == ManifestEntryStatus.DELETED:
                kind = "delete"
            elif entry.status != ManifestEntryStatus.DELETED:
                kind = "existing"
            else:
                continue  # deleted by an earlier snapshot: that snapshot's manifests keep it
            entries[(m.partition_spec_id, _entry_year(entry))].append((kind, entry))
    written = []
    for (spec_id, _), group in sorted(entries.items(), key=lambda item: (item[0][0], item[0][1] or -1)):
        with producer.new_manifest_writer(spec=producer.spec(spec_id)) as writer:
            for kind, entry in group:
                getattr(writer, kind)(entry)
        written.append(writer.to_manifest_file())
    return [*written, *(m for m in data if m.manifest_path not in rewrite), *others]


def commit_files(
    table: IcebergTable,
    removed: Sequence[Any],
    added: Sequence[Any],
    summary: dict[str, str],
    retention: float | None = None,
    schema: Any = None,
    at: dt.datetime | None = None,
    deletes: Any = None,
    keep: Collection[int] = (),
) -> int:
    """One snapshot removing and adding these data files, its manifests by year; with `retention` (seconds), the
    snapshots committed longer ago than that, the new one's parent included, are expired in the same commit (one
    metadata file written, never holding more than the retention's snapshots), but for those `keep` names (tagged
    versions') and those a tag or branch heads. With `schema` (a pyiceberg Schema,
    its field ids as given), the snapshot is committed with it, made the current schema in the same commit (see
    use_schema). The snapshot's time is `at` (naive UTC, the table version's; None: now) as far as snapshot_millis
    allows. `deletes` (a deletes.DeleteChange) adds and removes delete files in the same snapshot.
    Returns how many were expired."""
    from pyiceberg.table.refs import MAIN_BRANCH
    from pyiceberg.table.snapshots import Operation

    append, overwrite, transaction_class, expire_known = _producers()
    expired = []
    if retention is not None:
        cutoff = int((time.time() - retention) * 1000)
        base = table.metadata
        # Other branches' and tags' heads stay (an engine's user may have made them); main moves to the new one.
        kept = {ref.snapshot_id for name, ref in base.refs.items() if name != MAIN_BRANCH} | set(keep)
        expired = [s.snapshot_id for s in base.snapshots if s.timestamp_ms < cutoff and s.snapshot_id not in kept]
    with _expiry_race_is_a_conflict(table, expired), transaction_class(table) as transaction:
        if schema is not None:
            use_schema(transaction, schema)
        # Iceberg's operations: rows only added is an append; deletes changed is an overwrite, as files removed.
        producer_class, operation = (
            (overwrite, Operation.OVERWRITE) if removed or deletes else (append, Operation.APPEND)
        )
        with producer_class(
            operation=operation,
            transaction=transaction,
            io=table.io,
            snapshot_properties={**summary, **(deletes.summary() if deletes else {})},
        ) as producer:
            producer.timestamp_ms = snapshot_millis(transaction.table_metadata, at)
            producer.deletes = deletes or None
            for data_file in removed:
                producer.delete_data_file(data_file)
            for data_file in added:
                producer.append_data_file(data_file)
        if expired:
            expire_known(transaction, expired).commit()
    return len(expired)


# Java's Iceberg (Spark, Trino, Flink) refuses metadata whose last-updated time is more than a minute before the
# metadata it replaces: a snapshot may be stamped at most this long before the table's last change.
BACKDATE_LIMIT_MS = 50_000


def snapshot_millis(metadata: Any, at: dt.datetime | None) -> int:  # a pyiceberg TableMetadata
    """The time a snapshot is stamped with: its table version's time (naive UTC) rounded up to the millisecond,
    so that an engine's TIMESTAMP AS OF an instant finds the version siltlake finds then; later than every
    snapshot before it (a by-time lookup needs them ordered) and at most BACKDATE_LIMIT_MS before the table's last
    metadata change (a schema change or a reap's commit made since the version; docs/design.md, "Iceberg target")."""
    if at is None:
        wanted = int(time.time() * 1000)
    else:
        micros = (at - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
        wanted = -(-micros // 1000)
    previous = max((entry.timestamp_ms for entry in metadata.snapshot_log), default=0)
    return max(wanted, previous + 1, metadata.last_updated_ms - BACKDATE_LIMIT_MS)


def use_schema(transaction: Any, schema: Any) -> int:  # PyIceberg's Transaction and Schema
    """Make `schema` (its field ids as given, not Iceberg's fresh ones) the transaction's current schema: a schema
    the table has with the same fields, in any order (by its id: an added column stays where Iceberg put it, after
    dt), else added under the next id. A snapshot a commit makes takes the current schema's id: a siltlake table
    version is committed with the definition it had (an engine reads a snapshot with its own schema). Returns the
    schema's id."""
    from pyiceberg.schema import Schema
    from pyiceberg.table.update import AddSchemaUpdate, AssertCurrentSchemaId, SetCurrentSchemaUpdate

    metadata = transaction.table_metadata
    same = next((s for s in metadata.schemas if same_fields(s, schema)), None)
    if same is not None and same.schema_id == metadata.current_schema_id:
        return same.schema_id
    updates: tuple[Any, ...] = ()
    if same is None:
        same = Schema(
            *schema.fields,
            schema_id=max(s.schema_id for s in metadata.schemas) + 1,
            identifier_field_ids=schema.identifier_field_ids,
        )
        updates = (AddSchemaUpdate(schema=same),)
    # As UpdateSchema does. pyiceberg's models take field names as well as their aliases (populate_by_name); without
    # pydantic's mypy plugin only the aliases ("schema-id") are seen.
    transaction._apply(
        (*updates, SetCurrentSchemaUpdate(schema_id=same.schema_id)),  # type: ignore[call-arg]
        (AssertCurrentSchemaId(current_schema_id=metadata.current_schema_id),),  # type: ignore[call-arg]
    )
    return same.schema_id


def same_fields(one: Any, other: Any) -> bool:  # pyiceberg Schemas
    """Whether two schemas have the same fields (ids, names, types), in any order."""
    return {f.field_id: f for f in one.fields} == {f.field_id: f for f in other.fields} and set(
        one.identifier_field_ids
    ) == set(other.identifier_field_ids)


def expire_snapshots(table: IcebergTable, snapshot_ids: Sequence[int]) -> None:
    """Expire these snapshots in one commit, and any tag or branch that heads one of them (reap: their files are
    being deleted; PyIceberg's own expiry refuses a tagged snapshot)."""
    _, _, transaction_class, expire_known = _producers()
    with _expiry_race_is_a_conflict(table, snapshot_ids), transaction_class(table) as transaction:
        expire_known(transaction, snapshot_ids).commit()


@contextlib.contextmanager
def _expiry_race_is_a_conflict(table: IcebergTable, snapshot_ids: Sequence[int]) -> Iterator[None]:
    """A commit's expiry of a snapshot another commit (a reap, a publish run's own expiry) removed after this one
    read the table is a lost race, raised as PyIceberg's CommitFailedException like any other: the catalog applies
    the expiry to the table as it is at commit time, where PyIceberg says "Snapshot ... does not exist"."""
    from pyiceberg.exceptions import CommitFailedException

    try:
        yield
    except ValueError as exc:
        if not snapshot_ids:
            raise
        table.refresh()
        if all(table.metadata.snapshot_by_id(snapshot_id) is not None for snapshot_id in snapshot_ids):
            raise
        raise CommitFailedException(
            f"Iceberg table {'.'.join(table.name())}: a snapshot this commit expires was "
            "expired by another commit since it read the table"
        ) from exc


@functools.cache
def _producers() -> tuple[type, type, type, type]:
    """PyIceberg's fast append and overwrite, their manifests by year, the transaction they run in and the expiry of
    snapshots chosen from its base (made on first use: PyIceberg is imported only by a deployment that publishes to
    Iceberg)."""
    from pyiceberg.table import Transaction
    from pyiceberg.table.update import AddSnapshotUpdate
    from pyiceberg.table.update.snapshot import ExpireSnapshots, _FastAppendFiles, _OverwriteFiles

    class OneCopyTransaction(Transaction):
        """PyIceberg's transaction, its metadata with the updates applied made once per state of the updates:
        PyIceberg's copies it whole on every read (about 14 a commit), a cost that grows with the snapshots."""

        _applied: tuple | None = None

        @property
        def table_metadata(self) -> Any:  # a pyiceberg TableMetadata
            applied = self._applied
            if applied is None or applied[0] is not self._table.metadata or applied[1] is not self._updates:
                applied = self._applied = (self._table.metadata, self._updates, super().table_metadata)
            return applied[2]

        def _rebuild_snapshot_updates(self) -> None:
            # PyIceberg retries a commit another one beat by replaying its producers on the new table: the same
            # files appended again on top of the winner's snapshot (two publish runs: every row twice). A commit's
            # files are a diff against the snapshot it read, so the caller re-reads the table and decides again.
            from pyiceberg.exceptions import CommitFailedException

            raise CommitFailedException(
                f"Iceberg table {'.'.join(self._table.name())} was changed by another commit after this one read it"
            )

    class Stamped:
        """A producer whose snapshot carries the time it is given (commit_files: its table version's), not the
        moment PyIceberg builds it."""

        timestamp_ms: int | None = None
        deletes: Any = None  # a deletes.DeleteChange: writes the snapshot's delete manifests

        def _with_deletes(self, manifests: list[Any]) -> list[Any]:
            return manifests if self.deletes is None else self.deletes.manifests(self, manifests)

        def _commit(self) -> Any:  # PyIceberg's updates and requirements
            updates, requirements = super()._commit()  # type: ignore[misc]
            if self.timestamp_ms is None:
                return updates, requirements
            at = {"timestamp_ms": self.timestamp_ms}
            stamped = tuple(
                AddSnapshotUpdate(snapshot=u.snapshot.model_copy(update=at)) if isinstance(u, AddSnapshotUpdate) else u
                for u in updates
            )
            return stamped, requirements

    class YearlyAppend(Stamped, _FastAppendFiles):
        def _process_manifests(self, manifests: list[Any]) -> list[Any]:
            return self._with_deletes(by_year(self, super()._process_manifests(manifests)))

    class YearlyOverwrite(Stamped, _OverwriteFiles):
        def _process_manifests(self, manifests: list[Any]) -> list[Any]:
            return self._with_deletes(by_year(self, super()._process_manifests(manifests)))

        def _build_manifest_evaluator(self, spec_id: int) -> Any:  # a callable
            # PyIceberg 0.12's manifest evaluator keeps the manifest it is judging in its own state, and the
            # overwrite's search for the removed files runs it on a thread pool: with many manifests one judged
            # another's bounds, skipped a manifest holding a removed file and failed the commit ("Missing required
            # files to delete"). One judgement at a time.
            evaluate = super()._build_manifest_evaluator(spec_id)
            lock = threading.Lock()

            def one_at_a_time(manifest: Any) -> bool:  # a pyiceberg ManifestFile
                with lock:
                    return evaluate(manifest)

            return one_at_a_time

    class ExpireKnown(ExpireSnapshots):
        """PyIceberg's expiry of snapshots the caller found in the table, without its checks: they read the
        transaction's metadata once more (one more copy of all of it), and refuse a snapshot a tag or branch heads,
        where applying the update removes that ref with it (commit_files keeps such snapshots out; reap expires
        them with their files)."""

        def __init__(self, transaction: Transaction, snapshot_ids: Sequence[int]) -> None:
            super().__init__(transaction)
            self._snapshot_ids_to_expire = set(snapshot_ids)

        def _get_protected_snapshot_ids(self) -> set[int]:
            return set()

    return YearlyAppend, YearlyOverwrite, OneCopyTransaction, ExpireKnown
