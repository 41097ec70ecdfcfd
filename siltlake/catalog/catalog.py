"""Catalog operations over SQLAlchemy Core."""

from __future__ import annotations

import datetime as dt
import os
import secrets
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import (
    DisconnectionError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    ProgrammingError,
    SQLAlchemyError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout

from siltlake.catalog import schema as s
from siltlake.catalog.external_sync import ExternalSync
from siltlake.catalog.merge_queue import MergeQueue
from siltlake.catalog.publishing import Publishing
from siltlake.catalog.reaping import Reaping
from siltlake.clock import utcnow
from siltlake.errors import CatalogError, CatalogUnreachable, NotFoundError
from siltlake.storage.keys import TableLayout
from siltlake.tabledef import Column, TableDef, check_identifier

MIGRATIONS = Path(__file__).with_name("migrations")
# The newest migration's revision (tests check it against Alembic's head): check_ready() compares it with
# the catalog's without importing Alembic, which would double a read-only command's start-up time.
HEAD_REVISION = "0006"


@dataclass(frozen=True)
class TableRecord:
    id: int
    definition: TableDef
    physical_schema_name: str
    physical_table_name: str
    create_time: dt.datetime

    @property
    def qualified_name(self) -> str:
        return self.definition.qualified_name

    def layout(self, instance_key: str) -> TableLayout:
        return TableLayout(instance_key, self.physical_schema_name, self.physical_table_name)


@dataclass(frozen=True)
class PendingStagingObject:
    id: int
    uri: str
    size: int
    table: TableRecord


@dataclass(frozen=True)
class FailingStagingObject:
    """A pending staging object whose processing failed; at stream.max_failures it moves to unknown objects."""

    uri: str
    table_name: str
    failure_count: int
    last_failure: str
    last_failure_time: dt.datetime


@dataclass(frozen=True)
class Redelivery:
    """A registered staging key put again: its size when registered and now (different = new bytes, not loaded)."""

    uri: str
    put_time: dt.datetime
    registered_size: int
    size: int

    @property
    def changed(self) -> bool:
        return self.size != self.registered_size


@dataclass(frozen=True)
class UnknownObject:
    uri: str
    reason: str
    size: int | None
    detect_time: dt.datetime
    table_name: str | None


@dataclass(frozen=True)
class PartitionRow:
    id: int
    table_id: int
    partition_date: dt.date
    current_manifest_version: int
    desired_manifest_version: int
    last_live_object_id: int | None
    switched: bool

    @property
    def closed(self) -> bool:
        return self.last_live_object_id is not None


@dataclass(frozen=True)
class SmallObjectRow:
    id: int
    partition_date: dt.date
    delayed: bool
    content_length: int
    row_count: int


def catalog_unavailable(exc: BaseException) -> bool:
    """Whether an exception says the catalog database could not be used (down, locked, connection lost):
    a failure of the surroundings, never of the data being written."""
    return isinstance(exc, (CatalogUnreachable, OperationalError, InterfaceError, DisconnectionError, PoolTimeout))


def normalise_url(url: str) -> str:
    """Use psycopg 3 for PostgreSQL and an absolute path for SQLite files."""
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        path = Path(url[len("sqlite:///"):]).expanduser().resolve()
        return f"sqlite:///{path}"
    return url


def _sqlite_setup(engine: Engine) -> None:
    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:  # noqa: ANN001 - DBAPI objects
        # Let SQLAlchemy's begin() issue BEGIN IMMEDIATE: every transaction takes the write lock up
        # front, so read-then-write transactions never fail on a lock upgrade.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA busy_timeout = 60000")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(connection) -> None:  # noqa: ANN001
        connection.exec_driver_sql("BEGIN IMMEDIATE")


class Catalog(MergeQueue, Publishing, ExternalSync, Reaping):
    """One deployment's catalog. Create with a URL; call upgrade() (silt init) before use."""

    def __init__(self, url: str, *, echo: bool = False, connect_timeout: int | None = None) -> None:
        self.url = normalise_url(url)
        self.dialect = "postgresql" if self.url.startswith("postgresql") else "sqlite"
        self.sqlite_file = (Path(self.url[len("sqlite:///"):])
                            if self.dialect == "sqlite" and self.url != "sqlite:///:memory:" else None)
        options: dict = {"echo": echo, "future": True}
        if self.dialect == "postgresql":
            options.update(pool_pre_ping=True, pool_size=4, max_overflow=4)
            if connect_timeout is not None:
                options["connect_args"] = {"connect_timeout": connect_timeout}
        engine_url = self.url
        if self.sqlite_file is not None:
            # mode=rw: only upgrade() (silt init) creates the file; any other command on a deployment
            # that has none fails instead of leaving an empty catalog.db (and its directory) behind.
            engine_url = f"sqlite:///file:{quote(str(self.sqlite_file))}?mode=rw&uri=true"
        self.engine = sa.create_engine(engine_url, **options)
        if self.dialect == "sqlite":
            _sqlite_setup(self.engine)

    def __repr__(self) -> str:
        return f"Catalog({self.masked_url})"

    @property
    def masked_url(self) -> str:
        """The URL without its password (SQLite: the file's path): how markers and messages name it."""
        if self.sqlite_file is not None:
            return f"sqlite:///{self.sqlite_file}"
        return self.engine.url.render_as_string(hide_password=True)

    def _not_initialised(self) -> CatalogError:
        if self.sqlite_file is not None and not self.sqlite_file.exists():
            return CatalogError(f"there is no catalog at {self.sqlite_file} (not initialised): run `silt init` "
                                "first (in the deployment's directory, or with its --config)")
        return CatalogError(f"the catalog at {self!r} is not initialised; run `silt init` first")

    def close(self) -> None:
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
        with self.engine.begin() as connection:
            command.upgrade(self._alembic_config(connection), revision)

    def downgrade(self, revision: str) -> None:
        from alembic import command

        with self.engine.begin() as connection:
            command.downgrade(self._alembic_config(connection), revision)

    def revision(self) -> str | None:
        """The catalog schema's revision (Alembic's version table), None before `silt init`."""
        with self.engine.connect() as connection:
            if not sa.inspect(connection).has_table("alembic_version"):
                return None
            return connection.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()

    def head_revision(self) -> str:
        from alembic.script import ScriptDirectory

        head = ScriptDirectory.from_config(self._alembic_config(None)).get_current_head()  # no connection needed
        assert head is not None
        return head

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        try:
            with self.engine.begin() as connection:
                yield connection
        except (OperationalError, ProgrammingError) as exc:
            if ("no such table" in str(exc) or "does not exist" in str(exc)
                    or (self.sqlite_file is not None and not self.sqlite_file.exists())):
                raise self._not_initialised() from None
            raise

    @contextmanager
    def _snapshot(self) -> Iterator[Connection]:
        """A read-only transaction whose queries all see one state (REPEATABLE READ on PostgreSQL;
        SQLite's transaction already is one snapshot)."""
        if self.dialect == "postgresql":
            with (self.engine.connect().execution_options(isolation_level="REPEATABLE READ") as connection,
                  connection.begin()):
                yield connection
            return
        with self._tx() as connection:
            yield connection

    def check_ready(self) -> None:
        """Raise a CatalogError telling the user what to run when the schema is missing or old."""
        try:
            current = self.revision()
        except OperationalError as exc:
            if self.sqlite_file is not None and not self.sqlite_file.exists():
                raise self._not_initialised() from None
            raise CatalogUnreachable(f"cannot open the catalog {self!r}: {exc.orig}") from None
        if current is None:
            raise self._not_initialised()
        if current != HEAD_REVISION:
            raise CatalogError(
                f"the catalog schema is at revision {current}, this siltlake needs {HEAD_REVISION}; "
                "run `silt init` to upgrade it"
            )

    # --- instances -----------------------------------------------------------------------------

    def register_instance(self, instance_key: str, storage_root: str, *, is_self: bool,
                          description: str = "") -> None:
        with self._tx() as c:
            if is_self:
                existing = c.execute(
                    sa.select(s.instances.c.instance_key).where(s.instances.c.is_self)
                ).scalar_one_or_none()
                if existing is not None and existing != instance_key:
                    raise CatalogError(
                        f"this catalog already belongs to instance {existing!r}, not {instance_key!r}; "
                        "remove instance_key from the configuration or set it to the registered key"
                    )
            found = c.execute(
                sa.select(s.instances.c.instance_key).where(s.instances.c.instance_key == instance_key)
            ).first()
            if found is None:
                c.execute(s.instances.insert().values(
                    instance_key=instance_key, is_self=is_self, storage_root=storage_root,
                    description=description, registered_time=utcnow(),
                ))

    def self_instance_key(self) -> str:
        with self._tx() as c:
            key = c.execute(sa.select(s.instances.c.instance_key).where(s.instances.c.is_self)).scalar()
        if key is None:
            raise CatalogError("this catalog has no instance key registered; run `silt init`")
        return key

    # The is_self row's description holds the catalog id: random, given once by `silt init`, named by the
    # instance key's _instance.json. It tells this catalog apart from others whatever URL reaches it.

    def catalog_id(self) -> str | None:
        """This catalog's id; None before `silt init` registered an instance key (or gave it an id)."""
        with self._tx() as c:
            found = c.execute(sa.select(s.instances.c.description).where(s.instances.c.is_self)).scalar()
        return found or None

    def ensure_catalog_id(self) -> str:
        """Give this catalog its id unless it has one (catalogs initialised before ids had none); return it."""
        i = s.instances
        with self._tx() as c:
            c.execute(i.update().where(i.c.is_self, i.c.description == "").values(description=secrets.token_hex(16)))
            found = c.execute(sa.select(i.c.description).where(i.c.is_self)).scalar()
        if not found:
            raise CatalogError("this catalog has no instance key registered; run `silt init`")
        return found

    @classmethod
    def look_at(cls, masked_url: str, like: Catalog) -> Catalog:
        """Open the catalog a marker names, only to read who it is; CatalogUnreachable when it cannot be.

        A SQLite file that is gone is not created again. Markers hold no passwords: a PostgreSQL URL with
        `like`'s user is tried with `like`'s password."""
        if masked_url.startswith("sqlite:///"):
            path = masked_url[len("sqlite:///"):]
            if not Path(path).is_file():
                raise CatalogUnreachable(f"{path} does not exist")
            return cls(masked_url)
        try:
            url = make_url(masked_url)
            if url.password is not None:
                own = like.engine.url
                url = url.set(password=own.password if own.username == url.username else None)
            return cls(url.render_as_string(hide_password=False), connect_timeout=10)
        except (SQLAlchemyError, ImportError):
            raise CatalogUnreachable(f"{masked_url!r} is not a catalog URL siltlake can open") from None

    def registered_self(self) -> tuple[str | None, str | None]:
        """(instance key, catalog id) this catalog registers as its own, (None, None) when it has none;
        CatalogUnreachable when it cannot be read (down, gone, not a catalog)."""
        try:
            with self._tx() as c:
                row = c.execute(sa.select(s.instances.c.instance_key, s.instances.c.description)
                                .where(s.instances.c.is_self)).first()
        except CatalogError as exc:  # not initialised: it registers nothing
            if isinstance(exc, CatalogUnreachable):
                raise
            return None, None
        except SQLAlchemyError as exc:
            raise CatalogUnreachable(str(getattr(exc, "orig", exc)).strip().splitlines()[0]) from None
        return (row.instance_key, row.description or None) if row is not None else (None, None)

    def same_database(self, other: Catalog) -> bool:
        """Whether two catalogs, opened under different URLs, are one database (not one and its copy);
        CatalogUnreachable when either cannot be read."""
        try:
            return self._fingerprint() == other._fingerprint()
        except (OSError, SQLAlchemyError) as exc:
            raise CatalogUnreachable(str(getattr(exc, "orig", exc)).strip().splitlines()[0]) from None

    def _fingerprint(self) -> tuple:
        if self.dialect == "sqlite":
            stat = os.stat(self.url[len("sqlite:///"):])
            return stat.st_dev, stat.st_ino
        # A copy lives in another database of the server, or on another server (started at another time).
        with self._tx() as c:
            return tuple(c.execute(sa.text(
                "SELECT current_database(), pg_postmaster_start_time(), "
                "(SELECT oid FROM pg_database WHERE datname = current_database())")).one())

    # --- tables ----------------------------------------------------------------------------------

    @staticmethod
    def _record(row) -> TableRecord:  # noqa: ANN001 - a SQLAlchemy Row
        return TableRecord(
            id=row.id,
            definition=TableDef.from_json(row.definition),
            physical_schema_name=row.physical_schema_name,
            physical_table_name=row.physical_table_name,
            create_time=row.create_time,
        )

    def create_table(self, definition: TableDef) -> TableRecord:
        with self._tx() as c:
            if self._find_table(c, definition.schema_name, definition.name) is not None:
                raise CatalogError(f"table {definition.qualified_name} already exists")
            taken = {
                (r.physical_schema_name, r.physical_table_name)
                for r in c.execute(sa.select(s.tables.c.physical_schema_name, s.tables.c.physical_table_name))
            }
            physical_table, suffix = definition.name, 1
            # A dropped table keeps its physical name until reap removes its objects.
            while (definition.schema_name, physical_table) in taken:
                suffix += 1
                physical_table = f"{definition.name}_{suffix}"
            now = utcnow()
            new_id = c.execute(s.tables.insert().values(
                schema_name=definition.schema_name, table_name=definition.name,
                physical_schema_name=definition.schema_name, physical_table_name=physical_table,
                create_time=now, merge_interval=definition.merge_interval,
                time_column=definition.time_column, timezone=definition.timezone,
                ttl_days=definition.ttl_days, definition=definition.to_json(),
            ).returning(s.tables.c.id)).scalar_one()
            return self._record(c.execute(sa.select(s.tables).where(s.tables.c.id == new_id)).one())

    @staticmethod
    def _find_table(c: Connection, schema_name: str, table_name: str):  # noqa: ANN205
        return c.execute(sa.select(s.tables).where(
            s.tables.c.schema_name == schema_name,
            s.tables.c.table_name == table_name,
            s.tables.c.dropped_time.is_(None),
        )).first()

    @staticmethod
    def split_name(qualified: str) -> tuple[str, str]:
        parts = qualified.split(".")
        if len(parts) != 2:
            raise CatalogError(f"table name {qualified!r} must be written schema.table")
        return check_identifier(parts[0], "schema name"), check_identifier(parts[1], "table name")

    def get_table(self, qualified: str) -> TableRecord:
        schema_name, table_name = self.split_name(qualified)
        with self._tx() as c:
            row = self._find_table(c, schema_name, table_name)
        if row is None:
            raise NotFoundError(f"no table {qualified}; `silt table list` shows the tables")
        return self._record(row)

    def list_tables(self) -> list[TableRecord]:
        with self._tx() as c:
            rows = c.execute(
                sa.select(s.tables).where(s.tables.c.dropped_time.is_(None))
                .order_by(s.tables.c.schema_name, s.tables.c.table_name)
            ).all()
        return [self._record(r) for r in rows]

    def tables_by_key_names(self) -> dict[tuple[str, str], TableRecord]:
        """Live tables by logical and by physical (schema, table): staging keys may use either."""
        records = self.list_tables()
        found = {(r.physical_schema_name, r.physical_table_name): r for r in records}
        found.update({(r.definition.schema_name, r.definition.name): r for r in records})
        return found

    def _update_definition(self, c: Connection, table_id: int, definition: TableDef) -> None:
        c.execute(s.tables.update().where(s.tables.c.id == table_id).values(
            schema_name=definition.schema_name, table_name=definition.name,
            merge_interval=definition.merge_interval, time_column=definition.time_column,
            timezone=definition.timezone, ttl_days=definition.ttl_days, definition=definition.to_json(),
        ))

    def add_column(self, qualified: str, column: Column) -> TableRecord:
        if not column.nullable:
            raise CatalogError(
                f"new column {column.name} must be nullable: objects written before it have no values"
            )
        with self._tx() as c:
            record = self._locked_table(c, qualified)
            if column.name in {existing.name for existing in record.definition.columns}:
                raise CatalogError(f"table {qualified} already has a column {column.name}")
            self._update_definition(c, record.id, record.definition.with_column(column))
        return self.get_table(qualified)

    def alter_column_type(self, qualified: str, column: str, type_name: str) -> TableRecord:
        """Widen a column (int -> bigint, float -> double); older objects read as the new type."""
        with self._tx() as c:
            record = self._locked_table(c, qualified)
            self._update_definition(c, record.id, record.definition.with_column_type(column, type_name))
        return self.get_table(qualified)

    def rename_table(self, qualified: str, new_qualified: str) -> TableRecord:
        new_schema, new_name = self.split_name(new_qualified)
        with self._tx() as c:
            record = self._locked_table(c, qualified)
            if self._find_table(c, new_schema, new_name) is not None:
                raise CatalogError(f"table {new_qualified} already exists")
            self._update_definition(c, record.id, record.definition.renamed(new_schema, new_name))
        return self.get_table(new_qualified)

    def drop_table(self, qualified: str) -> TableRecord:
        """Mark a table dropped; its objects stay until reap removes them."""
        with self._tx() as c:
            record = self._locked_table(c, qualified)
            c.execute(s.tables.update().where(s.tables.c.id == record.id).values(dropped_time=utcnow()))
        return record

    def _locked_table(self, c: Connection, qualified: str) -> TableRecord:
        schema_name, table_name = self.split_name(qualified)
        query = sa.select(s.tables).where(
            s.tables.c.schema_name == schema_name,
            s.tables.c.table_name == table_name,
            s.tables.c.dropped_time.is_(None),
        )
        if self.dialect == "postgresql":
            query = query.with_for_update()
        row = c.execute(query).first()
        if row is None:
            raise NotFoundError(f"no table {qualified}; `silt table list` shows the tables")
        return self._record(row)

    # --- staging objects ---------------------------------------------------------------------

    def known_uris(self, uris: Sequence[str]) -> set[str]:
        """Which of these URIs are already registered, as staging or unknown objects."""
        known: set[str] = set()
        with self._tx() as c:
            for start in range(0, len(uris), 500):
                chunk = list(uris[start:start + 500])
                for table in (s.staging_objects, s.unknown_staging_objects):
                    known.update(c.execute(sa.select(table.c.uri).where(table.c.uri.in_(chunk))).scalars())
        return known

    def register_staging_objects(self, objects: Iterable[tuple[str, int, int, dt.datetime | None]]) -> int:
        """Register (uri, table_id, size, send_time) rows once each; returns how many were new."""
        added = 0
        now = utcnow()
        with self._tx() as c:
            for uri, table_id, size, send_time in objects:
                added += self._insert_once(c, s.staging_objects, "uri", dict(
                    uri=uri, table_id=table_id, size=size, send_time=send_time, receive_time=now,
                ))
        return added

    def note_redeliveries(self, puts: Sequence[tuple[str, dt.datetime, int]]) -> list[Redelivery]:
        """Registered staging objects put again (a newer mtime than their send_time), each put returned once.

        The send_time moves to the newest put under a compare-and-set, so of several processes listing
        the same re-put only one returns it, and a later listing of the same put returns nothing."""
        so = s.staging_objects
        newer: list[Redelivery] = []
        with self._tx() as c:
            for start in range(0, len(puts), 500):
                chunk = {uri: (put_time, size) for uri, put_time, size in puts[start:start + 500]}
                for uri, send_time, size in c.execute(
                        sa.select(so.c.uri, so.c.send_time, so.c.size).where(so.c.uri.in_(list(chunk)))):
                    put_time, put_size = chunk[uri]
                    if send_time is not None and put_time > send_time:
                        newer.append(Redelivery(uri, put_time, size, put_size))
            return [put for put in newer if c.execute(
                so.update().where(so.c.uri == put.uri, so.c.send_time < put.put_time)
                .values(send_time=put.put_time)).rowcount]

    def record_unknown(self, uri: str, reason: str, *, size: int | None = None,
                       table_id: int | None = None) -> bool:
        with self._tx() as c:
            return bool(self._insert_once(c, s.unknown_staging_objects, "uri", dict(
                uri=uri, reason=reason, size=size, table_id=table_id, detect_time=utcnow(),
            )))

    def _insert_once(self, c: Connection, table: sa.Table, key: str | tuple[str, ...], values: dict) -> int:
        """Insert unless a row with the same unique key (one column or several) exists; 1 if inserted."""
        if self.dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert
        columns = [key] if isinstance(key, str) else list(key)
        statement = insert(table).values(**values).on_conflict_do_nothing(index_elements=columns)
        return len(c.execute(statement.returning(table.c[columns[0]])).all())

    def pending_staging_objects(self, limit: int) -> list[PendingStagingObject]:
        with self._tx() as c:
            rows = c.execute(
                sa.select(s.staging_objects.c.id, s.staging_objects.c.uri, s.staging_objects.c.size,
                          s.staging_objects.c.table_id)
                .where(s.staging_objects.c.processed_time.is_(None))
                .order_by(s.staging_objects.c.id).limit(limit)
            ).all()
            table_ids = {r.table_id for r in rows}
            tables = {
                t.id: self._record(t)
                for t in c.execute(sa.select(s.tables).where(s.tables.c.id.in_(table_ids)))
            } if table_ids else {}
        return [PendingStagingObject(r.id, r.uri, r.size, tables[r.table_id]) for r in rows]

    def failing_staging_objects(self) -> list[FailingStagingObject]:
        """Pending staging objects whose processing failed at least once, the most failed first."""
        so, t = s.staging_objects, s.tables
        with self._tx() as c:
            rows = c.execute(
                sa.select(so.c.uri, t.c.schema_name, t.c.table_name, so.c.failure_count, so.c.last_failure,
                          so.c.last_failure_time)
                .select_from(so.join(t, so.c.table_id == t.c.id))
                .where(so.c.processed_time.is_(None), so.c.failure_count > 0)
                .order_by(so.c.failure_count.desc(), so.c.id)
            ).all()
        return [FailingStagingObject(r.uri, f"{r.schema_name}.{r.table_name}", r.failure_count, r.last_failure,
                                     r.last_failure_time) for r in rows]

    def list_unknown(self) -> list[UnknownObject]:
        u, t = s.unknown_staging_objects, s.tables
        with self._tx() as c:
            rows = c.execute(
                sa.select(u.c.uri, u.c.reason, u.c.size, u.c.detect_time, t.c.schema_name, t.c.table_name)
                .select_from(u.outerjoin(t, u.c.table_id == t.c.id)).order_by(u.c.id)
            ).all()
        return [
            UnknownObject(r.uri, r.reason, r.size, r.detect_time,
                          f"{r.schema_name}.{r.table_name}" if r.schema_name else None)
            for r in rows
        ]

    def forget_unknown(self, uris: Sequence[str] | None = None) -> list[str]:
        """Remove unknown rows (all, or the given URIs) and re-queue their staging rows for a replay."""
        u = s.unknown_staging_objects
        with self._tx() as c:
            query = sa.select(u.c.uri)
            if uris is not None:
                query = query.where(u.c.uri.in_(list(uris)))
            forgotten = list(c.execute(query).scalars())
            if forgotten:
                c.execute(u.delete().where(u.c.uri.in_(forgotten)))
                c.execute(s.staging_objects.delete().where(
                    s.staging_objects.c.uri.in_(forgotten),
                    ~sa.exists().where(s.small_objects.c.staging_object_id == s.staging_objects.c.id),
                ))
        return forgotten

    def error_uris(self, table_id: int) -> list[str]:
        so = s.staging_objects
        with self._tx() as c:
            return list(c.execute(
                sa.select(so.c.error_uri).where(so.c.table_id == table_id, so.c.error_uri.is_not(None))
                .order_by(so.c.id)
            ).scalars())

    def error_uris_received(self, table_id: int) -> list[tuple[str, dt.datetime]]:
        """(error file URI, when its staging object was registered) of a table, in staging id order."""
        so = s.staging_objects
        with self._tx() as c:
            return [(r.error_uri, r.receive_time) for r in c.execute(
                sa.select(so.c.error_uri, so.c.receive_time).where(so.c.table_id == table_id,
                                                                   so.c.error_uri.is_not(None))
                .order_by(so.c.id))]

    def clear_error_uri(self, error_uri: str) -> None:
        with self._tx() as c:
            c.execute(s.staging_objects.update().where(s.staging_objects.c.error_uri == error_uri)
                      .values(error_uri=None))

    # --- small objects and partitions ------------------------------------------------------------

    @contextmanager
    def stream_commit(self) -> Iterator[StreamCommit]:
        """A transaction that appends small objects, holding the lock that orders their ids.

        Ids are handed out and committed under one lock, so once a reader sees id N every smaller id
        is committed too: merge ranges can cover "ids <= upper bound" without missing a late commit.
        """
        with self._tx() as c:
            if self.dialect == "postgresql":
                c.execute(sa.select(sa.func.pg_advisory_xact_lock(s.SMALL_OBJECT_LOCK)))
            yield StreamCommit(self, c)

    def close_partition(self, table_id: int, partition_date: dt.date) -> PartitionRow:
        """Close a partition: later small objects of its date become delayed."""
        with self.stream_commit() as tx:
            partition = tx.partition(table_id, partition_date)
            if partition is None:
                raise NotFoundError(f"table id {table_id} has no partition {partition_date}")
            return tx.close(partition)

    def partitions(self, table_id: int) -> list[PartitionRow]:
        with self._tx() as c:
            rows = c.execute(sa.select(s.partitions).where(s.partitions.c.table_id == table_id)
                             .order_by(s.partitions.c.partition_date)).all()
        return [_partition(r) for r in rows]

    def small_objects(self, table_id: int, *, delayed: bool | None = None,
                      up_to_id: int | None = None) -> list[SmallObjectRow]:
        """A table's small objects in id order, in one query."""
        so, p = s.small_objects, s.partitions
        query = (
            sa.select(so.c.id, p.c.partition_date, so.c.delayed, so.c.content_length, so.c.row_count)
            .select_from(so.join(p, so.c.partition_id == p.c.id))
            .where(p.c.table_id == table_id)
            .order_by(so.c.id)
        )
        if delayed is not None:
            query = query.where(so.c.delayed == delayed)
        if up_to_id is not None:
            query = query.where(so.c.id <= up_to_id)
        with self._tx() as c:
            return [SmallObjectRow(*r) for r in c.execute(query)]

    def max_small_object_id(self) -> int:
        with self._tx() as c:
            return c.execute(sa.select(sa.func.coalesce(sa.func.max(s.small_objects.c.id), 0))).scalar_one()

    def merge_jobs(self, partition_id: int) -> list[dict]:
        with self._tx() as c:
            return [r._asdict() for r in c.execute(
                sa.select(s.merge_jobs).where(s.merge_jobs.c.partition_id == partition_id)
            )]

    def partition_summary(self, table_id: int) -> list[dict]:
        """Per partition: state, object and row counts by live/delayed, merged objects and their rows."""
        so, p = s.small_objects, s.partitions
        with self._tx() as c:
            rows = c.execute(
                sa.select(
                    p.c.partition_date, p.c.last_live_object_id, so.c.delayed,
                    sa.func.count(so.c.id).label("objects"),
                    sa.func.coalesce(sa.func.sum(so.c.row_count), 0).label("rows"),
                    sa.func.coalesce(sa.func.sum(so.c.content_length), 0).label("bytes"),
                )
                .select_from(p.outerjoin(so, so.c.partition_id == p.c.id))
                .where(p.c.table_id == table_id)
                .group_by(p.c.partition_date, p.c.last_live_object_id, so.c.delayed)
                .order_by(p.c.partition_date)
            ).all()
            r_ = s.merge_ranges
            merged = {row.partition_date: row for row in c.execute(
                sa.select(p.c.partition_date, sa.func.count(r_.c.id).label("objects"),
                          sa.func.coalesce(sa.func.sum(r_.c.row_count), 0).label("rows"))
                .select_from(p.join(r_, r_.c.partition_id == p.c.id))
                .where(p.c.table_id == table_id, r_.c.lower_bound.is_not(None))
                .group_by(p.c.partition_date)
            )}
        summary: dict[dt.date, dict] = {}
        for r in rows:
            entry = summary.setdefault(r.partition_date, {
                "date": r.partition_date, "closed": r.last_live_object_id is not None,
                "live_objects": 0, "live_rows": 0, "delayed_objects": 0, "delayed_rows": 0, "bytes": 0,
                "merged_objects": merged[r.partition_date].objects if r.partition_date in merged else 0,
                "merged_rows": int(merged[r.partition_date].rows) if r.partition_date in merged else 0,
            })
            if r.delayed is None:
                continue
            kind = "delayed" if r.delayed else "live"
            entry[f"{kind}_objects"] += r.objects
            entry[f"{kind}_rows"] += r.rows
            entry["bytes"] += r.bytes
        return list(summary.values())


def _partition(row) -> PartitionRow:  # noqa: ANN001
    return PartitionRow(
        id=row.id, table_id=row.table_id, partition_date=row.partition_date,
        current_manifest_version=row.current_manifest_version,
        desired_manifest_version=row.desired_manifest_version,
        last_live_object_id=row.last_live_object_id, switched=row.switched,
    )


class StreamCommit:
    """Operations inside one small-object commit (see Catalog.stream_commit)."""

    def __init__(self, catalog: Catalog, connection: Connection) -> None:
        self._catalog = catalog
        self._c = connection

    def is_processed(self, staging_object_id: int) -> bool:
        row = self._c.execute(
            sa.select(s.staging_objects.c.processed_time).where(s.staging_objects.c.id == staging_object_id)
        ).one_or_none()
        return row is None or row.processed_time is not None

    def partition(self, table_id: int, partition_date: dt.date) -> PartitionRow | None:
        row = self._c.execute(sa.select(s.partitions).where(
            s.partitions.c.table_id == table_id, s.partitions.c.partition_date == partition_date,
        )).first()
        return _partition(row) if row else None

    def partition_for(self, table_id: int, partition_date: dt.date, merge_interval: int,
                      now: dt.datetime) -> PartitionRow:
        """The partition row (created with the first object), with a waiting merge job.

        A partition always has a waiting job while it holds unmerged objects: the first object's
        schedules the first merge merge_interval later; one arriving while no job waits (the last
        one finished, or is running) schedules the next merge the same way.
        """
        found = self.partition(table_id, partition_date)
        if found is None:
            self._c.execute(s.partitions.insert().values(
                table_id=table_id, partition_date=partition_date, create_time=now))
            found = self.partition(table_id, partition_date)
            assert found is not None
        # advance=False: a job waiting out a failure's backoff keeps its later time.
        self._catalog._schedule_waiting(self._c, found.id, now + dt.timedelta(seconds=merge_interval),
                                        advance=False)
        return found

    def updated_since(self, partition_id: int, mark: int) -> int | None:
        """The version number of an update published to the partition after `mark` (Catalog.version_mark):
        an append that started before it must not commit (seed 004: update vs append, the later fails)."""
        v = s.partition_versions
        return self._c.execute(sa.select(sa.func.min(v.c.version)).where(
            v.c.partition_id == partition_id, v.c.id > mark, v.c.commit_op == "update")).scalar_one()

    def allocate_ids(self, count: int) -> list[int]:
        if count <= 0:
            return []
        if self._catalog.dialect == "postgresql":
            return list(self._c.execute(sa.select(sa.func.nextval("small_object_id_seq")).select_from(
                sa.func.generate_series(1, count))).scalars())
        last = self._c.execute(
            s.id_counters.update().where(s.id_counters.c.name == "small_objects")
            .values(last_value=s.id_counters.c.last_value + count).returning(s.id_counters.c.last_value)
        ).scalar_one()
        return list(range(last - count + 1, last + 1))

    def add_small_object(self, *, object_id: int, staging_object_id: int, partition_id: int, delayed: bool,
                         content_length: int, row_count: int, min_event_time: dt.datetime,
                         max_event_time: dt.datetime, upload_start_time: dt.datetime) -> None:
        try:
            with self._c.begin_nested():
                self._c.execute(s.small_objects.insert().values(
                    id=object_id, staging_object_id=staging_object_id, partition_id=partition_id,
                    delayed=delayed, content_length=content_length, row_count=row_count,
                    min_event_time=min_event_time, max_event_time=max_event_time,
                    upload_start_time=upload_start_time,
                ))
        except IntegrityError:
            raise CatalogError(
                f"staging object {staging_object_id} already has a small object in partition {partition_id}"
            ) from None

    def mark_processed(self, staging_object_id: int, *, records_in: int, bad_records: int,
                       error_uri: str | None, now: dt.datetime) -> None:
        self._c.execute(s.staging_objects.update().where(s.staging_objects.c.id == staging_object_id).values(
            processed_time=now, records_in=records_in, bad_records=bad_records, error_uri=error_uri,
        ))

    def register_loaded(self, uri: str, *, table_id: int, size: int, records_in: int, bad_records: int,
                        error_uri: str | None, now: dt.datetime) -> int | None:
        """Register one load task's output as a processed staging row (its small objects need one);
        None when the URI is already registered: that task was committed before, so nothing is added."""
        if not self._catalog._insert_once(self._c, s.staging_objects, "uri", dict(
            uri=uri, table_id=table_id, size=size, receive_time=now, processed_time=now,
            records_in=records_in, bad_records=bad_records, error_uri=error_uri,
        )):
            return None
        return self._c.execute(sa.select(s.staging_objects.c.id).where(s.staging_objects.c.uri == uri)).scalar_one()

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """A part of the commit that can fail alone: an exception undoes its writes and propagates."""
        with self._c.begin_nested():
            yield

    def record_failure(self, staging_object_id: int, reason: str, *, max_failures: int,
                       now: dt.datetime) -> tuple[int, str | None]:
        """Count a failed processing attempt of a pending staging object: (its failures so far, and the unknown
        object's reason once they reach max_failures, when it moves to unknown). (0, None) if no longer pending."""
        so = s.staging_objects
        row = self._c.execute(
            so.update().where(so.c.id == staging_object_id, so.c.processed_time.is_(None))
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

    def mark_unknown(self, staging_object_id: int, uri: str, reason: str, *, size: int, table_id: int,
                     now: dt.datetime) -> None:
        self._catalog._insert_once(self._c, s.unknown_staging_objects, "uri", dict(
            uri=uri, reason=reason, size=size, table_id=table_id, detect_time=now,
        ))
        self._c.execute(s.staging_objects.update().where(s.staging_objects.c.id == staging_object_id)
                        .values(processed_time=now, records_in=0, bad_records=0))

    def close(self, partition: PartitionRow) -> PartitionRow:
        if partition.closed:
            return partition
        largest = self._c.execute(
            sa.select(sa.func.coalesce(sa.func.max(s.small_objects.c.id), 0))
            .where(s.small_objects.c.partition_id == partition.id)
        ).scalar_one()
        self._c.execute(s.partitions.update().where(s.partitions.c.id == partition.id)
                        .values(last_live_object_id=largest))
        closed = self.partition(partition.table_id, partition.partition_date)
        assert closed is not None
        return closed
