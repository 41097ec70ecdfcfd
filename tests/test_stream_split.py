"""One large object on several cores (docs/design.md, "One large object on every core"): decoded on threads to the
serial decoder's batches, its dates written as their rows come, loaded exactly once as one small object per date."""

from __future__ import annotations

import datetime as dt
import gzip
import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from siltlake.deployment import Deployment
from siltlake.records import UnreadableObject, read_staging_object
from siltlake.records.writer import ObjectWriter
from siltlake.storage.filesystem import Storage
from siltlake.storage.keys import TableLayout
from siltlake.stream import stream_once
from siltlake.stream.stage import decode_threads
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE, make_config
from .records_helpers import BASIC, OneWayStream, make_table
from .test_stream import assert_rows_once, event, jsonl_gz, lake_files, stage

UTC = dt.UTC
START = dt.datetime(2026, 11, 20, 0, tzinfo=UTC)
IGNORING = make_table(
    [
        {"name": "ts", "type": "timestamp"},
        {"name": "user", "type": "string"},
        {"name": "n", "type": "bigint"},
        {"name": "action", "type": "string", "nullable": False},
    ],
    unknown_fields="ignore",
)


def mixed_lines(count: int) -> bytes:
    """JSON lines with, here and there, a line that is not JSON, a record missing a required field, a field that is
    no column, and blank lines: every path of the decoder, spread over many blocks."""
    lines = []
    for i in range(count):
        record = {"ts": f"2024-05-01T12:{i // 60 % 60:02d}:{i % 60:02d}Z", "user": f"u{i}", "n": i, "action": "a"}
        if i % 997 == 5:
            lines.append("{not json")
            continue
        if i % 1201 == 7:
            del record["action"]
        if i % 11 == 3:
            record[f"extra{i % 3}"] = i
        if i % 1500 == 9:
            lines.append("   ")
        lines.append(json.dumps(record))
    return ("\n".join(lines) + "\n").encode()


def decode(data: bytes, table: TableDef, workers: int) -> tuple[pa.Table, list, Counter, int]:
    dropped: Counter[str] = Counter()
    batches = list(
        read_staging_object(
            OneWayStream(data), "in/obj.jsonl.gz", table, batch_rows=256, dropped=dropped, workers=workers
        )
    )
    rows = pa.concat_tables([batch.table for batch in batches])
    bad = [(record.line, record.reason, record.raw) for batch in batches for record in batch.bad]
    return rows, bad, dropped, len(batches)


def test_threads_decode_an_object_to_the_serial_decoders_batches() -> None:
    data = gzip.compress(mixed_lines(6000))
    serial_rows, serial_bad, serial_dropped, batches = decode(data, IGNORING, workers=1)
    assert batches > 8 and len(serial_bad) > 5 and serial_dropped  # many blocks, every path taken

    rows, bad, dropped, _ = decode(data, IGNORING, workers=3)

    assert rows.equals(serial_rows)
    assert bad == serial_bad
    assert dropped == serial_dropped
    assert serial_rows.num_rows + len(serial_bad) == 6000


def test_invalid_utf8_in_a_later_block_is_named_at_its_line_on_threads() -> None:
    lines = mixed_lines(4000).split(b"\n")
    lines[3210] = b'{"ts": "2024-05-01T12:00:00Z", "user": "\xff", "n": 1, "action": "a"}'
    data = b"\n".join(lines)
    messages = []
    for workers in (1, 3):
        with pytest.raises(UnreadableObject) as raised:
            decode(data, BASIC, workers)
        messages.append(str(raised.value))
    assert messages[0] == messages[1] and "line 3211" in messages[0]


def access_rows(definition: TableDef, times: list[dt.datetime], first_id: int) -> pa.Table:
    return pa.table(
        {
            "utc_event_time": pa.array(times, pa.timestamp("us", tz="UTC")),
            "user_id": pa.array(range(first_id, first_id + len(times)), pa.int64()),
            "action": ["view"] * len(times),
        },
        schema=definition.arrow_schema(),
    )


@pytest.mark.parametrize("late, user_id", [(False, "user_id"), (True, "user_id"), (True, "uid_v1")])
def test_a_date_in_time_order_is_written_as_it_comes_and_late_rows_take_the_runs_path(
    tmp_path: Path, late: bool, user_id: str
) -> None:
    # user_id: the name its objects hold the column under (a renamed column keeps its old one)
    columns = [
        {**c, "physical": user_id} if c["name"] == "user_id" and user_id != "user_id" else c
        for c in ACCESS_TABLE["columns"]
    ]
    definition = TableDef.from_mapping({**ACCESS_TABLE, "columns": columns})
    lake = Storage(str(tmp_path / "lake"))
    writer = ObjectWriter(definition, lake, TableLayout("k1k1", "web", "access"), "r", 1, spill_bytes=32 << 10)
    date = dt.date(2026, 11, 20)
    for batch in range(20):  # in time order, each batch past the spill threshold
        writer.add(
            access_rows(definition, [START + dt.timedelta(seconds=batch * 1000 + i) for i in range(1000)], batch * 1000)
        )
    assert writer.buffers[(date, "")].ordered is not None and not writer.buffers[(date, "")].runs
    if late:  # rows before some already written: what was written becomes a sorted run
        writer.add(access_rows(definition, [START + dt.timedelta(seconds=500 + i) for i in range(1000)], 20000))

    (part,) = writer.finish()

    written = pq.read_table(lake.path(part["tmp_key"]))
    times = written.column("utc_event_time").to_pylist()
    assert times == sorted(times)
    assert sorted(written.column(user_id).to_pylist()) == list(range(21000 if late else 20000))
    assert part["rows"] == written.num_rows and part["date"] == "2026-11-20"
    assert bool(writer.object_runs) == late
    assert not [info.key for info in lake.list() if ".run-" in info.key]
    if not late:
        assert writer.written == [part["tmp_key"]]  # no run was ever written


def test_a_large_object_has_its_share_of_the_cores() -> None:
    assert decode_threads([100 << 20], 2, 32 << 20) == [2]
    assert decode_threads([100 << 20, 1 << 20, 1 << 20], 2, 32 << 20) == [2, 1, 1]
    assert decode_threads([40 << 20, 40 << 20], 4, 32 << 20) == [2, 2]
    assert decode_threads([1 << 20] * 3, 2, 32 << 20) == [1, 1, 1]


@pytest.mark.spark
@pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)
def test_an_object_decoded_on_threads_loads_exactly_once_one_small_object_per_date(
    tmp_path: Path, catalog_url: str, spark
) -> None:
    # A tiny threshold splits every object's decoding; small blocks (batch_rows) give the threads many blocks.
    deployment = Deployment(
        make_config(tmp_path, catalog_url, parallel_decode_bytes=1, batch_rows=256, spill_bytes=256 << 10)
    )
    deployment.init()
    deployment.use_spark(spark)
    try:
        deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
        # Two Tokyo dates in time order, then a stretch of late rows, then a line that is no record.
        times = [START + dt.timedelta(seconds=4 * i) for i in range(20000)]
        times[15000:15100] = [START + dt.timedelta(seconds=i) for i in range(100)]
        lines = [json.dumps(event(when, i)) for i, when in enumerate(times)]
        lines.insert(12345, "not a record")
        stage(deployment, "f1.web.access/2026/11/20/big.jsonl.gz", gzip.compress(("\n".join(lines) + "\n").encode()))
        stage(
            deployment,
            "f1.web.access/2026/11/20/small.jsonl.gz",
            jsonl_gz([event(START + dt.timedelta(hours=2), 50000 + i) for i in range(10)]),
        )

        report = stream_once(deployment)

        assert (report.processed, report.records_loaded, report.bad_records) == (2, 20010, 1)
        assert report.bad_samples[0][1].startswith("line 12346:")
        assert_rows_once(deployment, 20010)
        live = lake_files(deployment, "live")
        # One object per date per staging object: the big one spans two dates, the small one one.
        assert sorted(key.split("/")[-2] for key in live) == ["dt=2026-11-20", "dt=2026-11-20", "dt=2026-11-21"]
        for key in live:
            written = pq.read_table(deployment.lake.path(key)).column("utc_event_time").to_pylist()
            assert written == sorted(written)
        again = stream_once(deployment)
        assert (again.registered, again.processed, again.records_loaded) == (0, 0, 0)
    finally:
        deployment.close()
