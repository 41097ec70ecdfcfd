"""A merge's inputs in one DuckDB scan when they are alike (siltlake/merge/scan.py), else object by object."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import siltlake.merge.task as merge_task
from siltlake.merge.scan import scan_alike, scannable
from siltlake.merge.task import MergeTask, RangeTask, run_merge_task
from siltlake.records.writer import object_rows
from siltlake.storage.filesystem import Storage
from siltlake.tabledef import TableDef

UTC = dt.UTC
DAY = dt.date(2026, 11, 20)
TABLE = TableDef.from_mapping(
    {
        "schema": "web",
        "name": "access",
        "time_column": "utc_event_time",
        "timezone": "Asia/Tokyo",
        "columns": [
            {"name": "utc_event_time", "type": "timestamp", "nullable": False},
            {"name": "user_id", "type": "bigint"},
            {"name": "action", "type": "string"},
            {"name": "status", "type": "int"},
            {"name": "amount", "type": "decimal(10,2)"},
            {"name": "latency", "type": "double"},
            {"name": "ok", "type": "boolean"},
            {"name": "day", "type": "date"},
            {"name": "ratio", "type": "float"},
        ],
    }
)


def rows(first: int, count: int) -> pa.Table:
    import decimal

    base = dt.datetime(2026, 11, 20, 1, tzinfo=UTC)
    index = range(first, first + count)
    return pa.table(
        {
            "utc_event_time": pa.array(
                [base + dt.timedelta(seconds=(i * 37) % 5000) for i in index], pa.timestamp("us", tz="UTC")
            ),
            "user_id": pa.array([i if i % 7 else None for i in index], pa.int64()),
            "action": pa.array([("view", "buy", None, "login")[i % 4] for i in index]),
            "status": pa.array([200 + i % 3 for i in index], pa.int32()),
            "amount": pa.array([decimal.Decimal(i) / 100 for i in index], pa.decimal128(10, 2)),
            "latency": pa.array([i / 3 for i in index]),
            "ok": pa.array([i % 2 == 0 for i in index]),
            "day": pa.array([DAY - dt.timedelta(days=i % 3) for i in index], pa.date32()),
            "ratio": pa.array([i / 7 for i in index], pa.float32()),
        }
    )


def write_objects(lake: Storage, tables: list[pa.Table], schema: pa.Schema | None = None) -> list[str]:
    keys = []
    for n, table in enumerate(tables):
        key = f"small/obj-{n:04d}.parquet"
        path = Path(lake.path(key))
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(object_rows(table, schema or TABLE.file_schema(), DAY) if schema is None else table, path)
        keys.append(key)
    return keys


def merge(lake: Storage, keys: list[str], output: str) -> pa.Table:
    planned = RangeTask(
        lower=0,
        upper=len(keys),
        output_key=output,
        small_keys=tuple(keys),
        small_bytes=sum(lake.info(key).size for key in keys),
    )
    task = MergeTask(
        job_id=1,
        lake=lake,
        table_json=TABLE.to_json(),
        ranges=(planned,),
        row_group_bytes=TABLE.row_group_bytes,
        partition_date=DAY,
    )
    result = run_merge_task(task)
    assert result["status"] == "ok", result
    return pq.read_table(lake.path(output))


def test_alike_objects_scan_to_the_rows_and_order_each_object_decodes_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake = Storage(str(tmp_path))
    keys = write_objects(lake, [rows(n * 50, 1 + n * 7 % 50) for n in range(40)])
    wanted = TABLE.arrow_schema()
    scanned = scan_alike([lake.path(key) for key in keys], wanted)
    assert scanned is not None and scanned.schema.equals(wanted)
    each = pa.concat_tables([pq.read_table(lake.path(key)).select(wanted.names).cast(wanted) for key in keys])
    assert scanned.equals(each)  # values, nulls and order: object by object, row by row

    scans: list[bool] = []

    def spied(paths, schema, sort_by=None):
        found = scan_alike(paths, schema, sort_by)
        scans.append(found is not None)
        return found

    monkeypatch.setattr(merge_task, "scan_alike", spied)
    with_scan = merge(lake, keys, "merged/with-scan.parquet")
    assert scans == [True]
    monkeypatch.setattr(merge_task, "MAX_SCAN_BYTES", -1)  # object by object, as before the scan
    without = merge(lake, keys, "merged/without.parquet")
    assert scans == [True] and with_scan.equals(without)
    assert pq.read_schema(lake.path("merged/with-scan.parquet")).equals(
        pq.read_schema(lake.path("merged/without.parquet")), check_metadata=True
    )


@pytest.mark.parametrize("sorted_in", ["scan", "pyarrow"])
def test_a_sorted_scan_keeps_equal_times_in_object_then_row_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sorted_in: str
) -> None:
    lake = Storage(str(tmp_path))
    # Ten distinct times over 30 objects of 40 rows: most rows share their time with rows of other objects.
    tables = []
    for n in range(30):
        table = rows(n * 40, 40)
        times = pa.array(
            [dt.datetime(2026, 11, 20, 1, tzinfo=UTC) + dt.timedelta(seconds=(n * 7 + i) % 10) for i in range(40)],
            pa.timestamp("us", tz="UTC"),
        )
        tables.append(table.set_column(0, "utc_event_time", times))
    keys = write_objects(lake, tables)
    wanted = TABLE.arrow_schema()
    paths = [lake.path(key) for key in keys]
    each = pa.concat_tables([pq.read_table(path).select(wanted.names).cast(wanted) for path in paths])
    stable = each.take(pc.sort_indices(each, sort_keys=[("utc_event_time", "ascending")]))
    scanned = scan_alike(paths, wanted, sort_by="utc_event_time")
    assert scanned is not None and scanned.equals(stable)
    # A deep merge sorts in the scan above SORT_IN_SCAN_BYTES of input, with pyarrow after an unsorted scan below.
    monkeypatch.setattr(merge_task, "SORT_IN_SCAN_BYTES", -1 if sorted_in == "scan" else 1 << 40)
    sorts: list[str | None] = []

    def spied(paths, schema, sort_by=None):
        sorts.append(sort_by)
        return scan_alike(paths, schema, sort_by)

    monkeypatch.setattr(merge_task, "scan_alike", spied)
    with_scan = merge(lake, keys, "merged/with-scan.parquet")
    assert sorts == (["utc_event_time"] if sorted_in == "scan" else [None])
    assert with_scan.select(wanted.names).cast(wanted).equals(stable)
    monkeypatch.setattr(merge_task, "MAX_SCAN_BYTES", -1)
    assert with_scan.equals(merge(lake, keys, "merged/without.parquet"))


def test_unalike_objects_are_not_scanned_and_merge_as_before(tmp_path: Path) -> None:
    lake = Storage(str(tmp_path))
    keys = write_objects(lake, [rows(n * 10, 10) for n in range(6)])
    # An object written before a column was added, and one whose status is still a 32-bit int of another id.
    older = rows(100, 5).drop_columns(["ratio"])
    older_schema = pa.schema([f for f in TABLE.file_schema() if f.name != "ratio"])
    pq.write_table(object_rows(older, older_schema, DAY), lake.path("small/older.parquet"))
    paths = [lake.path(key) for key in keys]
    wanted = TABLE.arrow_schema()
    assert scan_alike([*paths, lake.path("small/older.parquet")], wanted) is None  # not the first one's schema
    assert scan_alike([lake.path("small/older.parquet"), *paths], wanted) is None  # lacks a column read
    merged = merge(lake, [*keys, "small/older.parquet"], "merged/mixed.parquet")
    assert merged.num_rows == 65
    assert merged.column("ratio").null_count == 5  # the older object's rows read the added column as null


def test_only_types_the_scan_returns_unchanged_are_scanned() -> None:
    instant = pa.schema([pa.field("t", pa.timestamp("us", tz="UTC"))])
    assert scannable(instant, instant)
    for other in (
        pa.timestamp("ns", tz="UTC"),
        pa.timestamp("us"),
        pa.large_string(),
        pa.binary(),
        pa.list_(pa.int64()),
        pa.int16(),
    ):
        schema = pa.schema([pa.field("t", other)])
        assert not scannable(schema, schema), other
    assert not scannable(pa.schema([pa.field("t", pa.int32())]), pa.schema([pa.field("t", pa.int64())]))


def test_a_scan_that_fails_leaves_the_files_to_the_object_by_object_path(tmp_path: Path) -> None:
    lake = Storage(str(tmp_path))
    keys = write_objects(lake, [rows(n * 500, 500) for n in range(40)])
    paths = [lake.path(key) for key in keys]
    # Pages damaged behind an intact footer: DuckDB's scan fails, and its error is not the merge's answer.
    damaged = Path(paths[5])
    data = bytearray(damaged.read_bytes())
    data[4 : len(data) // 2] = bytes(len(data) // 2 - 4)
    damaged.write_bytes(bytes(data))
    assert scan_alike(paths, TABLE.arrow_schema()) is None
    planned = RangeTask(lower=0, upper=40, output_key="merged/x.parquet", small_keys=tuple(keys), small_bytes=1)
    task = MergeTask(
        job_id=1,
        lake=lake,
        table_json=TABLE.to_json(),
        ranges=(planned,),
        row_group_bytes=TABLE.row_group_bytes,
        partition_date=DAY,
    )
    result = run_merge_task(task)  # object by object, as before the scan: pyarrow names what is wrong
    assert result["status"] == "failed", result
    assert result["error"].startswith("OSError: ") and "duckdb" not in (result["error"] + result["trace"]).lower()
    # A file gone: the merge fails on it in its own terms (its job's failure, not a storage outage).
    Path(paths[2]).unlink()
    result = run_merge_task(task)
    assert result["status"] == "failed" and "FileNotFoundError" in result["error"] and not result["outage"]


def test_footer_bytes_tell_one_schema_from_another(tmp_path: Path) -> None:
    from siltlake.merge.footers import raw_footer, schema_prefix

    def written(name: str, table: pa.Table) -> bytes:
        path = tmp_path / name
        pq.write_table(table, path)
        footer = raw_footer(str(path))
        assert footer is not None
        return footer

    schema = TABLE.file_schema()
    base = written("a.parquet", object_rows(rows(0, 30), schema, DAY))
    prefix = schema_prefix(base)
    assert prefix is not None and 0 < len(prefix) < len(base)
    assert written("b.parquet", object_rows(rows(500, 7), schema, DAY)).startswith(prefix)  # other rows, same schema
    nullable = pa.schema([f.with_nullable(True) if f.name == "utc_event_time" else f for f in schema])
    renumbered = pa.schema([f.with_metadata({b"PARQUET:field_id": b"99"}) if f.name == "status" else f for f in schema])
    for other in (nullable, renumbered):
        assert not written("c.parquet", object_rows(rows(0, 30), other, DAY)).startswith(prefix)
    assert schema_prefix(b"") is None and schema_prefix(b"\x15\x02\x00") is None and schema_prefix(base[:10]) is None
    (tmp_path / "text.parquet").write_text("not parquet at all")
    assert raw_footer(str(tmp_path / "text.parquet")) is None
