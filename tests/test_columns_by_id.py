"""Columns renamed and dropped without moving data: objects keep the names they hold columns under,
readers show the table's names; a dropped column's data never shows again, not even under a new column of the
same name; every reader (Spark, Spark SQL, the table API, DuckDB, Iceberg) agrees at every table version."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from siltlake.deployment import Deployment
from siltlake.errors import CatalogError, DefinitionError
from siltlake.lake import Lake
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.publish.iceberg.catalog import open_catalog
from siltlake.publish.iceberg.snapshots import snapshot_of_version
from siltlake.read import sql as spark_sql
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE
from .test_merge import DAY, make_table
from .test_publish import tokyo
from .test_reap import files
from .test_table_api import stream

pytestmark = pytest.mark.spark
NEXT_DAY = DAY + dt.timedelta(days=1)
SHOWN = ("utc_event_time", "event", "user_id", "dt")


def test_rename_and_drop_change_the_definition_by_id() -> None:
    from siltlake.catalog.table_changes import with_column_renamed, without_column

    definition = TableDef.from_mapping(ACCESS_TABLE).with_field_ids()
    renamed = with_column_renamed(definition, "action", "event")
    event = renamed.column("event")
    assert (event.field_id, event.physical_name, event.source_field) == (3, "action", "action")
    dropped = without_column(renamed, "user_id")
    assert [c.name for c in dropped.columns] == ["utc_event_time", "event"]
    added = dropped.with_column(TableDef.from_mapping(ACCESS_TABLE).column("user_id"))
    user_id = added.column("user_id")
    assert user_id.field_id == 5 and user_id.physical_name == "user_id_5", "a new id and a name of its own"
    assert added.file_schema().names == ["utc_event_time", "action", "user_id_5", "dt"]
    again = without_column(added, "user_id").with_column(TableDef.from_mapping(ACCESS_TABLE).column("user_id"))
    assert (again.column("user_id").field_id, again.column("user_id").physical_name) == (6, "user_id_6")
    back = with_column_renamed(added, "event", "action")
    assert back.column("action").physical_name == "action" and back.file_schema().names[1] == "action"
    assert TableDef.from_json(added.to_json()) == added

    for change, message in (
        (lambda: without_column(definition, "utc_event_time"), "is the time column of web.access and cannot"),
        (lambda: without_column(definition, "nope"), "has no column nope"),
        (lambda: with_column_renamed(definition, "action", "user_id"), "already has a column user_id"),
        (lambda: with_column_renamed(definition, "action", "dt"), "already has a column dt"),
        (lambda: with_column_renamed(definition, "action", "Bad-Name"), "new column name 'Bad-Name' is not"),
    ):
        with pytest.raises(DefinitionError, match=message):
            change()
    keyed = TableDef.from_mapping(
        {
            **ACCESS_TABLE,
            "primary_key": ["user_id"],
            "columns": [
                ACCESS_TABLE["columns"][0],
                {"name": "user_id", "type": "bigint", "nullable": False},
                ACCESS_TABLE["columns"][2],
            ],
        }
    )
    with pytest.raises(DefinitionError, match="is a primary_key column of web.access and cannot be dropped"):
        without_column(keyed, "user_id")
    renamed_time = with_column_renamed(definition, "utc_event_time", "ts")
    assert renamed_time.time_column == "ts" and renamed_time.column("ts").physical_name == "utc_event_time"


def rows_of(table: pa.Table) -> Counter:
    """(event time in µs, event, user_id, dt) of each row."""
    times = pc.cast(table.column("utc_event_time"), pa.int64()).to_pylist()
    return Counter(zip(times, *(table.column(c).to_pylist() for c in SHOWN[1:]), strict=True))


def spark_rows(frame) -> Counter:  # a DataFrame
    return Counter(tuple(r) for r in frame.selectExpr("unix_micros(utc_event_time)", *SHOWN[1:]).collect())


def iceberg_rows(deployment: Deployment, version: int) -> Counter:
    """PyIceberg's scan of the version's snapshot, its columns found by field id under the table's names now
    (a snapshot committed before a rename or a drop carries the schema of then: Iceberg's time travel rule)."""
    iceberg = open_catalog(deployment).load_table(("web", "access"))
    snapshot = snapshot_of_version(iceberg, version)
    assert snapshot is not None, f"no snapshot holds table version {version}"
    scanned = iceberg.scan(snapshot_id=snapshot.snapshot_id).to_arrow()
    schema = next(s for s in iceberg.metadata.schemas if s.schema_id == snapshot.schema_id)
    ids = Lake(deployment).table("web.access").record.definition.field_ids
    by_id = {schema.find_field(name).field_id: name for name in scanned.column_names}
    shown = {
        name: scanned.column(by_id[ids[name]]) if ids[name] in by_id else pa.nulls(scanned.num_rows, pa.int64())
        for name in SHOWN
    }
    return rows_of(pa.table(shown))


def readers(deployment: Deployment, spark, version: int) -> dict[str, Counter]:
    """Each reader's rows of the version, its columns (the version's own) found by field id under the
    table's names now, as iceberg_rows does: a column the table no longer has (by id) is left out."""
    table = Lake(deployment).table("web.access")
    then = deployment.catalog.tables.definition_at(table.record, version).definition
    names = [*(c.name for c in then.columns), "dt"]
    now = {c.field_id: c.name for c in table.record.definition.columns}
    as_now = {c.name: now[c.field_id] for c in then.columns if c.field_id in now} | {"dt": "dt"}

    def arrow_now(rows: pa.Table) -> pa.Table:
        assert rows.column_names == names, f"version {version} shows its own columns"
        found = {as_now[n]: rows.column(n) for n in rows.column_names if n in as_now}
        return pa.table({n: found.get(n, pa.nulls(rows.num_rows, pa.int64())) for n in SHOWN})

    def spark_now(frame):  # DataFrames
        assert frame.columns == names, f"version {version} shows its own columns"
        return frame.selectExpr(
            *(f"`{old}` AS `{as_now[old]}`" for old in names if old in as_now),
            *(f"CAST(NULL AS bigint) AS `{n}`" for n in SHOWN if n not in as_now.values()),
        )

    arrow = arrow_now(table.to_arrow(as_of_version=version))
    with duckdb.connect() as connection:
        duck = table.to_duckdb(connection, as_of_version=version).arrow()
        duck = arrow_now(duck.read_all() if isinstance(duck, pa.RecordBatchReader) else duck)
    frame = spark_now(table.to_spark(spark, as_of_version=version))
    return {
        "table API": rows_of(arrow),
        "DuckDB": rows_of(duck),
        "Spark": spark_rows(frame),
        "Spark SQL": spark_rows(
            spark_now(spark_sql(spark, f"SELECT * FROM web.access VERSION AS OF {version}", deployment))
        ),
        "Iceberg": iceberg_rows(deployment, version),
    }


def data_files(keys: set[str]) -> set[str]:
    return {key for key in keys if "/_iceberg/" not in key or "/metadata/" not in key}


def test_walk_through_rename_drop_add_merge_delete_and_time_travel(deployment: Deployment, spark) -> None:
    deployment.config.publish.targets = ["iceberg"]
    make_table(deployment)
    lake = Lake(deployment)
    day = lambda rows: Counter({(t, a, None, DAY): n for (t, _, a), n in rows.items()})  # noqa: E731
    before = stream(deployment, DAY, 0) + stream(deployment, DAY, 1)
    publish_once(deployment, now=tokyo(DAY, 12))
    objects = files(deployment)
    first = lake.table("web.access").version

    table = lake.table("web.access")
    table.rename_column("action", "event", now=tokyo(DAY, 13))
    table.drop_column("user_id", now=tokyo(DAY, 14))
    table.add_column("user_id", "bigint", now=tokyo(DAY, 15))
    # Each change's Iceberg snapshot follows at once (new metadata); no data object is written or rewritten.
    assert data_files(files(deployment)) == data_files(objects), "a rename or a drop rewrites no object"
    changes = [(c.op, c.detail) for c in deployment.catalog.tables.changes(table.record.id)]
    assert changes == [
        ("rename-column", "action -> event"),
        ("drop-column", "user_id"),
        ("add-column", "user_id bigint"),
    ]
    assert table.version == first + 3

    after = stream(deployment, DAY, 2) + stream(deployment, NEXT_DAY, 3)
    new_rows = Counter({(t, a, u, DAY if u < 3_000_000 else NEXT_DAY): n for (t, u, a), n in after.items()})
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))  # closes DAY
    merge_once(deployment)
    publish_once(deployment, now=tokyo(NEXT_DAY, 2))  # DAY shows its merged object
    lake.table("web.access").delete("event = 'a1'", dates=DAY, now=tokyo(NEXT_DAY, 3))
    publish_once(deployment, now=tokyo(NEXT_DAY, 4))
    oldest, newest = lake.table("web.access").versions()

    expected_now = Counter(
        {row: n for row, n in (day(before) + new_rows).items() if not (row[3] == DAY and row[1] == "a1")}
    )
    old_ids = {u for (_, u, _) in before}
    for version in range(oldest, newest + 1):
        answers = readers(deployment, spark, version)
        reference = answers["table API"]
        assert not {u for (_, _, u, _) in reference} & old_ids, f"version {version}: dropped user_id data shows"
        wrong = {name: rows for name, rows in answers.items() if rows != reference}
        assert not wrong, f"version {version}: {sorted(wrong)} disagree with the table API"
        if version < first + 1:
            assert reference == day(before)
    assert answers["table API"] == expected_now
    iceberg = open_catalog(deployment).load_table(("web", "access"))
    assert [(f.name, f.field_id) for f in iceberg.schema().fields] == [
        ("utc_event_time", 1),
        ("event", 3),
        ("dt", 4),
        ("user_id", 5),
    ]
    mapping = json.loads(iceberg.properties["schema.name-mapping.default"])
    assert {m["field-id"]: m["names"] for m in mapping} == {
        1: ["utc_event_time"],
        3: ["action"],
        5: ["user_id_5"],
        4: ["dt"],
    }, "objects without ids: by physical name"


def test_a_column_of_a_table_a_derived_table_reads_is_neither_renamed_nor_dropped(
    deployment: Deployment, spark
) -> None:
    from .test_derived import make_source, rollup

    make_source(deployment, days=1)
    rollup(deployment, spark)
    for change in (
        lambda: deployment.catalog.tables.rename_column("web.access", "action", "event"),
        lambda: deployment.catalog.tables.drop_column("web.access", "user_id"),
    ):
        with pytest.raises(
            CatalogError,
            match=r"^web.access is read by derived table web.daily_actions, whose query "
            r"names column (action|user_id), selects \* or cannot be analysed; "
            r"`silt derived drop` it",
        ):
            change()
    definition = deployment.catalog.tables.get("web.access").definition
    assert [c.name for c in definition.columns] == ["utc_event_time", "user_id", "action"]
    assert deployment.catalog.tables.changes(deployment.catalog.tables.get("web.access").id) == []


def test_silt_renames_and_drops_columns_and_history_lists_them(plain_deployment: Deployment, monkeypatch) -> None:
    from .merge_helpers import silt_in_process

    silt = silt_in_process(plain_deployment, monkeypatch)
    assert "renamed column action of web.access to event" in silt(
        "table", "rename-column", "web.access", "action", "event"
    )
    assert "dropped column user_id of web.access" in silt("table", "drop-column", "web.access", "user_id", "--yes")
    refused = silt("table", "drop-column", "web.access", "utc_event_time", "--yes", code=2)
    assert "utc_event_time is the time column of web.access and cannot be dropped" in refused
    assert "has no column nope" in silt("table", "rename-column", "web.access", "nope", "x", code=2)
    history = json.loads(silt("history", "web.access", "--format", "json"))
    assert [(row["table_version"], row["op"], row["shows"]) for row in history] == [
        (1, "rename-column", "action -> event"),
        (2, "drop-column", "user_id"),
    ]
    shown = silt("table", "show", "web.access")
    assert "event" in shown and "user_id" not in shown
