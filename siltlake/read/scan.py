"""A read of a table version, planned in one place (docs/design.md "One scan, one predicate"): `Table.scan()` makes an
immutable Scan (the version, the days, a filter, the columns, a row limit) and its outputs read it: Arrow (a table or
a stream of batches), pandas, Polars (lazy), DuckDB (a relation or a view), a pyarrow dataset, its files.

The plan is the version's exact files (siltlake.read.version_files): the current state's files of some days are kept by
the Table while the catalog says they are unchanged (ReadPlans, with the DuckDB SELECT made of them), time travel
and filtered reads plan each time, a filter's conditions on dt and on the partition_by columns ruling out partitions
before their manifests are read (siltlake.read.partition_prune).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from siltlake.errors import SiltError, did_you_mean
from siltlake.read.version_files import parse_as_of, parse_dates, version_files, version_number

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.dataset as ds

    from siltlake.catalog import TableRecord
    from siltlake.deployment import Deployment
    from siltlake.read.predicate import Predicate
    from siltlake.read.version_files import ArrowParts, DataFile

__all__ = ["ReadPlans", "Scan"]

_PLANS_HELD = 32  # current-state file lists a Table keeps (by the dates read)
_VIEWS_HELD = 8  # parsed view statements a plan keeps


@dataclasses.dataclass
class CurrentPlan:
    """The current state's files of some dates, planned at a catalog state (VersionReads.current_state), and their
    DuckDB SELECT once made, when it reads only files (nothing registered on one connection)."""

    state: tuple[int, int]
    files: list[DataFile]
    duckdb_select: str | None = None
    # to_duckdb(view=)'s CREATE of that SELECT, parsed once, by view name (at most _VIEWS_HELD)
    duckdb_views: dict[str, Any] = dataclasses.field(default_factory=dict)


class ReadPlans:
    """The current state's plans a Table keeps, by the dates read: asking again costs one statement while nothing
    changed (anything that changes what the current state shows publishes a version or adds a live object)."""

    def __init__(self) -> None:
        self.by_dates: dict[frozenset[dt.date] | None, CurrentPlan] = {}

    def current(self, deployment: Deployment, record: TableRecord, dates: frozenset[dt.date] | None) -> CurrentPlan:
        state = deployment.catalog.version_reads.current_state(record.id, dates)
        planned = self.by_dates.get(dates)
        if planned is None or planned.state != state:
            files = version_files(deployment, record, dates=None if dates is None else set(dates))
            if len(self.by_dates) >= _PLANS_HELD:
                self.by_dates.clear()
            # Planned after reading the state: a change in between only makes the next call plan again.
            planned = self.by_dates[dates] = CurrentPlan(state, files)
        return planned


def registered_name(table_id: int) -> str:
    """A name of its own for what one to_duckdb call registers on a connection (Arrow parts: S3, merged on read,
    a filter's scan)."""
    import uuid

    return f"__silt_table_{table_id}_{uuid.uuid4().hex[:12]}"


@dataclasses.dataclass(frozen=True)
class Scan:
    """A read of one table version: `as_of_version` (the state after that commit), `as_of` (the versions published
    at or before a naive UTC time) or neither (the current state, live objects included, as of each output's
    call); `dates` (None: every partition), `filter` (a Predicate), `columns` (None: all, dt last), `limit` (rows).
    Refinements return new scans; the outputs plan and read."""

    deployment: Deployment = dataclasses.field(repr=False)
    record: TableRecord = dataclasses.field(repr=False)
    plans: ReadPlans = dataclasses.field(repr=False, compare=False)
    filter: Predicate | None = None
    columns: tuple[str, ...] | None = None
    as_of_version: int | None = None
    as_of: dt.datetime | None = None
    dates: frozenset[dt.date] | None = None
    limit: int | None = None

    @classmethod
    def of(
        cls,
        deployment: Deployment,
        record: TableRecord,
        plans: ReadPlans,
        *,
        filter: Any = None,
        columns: Sequence[str] | None = None,
        as_of_version: int | str | None = None,
        as_of: dt.datetime | dt.date | str | None = None,
        dates: Any = None,
        limit: int | None = None,
    ) -> Scan:
        """A scan with its arguments checked: `filter` SQL text or a pyarrow expression, `dates` a date, ISO text or
        several, `as_of` a time (naive means UTC) or ISO text."""
        as_of = parse_as_of(as_of) if as_of is not None else None
        as_of_version = version_number(deployment, record, as_of_version)  # a tag's name: its version
        # A version is read with its own columns and types (docs/design.md "What time travel shows").
        record = deployment.catalog.tables.definition_at(record, as_of_version, as_of)
        parsed = parse_dates(dates)
        scan = cls(
            deployment, record, plans, None, None, as_of_version, as_of, None if parsed is None else frozenset(parsed)
        )
        scan = scan.with_filter(filter) if filter is not None else scan
        scan = scan.select(*columns) if columns is not None else scan
        return scan.with_limit(limit) if limit is not None else scan

    @property
    def name(self) -> str:
        return self.record.qualified_name

    def __repr__(self) -> str:
        shown = [
            f"{field.name}={getattr(self, field.name)!r}"
            for field in dataclasses.fields(self)
            if field.repr and getattr(self, field.name) is not None
        ]
        return f"Scan({self.name}{''.join(', ' + s for s in shown)})"

    # --- refinements -------------------------------------------------------------------------------------------

    def with_filter(self, filter: Any) -> Scan:  # the scan's word
        """This scan with `filter` (SQL text or a pyarrow expression) and the one it had both holding."""
        from siltlake.read.predicate import predicate_of

        added = predicate_of(filter, self.name, self.table_schema, self._stored_names())
        return dataclasses.replace(self, filter=added if self.filter is None else self.filter.and_(added))

    def select(self, *columns: str) -> Scan:
        """This scan reading `columns` only (in that order)."""
        if len(columns) == 1 and not isinstance(columns[0], str):
            columns = tuple(columns[0])  # select(["a", "b"]) as select("a", "b")
        names = self.table_schema.names
        for column in columns:
            if column not in names:
                raise SiltError(
                    f"cannot read column {column!r} of {self.name}: no such column"
                    f"{did_you_mean(column, names)}; its columns are {', '.join(names)}"
                )
        return dataclasses.replace(self, columns=tuple(columns))

    def with_dates(self, dates: Any) -> Scan:
        """This scan of the partitions `dates` (a date, ISO text, several; None: all)."""
        parsed = parse_dates(dates)
        return dataclasses.replace(self, dates=None if parsed is None else frozenset(parsed))

    def with_version(
        self, as_of_version: int | str | None = None, as_of: dt.datetime | dt.date | str | None = None
    ) -> Scan:
        """This scan of another version (neither: the current state)."""
        as_of = parse_as_of(as_of) if as_of is not None else None
        as_of_version = version_number(self.deployment, self.record, as_of_version)
        tables = self.deployment.catalog.tables
        # The record as that version is read (this scan's may be another version's definition).
        record = tables.definition_at(tables.get(self.name), as_of_version, as_of)
        return dataclasses.replace(self, record=record, as_of_version=as_of_version, as_of=as_of)

    def with_limit(self, limit: int | None) -> Scan:
        """This scan reading at most `limit` rows (None: all)."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise SiltError(f"cannot scan {self.name}: limit {limit!r} is not a count of rows (0 or more)")
        return dataclasses.replace(self, limit=limit)

    # --- planning ------------------------------------------------------------------------------------------------

    @property
    def table_schema(self) -> pa.Schema:
        """The table's columns as read (every one nullable), then dt."""
        from siltlake.read.version_files import table_schema

        return table_schema(self.record)

    @property
    def schema(self) -> pa.Schema:
        """The columns this scan gives."""
        import pyarrow as pa

        schema = self.table_schema
        return schema if self.columns is None else pa.schema([schema.field(name) for name in self.columns])

    def _stored_names(self) -> dict[str, str]:
        return {c.name: c.physical_name for c in self.record.definition.columns if c.physical_name != c.name}

    def _current(self) -> CurrentPlan | None:
        """The current state's kept plan, when this scan reads it whole (no pin, no filter)."""
        if self.as_of_version is not None or self.as_of is not None or self.filter is not None:
            return None
        return self.plans.current(self.deployment, self.record, self.dates)

    def _files(self) -> list[DataFile]:
        plan = self._current()
        if plan is not None:
            return list(plan.files)
        return version_files(
            self.deployment,
            self.record,
            as_of_version=self.as_of_version,
            as_of=self.as_of,
            dates=None if self.dates is None else set(self.dates),
            partition_filter=None if self.filter is None else self._partitions_passing,
        )

    def _partitions_passing(self, present: list[tuple[dt.date, str]]) -> set[tuple[dt.date, str]]:
        """The partitions (date, values below dt) this scan's filter does not rule out (siltlake.read.partition_prune:
        pyarrow's simplification by dt and identity values, then the values a SQL filter pins for buckets)."""
        from siltlake.read.partition_prune import arrow_partitions, column_types, column_values, partitions_of_values

        assert self.filter is not None
        fields = self.record.definition.partition_fields
        types = column_types(self.record)
        kept = arrow_partitions(self.filter.arrow, present, self.table_schema, fields, types)
        allowed = column_values(self.filter.conditions, types)
        return partitions_of_values(allowed, sorted(kept), fields, types) if allowed else kept

    def plain_files(self) -> list[DataFile]:
        """The version's data files (without statistics); a keyed table's partitions needing a merge on read have
        no plain file list: SiltError names them."""
        from siltlake.read.version_files import dirty_dates_of

        files = self._files()
        dirty = dirty_dates_of(self.record, files)
        if dirty:
            listed = ", ".join(day.isoformat() for day in sorted(dirty))
            raise SiltError(
                f"{self.name} is keyed (primary key {', '.join(self.record.definition.primary_key)}) and its "
                f"partitions {listed} hold several rows of some keys until merged, so their files alone are not "
                "the table: read it with to_arrow(), to_duckdb() or to_spark(), which merge on read; or, once "
                "the day has closed, run `silt merge --once --now` and `silt publish --once` (or wait for them), "
                "after which each partition is one merged object"
            )
        return files

    def files(self) -> list[str]:
        """The URIs (file:///..., s3://...) of exactly the data files this scan reads."""
        return [f.uri for f in self.plain_files()]

    def data_files(self) -> list[DataFile]:
        """plain_files with each file's size, row count and event time range (siltlake.read.inspect.with_stats)."""
        from siltlake.read.inspect import with_stats

        return with_stats(self.deployment, self.record, self.plain_files())

    def _parts(self) -> ArrowParts:
        from siltlake.read.version_files import stored_parts

        return stored_parts(self.deployment, self.record, self._files(), self.table_schema)

    # --- pyarrow ---------------------------------------------------------------------------------------------------

    def _scanner(self, parts: ArrowParts) -> ds.Scanner:
        """The plain files' scanner: this scan's columns under the table's names, its filter pushed down to the
        files (over the stored names where a column is renamed)."""
        import pyarrow.dataset as ds

        arrow = None if self.filter is None else self.filter.arrow
        if not parts.stored_names:
            return ds.Scanner.from_dataset(
                parts.plain, columns=None if self.columns is None else list(self.columns), filter=arrow
            )
        if self.filter is None or self.filter.stored is not None:
            return ds.Scanner.from_dataset(
                parts.plain,
                columns=parts.renaming(self.columns),
                filter=None if self.filter is None else self.filter.stored,
            )
        # A filter pyarrow cannot say over the stored names applies to the renamed stream.
        renamed = ds.Scanner.from_dataset(parts.plain, columns=parts.renaming()).to_reader()
        return ds.Scanner.from_batches(
            renamed, filter=arrow, columns=None if self.columns is None else list(self.columns)
        )

    def _merged(self, parts: ArrowParts) -> pa.Table | None:
        """The rows merged on read (held in memory already), filtered and projected here."""
        merged = parts.merged
        if merged is None:
            return None
        if self.filter is not None:
            merged = merged.filter(self.filter.arrow)
        return merged if self.columns is None else merged.select(list(self.columns))

    def to_arrow(self) -> pa.Table:
        """The rows as one Arrow table."""
        import pyarrow as pa

        parts = self._parts()
        scanner = self._scanner(parts)
        table = scanner.to_table() if self.limit is None else scanner.head(self.limit)
        merged = self._merged(parts)
        if merged is None:
            return table
        if self.limit is not None:
            merged = merged.slice(0, max(self.limit - table.num_rows, 0))
        return pa.concat_tables([table, merged]) if table.num_rows else merged

    def to_batches(self) -> pa.RecordBatchReader:
        """The rows as a stream of record batches, read as they are consumed (memory bounded by a few batches, and
        the partitions a keyed table merges on read)."""
        import pyarrow as pa

        parts = self._parts()
        scanner, merged = self._scanner(parts), self._merged(parts)
        schema = scanner.projected_schema

        def batches() -> Iterator[pa.RecordBatch]:
            left = self.limit
            sources = [scanner.to_batches()] + ([merged.to_batches()] if merged is not None else [])
            for source in sources:
                for batch in source:
                    if left is not None:
                        if left <= 0:
                            return
                        batch = batch.slice(0, left)
                        left -= batch.num_rows
                    if batch.num_rows:
                        yield batch.cast(schema) if batch.schema != schema else batch

        return pa.RecordBatchReader.from_batches(schema, batches())

    def to_pandas(self) -> pd.DataFrame:
        return self.to_arrow().to_pandas()

    def count(self) -> int:
        """The number of rows (from the files' footers where no filter needs their rows)."""
        parts = self._parts()
        merged = self._merged(parts)
        counted = self._scanner(parts).count_rows() + (merged.num_rows if merged is not None else 0)
        return counted if self.limit is None else min(counted, self.limit)

    def to_pyarrow_dataset(self) -> ds.Dataset:
        """A pyarrow dataset over exactly the version's files, with the table's schema (dt from each file's partition;
        columns added later read as null, widened ones as their new type) and this scan's filter. A keyed table's
        partitions that need a merge on read are merged now, held in memory. Where a column is renamed (objects hold
        it under its old name), a siltlake.read.renamed.RenamedDataset: a pyarrow dataset's reading methods over the
        files in place, as pyarrow cannot rename a dataset's column lazily."""
        if self.columns is not None or self.limit is not None:
            raise SiltError(
                f"{self!r}.to_pyarrow_dataset(): a dataset has every column and row of the version; "
                "select columns or limit rows on it, or read this scan with to_batches()"
            )
        import pyarrow.dataset as ds

        parts = self._parts()
        if parts.stored_names:  # pyarrow cannot rename a dataset's column lazily: the files read in place
            from siltlake.read.renamed import RenamedDataset

            return RenamedDataset(parts, None if self.filter is None else self.filter.arrow)
        dataset = (
            parts.plain
            if parts.merged is None
            else ds.UnionDataset(parts.schema, [parts.plain, ds.InMemoryDataset(parts.merged)])
        )
        return dataset if self.filter is None else dataset.filter(self.filter.arrow)

    # --- Polars ----------------------------------------------------------------------------------------------------

    def to_polars(self) -> Any:
        """A Polars LazyFrame (needs polars installed): the files scanned through pyarrow as Polars asks, with this
        scan's filter, columns and limit."""
        try:
            import polars
        except ImportError:
            raise SiltError(
                "to_polars needs the polars package, which is not installed: pip install polars; "
                "or read with to_arrow()"
            ) from None
        parts = self._parts()
        if not parts.stored_names:
            frame = polars.scan_pyarrow_dataset(self._unnarrowed_dataset(parts))
        elif self.filter is None or self.filter.stored is not None:
            plain = parts.plain if self.filter is None else parts.plain.filter(self.filter.stored)
            frame = polars.scan_pyarrow_dataset(plain).rename(
                {stored: name for name, stored in parts.stored_names.items()}
            )
            merged = dataclasses.replace(self, columns=None)._merged(parts)
            if merged is not None:
                # A Table converts to a DataFrame: from_arrow's type covers an Array's Series too.
                merged_frame = cast("polars.DataFrame", polars.from_arrow(merged))
                frame = polars.concat([frame, merged_frame.lazy()])
        else:  # a filter pyarrow cannot say over the stored names: applied to the renamed files as they are read
            frame = polars.scan_pyarrow_dataset(
                dataclasses.replace(self, columns=None, limit=None).to_pyarrow_dataset()
            )
        if self.columns is not None:
            frame = frame.select(list(self.columns))
        return frame if self.limit is None else frame.head(self.limit)

    def _unnarrowed_dataset(self, parts: ArrowParts) -> ds.Dataset:
        import pyarrow.dataset as ds

        dataset = (
            parts.plain
            if parts.merged is None
            else ds.UnionDataset(parts.schema, [parts.plain, ds.InMemoryDataset(parts.merged)])
        )
        return dataset if self.filter is None else dataset.filter(self.filter.arrow)

    # --- DuckDB ------------------------------------------------------------------------------------------------------

    def to_duckdb(self, connection: Any, view: str | None = None) -> Any:
        """A DuckDB relation over the rows (`connection` a duckdb connection); with `view`, a temporary view of that
        name on the connection (replacing one), and the connection is returned, as PyIceberg's
        `to_duckdb(table_name, connection)`. DuckDB reads the exact file list itself (read_parquet, dt from each
        file's partition) and a filter given as SQL; a filter given as a pyarrow expression is applied by pyarrow's
        scan of the files, which DuckDB reads; a keyed table's partitions that need a merge on read are merged now
        and handed over as Arrow."""
        from siltlake.read.duck import create_view, view_statement

        if self.filter is not None and self.filter.duckdb is None:
            return self._duckdb_through_arrow(connection, view)
        select, kept = self._duckdb_select(connection)
        if self.filter is not None or self.columns is not None or self.limit is not None:
            select, kept = self._narrowed(select), None
        if view is None:
            return connection.sql(select)
        if kept is None:
            create_view(connection, view, select, replace=True)
            return connection
        statement = kept.duckdb_views.get(view)
        if statement is None:
            if len(kept.duckdb_views) >= _VIEWS_HELD:
                kept.duckdb_views.clear()
            statement = kept.duckdb_views[view] = view_statement(connection, view, select, replace=True)
        connection.execute(statement)
        return connection

    def _narrowed(self, select: str, source: str | None = None) -> str:
        """`select` (or the relation `source`) with this scan's filter (DuckDB's form), columns and limit."""
        from siltlake.read.duck import _ident

        columns = "*" if self.columns is None else ", ".join(_ident(name) for name in self.columns)
        where = f" WHERE {self.filter.duckdb}" if self.filter is not None and self.filter.duckdb is not None else ""
        limit = f" LIMIT {self.limit}" if self.limit is not None else ""
        return f"SELECT {columns} FROM {source or f'({select})'}{where}{limit}"

    def _duckdb_through_arrow(self, connection: Any, view: str | None) -> Any:
        """to_duckdb with a pyarrow expression: pyarrow's scan applies it and DuckDB reads that scan."""
        from siltlake.read.duck import _ident, create_view

        parts = self._parts()
        if not parts.stored_names and view is None and self.columns is None and self.limit is None:
            return connection.from_arrow(self._unnarrowed_dataset(parts))
        name = registered_name(self.record.id)
        if parts.stored_names:
            # Registered under the stored names and renamed by DuckDB: the files stay files, read at each query.
            plain = ds_filtered(parts, self.filter)
            connection.register(name, plain)
            selects = [
                f"SELECT {', '.join(f'{_ident(parts.stored(n))} AS {_ident(n)}' for n in parts.schema.names)}"
                f" FROM {_ident(name)}"
            ]
            merged = dataclasses.replace(self, columns=None)._merged(parts)
            if merged is not None:
                connection.register(f"{name}_rows", merged)
                selects.append(f"SELECT * FROM {_ident(name + '_rows')}")
            source = f"({' UNION ALL BY NAME '.join(selects)})"
        else:
            connection.register(name, self._unnarrowed_dataset(parts))
            source = _ident(name)
        select = self._narrowed("", source)
        if view is None:
            return connection.sql(select)
        create_view(connection, view, select, replace=True)
        return connection

    def _duckdb_select(self, connection: Any) -> tuple[str, CurrentPlan | None]:
        """The DuckDB SELECT of the version's files, and the current state's plan that keeps it (None: made for
        this call only): the current state's is made once while it stays current."""
        from siltlake.read.duck import table_select

        plan = self._current()
        if plan is not None:
            if plan.duckdb_select is not None:
                return plan.duckdb_select, plan
            files = plan.files
        else:
            files = self._files()
        made = table_select(connection, registered_name(self.record.id), self.deployment, self.record, files)
        if plan is None or made.registered:
            return made.sql, None
        plan.duckdb_select = made.sql
        return made.sql, plan


def ds_filtered(parts: ArrowParts, predicate: Predicate | None) -> ds.Dataset:
    """The stored-name files with the filter applied, where it can be said over the stored names; otherwise the
    renamed stream filtered (read once)."""
    import pyarrow.dataset as ds

    if predicate is None:
        return parts.plain
    if predicate.stored is not None:
        return parts.plain.filter(predicate.stored)
    renamed = ds.Scanner.from_dataset(parts.plain, columns=parts.renaming()).to_reader()
    stream = ds.Scanner.from_batches(renamed, filter=predicate.arrow).to_reader()
    stored = {name: parts.stored(name) for name in parts.schema.names}
    return ds.InMemoryDataset(
        ds.Scanner.from_batches(stream, columns={stored[n]: ds.field(n) for n in stored}).to_reader()
    )
