"""The merged object's layout: row groups of the table's row_group_bytes encoded on several threads and joined in
order, sorted and complete; dictionaries only where values repeat; pieces joined by RowGroupAppender."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from siltlake.merge.parquet_concat import RowGroupAppender, ShallowMergeRefused
from siltlake.merge.task import ENCODE_THREADS, MergeTask, RangeTask, run_merge_task
from siltlake.records.writer import object_rows, object_schema
from siltlake.storage.filesystem import Storage
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE

DAY = dt.date(2026, 11, 20)
DAY_START = dt.datetime(2026, 11, 19, 15, tzinfo=dt.UTC)


def small_objects(lake: Storage, definition: TableDef, count: int, rows: int) -> list[str]:
    """`count` time-sorted small objects of `rows` rows each at scattered times of DAY; their keys."""
    keys = []
    for n in range(count):
        times = sorted(DAY_START + dt.timedelta(seconds=(n * 7919 + i * 104729) % 86_000) for i in range(rows))
        batch = pa.table(
            {
                "utc_event_time": times,
                "user_id": [n * 100_000 + i for i in range(rows)],
                "action": [f"action-{i % 4}" for i in range(rows)],
            },
            schema=definition.arrow_schema(),
        )
        key = f"small/{n:04d}.parquet"
        with lake.open_output(key) as sink:
            pq.write_table(object_rows(batch, object_schema(definition), DAY), sink, compression=definition.codec)
        keys.append(key)
    return keys


def merge(tmp_path: Path, count: int, rows: int, row_group_bytes: int) -> tuple[Path, list[str], Storage]:
    definition = TableDef.from_mapping({**ACCESS_TABLE, "merge_mode": "deep", "row_group_bytes": row_group_bytes})
    lake = Storage(str(tmp_path))
    keys = small_objects(lake, definition, count, rows)
    planned = RangeTask(lower=0, upper=count, output_key="merged/out.parquet", small_keys=tuple(keys), small_bytes=1)
    task = MergeTask(
        job_id=1,
        lake=lake,
        table_json=definition.to_json(),
        ranges=(planned,),
        row_group_bytes=row_group_bytes,
        partition_date=DAY,
    )
    result = run_merge_task(task)
    assert result["status"] == "ok", result.get("error")
    assert result["ranges"][0]["rows"] == count * rows
    return tmp_path / "merged" / "out.parquet", keys, lake


def test_row_groups_follow_row_group_bytes_and_the_object_is_sorted_and_complete(tmp_path: Path) -> None:
    path, keys, lake = merge(tmp_path, count=40, rows=300, row_group_bytes=48 * 1024)
    merged = pq.ParquetFile(path)
    small = pa.concat_tables(pq.read_table(lake.path(key)) for key in keys)
    # row_group_bytes // the decoded bytes of a row (dt is not decoded: one value per object) rows a group
    per_group = 48 * 1024 // (small.drop_columns(["dt"]).nbytes // small.num_rows)
    sizes = [merged.metadata.row_group(i).num_rows for i in range(merged.num_row_groups)]
    assert len(sizes) > ENCODE_THREADS + 1, "more row groups than pieces in flight"
    assert sizes == [per_group] * (len(sizes) - 1) + [40 * 300 - per_group * (len(sizes) - 1)]
    everything = merged.read()
    times = everything.column("utc_event_time").to_pylist()
    assert times == sorted(times), "rows are in event-time order across row groups"
    assert Counter(zip(everything.column("user_id").to_pylist(), times, strict=True)) == Counter(
        zip(small.column("user_id").to_pylist(), small.column("utc_event_time").to_pylist(), strict=True)
    )
    assert set(everything.column("dt").to_pylist()) == {DAY}
    assert merged.schema_arrow.equals(small.schema)


def test_one_row_group_when_the_rows_fit(tmp_path: Path) -> None:
    path, _, _ = merge(tmp_path, count=3, rows=100, row_group_bytes=32 * 1024 * 1024)
    assert pq.ParquetFile(path).metadata.num_row_groups == 1


def test_dictionaries_only_for_repeating_columns(tmp_path: Path) -> None:
    path, _, _ = merge(tmp_path, count=4, rows=500, row_group_bytes=32 * 1024 * 1024)
    chunks = pq.ParquetFile(path).metadata.row_group(0)
    dictionary = {
        chunks.column(i).path_in_schema: chunks.column(i).has_dictionary_page for i in range(chunks.num_columns)
    }
    # action repeats four values and dt one; every user id and nearly every time is distinct
    assert dictionary == {"utc_event_time": False, "user_id": False, "action": True, "dt": True}


def test_appender_joins_pieces_in_order_and_refuses_an_unlike_piece(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("n", pa.int64()), pa.field("s", pa.string())])

    def piece(start: int, rows: int, compression: str = "zstd") -> pa.BufferReader:
        encoded = pa.BufferOutputStream()
        table = pa.table({"n": range(start, start + rows), "s": [f"v{i % 3}" for i in range(rows)]}, schema=schema)
        pq.write_table(table, encoded, compression=compression, row_group_size=200)
        return pa.BufferReader(encoded.getvalue())

    with open(tmp_path / "joined.parquet", "wb") as sink:
        appender = RowGroupAppender(sink)
        for start in (0, 500, 1000):
            appender.add(piece(start, 500))
        result = appender.close()
    assert (result.rows, result.row_groups) == (1500, 9)
    assert result.bytes_written == (tmp_path / "joined.parquet").stat().st_size
    joined = pq.read_table(tmp_path / "joined.parquet")
    assert joined.column("n").to_pylist() == list(range(1500))

    with open(tmp_path / "refused.parquet", "wb") as sink:
        appender = RowGroupAppender(sink)
        appender.add(piece(0, 10))
        with pytest.raises(ShallowMergeRefused, match="piece 1: .*codec"):
            appender.add(piece(10, 10, compression="snappy"))
    with pytest.raises(ShallowMergeRefused, match="no pieces"):
        RowGroupAppender(pa.BufferOutputStream()).close()
