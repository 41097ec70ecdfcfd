"""Small read-only SELECTs run on the DBAPI connection as they are (CatalogCore.read_row): compiled once for the
dialect, and on SQLite asked again only once the database has changed."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from contextlib import suppress

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import PoolProxiedConnection

from siltlake.catalog.many_rows import bind_processors

_ROWS_HELD = 256  # answers kept per database state: one per (statement, values) a process keeps asking


class DirectStatement:
    """A SELECT compiled once for a dialect, its parameters put in the DBAPI's form (SQLite's are positional)
    through the columns' bind processors (SQLite keeps dates as ISO text)."""

    def __init__(self, statement: sa.Select, dialect: sa.Dialect) -> None:
        compiled = statement.compile(dialect=dialect)
        self.sql = compiled.string
        self._compiled = compiled
        self._order = compiled.positiontup
        self._processors = bind_processors(compiled, dialect)

    def parameters(self, values: Mapping[str, object]) -> Sequence[object] | Mapping[str, object]:
        given = self._compiled.construct_params(values)
        for name, processor in self._processors.items():
            given[name] = processor(given[name])
        return given if self._order is None else [given[name] for name in self._order]


def fetch_one(connection, direct: DirectStatement, values: Mapping[str, object]) -> tuple | None:
    return _first_row(connection, direct.sql, direct.parameters(values))


def _first_row(
    connection,
    sql: str,  # a DBAPI connection
    parameters: Sequence[object] | Mapping[str, object] = (),
) -> tuple | None:
    cursor = connection.cursor()
    try:
        cursor.execute(sql, parameters)
        return cursor.fetchone()
    finally:
        cursor.close()  # a SQLite statement left open would hold its read snapshot


class SqliteReader:
    """The SQLite connection this process keeps for read_row, and the rows it answered since the database last
    changed. PRAGMA data_version moves whenever any other connection, of this process or another, commits; this
    one only reads. Asking it costs a fraction of the smallest SELECT, which a reader asks on every call."""

    def __init__(self, engine: Engine) -> None:
        self._lock = threading.Lock()
        self._engine = engine
        self._failures = (engine.dialect.loaded_dbapi.Error, SQLAlchemyError)
        self._held: tuple[int, PoolProxiedConnection] | None = None  # (process id, pooled DBAPI connection)
        self._version: object = None
        self._rows: dict[tuple, tuple] = {}

    @property
    def connection(self):  # the pooled DBAPI connection, None until the first read
        return None if self._held is None else self._held[1]

    def row(self, direct: DirectStatement, values: Mapping[str, object]) -> tuple | None:
        """The statement's one row; None when the connection failed (it is closed; the next call opens another).
        The values are scalars (no expanding IN lists: the statement is compiled once), so they make a key."""
        with self._lock:
            try:
                return self._row(direct, values)
            except self._failures:
                self._close()
                return None

    def _row(self, direct: DirectStatement, values: Mapping[str, object]) -> tuple | None:
        if self._held is None or self._held[0] != os.getpid():  # a forked process opens its own
            self._held = (os.getpid(), self._engine.raw_connection())
            self._version, self._rows = None, {}
        connection = self._held[1]
        answer = _first_row(connection, "PRAGMA data_version")
        assert answer is not None  # the pragma always answers one row
        (version,) = answer
        if version != self._version:
            self._version, self._rows = version, {}
        key = (direct.sql, *sorted(values.items()))
        row = self._rows.get(key)
        if row is None:
            row = fetch_one(connection, direct, values)
            if row is not None:
                if len(self._rows) >= _ROWS_HELD:
                    self._rows.clear()
                self._rows[key] = tuple(row)
        return row

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        held, self._held = self._held, None
        self._version, self._rows = None, {}
        if held is not None and held[0] == os.getpid():
            with suppress(Exception):  # it is dropped because it failed, or the catalog closes
                held[1].close()
