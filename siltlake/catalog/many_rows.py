"""One statement over many rows (an executemany) run on the DBAPI cursor with parameters made here, and a test
against many values in one parameter.

SQLAlchemy turns each row's dict into the driver's parameters through its compiled statement in Python, about 7 us
a row: on a stream round's thousands of staging and position rows that costs about as much as SQLite's own work.
Here the statement is compiled once per call, and each row's values are put in the driver's order through the
columns' bind processors (SQLite keeps times as ISO text) in one pass.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.dml import UpdateBase

# Fewer rows go through SQLAlchemy, whose cached compiled form is cheaper than compiling the statement again.
DIRECT_FROM_ROWS = 32


def execute_many(c: Connection, statement: UpdateBase, rows: Sequence[Mapping[str, object]]) -> None:
    """The statement once for each row, in c's transaction. Every row has the same keys, as SQLAlchemy's
    executemany wants; a statement that returns rows, computes a default in Python or expands a list goes through
    SQLAlchemy. No count of the rows changed: psycopg's executemany keeps none."""
    if not rows:
        return
    if len(rows) >= DIRECT_FROM_ROWS:
        compiled = statement.compile(dialect=c.dialect, column_keys=list(rows[0]))
        if isinstance(compiled, SQLCompiler) and _direct(compiled):
            c.exec_driver_sql(compiled.string, _parameters(compiled, c.dialect, rows))
            return
    c.execute(statement, list(rows))


def one_of(dialect: str, column: sa.Column, values: Sequence[str] | Sequence[int]) -> sa.ColumnElement[bool]:
    """column IN values, the values one parameter however many (SQLite: a JSON array that json_each reads; PostgreSQL:
    an array). An IN list's thousands of parameters cost SQLAlchemy several microseconds each to expand, and need
    statements cut below the databases' limits."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import ARRAY

        return column == sa.any_(sa.bindparam(None, list(values), type_=ARRAY(column.type)))
    listed = sa.func.json_each(sa.bindparam(None, json.dumps(list(values)), type_=sa.Text)).table_valued("value")
    return column.in_(sa.select(listed.c.value))


def bind_processors(compiled: SQLCompiler, dialect: sa.Dialect) -> dict[str, Callable[[object], object]]:
    """The compiled statement's parameters that the dialect stores otherwise than Python gives them, and how."""
    return {
        name: processor
        for name, bind in compiled.binds.items()
        if (processor := bind.type.dialect_impl(dialect).bind_processor(dialect)) is not None
    }


def _direct(compiled: SQLCompiler) -> bool:
    return not (
        compiled.returning
        or compiled.insert_prefetch
        or compiled.update_prefetch
        or compiled.literal_execute_params
        or compiled.post_compile_params
        or any(bind.expanding or bind.callable is not None for bind in compiled.binds.values())
    )


def _parameters(
    compiled: SQLCompiler, dialect: sa.Dialect, rows: Sequence[Mapping[str, object]]
) -> list[tuple] | list[dict]:
    processors = bind_processors(compiled, dialect)
    names = compiled.positiontup if compiled.positiontup is not None else list(compiled.binds)
    given = rows[0].keys()
    # A value in the statement itself (a literal in a WHERE) is the same in every row
    fixed = {name: compiled.binds[name].effective_value for name in names if name not in given}
    if fixed:
        rows = [{**row, **fixed} for row in rows]
    steps = [(name, processors.get(name)) for name in names]
    if compiled.positiontup is not None:
        return [tuple(processor(row[name]) if processor else row[name] for name, processor in steps) for row in rows]
    escaped = compiled.escaped_bind_names
    return [
        {escaped.get(name, name): processor(row[name]) if processor else row[name] for name, processor in steps}
        for row in rows
    ]
