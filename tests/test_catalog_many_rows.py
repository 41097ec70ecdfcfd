"""catalog/many_rows.py: a statement over many rows run on the DBAPI cursor writes what SQLAlchemy's executemany
writes, on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from siltlake.catalog import Catalog
from siltlake.catalog import schema_discovery as sd
from siltlake.catalog.many_rows import DIRECT_FROM_ROWS, execute_many, one_of

ROWS = DIRECT_FROM_ROWS + 8
WHEN = dt.datetime(2026, 12, 7, 21, 5, 0, 0)  # no microseconds: SQLite's text of a time keeps them all the same


def position_rows(prefix: str, count: int = ROWS) -> list[dict]:
    return [
        dict(
            staging_root="/staging",
            uri=f"file:///staging/{prefix}/{n}.log",
            key=f"{prefix}/{n}.log",
            change_time=WHEN + dt.timedelta(seconds=n),
            watch=n % 2 == 0,
            compressed=n % 3 == 0,
            consumed_end=n * 10,
            head_crc=None if n % 4 else n,
        )
        for n in range(count)
    ]


def upsert(catalog: Catalog) -> sa.Executable:
    """An upsert with a literal of its own in the WHERE, as record_all_consumed's."""
    p = sd.staging_positions
    statement = catalog.insert(p)
    return statement.on_conflict_do_update(
        index_elements=["uri"],
        where=p.c.state == "appending",
        set_=dict(consumed_end=statement.excluded.consumed_end, change_time=statement.excluded.change_time),
    )


def stored(catalog: Catalog, prefix: str) -> list[tuple]:
    p = sd.staging_positions
    columns = [p.c.key, p.c.change_time, p.c.watch, p.c.compressed, p.c.consumed_end, p.c.head_crc, p.c.state]
    with catalog.tx() as c:
        rows = c.execute(sa.select(*columns).where(p.c.key.startswith(f"{prefix}/")).order_by(p.c.id)).all()
    return [(row.key.split("/", 1)[1], *row[1:]) for row in rows]


@pytest.mark.parametrize("count", [3, ROWS], ids=["through SQLAlchemy", "on the cursor"])
def test_rows_written_directly_read_back_as_sqlalchemys(catalog: Catalog, count: int) -> None:
    with catalog.tx() as c:
        c.execute(upsert(catalog), position_rows("reference", count))
        execute_many(c, upsert(catalog), position_rows("direct", count))
    assert stored(catalog, "direct") == stored(catalog, "reference")
    assert stored(catalog, "direct")[1] == (
        "1.log",
        WHEN + dt.timedelta(seconds=1),
        False,
        False,
        10,
        None,
        "appending",
    )

    # The upsert's update half, and an UPDATE of bound names: times and literals put in the driver's form
    later = [{**row, "consumed_end": 999, "change_time": WHEN.replace(year=2027)} for row in position_rows("direct")]
    p = sd.staging_positions
    with catalog.tx() as c:
        execute_many(c, upsert(catalog), later[:count])
        execute_many(
            c,
            p.update()
            .where(p.c.uri == sa.bindparam("b_uri"), p.c.state == "appending")
            .values(watch=sa.bindparam("b_watch", type_=sa.Boolean)),
            [{"b_uri": row["uri"], "b_watch": True} for row in later[:count]],
        )
    assert {row[1:5] for row in stored(catalog, "direct")} == {
        (WHEN.replace(year=2027), True, row[3], 999) for row in stored(catalog, "direct")
    }


def test_a_broken_constraint_raises_sqlalchemys_error_and_a_returning_statement_returns(catalog: Catalog) -> None:
    rows = position_rows("twice")
    with pytest.raises(IntegrityError), catalog.tx() as c:
        execute_many(c, sd.staging_positions.insert(), rows + rows[:1])
    assert stored(catalog, "twice") == []
    # RETURNING: an executemany returns no rows, so the statement goes through SQLAlchemy's, and writes alike
    p = sd.staging_positions
    with catalog.tx() as c:
        execute_many(c, p.insert().returning(p.c.id), position_rows("returning"))
        c.execute(p.insert(), position_rows("reference"))
    assert stored(catalog, "returning") == stored(catalog, "reference")


def test_one_of_matches_a_list_of_values_in_one_parameter(catalog: Catalog) -> None:
    p = sd.staging_positions
    with catalog.tx() as c:
        execute_many(c, p.insert(), position_rows("listed", 100))
        uris = [f"file:///staging/listed/{n}.log" for n in range(0, 100, 3)] + ["file:///nowhere"] * 6000
        found = c.execute(sa.select(p.c.uri).where(one_of(catalog.dialect, p.c.uri, uris))).scalars().all()
        assert sorted(found) == sorted(uris[:34])
        crcs = c.execute(sa.select(p.c.head_crc).where(one_of(catalog.dialect, p.c.head_crc, [0, 4, 8, 9]))).scalars()
        assert sorted(crcs) == [0, 4, 8]
        assert c.execute(sa.select(p.c.uri).where(one_of(catalog.dialect, p.c.uri, []))).all() == []
