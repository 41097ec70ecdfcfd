"""A group's small JSON-lines objects read in one pyarrow call (records.joined): each object's rows, report, bad
records and dropped fields exactly as decoding it alone gives them."""

from __future__ import annotations

import datetime as dt
import gzip
import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from siltlake.records import json_fast
from siltlake.records.json_fast import JsonFastPath
from siltlake.storage.filesystem import Storage
from siltlake.storage.keys import TableLayout
from siltlake.stream import group_task
from siltlake.stream.group_task import StreamGroup, process_wave_item
from siltlake.stream.task import StreamTask, process_staging_object
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE

START = dt.datetime(2026, 11, 20, 14, 50, tzinfo=dt.UTC)  # the Tokyo day turns at 15:00 UTC
COUNTED = TableDef.from_mapping({**ACCESS_TABLE, "unknown_fields": "ignore"})

# One line of an object, by kind: what shippers send, and what they sometimes send instead.
LINE_KINDS = ["event", "event", "event", "epoch", "extra_int", "extra_text", "blank", "not_json", "bad_time", "array"]


def _line(kind: str, n: int) -> bytes:
    when = START + dt.timedelta(minutes=(7 * n) % 23)
    record: object = {"time": when.isoformat().replace("+00:00", "Z"), "user_id": n, "action": "view"}
    if kind == "epoch":
        record = {"time": int(when.timestamp()), "user_id": n}
    elif kind == "extra_int":
        record = {**record, "extra": n}
    elif kind == "extra_text":
        record = {**record, "extra": f"x{n}", "other": None}
    elif kind == "blank":
        return b"  \n"
    elif kind == "not_json":
        return b"{not json\n"
    elif kind == "bad_time":
        record = {"time": "never", "user_id": n}
    elif kind == "array":
        record = [n]
    return json.dumps(record).encode() + b"\n"


def _object(kinds: list[str], first: int, bom: bool, cut_newline: bool, compressed: bool) -> bytes:
    data = b"".join(_line(kind, first + i) for i, kind in enumerate(kinds))
    if bom:
        data = b"\xef\xbb\xbf" + data
    if cut_newline and data.endswith(b"\n"):
        data = data[:-1]
    return gzip.compress(data) if compressed else data


CLEAN_KINDS = ["event", "event", "event", "extra_int", "extra_text", "blank"]
objects = st.lists(
    st.tuples(
        st.one_of(
            st.lists(st.sampled_from(CLEAN_KINDS), min_size=1, max_size=12),  # what the joined read takes
            st.lists(st.sampled_from(LINE_KINDS), min_size=0, max_size=12),
        ),
        st.booleans(),
        st.booleans(),
        st.booleans(),
    ),
    min_size=1,
    max_size=8,
)


def _task(staging: Storage, lake: Storage, table: TableDef, key: str, object_id: int, run: str) -> StreamTask:
    return StreamTask(
        staging_object_id=object_id,
        uri=staging.uri(key),
        staging=staging,
        lake=lake,
        layout=TableLayout("k1k1", "web", "access"),
        table_json=table.to_json(),
        run_id=run,
        batch_rows=1000,
        spill_bytes=1 << 20,
    )


def _rows_alone(lake: Storage, result: dict) -> list[tuple]:
    rows = []
    for part in result["parts"]:
        table = pq.read_table(lake.path(part["tmp_key"]), columns=["utc_event_time", "user_id", "action"])
        rows += list(zip(*(table.column(name).to_pylist() for name in table.column_names), strict=True))
    return sorted(rows, key=repr)


def _rows_by_source(lake: Storage, parts: list[dict]) -> dict[int, list[tuple]]:
    found: dict[int, list[tuple]] = {}
    for part in parts:
        table = pq.read_table(lake.path(part["tmp_key"]), columns=["utc_event_time", "user_id", "action"])
        for source, first, count in part["sources"]:
            piece = table.slice(first, count)
            found.setdefault(source, []).extend(
                zip(*(piece.column(name).to_pylist() for name in piece.column_names), strict=True)
            )
    return {source: sorted(rows, key=repr) for source, rows in found.items()}


REPORT_FIELDS = ["status", "records_in", "bad_records", "bad_samples", "dropped_fields", "dropped_field_names"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=objects, block_bytes=st.sampled_from([1, 400, 2000, 4 << 20]))
def test_a_group_decodes_each_object_as_it_decodes_alone(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, specs, block_bytes: int
) -> None:
    # Joined reads of every size: one object each, a few, the whole group.
    monkeypatch.setattr(group_task, "JOIN_BLOCK_BYTES", block_bytes)
    root = tmp_path_factory.mktemp("joined")
    staging, lake = Storage(str(root / "staging")), Storage(str(root / "lake"))
    tasks = []
    for number, (kinds, bom, cut, compressed) in enumerate(specs, start=1):
        key = f"f.web.access/2026/11/20/{number:03d}.jsonl{'.gz' if compressed else ''}"
        path = Path(staging.path(key))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_object(kinds, number * 100, bom, cut, compressed))
        tasks.append(_task(staging, lake, COUNTED, key, number, "group"))

    grouped = process_wave_item(StreamGroup(tuple(tasks)))

    assert grouped["status"] == "group"
    by_source = _rows_by_source(lake, grouped["parts"])
    for task, member in zip(tasks, grouped["members"], strict=True):
        alone = process_staging_object(_task(staging, lake, COUNTED, task.uri.rsplit("staging/", 1)[1], 0, "alone"))
        alone_id = task.staging_object_id
        assert member["staging_object_id"] == alone_id
        assert {field: member.get(field) for field in REPORT_FIELDS} == {
            field: alone.get(field) for field in REPORT_FIELDS
        }, task.uri
        if alone["status"] == "ok":
            assert by_source.get(alone_id, []) == _rows_alone(lake, alone), task.uri
        else:
            assert alone_id not in by_source


def _clean_object(first: int, rows: int, extra: bool = False) -> bytes:
    lines = [json.loads(_line("extra_int" if extra else "event", first + i)) for i in range(rows)]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


@pytest.mark.parametrize("block_bytes", [4 << 20, 2000])
def test_clean_objects_of_a_group_are_read_by_one_call_a_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block_bytes: int
) -> None:
    monkeypatch.setattr(group_task, "JOIN_BLOCK_BYTES", block_bytes)
    calls = []
    real = json_fast.JsonFastPath._read
    monkeypatch.setattr(json_fast.JsonFastPath, "_read", lambda self, *a: calls.append(1) or real(self, *a))
    staging, lake = Storage(str(tmp_path / "staging")), Storage(str(tmp_path / "lake"))
    tasks = []
    blocks, held = 0, 0  # the reads the objects' sizes call for: a read each time the held bytes reach block_bytes
    for number in range(1, 31):
        key = f"f.web.access/2026/11/20/{number:03d}.jsonl.gz"
        Path(staging.path(key)).parent.mkdir(parents=True, exist_ok=True)
        data = _clean_object(number * 100, 5 + number % 4, number % 3 == 0)
        Path(staging.path(key)).write_bytes(gzip.compress(data))
        tasks.append(_task(staging, lake, COUNTED, key, number, "group"))
        held += len(data)
        if held >= block_bytes:
            blocks, held = blocks + 1, 0
    blocks += held > 0

    grouped = process_wave_item(StreamGroup(tuple(tasks)))

    assert len(calls) == blocks  # was one an object
    assert blocks == 1 if block_bytes > 2000 else blocks > 1
    members = grouped["members"]
    assert [m["records_in"] for m in members] == [5 + n % 4 for n in range(1, 31)]
    assert [m["dropped_fields"] for m in members] == [(5 + n % 4) * (n % 3 == 0) for n in range(1, 31)]
    assert sum(part["rows"] for part in grouped["parts"]) == sum(5 + n % 4 for n in range(1, 31))


def test_a_joined_read_gives_each_piece_its_rows_and_dropped_fields() -> None:
    pieces = [_clean_object(0, 3), _clean_object(10, 2, extra=True).rstrip(b"\n"), b"\n" + _clean_object(20, 4)]
    fast = JsonFastPath(COUNTED, Counter())

    joined = fast.convert_joined(pieces)

    assert joined is not None
    for piece, (rows, dropped) in zip(pieces, joined, strict=True):
        alone = JsonFastPath(COUNTED, Counter())
        assert rows.equals(alone.convert(piece))
        assert dropped == alone.dropped
    assert [dropped for _, dropped in joined] == [Counter(), Counter(extra=2), Counter()]


@pytest.mark.parametrize(
    "odd_piece",
    [b'{"time": 1763650200, "user_id": 1}\n', b"{not json\n", b'["an array"]\n', b"\xff\xfe\n", b"  \n"],
    ids=["epoch time after text times", "not JSON", "not an object", "not UTF-8", "blank only"],
)
def test_a_joined_read_refuses_what_the_per_record_decoder_must_judge(odd_piece: bytes) -> None:
    assert JsonFastPath(COUNTED, Counter()).convert_joined([_clean_object(0, 3), odd_piece]) is None


def test_the_rows_of_a_joined_read_outlive_the_next_reads_buffer() -> None:
    """Joined reads share a reused buffer: Arrow's reader copies what it keeps, so rows read before another read
    (of other, larger or smaller, lines) are unchanged, with strings, numbers and the extra field's count."""
    fast = JsonFastPath(COUNTED, Counter())
    first = fast.convert_joined([_clean_object(0, 40, extra=True), _clean_object(50, 30)])
    assert first is not None
    kept = [(rows.to_pylist(), dropped) for rows, dropped in first]
    for size in (300, 2, 80):
        assert fast.convert_joined([_clean_object(1000 + size, size)]) is not None
    assert [(rows.to_pylist(), dropped) for rows, dropped in first] == kept
    alone = JsonFastPath(COUNTED, Counter()).convert(_clean_object(0, 40, extra=True))
    assert alone is not None and first[0][0].equals(alone)
