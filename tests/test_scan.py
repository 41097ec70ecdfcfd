"""Table.scan(): one immutable read whose outputs (Arrow, batches, pandas, Polars, DuckDB, files, count) read the same
rows, refined into new scans, with one predicate type: SQL text or a pyarrow expression, the same rows and the same
errors for both (docs/design.md "One scan, one predicate")."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections import Counter
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from siltlake.deployment import Deployment
from siltlake.errors import SiltError
from siltlake.lake import Lake, Table
from siltlake.publish import publish_once
from siltlake.tabledef import TableDef

from .conftest import make_config
from .merge_helpers import add_small_objects
from .test_fast_sql import DAYS, batch
from .test_keyed_read import keyed_table
from .test_merge import make_table
from .test_publish import tokyo

NOON = dt.datetime(2026, 11, 20, 3, 0, tzinfo=dt.UTC)  # noon in Tokyo on DAYS[0]

# The same condition as SQL text and as a pyarrow expression.
FILTERS = [
    ("dt = '2026-11-21'", pc.field("dt") == DAYS[1]),
    ("dt >= DATE '2026-11-21' AND action = 'view'", (pc.field("dt") >= DAYS[1]) & (pc.field("action") == "view")),
    (
        "action IN ('login', 'Émile') OR user_id IS NULL",
        pc.field("action").isin(["login", "Émile"]) | pc.field("user_id").is_null(),
    ),
    ("NOT user_id > 3", ~(pc.field("user_id") > 3)),
    ("user_id BETWEEN 2 AND '4'", (pc.field("user_id") >= 2) & (pc.field("user_id") <= 4)),
    (
        "lower(ACTION) LIKE 'lo%' AND action IS NOT NULL",
        pc.match_like(pc.utf8_lower(pc.field("action")), "lo%") & ~pc.field("action").is_null(),
    ),
    (
        "utc_event_time < '2026-11-20 03:00:00'",
        pc.field("utc_event_time") < pc.scalar(pa.scalar(NOON, pa.timestamp("us", tz="UTC"))),
    ),
    ("user_id * 2 + 1 = 7", pc.field("user_id") * 2 + 1 == 7),
]


@pytest.fixture
def lake(tmp_path: Path, catalog_url: str) -> Lake:
    """web.access: DAYS[0] and DAYS[1] published as version 1, more rows of DAYS[1] and DAYS[2] live; web.keyed: a
    partition holding two rows of some keys (merged on read)."""
    deployment = Deployment(make_config(tmp_path, catalog_url))
    deployment.init()
    record = make_table(deployment)
    add_small_objects(deployment, record, DAYS[0], [batch(DAYS[0], 30), batch(DAYS[0], 20)])
    add_small_objects(deployment, record, DAYS[1], [batch(DAYS[1], 25)])
    publish_once(deployment, now=tokyo(DAYS[0], 12))
    add_small_objects(deployment, record, DAYS[1], [batch(DAYS[1], 15)])
    add_small_objects(deployment, record, DAYS[2], [batch(DAYS[2], 10)])
    keyed = deployment.catalog.tables.create(TableDef.from_mapping(keyed_table("keyed").model_dump(by_alias=True)))
    add_small_objects(
        deployment,
        keyed,
        DAYS[0],
        [
            [{"utc_event_time": NOON, "event_id": f"e{i}", "seq": 1, "v": f"old{i}"} for i in range(6)],
            [{"utc_event_time": NOON, "event_id": f"e{i}", "seq": 2, "v": f"new{i}"} for i in range(0, 6, 2)],
        ],
    )
    yield Lake(deployment)
    deployment.close()


def rows(table: pa.Table) -> Counter:
    return Counter(tuple(row.values()) for row in table.to_pylist())


def outputs(table: Table, **options: object) -> dict[str, Counter]:
    """The rows each output of table.scan(**options) gives."""
    scan = table.scan(**options)
    with duckdb.connect() as connection:
        relation = scan.to_duckdb(connection)
        assert relation.columns == scan.schema.names, options
        duck = Counter(relation.fetchall())
        scan.to_duckdb(connection, view="scanned")
        view = Counter(connection.sql("SELECT * FROM scanned").fetchall())
    frame = scan.to_pandas()
    return {
        "to_arrow": rows(scan.to_arrow()),
        "to_batches": rows(scan.to_batches().read_all()),
        "to_pandas": Counter(
            tuple(None if v is None or v != v else v for v in r)
            for r in frame.astype(object).itertuples(index=False, name=None)
        ),
        "to_polars": Counter(scan.to_polars().collect().rows()),
        "to_pyarrow_dataset": rows(scan.to_pyarrow_dataset().to_table())
        if scan.limit is None and scan.columns is None
        else rows(scan.to_arrow()),
        "to_duckdb": duck,
        "to_duckdb view": view,
    }


def test_every_output_of_a_scan_reads_the_same_rows(lake: Lake) -> None:
    access, keyed = lake.table("web.access"), lake.table("web.keyed")
    cases = [
        (access, {}),
        (access, {"as_of_version": 1}),
        (access, {"dates": [DAYS[1], DAYS[2]]}),
        (access, {"columns": ["action", "dt"]}),
        (access, {"filter": "action = 'view'", "columns": ["user_id"]}),
        (access, {"filter": pc.field("user_id") == 3, "dates": DAYS[1]}),
        (keyed, {}),
        (keyed, {"filter": "v LIKE 'new%'", "columns": ["event_id", "v"]}),
        (keyed, {"filter": pc.field("seq") == 1}),
    ]
    for table, options in cases:
        found = outputs(table, **options)
        expected = found["to_arrow"]
        assert sum(expected.values()) > 0, (table, options)
        assert all(value == expected for value in found.values()), (table, options, found)
        assert table.scan(**options).count() == sum(expected.values()), (table, options)
    assert sum(outputs(keyed)["to_arrow"].values()) == 6, "one row a key: merged on read"
    assert access.scan(dates=DAYS[0]).files() == access.files(dates=DAYS[0])
    assert len(access.scan(filter="dt = '2026-11-22'").files()) == 1, "a filter's days: only those planned"


def test_a_limit_reads_that_many_rows_from_every_output(lake: Lake) -> None:
    for name, limit in (("web.access", 7), ("web.access", 0), ("web.keyed", 4)):
        scan = lake.table(name).scan(limit=limit)
        everything = rows(lake.table(name).to_arrow())
        for output, counted in outputs(lake.table(name), limit=limit).items():
            assert sum(counted.values()) == limit and not counted - everything, (name, output)
        assert scan.count() == limit
    big = lake.table("web.access").scan(limit=10_000)
    assert big.count() == big.to_arrow().num_rows == 100


def test_scans_are_immutable_and_refine_into_new_ones(lake: Lake) -> None:
    access = lake.table("web.access")
    scan = access.scan()
    with pytest.raises(dataclasses.FrozenInstanceError):
        scan.limit = 3  # type: ignore[misc]
    viewed = scan.with_filter("action = 'view'")
    narrowed = viewed.with_filter(pc.field("dt") == DAYS[0]).select("user_id", "dt").with_limit(4)
    assert scan.filter is None and scan.columns is None and viewed.columns is None and viewed.limit is None
    assert narrowed.schema.names == ["user_id", "dt"]
    expected = access.to_arrow(
        filter=(pc.field("action") == "view") & (pc.field("dt") == DAYS[0]), columns=["user_id", "dt"]
    )
    assert narrowed.with_limit(None).to_arrow().equals(expected)
    assert narrowed.to_arrow().num_rows == 4
    assert scan.with_dates(DAYS[2]).count() == 10 and scan.with_version(as_of_version=1).count() == 75
    assert scan.with_version(as_of_version=1).with_version().count() == scan.count() == 100
    assert "web.access" in repr(narrowed) and "limit=4" in repr(narrowed)


def test_to_batches_is_a_stream_of_record_batches(lake: Lake) -> None:
    reader = lake.table("web.access").scan(columns=["user_id", "action"]).to_batches()
    assert isinstance(reader, pa.RecordBatchReader) and reader.schema.names == ["user_id", "action"]
    first = reader.read_next_batch()
    assert 0 < first.num_rows < 100  # one object's rows: not the whole version at once
    assert first.num_rows + sum(b.num_rows for b in reader) == 100


def test_a_string_and_an_expression_filter_give_the_same_rows(lake: Lake) -> None:
    access = lake.table("web.access")
    for text, expression in FILTERS:
        by_text, by_expression = outputs(access, filter=text), outputs(access, filter=expression)
        assert 0 < sum(by_text["to_arrow"].values()) < 100, text
        assert by_text == by_expression, text
        assert access.scan(filter=text).files() == access.scan(filter=expression).files(), text
    with duckdb.connect() as connection:  # text: DuckDB reads the files itself, the condition in its WHERE
        relation = access.scan(filter="action = 'view' AND dt = '2026-11-20'").to_duckdb(connection)
        assert "READ_PARQUET" in relation.explain() and "ARROW" not in relation.explain().upper()


def test_a_filter_naming_no_column_or_mismatching_types_is_refused_alike(lake: Lake) -> None:
    access = lake.table("web.access")
    for text, expression, message in (
        (
            "actoin = 'view'",
            pc.field("actoin") == "view",
            "no column actoin (did you mean action?); its columns are utc_event_time, user_id, action, dt",
        ),
        ("user_id = 'three'", pc.field("user_id") == "three", "no kernel matching input types (int64, string)"),
        ("user_id", pc.field("user_id"), "must evaluate to bool"),
    ):
        for given, shown in ((text, text), (expression, str(expression))):
            with pytest.raises(SiltError, match="^" + re.escape(f"cannot filter web.access by {shown!r}: ")) as refused:
                access.scan(filter=given)
            assert message in str(refused.value), given
    for given, message in (
        ("sqrt(user_id) > 1", "SQRT(user_id) is not supported in a filter"),
        ("SELECT 1", "give one boolean condition"),
        ("dt = DATE 'soon'", "is not a date"),
        ("access.user_id = 1", "names a table"),
        (3, "cannot filter web.access by a int"),
    ):
        with pytest.raises(SiltError, match=re.escape(message)):
            access.to_arrow(filter=given)
    with pytest.raises(SiltError, match=r"no such column \(did you mean action\?\)"):
        access.scan(columns=["Action"])
    with pytest.raises(SiltError, match="limit -1 is not a count"):
        access.scan(limit=-1)
    with pytest.raises(SiltError, match="a dataset has every column"):
        access.scan(columns=["action"]).to_pyarrow_dataset()


def test_a_renamed_column_is_read_in_place_by_every_output(lake: Lake) -> None:
    """Objects hold the column under its old name: every output shows the new one, and the dataset reads again."""
    access = lake.table("web.access")
    before = access.to_arrow()
    access.rename_column("action", "event")
    assert access.schema.names == ["utc_event_time", "user_id", "event", "dt"]
    expected = rows(before)
    for options in ({}, {"dates": [DAYS[1]]}, {"columns": ["event", "dt"]}):
        found = outputs(access, **options)
        assert all(value == found["to_arrow"] for value in found.values()), (options, found)
    assert outputs(access)["to_arrow"] == expected
    for text, expression in (
        ("event = 'view'", pc.field("event") == "view"),
        ("lower(event) LIKE 'lo%'", pc.match_like(pc.utf8_lower(pc.field("event")), "lo%")),
    ):
        by_text, by_expression = outputs(access, filter=text), outputs(access, filter=expression)
        assert by_text == by_expression and 0 < sum(by_text["to_arrow"].values()) < 100, text
    dataset = access.to_pyarrow_dataset()
    assert dataset.schema.names == access.schema.names
    assert rows(dataset.to_table()) == rows(dataset.to_table()) == expected, "read again, not a one-off stream"
    viewed = dataset.to_table(columns=["user_id"], filter=pc.field("event") == "view")
    assert (
        viewed.num_rows
        == dataset.count_rows(filter=pc.field("event") == "view")
        == sum(1 for row in before.to_pylist() if row["action"] == "view")
    )
    assert dataset.head(5).num_rows == 5 and rows(pa.table(dataset)) == expected
    assert access.to_polars().filter(pl.col("event") == "view").collect().height == viewed.num_rows
