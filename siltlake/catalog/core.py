"""The catalog's core: its engine, transactions and migrations, and the SQL helpers its concerns share."""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import (
    DisconnectionError,
    InterfaceError,
    OperationalError,
    ProgrammingError,
    SQLAlchemyError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout

from siltlake.catalog import schema as s
from siltlake.catalog.direct_read import DirectStatement, SqliteReader, fetch_one
from siltlake.catalog.rows import CatalogReplaced, TableRecord, VersionTimeBehind
from siltlake.catalog.sqlite import migrating, sqlite_setup
from siltlake.coltypes import refuse_reserved_column
from siltlake.derivedef import DerivedDef
from siltlake.errors import CatalogError, CatalogUnreachable
from siltlake.tabledef import TableDef

MIGRATIONS = Path(__file__).with_name("migrations")
# The newest migration's revision (tests check it against Alembic's head): check_ready() compares it with
# the catalog's without importing Alembic, which would double a read-only command's start-up time.
HEAD_REVISION = "0027"

_TICK = dt.timedelta(microseconds=1)  # how far a version stamped on a clock behind goes past the newest


def _known_revision(revision: str) -> bool:
    """Whether a revision id is one of the migrations here: they are numbered 0001 to HEAD_REVISION without
    gaps (tests/test_catalog_revision.py checks it against Alembic's scripts)."""
    return len(revision) == 4 and revision.isdigit() and 1 <= int(revision) <= int(HEAD_REVISION)


# What a catalog database that could not be used raises (down, locked, connection lost).
CATALOG_OUTAGES = (CatalogUnreachable, OperationalError, InterfaceError, DisconnectionError, PoolTimeout)


def catalog_unavailable(exc: BaseException) -> bool:
    """Whether an exception says the catalog database could not be used (down, locked, connection lost):
    a failure of the surroundings, never of the data being written."""
    return isinstance(exc, CATALOG_OUTAGES)


def normalise_url(url: str) -> str:
    """Use psycopg 3 for PostgreSQL and an absolute path for SQLite files."""
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        path = Path(url[len("sqlite:///") :]).expanduser().resolve()
        return f"sqlite:///{path}"
    return url


def row_values(row: sa.Row) -> tuple[Any, ...]:
    """A row's values, typed as the tuple a Row is. SQLAlchemy types the rows of a statement built from untyped
    columns with a variadic generic, whose unpacking the type checker reads as objects: the values are the
    columns' (Any), as the statement says."""
    return cast("tuple[Any, ...]", row)


def rows_values(rows: Iterable[sa.Row]) -> Iterable[tuple[Any, ...]]:
    """The rows' values, each typed as row_values types it (no copy: the same rows)."""
    return cast("Iterable[tuple[Any, ...]]", rows)


def table_record(row) -> TableRecord:  # a SQLAlchemy Row of the tables table
    return TableRecord(
        id=row.id,
        definition=TableDef.from_json(row.definition),
        physical_schema_name=row.physical_schema_name,
        physical_table_name=row.physical_table_name,
        create_time=row.create_time,
    )


def insert_table(c: Connection, definition: TableDef, now: dt.datetime) -> TableRecord:
    """Add a table in transaction c, under a physical name no table (dropped ones included) holds, its columns
    given Iceberg field ids (TableDef.with_field_ids) unless the definition names them."""
    for column in definition.columns:
        refuse_reserved_column(column.name)
    definition = definition.with_field_ids()
    t = s.tables
    found = c.execute(
        sa.select(t.c.id).where(
            t.c.schema_name == definition.schema_name, t.c.table_name == definition.name, t.c.dropped_time.is_(None)
        )
    ).first()
    if found is not None:
        raise CatalogError(f"table {definition.qualified_name} already exists")
    taken = {
        (r.physical_schema_name, r.physical_table_name)
        for r in c.execute(sa.select(t.c.physical_schema_name, t.c.physical_table_name))
    }
    physical_table, suffix = definition.name, 1
    # A dropped table keeps its physical name until reap removes its objects.
    while (definition.schema_name, physical_table) in taken:
        suffix += 1
        physical_table = f"{definition.name}_{suffix}"
    new_id: int = c.execute(
        t.insert()
        .values(
            schema_name=definition.schema_name,
            table_name=definition.name,
            physical_schema_name=definition.schema_name,
            physical_table_name=physical_table,
            create_time=now,
            merge_interval=definition.merge_interval,
            time_column=definition.time_column,
            timezone=definition.timezone,
            ttl_days=definition.ttl_days,
            definition=definition.to_json(),
        )
        .returning(t.c.id)
    ).scalar_one()
    return table_record(c.execute(sa.select(t).where(t.c.id == new_id)).one())


def derived_readers(c: Connection, table_id: int) -> list[str]:
    """The live derived tables whose query reads the table (schema.table names)."""
    d, t = s.derived_tables, s.tables
    rows = c.execute(
        sa.select(t.c.schema_name, t.c.table_name, d.c.sources)
        .select_from(d.join(t, t.c.id == d.c.table_id))
        .where(t.c.dropped_time.is_(None))
    ).all()
    return [f"{r.schema_name}.{r.table_name}" for r in rows if table_id in json.loads(r.sources)]


def derived_column_readers(c: Connection, table_id: int, column: str) -> list[str]:
    """The live derived tables whose query reads the table and may read its column `column`: those whose query
    names it or selects *, and those whose query cannot be analysed (DerivedDef.may_read_column)."""
    d, t = s.derived_tables, s.tables
    rows = c.execute(
        sa.select(t.c.schema_name, t.c.table_name, d.c.sources, d.c.definition)
        .select_from(d.join(t, t.c.id == d.c.table_id))
        .where(t.c.dropped_time.is_(None))
    ).all()
    return [
        f"{r.schema_name}.{r.table_name}"
        for r in rows
        if table_id in json.loads(r.sources) and DerivedDef.from_json(r.definition).may_read_column(column)
    ]


class CatalogCore:
    """One catalog database: its engine, transactions and schema migrations. Catalog (catalog.py) is this
    with its concerns; each concern speaks SQL through the transactions and helpers here."""

    def __init__(self, url: str, *, echo: bool = False, connect_timeout: int | None = None) -> None:
        self.url = normalise_url(url)
        self.dialect = "postgresql" if self.url.startswith("postgresql") else "sqlite"
        self.sqlite_file = (
            Path(self.url[len("sqlite:///") :])
            if self.dialect == "sqlite" and self.url != "sqlite:///:memory:"
            else None
        )
        options: dict = {"echo": echo, "future": True}
        if self.dialect == "postgresql":
            s.postgresql_index_options()
            options.update(pool_pre_ping=True, pool_size=4, max_overflow=4)
            if connect_timeout is not None:
                options["connect_args"] = {"connect_timeout": connect_timeout}
        engine_url = self.url
        if self.sqlite_file is not None:
            # mode=rw: only upgrade() (silt init) creates the file; any other command on a deployment
            # that has none fails instead of leaving an empty catalog.db (and its directory) behind.
            engine_url = f"sqlite:///file:{quote(str(self.sqlite_file))}?mode=rw&uri=true"
        self.engine = sa.create_engine(engine_url, **options)
        self._file_identity: tuple[int, int] | None = None  # SQLite: (device, inode) of the file first used
        self._direct: dict[sa.Select, DirectStatement] = {}  # read_row's statements, compiled for the dialect
        self._reader = SqliteReader(self.engine)  # SQLite: the connection read_row uses, and its answers
        if self.dialect == "sqlite":
            sqlite_setup(self.engine)

    def __repr__(self) -> str:
        return f"Catalog({self.masked_url})"

    def vacuum_unattended(self, table: sa.Table) -> bool:
        """VACUUM (ANALYZE) a table that just lost many rows, on a PostgreSQL server whose autovacuum is off: else
        its dead rows stay in the table and the indexes every round reads, and the catalog grows without bound
        (docs/benchmarks.md, the simulated month). With autovacuum on (the server's default) nothing is done."""
        if self.dialect != "postgresql":
            return False
        with self.engine.connect() as connection:
            if connection.execute(sa.text("SELECT current_setting('autovacuum')")).scalar() != "off":
                return False
        name = self.engine.dialect.identifier_preparer.format_table(table)
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.execute(sa.text(f"VACUUM (ANALYZE) {name}"))  # no transaction: VACUUM runs outside one
        return True

    @property
    def masked_url(self) -> str:
        """The URL without its password (SQLite: the file's path): how markers and messages name it."""
        if self.sqlite_file is not None:
            return f"sqlite:///{self.sqlite_file}"
        return self.engine.url.render_as_string(hide_password=True)

    def _not_initialised(self) -> CatalogError:
        if self.sqlite_file is not None and not self.sqlite_file.exists():
            return CatalogError(
                f"there is no catalog at {self.sqlite_file} (not initialised): run `silt init` "
                "first (in the deployment's directory, or with its --config)"
            )
        return CatalogError(f"the catalog at {self!r} is not initialised; run `silt init` first")

    def close(self) -> None:
        self._reader.close()
        self.engine.dispose()

    # --- schema management -------------------------------------------------------------------

    def _alembic_config(self, connection: Connection | None):
        from alembic.config import Config as AlembicConfig

        config = AlembicConfig()
        config.set_main_option("script_location", str(MIGRATIONS))
        config.attributes["connection"] = connection
        return config

    def upgrade(self, revision: str = "head") -> None:
        """Create or upgrade the catalog schema through the Alembic migrations."""
        from alembic import command

        if self.sqlite_file is not None and not self.sqlite_file.exists():
            import sqlite3

            self.sqlite_file.parent.mkdir(parents=True, exist_ok=True)
            sqlite3.connect(self.sqlite_file).close()  # creates the file the engine opens with mode=rw
        self.check_not_newer(self.revision())  # else Alembic fails on a revision it cannot locate
        with migrating(self.engine) as connection:
            command.upgrade(self._alembic_config(connection), revision)

    def downgrade(self, revision: str) -> None:
        from alembic import command

        with migrating(self.engine) as connection:
            command.downgrade(self._alembic_config(connection), revision)

    def revision(self) -> str | None:
        """The catalog schema's revision (Alembic's version table), None before `silt init`: one query."""
        try:
            with self.engine.connect() as connection:
                return connection.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()
        except (OperationalError, ProgrammingError) as exc:
            # No version table: SQLite says "no such table", PostgreSQL's SQLSTATE is 42P01 (undefined_table).
            if getattr(exc.orig, "sqlstate", None) == "42P01" or "no such table" in str(exc.orig):
                return None
            raise

    def check_not_newer(self, current: str | None) -> None:
        """Raise a CatalogError saying so when revision `current` is not one of this siltlake's migrations:
        a newer siltlake migrated the catalog, and this one must not read it (nor Alembic try to upgrade it)."""
        if current is None or _known_revision(current):
            return
        from importlib.metadata import PackageNotFoundError, version

        try:
            ours = f"siltlake {version('siltlake')}"
        except PackageNotFoundError:
            ours = "this siltlake"
        if current.isdigit() and int(current) > int(HEAD_REVISION):
            raise CatalogError(
                f"the catalog at {self.masked_url} is at revision {current}, newer than {ours} knows (up to "
                f"{HEAD_REVISION}): a newer siltlake migrated it; upgrade siltlake to that version here (every "
                "process using this catalog needs it), or point catalog.url at a catalog of this version; "
                "nothing was changed"
            )
        raise CatalogError(
            f"the catalog at {self.masked_url} is at revision {current!r}, not one {ours} knows (0001 to "
            f"{HEAD_REVISION}): check catalog.url (another application's database?), or use the siltlake that "
            "migrated it; nothing was changed"
        )

    def head_revision(self) -> str:
        from alembic.script import ScriptDirectory

        head = ScriptDirectory.from_config(self._alembic_config(None)).get_current_head()  # no connection needed
        assert head is not None
        return head

    def _check_file(self) -> None:
        """SQLite: raise CatalogReplaced once the catalog file is not the one this process first used.

        Open connections keep writing to a deleted (unlinked) file that no other process will ever read, and
        a file put in its place is another catalog: either way, stop. One stat per transaction."""
        if self.sqlite_file is None:
            return
        try:
            stat = os.stat(self.sqlite_file)
            identity = (stat.st_dev, stat.st_ino)
        except FileNotFoundError:
            identity = None
        if self._file_identity is None:
            self._file_identity = identity  # None until `silt init` creates the file
        elif identity != self._file_identity:
            raise CatalogReplaced(
                f"the catalog file {self.sqlite_file} was deleted or replaced while this process ran; it stops "
                "rather than write where no other process reads: restore the catalog (or `silt init` a new "
                "one) and restart it"
            )

    @contextmanager
    def tx(self) -> Iterator[Connection]:
        self._check_file()
        try:
            with self.engine.begin() as connection:
                yield connection
        except (OperationalError, ProgrammingError) as exc:
            if (
                "no such table" in str(exc)
                or "does not exist" in str(exc)
                or (self.sqlite_file is not None and not self.sqlite_file.exists())
            ):
                raise self._not_initialised() from None
            raise

    @contextmanager
    def snapshot(self) -> Iterator[Connection]:
        """A read-only transaction whose queries all see one state (REPEATABLE READ on PostgreSQL;
        SQLite's transaction already is one snapshot)."""
        if self.dialect == "postgresql":
            with (
                self.engine.connect().execution_options(isolation_level="REPEATABLE READ") as connection,
                connection.begin(),
            ):
                yield connection
            return
        with self.tx() as connection:
            yield connection

    def read_row(self, statement: sa.Select, values: Mapping[str, object]) -> tuple:
        """The one row of a single read-only SELECT, run as it is on a DBAPI connection: one statement sees one
        state by itself (SQLite outside a transaction, PostgreSQL's statement snapshot), and around a small
        statement SQLAlchemy's execution (events, BEGIN and COMMIT, result objects, a pool checkout) costs several
        times what the database spends. For reads on a reader's every call (VersionReads.current_state). SQLite's
        runs on a connection this process keeps for them, and is answered from memory until the database changes
        (direct_read.SqliteReader). A DBAPI error runs it again through SQLAlchemy, which reports it as every other
        catalog call does."""
        self._check_file()
        direct = self._direct.get(statement)
        if direct is None:
            direct = self._direct[statement] = DirectStatement(statement, self.engine.dialect)
        row = None
        if self.dialect == "sqlite":
            row = self._reader.row(direct, values)
        else:
            with suppress(self.engine.dialect.loaded_dbapi.Error, SQLAlchemyError):
                connection = self.engine.raw_connection()
                try:
                    row = fetch_one(connection, direct, values)
                finally:
                    connection.close()
        if row is None:
            with self.snapshot() as c:
                row = c.execute(statement, values).one()
        return tuple(row)

    def check_ready(self) -> None:
        """Raise a CatalogError telling the user what to run when the schema is missing, old or newer than this
        siltlake's. One query (every command runs it as it opens the catalog)."""
        self._check_file()
        try:
            current = self.revision()
        except OperationalError as exc:
            if self.sqlite_file is not None and not self.sqlite_file.exists():
                raise self._not_initialised() from None
            raise CatalogUnreachable(f"cannot open the catalog {self!r}: {exc.orig}") from None
        if current is None:
            raise self._not_initialised()
        self.check_not_newer(current)
        if current != HEAD_REVISION:
            raise CatalogError(
                f"the catalog at {self.masked_url} is at revision {current}, older than this siltlake's "
                f"{HEAD_REVISION}: run `silt init` to upgrade it"
            )

    def same_database(self, other: CatalogCore) -> bool:
        """Whether two catalogs, opened under different URLs, are one database (not one and its copy);
        CatalogUnreachable when either cannot be read."""
        try:
            return self._fingerprint() == other._fingerprint()
        except (OSError, SQLAlchemyError) as exc:
            raise CatalogUnreachable(str(getattr(exc, "orig", exc)).strip().splitlines()[0]) from None

    def _fingerprint(self) -> tuple:
        if self.dialect == "sqlite":
            stat = os.stat(self.url[len("sqlite:///") :])
            return stat.st_dev, stat.st_ino
        # A copy lives in another database of the server, or on another server (started at another time).
        with self.tx() as c:
            return tuple(
                c.execute(
                    sa.text(
                        "SELECT current_database(), pg_postmaster_start_time(), "
                        "(SELECT oid FROM pg_database WHERE datname = current_database())"
                    )
                ).one()
            )

    # --- helpers the concerns share --------------------------------------------------------------

    def insert_once(self, c: Connection, table: sa.Table, key: str | tuple[str, ...], values: dict | list[dict]) -> int:
        """Insert a row (or rows, in one statement) unless a row with the same unique key (one column or
        several) exists; how many were inserted."""
        columns = [key] if isinstance(key, str) else list(key)
        return len(self.insert_new(c, table, key, values, columns[0]))

    def insert_new(
        self, c: Connection, table: sa.Table, key: str | tuple[str, ...], values: dict | list[dict], *returning: str
    ) -> Sequence[sa.Row]:
        """insert_once, returning these columns of the rows it inserted."""
        if not values:
            return []
        columns = [key] if isinstance(key, str) else list(key)
        statement = self._insert(table).on_conflict_do_nothing(index_elements=columns)
        # Rows as parameters, not in the statement: one compiled INSERT for any number of rows, which SQLAlchemy
        # sends in pages ("insertmanyvalues"); callers need not cut their rows into statements.
        return c.execute(
            statement.returning(*(table.c[name] for name in returning)),
            values if isinstance(values, list) else [values],
        ).all()

    def insert(self, table: sa.Table):  # the dialect's Insert
        """An INSERT of the catalog's dialect, for an upsert whose update is the caller's own."""
        return self._insert(table)

    def _insert(self, table: sa.Table):
        """An INSERT of the catalog's dialect (imported on first use: naming it at import loads the dialect)."""
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert as postgresql_insert

            return postgresql_insert(table)
        from sqlalchemy.dialects.sqlite import insert as sqlite_insert

        return sqlite_insert(table)

    def upsert(
        self, c: Connection, table: sa.Table, key: tuple[str, ...], values: list[dict], updated: tuple[str, ...]
    ) -> None:
        """Insert rows, or set these columns of the rows with the same unique key (one statement)."""
        statement = self._insert(table)
        c.execute(
            statement.on_conflict_do_update(
                index_elements=list(key), set_={name: statement.excluded[name] for name in updated}
            ),
            values,
        )

    def add_staging_totals(self, c: Connection, deltas: Mapping[int, Sequence[int]]) -> None:
        """Add (objects, records in, bad records) to each table's running staging totals (staging_totals), in
        the transaction that wrote the staging rows they count. Each is one atomic `UPDATE ... SET n = n + k`,
        so concurrent writers (stream daemons, discovery, loads on PostgreSQL) never lose one another's counts;
        in table id order and as a transaction's last writes, so two never wait on each other crosswise."""
        totals = s.staging_totals
        changed = {table_id: delta for table_id, delta in sorted(deltas.items()) if any(delta)}

        def add(table_id: int, objects: int, records_in: int, bad_records: int) -> bool:
            return bool(
                c.execute(
                    totals.update()
                    .where(totals.c.table_id == table_id)
                    .values(
                        objects=totals.c.objects + objects,
                        records_in=totals.c.records_in + records_in,
                        bad_records=totals.c.bad_records + bad_records,
                    )
                ).rowcount
            )

        for table_id, delta in changed.items():
            if not add(table_id, *delta):  # a table's first staging row: its totals row, then the same update
                self.insert_once(c, totals, "table_id", dict(table_id=table_id))
                add(table_id, *delta)

    def new_table_versions(
        self, c: Connection, table_ids: Collection[int], now: dt.datetime, *, given: bool
    ) -> dict[int, tuple[int, dt.datetime]]:
        """Add a version to each table: {table id: (its number, its time)}. A table's version times strictly
        increase, else TIMESTAMP AS OF would show states that never existed: `now` earlier than the newest
        version is refused when the user `given` it, and a clock behind (another host's) or a time equal to
        it stamps the newest time plus a microsecond."""
        t = s.tables
        ids = sorted(set(table_ids))
        if not ids:
            return {}
        # The table rows' locks (SQLite: the write lock) order commits to a table, so the newest time read
        # with them is final until this transaction ends. The time is the table row's, not the newest of its
        # partitions' versions: reading those would cost what the table has ever published.
        numbers = {
            row.id: row
            for row in c.execute(
                t.update()
                .where(t.c.id.in_(ids))
                .values(version=t.c.version + 1)
                .returning(t.c.id, t.c.version, t.c.version_time, t.c.schema_name, t.c.table_name)
            )
        }
        stamped = {}
        for table_id, row in sorted(numbers.items()):
            last = row.version_time
            if last is not None and given and now < last:
                raise VersionTimeBehind(
                    f"{row.schema_name}.{row.table_name}'s newest version was published at "
                    f"{last.isoformat(sep=' ')} UTC; a new version cannot be stamped {now.isoformat(sep=' ')} UTC, "
                    "before it (TIMESTAMP AS OF would show a state that never existed): give a later time (--now), or "
                    "none for the current time; nothing was published"
                )
            stamped[table_id] = (row.version, now if last is None or now > last else last + _TICK)
            c.execute(t.update().where(t.c.id == table_id).values(version_time=stamped[table_id][1]))
        return stamped

    def ordering_lock(self, c: Connection) -> None:
        """The lock stream commits hold while adding small objects (SQLite: its write lock is already held)."""
        if self.dialect == "postgresql":
            c.execute(sa.select(sa.func.pg_advisory_xact_lock(s.SMALL_OBJECT_LOCK)))

    def lock_waiting_jobs(self, c: Connection, partition_ids: Sequence[int]) -> Sequence[sa.Row]:
        """The waiting merge jobs (id, partition_id, schedule_time) of these partitions, share-locked to the end
        of the transaction on PostgreSQL.

        A transaction that adds small objects relies on such a job to merge them; the lock keeps a merge
        worker from claiming it (MergeQueue.claim skips locked jobs) and planning before those objects are
        committed, which would leave them with no job at all. SQLite's write lock already serialises the two."""
        j = s.merge_jobs
        query = (
            sa.select(j.c.id, j.c.partition_id, j.c.schedule_time)
            .where(j.c.partition_id.in_(sorted(partition_ids)), j.c.ongoing_mark == 0)
            .order_by(j.c.id)
        )
        if self.dialect == "postgresql":
            query = query.with_for_update(read=True)
        return c.execute(query).all()

    def schedule_waiting(
        self,
        c: Connection,
        partition_id: int,
        when: dt.datetime,
        continued_from: int | None = None,
        advance: bool = True,
    ) -> None:
        """Make sure the partition has a waiting merge job (due no later than `when` if advance).

        Here, not in the merge queue: a stream commit schedules its partition's merge in its own transaction."""
        j = s.merge_jobs
        # A stream commit and a merge commit may both find no waiting job: the second insert is a no-op (on
        # PostgreSQL it waits for the first to commit), and reads the row again to hold its lock; should that job
        # have been claimed in between, it inserts the partition's next one.
        while not (found := self.lock_waiting_jobs(c, [partition_id])):
            if self.insert_once(
                c,
                j,
                ("partition_id", "ongoing_mark"),
                dict(partition_id=partition_id, schedule_time=when, ongoing_mark=0, continued_from=continued_from),
            ):
                return  # ours, unseen by others until we commit
        (waiting,) = found
        if advance and (waiting.schedule_time > when or continued_from is not None):
            values: dict = {"schedule_time": min(when, waiting.schedule_time)}
            if continued_from is not None:
                values["continued_from"] = continued_from
            c.execute(j.update().where(j.c.id == waiting.id).values(**values))
