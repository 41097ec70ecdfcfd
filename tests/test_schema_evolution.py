"""Schema evolution: int -> bigint and float -> double widen in place (older objects read as the new type,
merges cast them); added columns read as null; anything else is refused in one line."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from siltlake.deployment import Deployment
from siltlake.errors import DefinitionError
from siltlake.merge import merge_once
from siltlake.read import table as read_table
from siltlake.records import read_staging_object
from siltlake.tabledef import Column, TableDef

from .conftest import ACCESS_TABLE
from .merge_helpers import add_small_objects, merged_rows, rows_for
from .test_merge import DAY, make_table, only_partition


def test_only_int_to_bigint_and_float_to_double_widen() -> None:
    definition = TableDef.from_mapping(
        {
            **ACCESS_TABLE,
            "columns": [*ACCESS_TABLE["columns"], {"name": "score", "type": "int"}, {"name": "ratio", "type": "float"}],
        }
    )
    widened = definition.with_column_type("score", "BIGINT").with_column_type("ratio", "double")
    assert [(c.name, c.type) for c in widened.columns][3:] == [("score", "bigint"), ("ratio", "double")]
    assert widened.arrow_schema().field("ratio").type == pa.float64()
    assert definition.arrow_schema().field("ratio").type == pa.float32()
    refused = {
        ("action", "bigint"): "from string to bigint",
        ("user_id", "int"): "from bigint to int",
        ("score", "double"): "from int to double",
    }
    for (column, new_type), words in refused.items():
        with pytest.raises(
            DefinitionError,
            match=f"changing column {column} of web.access {words} converts its stored values: run it with --rewrite",
        ):
            definition.with_column_type(column, new_type)
    with pytest.raises(DefinitionError, match="column ratio of web.access is float already"):
        definition.with_column_type("ratio", "float")
    with pytest.raises(DefinitionError, match="has no column nope"):
        definition.with_column_type("nope", "bigint")
    with pytest.raises(DefinitionError, match="unknown column type 'long'"):
        definition.with_column_type("score", "long")


def test_float_columns_are_coerced_to_float32_on_both_json_paths() -> None:
    definition = TableDef.from_mapping(
        {**ACCESS_TABLE, "columns": [*ACCESS_TABLE["columns"], {"name": "ratio", "type": "float"}]}
    )
    good = [{"time": "2026-11-20T01:00:00Z", "ratio": value} for value in (0.1, 2, "2.5e3", -0.0, None)]
    bad = [{"time": "2026-11-20T01:00:00Z", "ratio": "x"}, {"time": "2026-11-20T01:00:00Z", "ratio": 1e39}]
    for extra in ([], bad):
        # Only good lines: the vectorised path; with bad ones the record-by-record path.
        lines = "".join(json.dumps(record) + "\n" for record in good + extra).encode()
        (batch,) = read_staging_object(io.BytesIO(lines), "x.jsonl", definition)
        column = batch.table.column("ratio")
        assert column.type == pa.float32()
        assert column.to_pylist() == pa.array([0.1, 2.0, 2500.0, 0.0, None], pa.float32()).to_pylist()
        assert [bad.reason for bad in batch.bad] == (
            [] if not extra else ["column ratio: 'x' is not a float", "column ratio: 1e+39 is outside the float range"]
        )


def test_widened_and_added_columns_read_and_merge_over_older_objects(deployment: Deployment, spark) -> None:
    catalog = deployment.catalog
    table = make_table(deployment, merge_mode="shallow")
    catalog.tables.add_column("web.access", Column(name="score", type="int"))
    catalog.tables.add_column("web.access", Column(name="ratio", type="float"))
    table = catalog.tables.get("web.access")

    def rows(count: int, seed: int) -> list[dict]:
        return [{**row, "score": row["user_id"] % 1000, "ratio": 0.5} for row in rows_for(DAY, count, seed)]

    add_small_objects(deployment, table, DAY, [rows(20, 1), rows(20, 2)])  # int32 and float32 objects
    table = catalog.tables.alter_column_type("web.access", "score", "bigint")
    table = catalog.tables.alter_column_type("web.access", "ratio", "double")
    table = catalog.tables.add_column("web.access", Column(name="referer", type="string"))

    read = read_table(spark, "web.access", deployment)
    assert dict(read.dtypes)["score"] == "bigint" and dict(read.dtypes)["ratio"] == "double"
    old = {(r["user_id"], r["score"], 0.5, None) for seed in (1, 2) for r in rows(20, seed)}
    assert {(r.user_id, r.score, r.ratio, r.referer) for r in read.collect()} == old, (
        "older int32/float32 objects read as bigint/double; the added column as null"
    )

    # Shallow copying would keep the older objects' int32 in the merged object: it falls back to deep.
    assert merge_once(deployment).failed == 0
    partition = only_partition(deployment, table)
    (entry,) = catalog.merge_queue.log(partition.id)
    assert entry["mode"] == "deep" and "columns changed since the objects were written" in entry["note"]
    merged = merged_rows(deployment, table, partition.id, DAY)
    assert merged.schema.equals(table.definition.arrow_schema())
    upper = catalog.merge_queue.ranges(partition.id)[-1].upper
    key = table.layout(deployment.instance_key).merged_object(DAY, 0, upper)
    assert pq.read_schema(deployment.lake.path(key)).field("score").type == pa.int64()

    # Objects written after the change share the merged object's schema: shallow again.
    newer = [{**row, "score": 5_000_000_000, "referer": "r"} for row in rows(10, 3)]
    add_small_objects(deployment, table, DAY, [newer])
    assert merge_once(deployment).failed == 0
    assert catalog.merge_queue.log(partition.id)[-1]["mode"] == "shallow"
    merged = merged_rows(deployment, table, partition.id, DAY)
    assert sorted(merged.column("score").to_pylist()) == sorted([s for _, s, *_ in old] + [5_000_000_000] * 10)
    assert merged.column("referer").null_count == 40


def test_alter_column_command(deployment: Deployment, monkeypatch) -> None:
    from click.testing import CliRunner

    from siltlake.cli import main

    from .merge_helpers import point_cli_at

    make_table(deployment)
    deployment.catalog.tables.add_column("web.access", Column(name="score", type="int"))
    point_cli_at(deployment, monkeypatch)
    runner = CliRunner()
    ok = runner.invoke(main, ["table", "alter-column", "web.access", "score", "bigint"])
    assert ok.exit_code == 0 and "score of web.access is now bigint" in ok.output
    refused = runner.invoke(main, ["table", "alter-column", "web.access", "action", "int"])
    assert refused.exit_code == 2
    assert (
        "changing column action of web.access from string to int converts its stored values: run it with --rewrite"
    ) in " ".join(refused.output.split())
