"""SQLite's side of the catalog engine: its connection settings and the way migrations run on it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from siltlake.errors import CatalogError


def sqlite_setup(engine: Engine) -> None:
    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record) -> None:  # DBAPI objects
        # Let SQLAlchemy's begin() issue BEGIN IMMEDIATE: every transaction takes the write lock up
        # front, so read-then-write transactions never fail on a lock upgrade.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA busy_timeout = 60000")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


@contextmanager
def migrating(engine: Engine) -> Iterator[Connection]:
    """One transaction for the migrations. On SQLite, foreign keys are off while they run and checked whole before
    the commit: a migration that changes a table other tables reference (partitions, 0027) recreates it, and SQLite
    refuses to drop a referenced table while they are on (its documented procedure for such changes; the pragma
    takes effect only outside a transaction)."""
    sqlite = engine.dialect.name == "sqlite"
    with engine.connect() as connection:
        raw = connection.connection.dbapi_connection if sqlite else None
        if raw is not None:
            raw.execute("PRAGMA foreign_keys = OFF")
        try:
            with connection.begin():
                yield connection
                if raw is not None and (broken := connection.exec_driver_sql("PRAGMA foreign_key_check").all()):
                    raise CatalogError(f"the migration left rows whose references are gone: {broken[:5]}")
        finally:
            if raw is not None:
                raw.execute("PRAGMA foreign_keys = ON")
