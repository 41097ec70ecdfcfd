"""Table.to_duckdb's SELECT: made once per current state, bound by DuckDB at each query rather than at a view's
creation, files holding the table's columns read as they are, and dt from the partition on any directory layout."""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from pathlib import Path

import duckdb
import pytest

import siltlake.read.duck
from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.tabledef import TableDef

from .conftest import make_config
from .merge_helpers import add_small_objects
from .test_fast_sql import DAYS, batch
from .test_keyed_read import keyed_table
from .test_merge import make_table
from .test_publish import tokyo


@pytest.fixture
def local_deployment(tmp_path: Path) -> Deployment:
    deployment = Deployment(make_config(tmp_path, f"sqlite:///{tmp_path / 'catalog.db'}"))
    deployment.init()
    yield deployment
    deployment.close()


@pytest.mark.skipif(int(duckdb.__version__.split(".")[0]) < 2, reason="DuckDB before 2.0 binds a view at its creation")
def test_a_view_is_bound_at_the_queries_over_it_not_at_its_creation(local_deployment: Deployment) -> None:
    record = make_table(local_deployment)
    add_small_objects(local_deployment, record, DAYS[0], [batch(DAYS[0], 20), batch(DAYS[0], 10)])
    table = Lake(local_deployment).table("web.access")
    with duckdb.connect() as connection:
        table.to_duckdb(connection, dates=[DAYS[0]], view="access")
        assert connection.sql("SELECT count(*) FROM access").fetchall() == [(30,)]
    missing = local_deployment.lake.path(table.files(dates=[DAYS[0]])[0].split(local_deployment.lake.root + "/")[1])
    Path(missing).unlink()
    with duckdb.connect() as connection:
        assert table.to_duckdb(connection, dates=[DAYS[0]], view="access") is connection  # nothing opened yet
        with pytest.raises(duckdb.IOException, match=re.escape(Path(missing).name)):
            connection.sql("SELECT count(*) FROM access").fetchall()


def test_the_current_state_s_select_is_made_once_while_it_stays_current(
    local_deployment: Deployment, monkeypatch
) -> None:
    made = []
    original = siltlake.read.duck.table_select
    monkeypatch.setattr(siltlake.read.duck, "table_select", lambda *a, **k: made.append(1) or original(*a, **k))
    record = make_table(local_deployment)
    add_small_objects(local_deployment, record, DAYS[0], [batch(DAYS[0], 20)])
    table = Lake(local_deployment).table("web.access")

    def count(**options: object) -> int:
        with duckdb.connect() as connection:
            return (
                table.to_duckdb(connection, view="access", **options)
                .sql("SELECT count(*) FROM access")
                .fetchall()[0][0]
            )

    assert (count(), count(), len(made)) == (20, 20, 1)
    assert (count(dates=[DAYS[0]]), len(made)) == (20, 2)  # another plan: the days asked for
    add_small_objects(local_deployment, record, DAYS[0], [batch(DAYS[0], 5)])
    assert (count(), count(dates=[DAYS[0]]), len(made)) == (25, 25, 4)


def test_a_partition_merged_on_read_is_registered_on_each_connection_anew(local_deployment: Deployment) -> None:
    keyed = local_deployment.catalog.tables.create(
        TableDef.from_mapping(keyed_table("keyed").model_dump(by_alias=True))
    )
    noon = tokyo(DAYS[0], 12).replace(tzinfo=dt.UTC)
    add_small_objects(
        local_deployment,
        keyed,
        DAYS[0],
        [
            [{"utc_event_time": noon, "event_id": f"e{i}", "seq": 1, "v": f"old{i}"} for i in range(4)],
            [{"utc_event_time": noon, "event_id": f"e{i}", "seq": 2, "v": f"new{i}"} for i in range(0, 4, 2)],
        ],
    )
    table = Lake(local_deployment).table("web.keyed")
    for _ in range(2):
        with duckdb.connect() as connection:
            assert sorted(table.to_duckdb(connection).select("v").fetchall()) == [
                ("new0",),
                ("new2",),
                ("old1",),
                ("old3",),
            ]


def test_files_holding_the_table_s_columns_are_read_as_they_are(local_deployment: Deployment) -> None:
    record = make_table(local_deployment)
    current, legacy = batch(DAYS[0], 20), batch(DAYS[1], 10)
    add_small_objects(local_deployment, record, DAYS[0], [current])  # the table's columns, then dt
    add_small_objects(local_deployment, record, DAYS[1], [legacy], legacy=True)  # before objects held dt
    table = Lake(local_deployment).table("web.access")
    with duckdb.connect() as connection:
        for days, rows in (([DAYS[0]], current), ([DAYS[1]], legacy)):
            relation = table.to_duckdb(connection, dates=days)
            assert "CAST" not in relation.sql_query() and "UNION" not in relation.sql_query(), days
            assert relation.columns == table.schema.names
            assert relation.types == ["TIMESTAMP WITH TIME ZONE", "BIGINT", "VARCHAR", "DATE"]
            assert Counter(relation.fetchall()) == Counter(
                (r["utc_event_time"], r["user_id"], r["action"], days[0]) for r in rows
            )


def test_a_lake_under_a_key_value_directory_takes_dt_from_the_partition_not_the_files(tmp_path: Path) -> None:
    config = make_config(tmp_path, f"sqlite:///{tmp_path / 'catalog.db'}")
    storage = config.storage.model_copy(update={"root": str(tmp_path / "env=test" / "lake")})
    deployment = Deployment(config.model_copy(update={"storage": storage}))
    deployment.init()
    try:
        record = make_table(deployment)
        rows = {DAYS[0]: batch(DAYS[0], 12), DAYS[1]: batch(DAYS[1], 8)}
        add_small_objects(deployment, record, DAYS[0], [rows[DAYS[0]]])
        add_small_objects(deployment, record, DAYS[1], [rows[DAYS[1]]], legacy=True)
        table = Lake(deployment).table("web.access")
        with duckdb.connect() as connection:
            relation = table.to_duckdb(connection)
            assert relation.columns == table.schema.names
            assert Counter(relation.fetchall()) == Counter(
                (r["utc_event_time"], r["user_id"], r["action"], day)
                for day, batch_rows in rows.items()
                for r in batch_rows
            )
            assert table.to_duckdb(connection, dates=[DAYS[0]]).aggregate("min(dt), max(dt)").fetchall() == [
                (DAYS[0], DAYS[0])
            ]
    finally:
        deployment.close()
