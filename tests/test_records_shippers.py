"""Formats as shippers write them: Fluentd out_file lines, LTSV, MessagePack under a .log name; naive time
strings in a table's naive_timezone; the count of dropped fields that are no column.

No shipper can be installed here: the bytes are built exactly as each one's documentation describes them."""

from __future__ import annotations

import gzip
import json
from collections import Counter

import pyarrow as pa
import pytest

from siltlake import timevalues as tv
from siltlake.records import UnreadableObject, read_staging_object
from siltlake.records.coerce import RecordConverter
from siltlake.records.json_fast import JsonFastPath
from siltlake.records.vectorised import strings_to_micros
from siltlake.tabledef import TableDef

from .records_helpers import (
    BASIC,
    BASIC_COLUMNS,
    EPOCH_2024,
    US,
    OneWayStream,
    TrickleStream,
    event_record,
    jsonl,
    make_table,
    pack,
    read_all,
)

# --- Fluentd out_file: time TAB tag TAB json ----------------------------------------------------

NO_TIME = [{"name": "ts", "type": "timestamp"}, {"name": "user", "type": "string"}, {"name": "n", "type": "bigint"}]
LINES_TABLE = make_table(NO_TIME)


def fluentd_line(time_text: str, record: dict, tag: str | None = "web.access") -> str:
    """A line as out_file's default formatter writes it: time, tag and the record as JSON, TAB-separated (the
    record has no time field unless inject adds one)."""
    parts = [time_text] + ([tag] if tag is not None else []) + [json.dumps(record, separators=(",", ":"))]
    return "\t".join(parts) + "\n"


def test_fluentd_out_file_lines_take_the_line_time() -> None:
    data = (
        fluentd_line("2024-05-01T12:34:56+09:00", {"user": "a", "n": 1})
        + fluentd_line("2024-05-01T12:34:57+0900", {"user": "b", "n": 2})
        + fluentd_line("1714566896", {"user": "c", "n": 3}, tag=None)
    ).encode()
    table, bad = read_all(data, LINES_TABLE, key="fluent/web.access/buffer.20240501.log")
    assert bad == []
    micros = [value.timestamp() * US for value in table.column("ts").to_pylist()]
    assert micros == [(EPOCH_2024 - 9 * 3600) * US, (EPOCH_2024 - 9 * 3600 + 1) * US, EPOCH_2024 * US]
    assert table.column("user").to_pylist() == ["a", "b", "c"]


def test_fluentd_line_record_time_wins_over_the_line_time() -> None:
    data = fluentd_line("2024-05-01T00:00:00Z", {"ts": "2024-05-01T12:34:56Z", "user": "a"}).encode()
    table, _ = read_all(data, LINES_TABLE, key="x.log")
    assert table.column("ts")[0].as_py().timestamp() == EPOCH_2024


def test_fluentd_line_bad_records() -> None:
    data = (
        fluentd_line("2024-05-01T12:34:56Z", {"user": "good"})
        + "2024-05-01T12:34:56Z\tweb.access\t{broken\n"
        + "2024-05-01T12:34:56Z\tweb.access\tnot json\n"
        + fluentd_line("yesterday", {"user": "no time"})
        + fluentd_line("2024-05-01T12:34:56Z", {"user": "x", "n": "many"})
    ).encode()
    table, bad = read_all(data, LINES_TABLE, key="x.log")
    assert table.column("user").to_pylist() == ["good"]
    reasons = {record.line: record.reason for record in bad}
    assert "invalid JSON" in reasons[2]
    assert "not a Fluentd out_file line" in reasons[3]
    assert "missing event time" in reasons[4] and "entry time is unusable" in reasons[4]
    assert "column n" in reasons[5]
    assert bad[0].raw == "2024-05-01T12:34:56Z\tweb.access\t{broken"


def test_fluentd_lines_stream_gzip_and_trickle() -> None:
    data = "".join(fluentd_line(f"{EPOCH_2024 + i}", {"user": f"u{i}", "n": i}) for i in range(500)).encode()
    batches = list(read_staging_object(TrickleStream(gzip.compress(data)), "x.log.gz", LINES_TABLE, batch_rows=64))
    assert sum(batch.table.num_rows for batch in batches) == 500
    assert max(batch.records_in for batch in batches) <= 64


def test_an_object_taken_for_fluentd_lines_that_is_not_loads_no_row() -> None:
    data = b'2024-05-01T12:34:56Z\tweb\t{"user":"a"}\n' + b"plain text\n" * 3
    _, bad = read_all(data, LINES_TABLE, key="x.log")
    assert len(bad) == 3  # the lines that are not out_file's are bad records, never rows of another reading
    with pytest.raises(UnreadableObject, match="not Fluentd out_file lines"):
        read_all(b"x\ty\tz\n" * 3, make_table(NO_TIME, format="fluentd_line"), key="x.log")


# --- LTSV ----------------------------------------------------------------------------------------

LTSV_COLUMNS = [
    {"name": "time", "type": "timestamp"},
    {"name": "host", "type": "string"},
    {"name": "status", "type": "int"},
    {"name": "size", "type": "bigint"},
    {"name": "reqtime", "type": "double"},
    {"name": "ua", "type": "string"},
]
LTSV_TABLE = make_table(LTSV_COLUMNS, time_column="time")


def ltsv(**fields: str) -> str:
    return "\t".join(f"{label}:{value}" for label, value in fields.items()) + "\n"


def test_ltsv_access_log() -> None:
    data = (
        ltsv(
            time="[01/May/2024:21:34:56 +0900]",
            host="192.0.2.1",
            req="GET / HTTP/1.1",
            status="200",
            size="512",
            reqtime="0.005",
            ua="curl/8.0",
        )
        + ltsv(time="2024-05-01T12:34:57Z", host="192.0.2.2", status="404", size="-", reqtime="", ua="-")
        + "\n"
        + ltsv(time="2024-05-01T12:34:58Z", host="h:3", ua="a\\tb:c")
    ).encode()
    table, bad = read_all(data, LTSV_TABLE, key="nginx/access.log")
    assert bad == []
    assert [t.timestamp() for t in table.column("time").to_pylist()] == [EPOCH_2024, EPOCH_2024 + 1, EPOCH_2024 + 2]
    assert table.column("status").to_pylist() == [200, 404, None]
    assert table.column("size").to_pylist() == [512, None, None]  # "-" and "" are null but in string columns
    assert table.column("reqtime").to_pylist() == [0.005, None, None]
    assert table.column("ua").to_pylist() == ["curl/8.0", "-", "a\\tb:c"]
    assert table.column("host").to_pylist() == ["192.0.2.1", "192.0.2.2", "h:3"]  # split at the first colon


def test_ltsv_bad_records() -> None:
    data = (
        ltsv(time="2024-05-01T12:34:56Z", host="ok")
        + "time:2024-05-01T12:34:56Z\tno label here\n"
        + "time:2024-05-01T12:34:56Z\thost:a\thost:b\n"
        + "time:2024-05-01T12:34:56Z\tbad label!:x\n"
        + ltsv(time="2024-05-01T12:34:56Z", status="two hundred")
        + ltsv(host="no time")
    ).encode()
    table, bad = read_all(data, LTSV_TABLE, key="x.ltsv")
    assert table.column("host").to_pylist() == ["ok"]
    reasons = {record.line: record.reason for record in bad}
    assert "field 2" in reasons[2] and "not label:value" in reasons[2]
    assert "'host' appears twice" in reasons[3]
    assert "not label:value" in reasons[4]
    assert "column status" in reasons[5]
    assert "missing event time" in reasons[6]


def test_ltsv_unknown_fields_rejected_when_the_table_says_so() -> None:
    table = make_table(LTSV_COLUMNS, time_column="time", unknown_fields="reject")
    data = (ltsv(time="2024-05-01T12:34:56Z", extra="") + ltsv(time="2024-05-01T12:34:56Z", extra="x")).encode()
    rows, bad = read_all(data, table, key="x.ltsv")
    assert rows.num_rows == 1 and "unknown field extra" in bad[0].reason


def test_an_object_taken_for_ltsv_that_is_not_is_unknown() -> None:
    with pytest.raises(UnreadableObject, match="not LTSV"):
        read_all(b"a b c\nd e f\n", make_table(LTSV_COLUMNS, time_column="time", format="ltsv"), key="x")
    with pytest.raises(UnreadableObject, match="invalid UTF-8 at line 2"):
        read_all(b"time:1\thost:a\ntime:1\thost:\xff\n", LTSV_TABLE, key="x.ltsv")


# --- content over the name ----------------------------------------------------------------------


def test_msgpack_under_a_log_name_loads_as_msgpack() -> None:
    maps = pack(event_record(1), event_record(2))  # out_file <format msgpack>: one map per record
    table, bad = read_all(maps, key="fluent/access.20240501_0.log")
    assert bad == [] and table.column("n").to_pylist() == [1, 2]
    entries = pack([EPOCH_2024, {"user": "a", "action": "x"}], [EPOCH_2024 + 1, {"user": "b", "action": "y"}])
    table, bad = read_all(gzip.compress(entries), key="buffer.b5f0.log.gz")  # [time, record] entries
    assert bad == [] and [t.timestamp() for t in table.column("ts").to_pylist()] == [EPOCH_2024, EPOCH_2024 + 1]


def test_json_under_a_csv_name_loads_as_json() -> None:
    table, bad = read_all(jsonl(event_record(1)), key="x.csv")
    assert bad == [] and table.num_rows == 1


# --- naive time strings -------------------------------------------------------------------------


def test_naive_timezone_defaults_to_the_table_zone() -> None:
    tokyo = make_table(BASIC_COLUMNS, timezone="Asia/Tokyo")
    assert tokyo.naive_timezone is None and tokyo.naive_zone == "Asia/Tokyo"
    utc_read = make_table(BASIC_COLUMNS, timezone="Asia/Tokyo", naive_timezone="UTC")
    assert utc_read.naive_zone == "UTC"
    data = jsonl({**event_record(1), "ts": "2024-05-01 21:34:56"}, {**event_record(2), "ts": "2024-05-01T12:34:56Z"})
    for table, first in ((tokyo, EPOCH_2024), (utc_read, EPOCH_2024 + 9 * 3600)):
        rows, bad = read_all(data, table)
        assert bad == []
        assert [t.timestamp() for t in rows.column("ts").to_pylist()] == [first, EPOCH_2024]


@pytest.mark.parametrize("kind", ["json", "msgpack", "csv", "ltsv"])
def test_naive_strings_in_every_format(kind: str) -> None:
    table = make_table(BASIC_COLUMNS, naive_timezone="America/New_York")
    converter = RecordConverter(table, kind)
    assert converter.add({"ts": "2024-05-01T08:34:56", "action": "a"}) is None
    assert converter.add({"ts": "2024-03-10T02:30:00", "action": "a"}) is not None  # skipped by the clock change
    assert converter.add({"ts": "2024-11-03T01:30:00", "action": "a"}) is None  # repeated: the earlier one
    times = converter.take_table().column("ts").to_pylist()
    assert [t.timestamp() for t in times] == [EPOCH_2024, tv.parse_event_time("2024-11-03T05:30:00Z") / US]


@pytest.mark.parametrize("zone", ["UTC", "Asia/Tokyo", "America/New_York", "Europe/London"])
def test_vectorised_naive_times_agree_with_the_per_record_rule(zone: str) -> None:
    texts = [
        "2024-05-01T12:34:56",
        "2024-11-03T01:30:00",
        "2024-03-31T00:59:59.5",
        "2024-10-27 01:30:00",
        "2024-05-01T12:34:56Z",
        "2024-05-01",
    ]
    for values in (texts[:4], texts[4:5], texts):
        micros = strings_to_micros(pa.chunked_array([values]), zone)
        if micros is not None:
            assert micros.to_pylist() == [tv.parse_event_time(text, "s", zone) for text in values]
    assert strings_to_micros(pa.chunked_array([texts[:4]]), zone) is not None  # the common case stays fast
    gap = strings_to_micros(pa.chunked_array([["2024-03-10T02:30:00"]]), "America/New_York")
    assert gap is None  # the per-record rule refuses it, with its reason


def test_json_fast_path_reads_naive_times_in_the_zone() -> None:
    table = make_table(BASIC_COLUMNS, naive_timezone="Asia/Tokyo")
    block = jsonl(*({**event_record(i), "ts": f"2024-05-01T21:34:{i:02d}"} for i in range(50)))
    fast = JsonFastPath(table).convert(block)
    assert fast is not None
    assert fast.column("ts")[0].as_py().timestamp() == EPOCH_2024 - 56  # 21:34:00 in Tokyo


def test_stored_definitions_without_naive_timezone_keep_utc() -> None:
    tokyo = make_table(BASIC_COLUMNS, timezone="Asia/Tokyo")
    assert TableDef.from_json(tokyo.to_json()).naive_zone == "Asia/Tokyo"
    stored_before = json.loads(tokyo.to_json())
    del stored_before["naive_timezone"]
    legacy = TableDef.from_json(json.dumps(stored_before))
    assert legacy.naive_zone == "UTC"
    assert (
        TableDef.from_json(
            legacy.with_column(legacy.columns[1].model_copy(update={"name": "other"})).to_json()
        ).naive_zone
        == "UTC"
    )


def test_naive_timezone_must_be_a_zone() -> None:
    from siltlake.errors import DefinitionError

    with pytest.raises(DefinitionError, match="naive_timezone 'Mars/Base' is not an IANA time zone"):
        make_table(BASIC_COLUMNS, naive_timezone="Mars/Base")


# --- dropped fields -------------------------------------------------------------------------------


def _dropped(data: bytes, key: str, table: TableDef = BASIC, batch_rows: int = 65536) -> Counter[str]:
    dropped: Counter[str] = Counter()
    list(read_staging_object(OneWayStream(data), key, table, batch_rows, dropped=dropped))
    return dropped


def test_dropped_fields_are_counted_in_every_format() -> None:
    records = [event_record(i, extra=i, other=None, nested={"a": 1}) for i in range(3)]
    records.append({**event_record(3, extra="x"), "n": "not a number"})  # a bad record drops nothing
    assert _dropped(jsonl(*records), "x.jsonl") == Counter(extra=3, nested=3)
    assert _dropped(pack(*records), "x.msgpack") == Counter(extra=3, nested=3)
    csv_data = b"ts,user,n,action,extra,blank\n2024-05-01T12:34:56Z,u,1,a,x,\n2024-05-01T12:34:56Z,u,2,a,y,\n"
    assert _dropped(csv_data, "x.csv") == Counter(extra=2)
    lines = fluentd_line("2024-05-01T12:34:56Z", {"user": "u", "action": "a", "extra": 1}).encode()
    assert _dropped(lines, "x.log") == Counter(extra=1)
    assert _dropped(ltsv(time="2024-05-01T12:34:56Z", extra="1", empty="").encode(), "x.ltsv", LTSV_TABLE) == Counter(
        extra=1
    )


def test_dropped_fields_counted_on_the_fast_path() -> None:
    records = [event_record(i, extra=i) for i in range(2000)]
    assert _dropped(jsonl(*records), "x.jsonl") == Counter(extra=2000)
    # An unknown field whose type changes from line to line: Arrow cannot infer it, the count stays exact.
    records = [event_record(i, extra=i if i % 2 else str(i)) for i in range(2000)]
    assert _dropped(jsonl(*records), "x.jsonl") == Counter(extra=2000)
    fast = JsonFastPath(BASIC, Counter())
    assert fast.convert(jsonl(*records)) is not None and fast.dropped == Counter(extra=2000)


def test_nothing_is_counted_when_unknown_fields_are_rejected() -> None:
    table = make_table(BASIC_COLUMNS, unknown_fields="reject")
    assert _dropped(jsonl(event_record(1, extra=1)), "x.jsonl", table) == Counter()
