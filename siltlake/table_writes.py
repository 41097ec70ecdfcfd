"""The writes of a Table's rows: append, overwrite, delete, update, upsert and restore, each one table version
(siltlake.write holds their work; Table inherits these so the API stays one object)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from siltlake.errors import SiltError
from siltlake.read.version_files import parse_as_of, parse_dates

if TYPE_CHECKING:
    from pyarrow.compute import Expression

    from siltlake.catalog import TableRecord
    from siltlake.deployment import Deployment
    from siltlake.write.append import AppendReport
    from siltlake.write.requests import UpdatesReport
    from siltlake.write.upsert import UpsertReport


class _OfDeployment(Protocol):  # the Lake, named by what the writes need of it (the Lake imports this module)
    @property
    def deployment(self) -> Deployment: ...


class TableWrites:
    """Row writes of a Table; `lake`, `record` and `name` are the Table's."""

    lake: _OfDeployment
    record: TableRecord

    if TYPE_CHECKING:

        @property
        def name(self) -> str: ...

    def delete(
        self,
        where: str | Expression,
        dates: Any = None,
        now: dt.datetime | None = None,
        request_id: str | None = None,
        dry_run: bool = False,
        progress: Callable[[int, dt.date], None] | None = None,
    ) -> UpdatesReport:
        """Delete the rows matching `where` (Spark SQL text, or a pyarrow expression as scan takes) as one table
        version, all of its partitions or none; runs on the deployment's Spark. The partitions are
        write_partitions(where, dates)'s: without `dates`, every partition where `where` may match. Once per
        `request_id`: a retry with an id applied already changes nothing (the report's applied_before says what the
        first did). The report is a sequence of the partitions'; `progress(done, date)` is told of each partition as
        it is rewritten."""
        from siltlake.write.row_updates import delete_rows_where

        wanted, tested = self.write_partitions(where, dates, "delete")
        assert tested is not None
        return delete_rows_where(
            self.lake.deployment,
            self.name,
            wanted,
            tested,
            request_id=request_id,
            now=now,
            dry_run=dry_run,
            progress=progress,
        )

    def write_partitions(
        self, where: str | Expression | None, dates: Any = None, operation: str = "delete"
    ) -> tuple[list[dt.date], str | None]:
        """The partitions a delete or update rewrites, and the predicate their rows are tested with (the one resolver
        of Table.delete/update and `silt delete`/`silt update`). `dates` (a date, ISO text, several, or "all"): those,
        `where` as given (a missing date is refused by the write, before anything is rewritten; `where` must not
        name dt). None: the days `where`'s conditions on dt joined by AND allow (dt = / <> / < / <= / > / >= /
        BETWEEN / IN quoted dates), those conditions left out of the predicate; every day if it has none."""
        if where is not None and not isinstance(where, str):  # a pyarrow expression, as reads take
            from siltlake.read.expression_sql import expression_sql

            where = expression_sql(where, f"{self.name}.{operation}")
        present = [p.partition_date for p in self.lake.deployment.catalog.partitions.list(self.record.id)]
        if dates is None:
            if where is None:
                return sorted(present), None
            from siltlake.read.where_days import days_of_where

            return days_of_where(where, present, f"{self.name}.{operation}", operation)
        if isinstance(dates, str) and dates == "all":
            return sorted(present), where
        wanted = sorted(parse_dates(dates) or ())
        if not wanted:
            raise SiltError(
                f"{self.name}.{operation}: give the partitions: a date, several, or dates='all' (or none "
                "at all: those the predicate's conditions on dt allow)"
            )
        return wanted, where

    def upsert(
        self,
        rows: Any = None,
        delete_column: str | None = None,
        now: dt.datetime | None = None,
        request_id: str | None = None,
        *,
        query: str | None = None,
        dry_run: bool = False,
    ) -> UpsertReport:
        """Replace the rows of the same (dt, primary key) with `rows` (a pyarrow Table, anything with
        __arrow_c_stream__, or a Spark DataFrame) or with the result of the Spark SQL `query` (bounded by
        sql.write_timeout), as one `merge` version per date they fall on; rows whose `delete_column` is true delete
        their key. Once per `request_id`, as delete's. A dry run checks the rows and counts them per date (the
        partitions' version and delayed None), writing nothing."""
        import pyarrow

        from siltlake.write.upsert import upsert

        deployment = self.lake.deployment
        if (rows is None) == (query is None):
            raise SiltError(f"{self.name}.upsert: give the rows or a query, one of them")
        if query is not None:
            from siltlake.read import sql
            from siltlake.spark import time_bound

            # Named as the setting's description names it, and as `silt upsert` has always reported it.
            with time_bound(deployment.config.sql.write_timeout, "sql.write_timeout", "upsert --sql"):
                rows = sql(deployment.spark(), query, deployment).toArrow()
        elif not isinstance(rows, pyarrow.Table) and hasattr(rows, "toArrow"):
            rows = rows.toArrow()  # a Spark DataFrame: the rows are small enough to pass through the driver
        elif not isinstance(rows, pyarrow.Table) and hasattr(rows, "__arrow_c_stream__"):
            rows = pyarrow.table(rows)  # pandas, Polars, a DuckDB relation: the rows of a key are replaced together
        if not isinstance(rows, pyarrow.Table):
            raise SiltError(
                f"{self.name}.upsert: give the rows as Arrow data or a Spark DataFrame, not {type(rows).__name__}"
            )
        return upsert(deployment, self.name, rows, delete_column, now, request_id, dry_run=dry_run)

    def append(self, rows: Any, request_id: str | None = None, now: dt.datetime | None = None) -> AppendReport:
        """Append rows (anything Arrow: a pyarrow Table, RecordBatch or RecordBatchReader, a pandas or Polars
        DataFrame, a DuckDB relation, any object with __arrow_c_stream__, or an iterable of batches; the table's
        columns by name, nullable ones may be missing) in one commit, as the stream appends a staging object: small
        objects, live or delayed, merge jobs scheduled; readers of the current state see them at once, time travel
        from the next publish. Once per `request_id`: a retry with an id applied already appends nothing and the
        report's applied_before says so."""
        from siltlake.write.append import append

        return append(self.lake.deployment, self.name, rows, request_id, now)

    def overwrite(
        self, rows: Any, dates: Any = None, request_id: str | None = None, now: dt.datetime | None = None
    ) -> UpdatesReport:
        """Replace every row of the partitions `dates` (a date, ISO text, several; None: the dates the rows fall on)
        with `rows` (anything Arrow, as append takes) as one table version, all of them or none; a date given no
        row is emptied. Rows on other dates, and dates the table has no partition for, are refused first. Once per
        `request_id`."""
        from siltlake.write.overwrite import overwrite

        return overwrite(self.lake.deployment, self.name, rows, dates, request_id=request_id, now=now)

    def update(
        self,
        set: dict[str, Any],
        where: str | Expression | None = None,
        dates: Any = None,
        request_id: str | None = None,
        now: dt.datetime | None = None,
        dry_run: bool = False,
        progress: Callable[[int, dt.date], None] | None = None,
    ) -> UpdatesReport:
        """SET columns (column -> value) in the rows matching `where` (Spark SQL text or a pyarrow expression; None:
        every row) of the partitions write_partitions(where, dates) names (without `dates`, those where `where` may
        match; without either, all), as one `update` table version: all of them or none, once per `request_id`.
        Primary key columns are not set.

        A str value is a Spark SQL expression over the row: "upper(action)", or "'LOGIN'" (quoted) for the text
        LOGIN; an unquoted "LOGIN" names a column, and is refused with a SiltError saying how to quote it. Any other
        Python value (a number, bool, None, date or datetime) is taken as a literal."""
        from siltlake.write.row_updates import update_rows

        wanted, tested = self.write_partitions(where, dates, "update")
        return update_rows(
            self.lake.deployment,
            self.name,
            set,
            None if tested == "true" else tested,
            wanted,
            request_id=request_id,
            now=now,
            dry_run=dry_run,
            progress=progress,
        )

    def restore_target(self, version: int | str | None = None, as_of: dt.datetime | str | None = None) -> int:
        """The table version restore(version=, as_of=) restores (the one resolver of Table.restore and `silt
        restore`): `version` (a number or a tag's name), or the newest published at or before the time `as_of`.
        Give one of them; VersionOutOfRange for a version the table never had, VersionReaped for one reap removed."""
        from siltlake.read.version_files import version_number
        from siltlake.write.restore import restore_version

        number = version_number(self.lake.deployment, self.record, version)  # a tag's name: its version
        return restore_version(
            self.lake.deployment, self.record, number, parse_as_of(as_of) if as_of is not None else None
        )

    def restore(
        self,
        version: int | str | None = None,
        as_of: dt.datetime | str | None = None,
        request_id: str | None = None,
        now: dt.datetime | None = None,
        dry_run: bool = False,
        progress: Callable[[int, dt.date], None] | None = None,
    ) -> UpdatesReport:
        """Publish a new table version that shows what restore_target(version, as_of) showed, partition by
        partition (those that differ are rewritten; one commit, refused as an update is on a conflict). A version
        reap has removed is refused, naming reap.retention. Once per `request_id`; `progress(done, date)` is told of
        each partition as it is rewritten."""
        from siltlake.write.restore import restore

        return restore(
            self.lake.deployment,
            self.name,
            self.restore_target(version, as_of),
            request_id=request_id,
            now=now,
            dry_run=dry_run,
            progress=progress,
        )
