"""Lake.sql: one SQL query over `schema.table` names, answered by DuckDB over the exact file lists when that gives
Spark's answer, else by Spark. `silt sql` runs its queries through it, and keeps the DuckDB translations of the
queries it ran (Translations) so that a query run again in a fresh process (as cron runs it) neither parses nor
translates, and imports no sqlglot."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from siltlake.errors import NotFoundError, SiltError
from siltlake.read.plan import QueryPlan, Read, checked_query, plan_query
from siltlake.read.version_files import parse_as_of

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from sqlglot import exp

    from siltlake.deployment import Deployment
    from siltlake.read.translate import Translation

__all__ = ["ENGINES", "SqlResult", "Translations", "run_sql"]

ENGINES = ("auto", "duckdb", "spark")


@dataclass(frozen=True)
class SqlResult:
    """A query's answer: its `columns`, its `rows` (values as PySpark's collect() gives them, whichever engine
    answered), the `engine` that answered ("duckdb" or "spark") and whether `limit` cut rows off (`truncated`)."""

    columns: tuple[str, ...]
    rows: tuple[tuple, ...]
    engine: str
    truncated: bool = False

    @property
    def num_rows(self) -> int:
        return len(self.rows)

    def to_pylist(self) -> list[dict[str, Any]]:
        """The rows as dicts by column name."""
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]

    def to_arrow(self) -> pa.Table:
        """The rows as a pyarrow Table, column types inferred from the values (a column of nulls only: null)."""
        import pyarrow as pa

        columns = [[_plain(row[index]) for row in self.rows] for index in range(len(self.columns))]
        return pa.Table.from_arrays([pa.array(values) for values in columns], names=list(self.columns))

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """The rows as record batches (the answer is already in memory: this is to_arrow's batches)."""
        yield from self.to_arrow().to_batches()

    def to_pandas(self) -> pd.DataFrame:
        return self.to_arrow().to_pandas()


def _plain(value: object) -> object:
    # A Spark struct arrives as a Row, a tuple subclass pyarrow would read as a list; its fields by name are the struct.
    as_dict = getattr(value, "asDict", None)
    if callable(as_dict):
        return as_dict(recursive=True)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def run_sql(
    deployment: Deployment,
    query: str,
    *,
    engine: str = "auto",
    limit: int | None = None,
    as_of: dt.datetime | str | None = None,
    spark: SparkSession | Callable[[], SparkSession] | None = None,
    running: Callable[[str], AbstractContextManager[object]] | None = None,
    tree: exp.Query | None = None,
    translations: Translations | None = None,
) -> SqlResult:
    """Plan the query (names, time travel and the sandbox checked; every read pinned in one catalog snapshot), then
    run it on the engine `engine` allows, within sql.timeout. `as_of` reads every table the query does not pin
    itself as of that time. `spark`: a session, or a function making one when Spark is needed (default: the
    deployment's). `running`: given what runs now ("running the query on DuckDB…"), the context it runs in (a
    command's spinner). `tree`: checked_query(query)'s tree when the caller has it (`silt sql` checks the query
    before it opens the deployment), so that the query is parsed once; it is changed by the planning.
    `translations`: where the DuckDB translations of queries run before are kept (`silt sql`'s); a query found
    there whose tables still have the columns it was translated for is not parsed again (see Translations)."""
    from siltlake.spark import time_bound

    if engine not in ENGINES:
        raise SiltError(f"engine {engine!r}: one of {', '.join(ENGINES)}")
    if limit is not None and limit < 0:
        raise SiltError(f"limit {limit}: a number of rows, 0 or more")
    fetch = None if limit is None else limit + 1
    kept = translations.get(query) if translations is not None and engine != "spark" and as_of is None else None
    if kept is not None:
        with time_bound(deployment.config.sql.timeout, "sql.timeout", "the query"):
            answer = _answer_kept(deployment, kept, fetch, running or _quietly)
        if answer is not None:
            columns, rows = answer
            return _result(columns, rows, "duckdb", limit)
    if tree is None:
        tree = checked_query(query)
    reads = None
    if as_of is not None:
        pinned = {"as_of": parse_as_of(as_of)}
        reads = {f"{name.db}.{name.name}": pinned for name in _table_references(tree)}
    # Only a query that reads every table's current state, whole, is kept: its plan is the table names alone.
    keep = translations is not None and reads is None and _plain_reads(tree)
    plan = plan_query(tree, deployment, reads=reads)
    with time_bound(deployment.config.sql.timeout, "sql.timeout", "the query"):
        columns, rows, answered_by, translation = _answer(
            deployment, query, plan, engine, limit, spark, running or _quietly
        )
    # A read its WHERE pruned below dt is planned again each time: a kept plan reads every partition.
    keep = keep and not any(read.pruned for read in plan.reads.values())
    if keep and translation is not None and translations is not None:
        translations.put(query, plan, translation)
    return _result(columns, rows, answered_by, limit)


def _result(columns: list[str], rows: list, answered_by: str, limit: int | None) -> SqlResult:
    truncated = limit is not None and len(rows) > limit
    return SqlResult(tuple(columns), tuple(tuple(row) for row in rows[:limit]), answered_by, truncated)


def _quietly(_what: str) -> AbstractContextManager[object]:
    return nullcontext()


def _table_references(tree: Any) -> list[Any]:
    from sqlglot import exp

    return [node for node in tree.find_all(exp.Table) if node.db]


def _answer(
    deployment: Deployment,
    query: str,
    plan: QueryPlan,
    engine: str,
    limit: int | None,
    spark: SparkSession | Callable[[], SparkSession] | None,
    running: Callable[[str], AbstractContextManager[object]],
) -> tuple[list[str], list, str, Translation | None]:
    """The column names and the rows (at most limit + 1: one more says whether the limit cut them), from DuckDB
    when it gives Spark's answer (and the engine allows), else from Spark; and the engine that answered, with the
    DuckDB translation when DuckDB did."""
    fetch = None if limit is None else limit + 1
    if engine != "spark":
        from siltlake.read.duck import faithful, run_plan
        from siltlake.read.translate import NotFaithful

        try:
            translation = faithful(plan, deployment)
            with running("running the query on DuckDB…"):
                rows = run_plan(plan, deployment, translation, fetch)
        except NotFaithful as exc:
            if engine == "duckdb":
                raise SiltError(
                    f"--engine duckdb: this query may not give Spark's answer on DuckDB ({exc}); run "
                    "it with --engine spark or auto"
                ) from None
        else:
            return translation.columns, rows, "duckdb", translation
    from siltlake.read import sql
    from siltlake.spark import bound_session, is_remote

    session = spark if spark is not None and not callable(spark) else (spark or deployment.spark)()
    made_here = session is not spark
    session = bound_session(session)  # a Spark Connect session is tagged here
    try:
        with running("running the query…"):
            frame = sql(session, query, deployment, plan=plan)
            collected = (frame if fetch is None else frame.limit(fetch)).collect()
        return frame.columns, collected, "spark", None
    finally:
        if made_here and is_remote(session):
            session.stop()  # ends this client's session on the server (its temp views), not the server


def _plain_reads(tree: Any) -> bool:
    """Whether every table the query names is read as it is now and whole: no VERSION or TIMESTAMP AS OF, no
    conditions on dt that would read only some days (plan.date_bounds). Only such a query's translation is kept."""
    from siltlake.read.plan import date_bounds

    return all(node.args.get("version") is None and date_bounds(node) is None for node in _table_references(tree))


class _CachedTranslation(NamedTuple):
    """A kept translation.Translation, rebuilt without importing sqlglot (run_plan reads its sql)."""

    sql: str
    columns: list[str]
    types: list[str]


@dataclass(frozen=True)
class Kept:
    """A query's kept plan and translation: the tables it names (schema.table, in the query's order), each view
    it reads (view, schema.table, its (column, type) list when translated), and the DuckDB translation."""

    tables: list[str]
    views: list[tuple[str, str, list[tuple[str, str]]]]
    translation: _CachedTranslation


def _answer_kept(
    deployment: Deployment,
    kept: Kept,
    fetch: int | None,
    running: Callable[[str], AbstractContextManager[object]],
) -> tuple[list[str], list] | None:
    """A kept query's answer from DuckDB, its reads pinned in the catalog as plan_query pins them (the tables by
    name, then each view's current partitions); None when it has to be planned again: a table's columns are not
    those it was translated for, the session zone is not one DuckDB knows, or the answer may not be Spark's."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    from siltlake.read.duck import columns_of

    catalog = deployment.catalog
    records = {}
    for qualified in kept.tables:  # as plan_query looks them up: a table gone is said as it says it
        try:
            records[qualified] = catalog.tables.get(qualified)
        except NotFoundError as exc:
            raise SiltError(str(exc)) from None
    reads = {}
    for view, qualified, columns in kept.views:
        record = records[qualified]
        partitions = catalog.version_reads.reader_snapshot(record.id, table_name=record.qualified_name)
        record = catalog.tables.definition_at(record)
        if columns_of(record) != columns:
            return None
        reads[view] = Read(view, record, {}, partitions)
    # duck.session_zone's check, whose NotFaithful (translate's) would import sqlglot: the planned path says it.
    zone = deployment.config.spark.conf.get("spark.sql.session.timeZone", "UTC")
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        return None
    with running("running the query on DuckDB…"):
        rows = _run_kept(deployment, zone, reads, kept.translation.sql, fetch)
    return None if rows is None else (kept.translation.columns, rows)


def _run_kept(deployment: Deployment, zone: str, reads: dict[str, Read], sql: str, fetch: int | None) -> list | None:
    """duck.run_plan for a kept translation, without translate (and so sqlglot) but where it says NotFaithful:
    the same views, sandbox, bounds and values; None where run_plan's answer would be NotFaithful."""
    import duckdb

    from siltlake.errors import missing_data_file
    from siltlake.read.duck import bounded, connect, table_sql
    from siltlake.read.version_files import partition_files

    connection = connect(zone)
    try:
        allowed: list[str] = []
        for view, read in reads.items():
            files = partition_files(deployment, read.record, read.partitions)
            allowed += table_sql(connection, view, deployment, read.record, files)
        with bounded(connection, deployment):
            if allowed:
                connection.execute(f"SET allowed_paths = [{', '.join(_quote(path) for path in allowed)}]")
            connection.execute("SET enable_external_access = false")
            connection.execute("SET lock_configuration = true")
            result = connection.execute(sql)
            rows = result.fetchall() if fetch is None else result.fetchmany(fetch)
    except duckdb.IOException as exc:
        missing = _MISSING.search(str(exc))
        if missing is None:
            raise
        raise SiltError(missing_data_file(missing.group(1))) from exc
    except duckdb.InvalidInputException as exc:
        from siltlake.read.translate import BEYOND_SPARK

        if BEYOND_SPARK not in str(exc):
            raise
        return None  # run_plan's NotFaithful: planned again, the query goes to Spark
    finally:
        connection.close()
    return [tuple(_as_spark(value) for value in row) for row in rows]


_MISSING = re.compile(r'No files found that match the pattern "([^"]+)"')  # as duck's


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _as_spark(value: object) -> object:
    # As duck's: PySpark returns a timestamp as a naive datetime in the local zone (datetime.fromtimestamp).
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone().replace(tzinfo=None)
    return value


class Translations:
    """The DuckDB translations of the queries `silt sql` ran, one small JSON file per query under `directory`
    (default: $SILT_SQL_CACHE, else $XDG_CACHE_HOME/siltlake/sql or ~/.cache/siltlake/sql; "off" keeps
    none). Kept: a query DuckDB answered that reads every table's current state whole (no time travel, no
    conditions on dt, none on partition_by columns that leave partitions out). Each entry holds the query, the
    tables it names, each view's columns and the translation; it is found by a hash of the query, of siltlake's read
    modules (their names, sizes and times) and of sqlglot's install, so another siltlake or sqlglot never reads it. A
    query found here is not parsed: its names, time travel and sandbox were checked when it was kept, and the
    translation depends on the query and the views' columns alone, which are compared with the tables' current ones
    (another set: planned again, and kept anew). The catalog reads, the DuckDB sandbox and the answer are a planned
    query's."""

    FORMAT = 1
    LIMIT = 256  # entries kept; beyond it the oldest written go

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @classmethod
    def default(cls) -> Translations | None:
        """Where `silt sql` keeps them, None when $SILT_SQL_CACHE is "off"."""
        given = os.environ.get("SILT_SQL_CACHE", "")
        if given.lower() in ("off", "0", "false", "no"):
            return None
        if given:
            return cls(Path(given))
        base = os.environ.get("XDG_CACHE_HOME", "")
        if not os.path.isabs(base):  # unset, or relative (which the XDG specification says to ignore)
            base = os.path.join(os.path.expanduser("~"), ".cache")
        if not os.path.isabs(base):  # no home directory either: none kept
            return None
        return cls(Path(base) / "siltlake" / "sql")

    def _path(self, query: str) -> Path | None:
        """The entry's file: the hash of the query and of the code that translated it; None when the code's
        files cannot be found."""
        digest = hashlib.sha256(f"{self.FORMAT}\0{query}".encode())
        try:
            import importlib.util

            import siltlake.read

            read_directory = Path(siltlake.read.__file__).parent
            spec = importlib.util.find_spec("sqlglot")  # its install, without importing it
            if spec is None or spec.origin is None:
                return None
            sqlglot_directory = Path(spec.origin).parent
            for path in (
                *sorted(read_directory.glob("*.py")),
                sqlglot_directory / "__init__.py",
                sqlglot_directory / "_version.py",
            ):
                stat = path.stat()
                digest.update(f"\0{path}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
        except (OSError, ImportError, ValueError):
            return None
        return self.directory / f"{digest.hexdigest()[:40]}.json"

    def get(self, query: str) -> Kept | None:
        """The query's kept entry, None when there is none (or it cannot be read, or is not this user's)."""
        path = self._path(query)
        if path is None:
            return None
        try:
            with open(path, "rb") as file:
                if os.fstat(file.fileno()).st_uid != os.getuid():
                    return None
                entry = json.loads(file.read())
            if entry["format"] != self.FORMAT or entry["query"] != query:
                return None
            views = [
                (str(view), str(table), [(str(name), str(kind)) for name, kind in columns])
                for view, table, columns in entry["views"]
            ]
            sql, columns, types = entry["translation"]
            return Kept(
                [str(table) for table in entry["tables"]],
                views,
                _CachedTranslation(str(sql), [str(name) for name in columns], [str(kind) for kind in types]),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, query: str, plan: QueryPlan, translation: Translation) -> None:
        """Keep a planned query's translation (quietly nothing when the directory cannot be written)."""
        from siltlake.read.duck import columns_of

        path = self._path(query)
        if path is None:
            return
        tables = list(dict.fromkeys(read.record.qualified_name for read in plan.reads.values()))
        entry = {
            "format": self.FORMAT,
            "query": query,
            "tables": tables,
            "views": [
                [view, read.record.qualified_name, [list(column) for column in columns_of(read.record)]]
                for view, read in plan.reads.items()
            ],
            "translation": [translation.sql, list(translation.columns), list(translation.types)],
        }
        with suppress(OSError):
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            descriptor, temporary = tempfile.mkstemp(dir=self.directory, prefix=".", suffix=".tmp")
            try:
                with os.fdopen(descriptor, "w") as file:
                    json.dump(entry, file)
                os.replace(temporary, path)
            except BaseException:
                with suppress(OSError):
                    os.unlink(temporary)
                raise
            self._prune()

    def _prune(self) -> None:
        entries = sorted(self.directory.glob("*.json"), key=lambda path: path.stat().st_mtime_ns)
        for path in entries[: max(0, len(entries) - self.LIMIT)]:
            with suppress(OSError):
                path.unlink()
