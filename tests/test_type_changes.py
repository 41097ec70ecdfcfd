"""Type changes beyond widening: refused without a rewrite; with one, the partitions holding values in the
column are rewritten as update versions, every reader returns the new type, the rows whose value does not convert
leave the table for an error file that `silt errors` lists and replays, and later objects take the new type.
Also: a derived table's query refuses changes of the columns it reads only, and adding a column is a version."""

from __future__ import annotations

import datetime as dt
import gzip
import itertools
import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from siltlake.deployment import Deployment
from siltlake.derivedef import DerivedDef
from siltlake.errors import CatalogError, DefinitionError
from siltlake.lake import Lake
from siltlake.publish import publish_once
from siltlake.publish.iceberg.catalog import open_catalog
from siltlake.read import sql as spark_sql
from siltlake.records.retype import REASON, ColumnConverter
from siltlake.stream import stream_once
from siltlake.stream.replay import error_files, replay_errors
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE
from .test_merge import DAY
from .test_publish import tokyo

WITH_CODE = {**ACCESS_TABLE, "columns": [*ACCESS_TABLE["columns"], {"name": "code", "type": "string"}]}
_staged = itertools.count()


def stage(deployment: Deployment, codes: list[object], hour: int = 1) -> list[dt.datetime]:
    """Stream one JSON-lines object of events on DAY (Tokyo), one per code; their event times."""
    times = [
        dt.datetime.combine(DAY, dt.time(hour, n), tzinfo=dt.UTC) - dt.timedelta(hours=9) for n in range(len(codes))
    ]
    lines = [
        {"time": t.isoformat(), "user_id": n, "action": "a", "code": code}
        for n, (t, code) in enumerate(zip(times, codes, strict=True))
    ]
    path = Path(deployment.staging.path(f"f1.web.access/{DAY:%Y/%m/%d}/{next(_staged)}.jsonl.gz"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress("".join(json.dumps(line) + "\n" for line in lines).encode()))
    stream_once(deployment)
    return times


def codes_by_reader(deployment: Deployment, spark, version: int | None = None) -> dict[str, tuple]:
    """Each reader's code values (sorted by event time) and the type it gives them."""
    table = Lake(deployment).table("web.access")
    arrow = table.to_arrow(as_of_version=version).sort_by("utc_event_time")
    with duckdb.connect() as connection:
        duck = table.to_duckdb(connection, as_of_version=version)
        duck_type = str(dict(zip(duck.columns, duck.types, strict=True))["code"])
        duck_rows = [r[0] for r in duck.order("utc_event_time").select("code").fetchall()]
    frame = table.to_spark(spark, as_of_version=version)
    as_of = "" if version is None else f" VERSION AS OF {version}"
    spark_rows = spark_sql(spark, f"SELECT code FROM web.access{as_of} ORDER BY utc_event_time", deployment)
    return {
        "table API": (str(arrow.schema.field("code").type), arrow.column("code").to_pylist()),
        "DuckDB": (duck_type, duck_rows),
        "Spark": (dict(frame.dtypes)["code"], [r[0] for r in frame.orderBy("utc_event_time").select("code").collect()]),
        "Spark SQL": (dict(spark_rows.dtypes)["code"], [r[0] for r in spark_rows.collect()]),
    }


@pytest.mark.spark
def test_string_to_bigint_rewrites_reports_keeps_and_replays_what_does_not_convert(
    deployment: Deployment, spark
) -> None:
    deployment.config.publish.targets = ["iceberg"]
    deployment.catalog.tables.create(TableDef.from_mapping({**WITH_CODE, "merge_interval": 0}))
    stage(deployment, ["1", "22", "abc", None, "-3", "2.5"])
    publish_once(deployment, now=tokyo(DAY, 12))
    table = Lake(deployment).table("web.access")
    before_version = table.version

    with pytest.raises(
        DefinitionError,
        match=r"from string to bigint converts its stored values: run it with "
        r"--rewrite",
    ):
        table.alter_column("code", "bigint")
    assert table.record.definition.column("code").type == "string" and table.version == before_version

    report = table.alter_column("code", "bigint", rewrite=True, now=tokyo(DAY, 13))
    assert (report.partitions, report.rows, report.bad_rows) == (1, 6, 2)
    assert table.record.definition.column("code").type == "bigint" and table.version == report.table_version
    assert report.table_version == before_version + 1, "the rewritten partitions and the definition: one version"
    answers = codes_by_reader(deployment, spark)
    assert answers == {
        "table API": ("int64", [1, 22, None, -3]),
        "DuckDB": ("BIGINT", [1, 22, None, -3]),
        "Spark": ("bigint", [1, 22, None, -3]),
        "Spark SQL": ("bigint", [1, 22, None, -3]),
    }

    ((error_key, count),) = error_files(deployment, "web.access")
    assert count == 2 and deployment.lake.uri(error_key) == report.error_file
    kept = [json.loads(line) for line in deployment.lake.read_bytes(error_key).splitlines()]
    assert [(k["reason"], json.loads(k["raw"])["code"]) for k in kept] == [
        ("column code: 'abc' is not a bigint", "abc"),
        ("column code: '2.5' is not a bigint", "2.5"),
    ]
    assert json.loads(kept[0]["raw"])["time"].startswith(f"{DAY - dt.timedelta(days=1)}T16:02:00")

    publish_once(deployment, now=tokyo(DAY, 14))
    iceberg = open_catalog(deployment).load_table(("web", "access"))
    assert str(iceberg.schema().find_field("code").field_type) == "long"
    assert sorted(v for v in iceberg.scan().to_arrow().column("code").to_pylist() if v is not None) == [-3, 1, 22]

    # Later objects take the new type; the kept rows, replayed unfixed, are bad records again (still kept).
    stage(deployment, ["7", "x"], hour=5)
    replayed = replay_errors(deployment, "web.access")
    assert replayed.records == 2
    again = stream_once(deployment)
    assert (again.records_loaded, again.bad_records) == (0, 2)
    publish_once(deployment, now=tokyo(DAY, 15))
    assert codes_by_reader(deployment, spark)["table API"] == ("int64", [1, 22, None, -3, 7])

    # A version before the rewrite reads as it was: with its own definition, the strings.
    old = codes_by_reader(deployment, spark, before_version)
    values = ["1", "22", "abc", None, "-3", "2.5"]
    assert old == {
        "table API": ("string", values),
        "DuckDB": ("VARCHAR", values),
        "Spark": ("string", values),
        "Spark SQL": ("string", values),
    }
    history = [(c.op, c.detail) for c in deployment.catalog.tables.changes(table.record.id)]
    assert history == [("alter-column", "code bigint (rewrite)")]


def convert(rows: dict[str, list], before: TableDef, column: str, new_type: str) -> tuple[list, list]:
    """Runs the rewrite's converter as a Spark task would: (converted values, reasons)."""
    after = before.with_column_type(column, new_type, rewrite=True)
    (out,) = ColumnConverter(before.to_json(), after.to_json(), column)(
        iter(pa.table(rows, before.arrow_schema()).to_batches())
    )
    return out.column(column).to_pylist(), out.column(REASON).to_pylist()


def test_conversions_follow_the_streams_coercion_and_the_tables_zone() -> None:
    table = TableDef.from_mapping(
        {
            **WITH_CODE,
            "columns": [
                *ACCESS_TABLE["columns"],
                {"name": "seen", "type": "timestamp"},
                {"name": "score", "type": "string"},
                {"name": "ratio", "type": "double"},
            ],
        }
    ).with_field_ids()
    late = dt.datetime(2026, 11, 19, 15, 30, tzinfo=dt.UTC)  # 00:30 on the 20th in Tokyo
    rows = {
        "utc_event_time": [late] * 3,
        "user_id": [1, 2, 3],
        "action": ["a"] * 3,
        "seen": [late, None, late],
        "score": ["1.5", "x", " 2"],
        "ratio": [3.0, 2.5, 1e30],
    }
    assert convert(rows, table, "seen", "date")[0] == [dt.date(2026, 11, 20), None, dt.date(2026, 11, 20)]
    values, reasons = convert(rows, table, "score", "double")
    assert values[0] == 1.5 and values[1] is None and reasons[:2] == [None, "column score: 'x' is not a double"]
    values, reasons = convert(rows, table, "ratio", "int")
    assert values == [3, None, None] and reasons[1] == "column ratio: 2.5 is not a whole number, so not an int"
    assert "outside the int range" in reasons[2]
    assert convert(rows, table, "ratio", "string")[0] == ["3.0", "2.5", "1e+30"]
    after = table.with_column_type("score", "double", rewrite=True)
    score = after.column("score")
    assert (score.field_id, score.physical_name) == (8, "score_8"), "a new id and physical name: old objects read null"
    assert [c.name for c in after.dropped_columns] == ["score"]
    assert after.with_column_type("ratio", "string", rewrite=True).column("ratio").field_id == 9


def test_refusals_name_the_rewrite_and_the_columns_that_cannot_change(
    plain_deployment: Deployment, monkeypatch
) -> None:
    from .merge_helpers import silt_in_process

    silt = silt_in_process(plain_deployment, monkeypatch)
    refused = silt("table", "alter-column", "web.access", "action", "bigint", code=2)
    assert "from string to bigint converts its stored values: run it with --rewrite" in " ".join(refused.split())
    refused = silt("table", "alter-column", "web.access", "utc_event_time", "date", "--rewrite", code=2)
    assert "utc_event_time is the time column of web.access: its type cannot change" in " ".join(refused.split())
    assert "added column referrer string" in silt("table", "add-column", "web.access", "referrer", "string")
    done = " ".join(silt("table", "alter-column", "web.access", "action", "bigint", "--rewrite").split())
    assert done == "column action of web.access is now bigint (table version 2)", "no partition: nothing rewritten"
    history = json.loads(silt("history", "web.access", "--format", "json"))
    assert [(row["table_version"], row["op"], row["shows"]) for row in history] == [
        (1, "add-column", "referrer string"),
        (2, "alter-column", "action bigint (rewrite)"),
    ]


def test_add_column_and_a_widening_are_table_versions(plain_deployment: Deployment) -> None:
    tables = plain_deployment.catalog.tables
    narrow = tables.create(
        TableDef.from_mapping(
            {**ACCESS_TABLE, "name": "narrow", "columns": [*ACCESS_TABLE["columns"][:2], {"name": "n", "type": "int"}]}
        )
    )
    tables.add_column("web.narrow", TableDef.from_mapping(WITH_CODE).column("code"))
    tables.alter_column_type("web.narrow", "n", "bigint")
    assert [(c.table_version, c.op, c.detail) for c in tables.changes(narrow.id)] == [
        (1, "add-column", "code string"),
        (2, "alter-column", "n bigint"),
    ]
    assert tables.get("web.narrow").definition.column("n").type == "bigint"


def test_a_derived_query_is_analysed_for_the_columns_it_reads() -> None:
    reads = lambda query, column: DerivedDef(name="web.r", query=query).may_read_column(column)  # noqa: E731
    assert not reads("SELECT dt, count(*) AS n FROM web.access GROUP BY dt", "action")
    assert reads("SELECT dt, action, count(1) AS n FROM web.access a GROUP BY dt, a.action", "action")
    assert not reads("SELECT dt, action, count(1) AS n FROM web.access GROUP BY dt, action", "user_id")
    assert reads("SELECT dt, a.* FROM web.access a", "user_id"), "a star reads every column"
    assert reads("SELECT a.dt FROM web.access a JOIN web.users u USING (user_id)", "user_id")
    assert reads("SELECT dt FROM web.access WHERE (", "user_id"), "a query sqlglot cannot parse reads every column"


@pytest.mark.spark
def test_a_derived_table_refuses_changes_of_the_columns_it_reads_only(deployment: Deployment, spark) -> None:
    from siltlake.derived import create_derived

    from .test_derived import make_source

    make_source(deployment, days=1)
    query = "SELECT dt, action, count(*) AS hits FROM web.access GROUP BY dt, action"
    create_derived(deployment, DerivedDef.from_mapping({"name": "web.daily_actions", "query": query}))
    tables = deployment.catalog.tables
    for change in (
        lambda: tables.rename_column("web.access", "action", "event"),
        lambda: tables.drop_column("web.access", "action"),
        lambda: tables.alter_column_type("web.access", "action", "bigint"),
    ):
        with pytest.raises(
            CatalogError,
            match=r"^web.access is read by derived table web.daily_actions, whose query "
            r"names column action, selects \* or cannot be analysed",
        ):
            change()
    tables.rename_column("web.access", "user_id", "uid")
    tables.drop_column("web.access", "uid")
    assert [c.name for c in tables.get("web.access").definition.columns] == ["utc_event_time", "action"]
