"""What readers see of published versions (docs/design.md): reader snapshots, table versions, their range and
times, and the current state a reader's cache depends on."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable, Collection

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from siltlake.catalog import schema as s
from siltlake.catalog.core import CatalogCore, rows_values
from siltlake.catalog.rows import PartitionView, TableBounds, VersionOutOfRange

# Up to this many dates are matched in the reader's queries; more (rare) are kept after reading all.
_DATES_IN_QUERY = 500


def newest_versions(*where: sa.ColumnElement) -> sa.Subquery:
    """Each partition's newest version row (of the versions matching `where`), as a subquery."""
    v = s.partition_versions
    newest = (
        sa.select(v.c.partition_id, sa.func.max(v.c.version).label("version"))
        .where(*where)
        .group_by(v.c.partition_id)
        .subquery()
    )
    return (
        sa.select(v)
        .select_from(
            v.join(newest, sa.and_(newest.c.partition_id == v.c.partition_id, newest.c.version == v.c.version))
        )
        .subquery()
    )


class VersionReads:
    """Reached as catalog.version_reads."""

    def __init__(self, core: CatalogCore) -> None:
        self._core = core

    def table_range(self, c: Connection, table_id: int) -> tuple[int, int, dt.datetime | None]:
        """(oldest readable, newest) table version and the oldest one's time (None: no versions yet).

        A table version is readable while every partition still has the versions it showed then: the
        oldest readable one is the newest of the first retained versions of partitions whose earlier
        versions were reaped (a partition that never had earlier versions showed nothing before)."""
        v, tc = s.partition_versions, s.table_changes
        newest = _newest(c, table_id)
        # Kept on the table row by reap as it deletes versions (Reaping.delete_version_rows): not a scan of every
        # partition's versions at each read of an older version.
        oldest = max(
            1, c.execute(sa.select(s.tables.c.readable_from).where(s.tables.c.id == table_id)).scalar_one_or_none() or 1
        )
        if not newest:
            return oldest, newest, None
        # A version is a publish (partition versions) or a definition change (a table change): the earlier stamp.
        times: list[dt.datetime | None] = [
            c.execute(
                sa.select(sa.func.min(v.c.created_at)).where(v.c.table_id == table_id, v.c.table_version == oldest)
            ).scalar_one_or_none(),
            c.execute(
                sa.select(sa.func.min(tc.c.created_at)).where(tc.c.table_id == table_id, tc.c.table_version == oldest)
            ).scalar_one_or_none(),
        ]
        found = [t for t in times if t is not None]
        return oldest, newest, min(found) if found else None

    def reader_snapshot(
        self,
        table_id: int,
        *,
        as_of_version: int | None = None,
        as_of: dt.datetime | None = None,
        table_name: str = "the table",
        dates: Collection[dt.date] | None = None,
        date_filter: Callable[[list[dt.date]], Collection[dt.date]] | None = None,
        partition_filter: Callable[[list[tuple[dt.date, str]]], Collection[tuple[dt.date, str]]] | None = None,
    ) -> list[PartitionView]:
        """Every partition's visible state, read in one snapshot with a constant number of queries; only
        that of the partitions dated `dates`, and of those `date_filter` keeps of the table's partition
        dates (given them all, read in the same snapshot, it returns the dates to read) and `partition_filter`
        keeps of its partitions (given them all as (date, values below dt), it returns those to read).

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
            kept_partitions: set[tuple[dt.date, str]] | None = None
            if date_filter is not None or partition_filter is not None:
                present = [
                    (row.partition_date, row.partition_values)
                    for row in c.execute(
                        sa.select(p.c.partition_date, p.c.partition_values).where(p.c.table_id == table_id)
                    )
                ]
                kept = {date for date, _ in present}
                if date_filter is not None:
                    kept &= set(date_filter(sorted(kept)))
                if partition_filter is not None:
                    kept_partitions = set(partition_filter([key for key in present if key[0] in kept]))
                    kept &= {date for date, _ in kept_partitions}
                dates = kept if dates is None else kept & set(dates)
            if dates is not None:
                dates = set(dates)
                # In the queries, so that reading a day of a long table touches that day's rows only.
                values["dates"] = sorted(dates) if len(dates) <= _DATES_IN_QUERY else None
            watermark_query, rows_query = _reader_queries(
                as_of_version is not None, as_of is not None, values.get("dates") is not None
            )
            watermark: int = c.execute(watermark_query).scalar_one()
            rows = c.execute(rows_query, values).all()
            if dates is not None:
                rows = [row for row in rows if row.partition_date in dates]
            if kept_partitions is not None:
                rows = [row for row in rows if (row.partition_date, row.partition_values) in kept_partitions]
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
                for pid, oid in rows_values(
                    c.execute(
                        _live_objects_query(), {"partition_ids": list(live), "lowest": lowest, "highest": highest}
                    )
                ):
                    lower, upper = live[pid]
                    if lower < oid <= upper:
                        objects.setdefault(pid, []).append(oid)
        views = []
        for row in rows:
            if pinned and row.version is None:
                continue
            if pinned and row.file_list_key is not None:
                views.append(
                    PartitionView(
                        row.partition_date,
                        row.version,
                        manifest_key=row.file_list_key,
                        table_version=row.table_version,
                        partition_values=row.partition_values,
                    )
                )
                continue
            if row.manifest_key is None and row.id not in live:
                continue  # switched without a version
            views.append(
                PartitionView(
                    row.partition_date,
                    row.version,
                    live_object_ids=tuple(objects.get(row.id, ())),
                    manifest_key=row.manifest_key,
                    table_version=row.table_version,
                    partition_values=row.partition_values,
                )
            )
        return views

    def _check_in_range(
        self, c: Connection, table_id: int, table_name: str, as_of_version: int | None, as_of: dt.datetime | None
    ) -> None:
        oldest, newest, oldest_time = self.table_range(c, table_id)
        if as_of_version is not None:
            if newest == 0:
                raise VersionOutOfRange(
                    f"{table_name} has no published versions yet, so it has no version "
                    f"{as_of_version}; run `silt publish --once`, or read its current state"
                )
            if not oldest <= as_of_version <= newest and not _tagged(c, table_id, as_of_version, newest):
                raise VersionOutOfRange(
                    f"{table_name} has no version {as_of_version}: its readable versions are {oldest} to {newest}"
                    + (f" (versions before {oldest} were reaped)" if oldest > 1 else "")
                )
        if as_of is None:
            return
        # Before the first version there is no table version to read: refused as as_of_version=0 is, not an
        # empty read that looks like a table without rows.
        if newest == 0:
            raise VersionOutOfRange(
                f"{table_name} cannot be read as of {as_of.isoformat(sep=' ')} UTC: it has no "
                "published versions yet; run `silt publish --once`, or read its current state"
            )
        if oldest_time is not None and as_of < oldest_time:
            if oldest > 1:
                raise VersionOutOfRange(
                    f"{table_name} cannot be read as of {as_of.isoformat(sep=' ')} UTC: versions before {oldest} "
                    f"(published {oldest_time.isoformat(sep=' ')} UTC) were reaped; read as of a later time"
                )
            raise VersionOutOfRange(
                f"{table_name} cannot be read as of {as_of.isoformat(sep=' ')} UTC: its first version (1) was "
                f"published {oldest_time.isoformat(sep=' ')} UTC, and it had no version before; read as of a later "
                "time"
            )

    def version_at(self, table_id: int, as_of: dt.datetime) -> int | None:
        """The newest table version published at or before `as_of` (data or definition; None: none was)."""
        p, v, tc = s.partitions, s.partition_versions, s.table_changes
        with self._core.snapshot() as c:
            data: int | None = c.execute(
                sa.select(sa.func.max(v.c.table_version)).where(
                    v.c.partition_id.in_(sa.select(p.c.id).where(p.c.table_id == table_id)), v.c.created_at <= as_of
                )
            ).scalar_one_or_none()
            definition: int | None = c.execute(
                sa.select(sa.func.max(tc.c.table_version)).where(tc.c.table_id == table_id, tc.c.created_at <= as_of)
            ).scalar_one_or_none()
        found = [n for n in (data, definition) if n is not None]
        return max(found) if found else None

    def version_times(self, table_id: int, after: int, upto: int) -> dict[int, dt.datetime]:
        """When each table version in (after, upto] became readable (naive UTC): the first of its partition versions
        and table changes, the instant from which version_at finds it."""
        p, v, tc = s.partitions, s.partition_versions, s.table_changes
        data = (
            sa.select(v.c.table_version.label("version"), sa.func.min(v.c.created_at).label("at"))
            .where(
                v.c.partition_id.in_(sa.select(p.c.id).where(p.c.table_id == table_id)),
                v.c.table_version > after,
                v.c.table_version <= upto,
            )
            .group_by(v.c.table_version)
        )
        definition = (
            sa.select(tc.c.table_version.label("version"), sa.func.min(tc.c.created_at).label("at"))
            .where(tc.c.table_id == table_id, tc.c.table_version > after, tc.c.table_version <= upto)
            .group_by(tc.c.table_version)
        )
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


def _tagged(c: Connection, table_id: int, version: int, newest: int) -> bool:
    """Whether a tag names the version: reap kept what it shows, readable_from notwithstanding (catalog.tags)."""
    t = s.version_tags
    return (
        1 <= version <= newest
        and c.execute(sa.select(t.c.id).where(t.c.table_id == table_id, t.c.table_version == version).limit(1)).first()
        is not None
    )


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
    newest = newest_versions(v.c.partition_id.in_(sa.select(p.c.id).where(*of_table)), *pins)
    rows = (
        sa.select(
            p.c.id,
            p.c.partition_date,
            p.c.partition_values,
            p.c.switched,
            newest.c.version,
            newest.c.live_watermark,
            newest.c.manifest_key,
            newest.c.covered_upper,
            newest.c.file_list_key,
            newest.c.table_version,
        )
        .select_from(p.outerjoin(newest, newest.c.partition_id == p.c.id))
        .where(*of_table)
        .order_by(p.c.partition_date, p.c.partition_values)
    )
    return sa.select(sa.func.coalesce(sa.func.max(so.c.id), 0)), rows


@functools.cache
def _state_query(date_count: int | None) -> sa.Select:
    """current_state's statement, over all partitions or those of `date_count` dates (date_0, date_1, ...; each
    its own parameter, as CatalogCore.read_row runs it)."""
    p, so, t = s.partitions, s.small_objects, s.tables
    live = [p.c.table_id == sa.bindparam("table_id"), p.c.switched.is_(False)]
    if date_count is not None:
        live.append(p.c.partition_date.in_([sa.bindparam(f"date_{i}", type_=sa.Date) for i in range(date_count)]))
    largest = sa.select(sa.func.coalesce(sa.func.max(so.c.id), 0)).where(
        so.c.partition_id.in_(sa.select(p.c.id).where(*live))
    )
    version = sa.select(sa.func.coalesce(t.c.version, 0)).where(t.c.id == sa.bindparam("table_id"))
    return sa.select(version.scalar_subquery(), largest.scalar_subquery())


@functools.cache
def _live_objects_query() -> sa.Select:
    """The live (not delayed) small objects of partitions `partition_ids` with ids in (lowest, highest]."""
    so = s.small_objects
    return (
        sa.select(so.c.partition_id, so.c.id)
        .where(
            so.c.partition_id.in_(sa.bindparam("partition_ids", expanding=True)),
            so.c.delayed.is_(False),
            so.c.id > sa.bindparam("lowest"),
            so.c.id <= sa.bindparam("highest"),
        )
        .order_by(so.c.id)
    )
