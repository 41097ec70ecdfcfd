"""History is immutable: each table version is read with the definition it had. Across an added, a
renamed and a dropped column, a widening and a rewriting type change, every version reads as it was in every
reader: the table API (by version and by time), DuckDB (to_duckdb and `silt sql`'s DuckDB path), Spark (the
reader, Spark SQL's VERSION/TIMESTAMP AS OF, the data source's versionAsOf/timestampAsOf); and reap keeps what a
retained version reads."""

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
from siltlake.lake import Lake
from siltlake.publish import publish_once
from siltlake.read import sql as spark_sql
from siltlake.read.duck import faithful, run_plan
from siltlake.read.plan import plan_query
from siltlake.read.spark_source import register
from siltlake.stream import stream_once
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE
from .test_merge import DAY
from .test_publish import tokyo

pytestmark = pytest.mark.spark
DEFINITION = {
    **ACCESS_TABLE,
    "merge_interval": 0,
    "columns": [*ACCESS_TABLE["columns"], {"name": "code", "type": "string"}, {"name": "n", "type": "int"}],
}
_staged = itertools.count()


def stage(deployment: Deployment, records: list[dict], hour: int) -> None:
    """Stream one JSON-lines object of events on DAY (Tokyo), a minute apart from `hour`."""
    start = dt.datetime.combine(DAY, dt.time(hour), tzinfo=dt.UTC) - dt.timedelta(hours=9)
    lines = [{"time": (start + dt.timedelta(minutes=i)).isoformat(), **r} for i, r in enumerate(records)]
    path = Path(deployment.staging.path(f"f1.web.access/{DAY:%Y/%m/%d}/{next(_staged)}.jsonl.gz"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress("".join(json.dumps(line) + "\n" for line in lines).encode()))
    assert stream_once(deployment).records_loaded == len(records)


def shown(names: list[str], rows: list[tuple]) -> tuple[list[str], list[tuple]]:
    """Columns and rows (ordered by event time) without the event time, whose form differs per reader."""
    return names[1:], [tuple(row[1:]) for row in rows]


def arrow_shown(table: pa.Table) -> tuple[list[str], list[tuple]]:
    table = table.sort_by("utc_event_time")
    return shown(table.column_names, list(zip(*(c.to_pylist() for c in table.columns), strict=True)))


def spark_shown(frame) -> tuple[list[str], list[tuple]]:  # a DataFrame
    return shown(frame.columns, [tuple(r) for r in frame.orderBy("utc_event_time").collect()])


def readers(deployment: Deployment, spark, config: str, version: int, at: dt.datetime) -> dict:
    """Each reader's (columns, rows) of table version `version`, and of the time `at` (in that version)."""
    table = Lake(deployment).table("web.access")
    stamp = at.strftime("%Y-%m-%d %H:%M:%S")
    with duckdb.connect() as connection:
        duck = table.to_duckdb(connection, as_of_version=version).arrow()
        duck = duck.read_all() if isinstance(duck, pa.RecordBatchReader) else duck
    answers = {
        "to_arrow": arrow_shown(table.to_arrow(as_of_version=version)),
        "to_arrow as_of": arrow_shown(table.to_arrow(as_of=at)),
        "to_duckdb": arrow_shown(duck),
    }
    for pin in (f"VERSION AS OF {version}", f"TIMESTAMP AS OF '{stamp}'"):
        query = f"SELECT * FROM web.access {pin} ORDER BY utc_event_time"
        plan = plan_query(query, deployment)
        duck_rows = run_plan(plan, deployment, faithful(plan, deployment), 1000)
        answers[f"silt sql DuckDB {pin}"] = shown(answers["to_arrow"][0], duck_rows)[1]
        answers[f"Spark SQL {pin}"] = spark_shown(spark_sql(spark, query, deployment))
    answers["to_spark"] = spark_shown(table.to_spark(spark, as_of_version=version))
    for option, value in (("versionAsOf", str(version)), ("timestampAsOf", at.isoformat() + "Z")):
        source = spark.read.format("siltlake").option("table", "web.access").option("config", config)
        answers[f"data source {option}"] = spark_shown(source.option(option, value).load())
    types = {
        "to_arrow": {f.name: str(f.type) for f in table.to_arrow(as_of_version=version).schema},
        "Spark": dict(table.to_spark(spark, as_of_version=version).dtypes),
    }
    return {"answers": answers, "types": types}


def test_every_version_reads_as_it_was_across_add_rename_drop_widen_and_retype(
    deployment: Deployment, spark, tmp_path: Path
) -> None:
    config = deployment.config
    path = tmp_path / "siltlake.toml"
    path.write_text(
        f'instance_key = "{config.instance_key}"\n[catalog]\nurl = "{config.catalog.url}"\n[storage]\n'
        f'root = "{config.storage.root}"\nstaging_root = "{config.storage.staging_root}"\n'
    )
    register(spark)
    deployment.catalog.tables.create(TableDef.from_mapping(DEFINITION))
    table = Lake(deployment).table("web.access")
    # Each step: (its version, a time within it, the columns then, the rows then, code's and n's types then).
    steps: list[tuple[int, dt.datetime, list[str], list[tuple], tuple[str, str]]] = []

    def step(hour: int, names: list[str], rows: list[tuple], types: tuple[str, str]) -> None:
        steps.append(
            (
                Lake(deployment).table("web.access").version,
                tokyo(DAY, hour).astimezone(dt.UTC).replace(tzinfo=None) + dt.timedelta(minutes=30),
                [*names, "dt"],
                [(*row, DAY) for row in rows],
                types,
            )
        )

    stage(
        deployment,
        [{"user_id": 1, "action": "a", "code": "12", "n": 1}, {"user_id": 2, "action": "b", "code": "x", "n": 2}],
        hour=1,
    )
    publish_once(deployment, now=tokyo(DAY, 12))
    step(12, ["user_id", "action", "code", "n"], [(1, "a", "12", 1), (2, "b", "x", 2)], ("string", "int32"))
    table.add_column("extra", "string", now=tokyo(DAY, 13))
    step(
        13,
        ["user_id", "action", "code", "n", "extra"],
        [(1, "a", "12", 1, None), (2, "b", "x", 2, None)],
        ("string", "int32"),
    )
    table.rename_column("action", "event", now=tokyo(DAY, 14))
    step(
        14,
        ["user_id", "event", "code", "n", "extra"],
        [(1, "a", "12", 1, None), (2, "b", "x", 2, None)],
        ("string", "int32"),
    )
    table.drop_column("user_id", now=tokyo(DAY, 15))
    step(15, ["event", "code", "n", "extra"], [("a", "12", 1, None), ("b", "x", 2, None)], ("string", "int32"))
    table.alter_column("n", "bigint", now=tokyo(DAY, 16))
    step(16, ["event", "code", "n", "extra"], [("a", "12", 1, None), ("b", "x", 2, None)], ("string", "int64"))
    report = table.alter_column("code", "bigint", rewrite=True, now=tokyo(DAY, 17))
    assert (report.partitions, report.bad_rows) == (1, 1), "'x' is no bigint: its row leaves for the error file"
    step(17, ["event", "code", "n", "extra"], [("a", 12, 1, None)], ("int64", "int64"))
    stage(deployment, [{"action": "c", "code": "7", "n": 3, "extra": "e"}], hour=5)
    publish_once(deployment, now=tokyo(DAY, 18))
    step(18, ["event", "code", "n", "extra"], [("a", 12, 1, None), ("c", 7, 3, "e")], ("int64", "int64"))
    assert [s[0] for s in steps] == sorted({s[0] for s in steps}), "each step is a version of its own"
    assert report.table_version == steps[5][0], "a rewrite and its definition are one version"

    oldest, newest = table.versions()
    for version in range(oldest, newest + 1):
        number, at, names, rows, (code_type, n_type) = [s for s in steps if s[0] <= version][-1]
        read = readers(deployment, spark, str(path), version, at)
        wrong = {
            reader: answer
            for reader, answer in read["answers"].items()
            if answer != ((names, rows) if not reader.startswith("silt sql") else rows)
        }
        assert not wrong, f"version {version} (as step {number}): expected {names} {rows}; got {wrong}"
        assert (read["types"]["to_arrow"]["code"], read["types"]["to_arrow"]["n"]) == (code_type, n_type)
        spark_types = {"string": "string", "int32": "int", "int64": "bigint"}
        assert (read["types"]["Spark"]["code"], read["types"]["Spark"]["n"]) == (
            spark_types[code_type],
            spark_types[n_type],
        )

    # Reap keeps every file a retained version reads: the versions before the rewrite still read as they were.
    Lake(deployment).reap(now=tokyo(DAY, 20).astimezone(dt.UTC).replace(tzinfo=None), grace=0, force=True)
    assert table.versions()[0] == oldest
    for number, _, names, rows, _ in steps:
        assert arrow_shown(table.to_arrow(as_of_version=number)) == (names, rows), f"version {number} after reap"
