"""siltlake.records.msgpack_format: MessagePack maps and Fluentd forward-protocol messages."""

from __future__ import annotations

import gzip
import json
import struct
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import msgpack
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from siltlake import timevalues as tv
from siltlake.records import UnreadableObject, msgpack_format

from .records_helpers import EPOCH_2024, T0, US, event_record, make_table, pack, read_all, read_batches

# --- MessagePack -------------------------------------------------------------------------------


def test_msgpack_maps() -> None:
    data = pack(event_record(1), event_record(2))
    table, bad = read_all(data, key="x.msgpack")
    assert bad == [] and table.column("n").to_pylist() == [1, 2]
    zipped, _ = read_all(gzip.compress(data), key="x.mpk.gz")
    assert zipped.equals(table)


def test_msgpack_is_sniffed_without_an_extension() -> None:
    table, _ = read_all(pack(event_record(1)), key="x")
    assert table.num_rows == 1


def ext(code: int, data: bytes) -> bytes:
    """Hand-built ext bytes, so every Timestamp layout is exercised whatever the packer prefers."""
    fixed = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}
    code_byte = struct.pack(">b", code)
    if len(data) in fixed:
        return bytes([fixed[len(data)]]) + code_byte + data
    return b"\xc7" + bytes([len(data)]) + code_byte + data


def fluentd_entry(time_bytes: bytes, record: dict[str, Any]) -> bytes:
    return b"\x92" + time_bytes + msgpack.packb(record)


@pytest.mark.parametrize(
    ("time_bytes", "expected"),
    [
        (msgpack.packb(EPOCH_2024), EPOCH_2024 * US),
        (msgpack.packb(EPOCH_2024 + 0.5), EPOCH_2024 * US + 500_000),
        (ext(0, struct.pack(">II", EPOCH_2024, 123_456_789)), EPOCH_2024 * US + 123_456),
        (ext(-1, struct.pack(">I", EPOCH_2024)), EPOCH_2024 * US),
        (ext(-1, struct.pack(">Q", (999_999_999 << 34) | EPOCH_2024)), EPOCH_2024 * US + 999_999),
        (ext(-1, struct.pack(">Iq", 1_000, EPOCH_2024)), EPOCH_2024 * US + 1),
        (ext(-1, struct.pack(">Iq", 500_000_000, -1)), -500_000),
    ],
)
def test_fluentd_entry_times(time_bytes: bytes, expected: int) -> None:
    record = {"user": "u", "action": "a"}
    data = fluentd_entry(time_bytes, record)  # [time, record]
    data += b"\x93" + msgpack.packb("app.log") + time_bytes + msgpack.packb(record)  # [tag, time, record]
    data += b"\x92" + msgpack.packb("app.log") + b"\x91" + fluentd_entry(time_bytes, record)  # forward mode
    table, bad = read_all(data, key="x.msgpack")
    assert bad == []
    assert table.column("ts").cast(pa.int64()).to_pylist() == [expected] * 3


def test_record_time_wins_over_entry_time_when_usable() -> None:
    entries = [
        [EPOCH_2024, {"ts": "2024-01-01T00:00:00Z", "action": "own"}],
        [EPOCH_2024, {"ts": "garbage", "action": "fallback"}],
        [EPOCH_2024, {"action": "missing"}],
        ["not a time", {"action": "neither"}],
        ["not a time", {"ts": "2024-01-01T00:00:00Z", "action": "own2"}],
    ]
    table, bad = read_all(pack(["tag", entries]), key="x.msgpack")
    assert table.column("action").to_pylist() == ["own", "fallback", "missing", "own2"]
    assert table.column("ts").to_pylist()[1:3] == [T0, T0]
    assert table.column("ts").to_pylist()[0] == datetime(2024, 1, 1, tzinfo=UTC)
    assert [(record.line, record.reason.split(",")[0]) for record in bad] == [(4, "missing event time (field ts)")]


def test_packed_forward_and_compressed_packed_forward() -> None:
    entries = pack([EPOCH_2024, {"action": "a"}], [tv.encode_fluentd_event_time(EPOCH_2024, 0), {"action": "b"}])
    two_members = gzip.compress(entries[:16]) + gzip.compress(entries[16:])
    assert msgpack.unpackb(entries[:16]) == [EPOCH_2024, {"action": "a"}]
    data = pack(
        ["tag", entries],
        ["tag", gzip.compress(entries), {"compressed": "gzip", "size": 2}],
        ["tag", two_members, {"compressed": "gzip"}],
    )
    table, bad = read_all(data, key="x.msgpack")
    assert bad == [] and table.column("action").to_pylist() == ["a", "b"] * 3


def test_msgpack_items_of_the_wrong_shape_are_bad_records_by_index() -> None:
    data = pack(
        event_record(1),
        ["tag", [[EPOCH_2024, {"action": "a"}], "junk", [EPOCH_2024, {"action": "b"}]]],
        42,
        [1, 2, 3],
        {"ts": b"\x00\xff", "action": msgpack.ExtType(5, b"zz")},
    )
    table, bad = read_all(data, key="x.msgpack")
    assert table.column("action").to_pylist() == ["login", "a", "b"]
    assert [record.line for record in bad] == [3, 5, 6, 7]
    assert bad[0].raw == '"junk"' and "not [time, record]" in bad[0].reason
    assert bad[1].raw == "42" and "wrong shape" in bad[1].reason
    assert bad[2].raw == "[1,2,3]"
    assert json.loads(bad[3].raw) == {"ts": "AP8=", "action": {"$ext": 5, "data": "eno="}}


def test_msgpack_values_coerce_like_json() -> None:
    table_def = make_table(
        [
            {"name": "ts", "type": "timestamp"},
            {"name": "s", "type": "string"},
            {"name": "j", "type": "json"},
            {"name": "d", "type": "double"},
            {"name": "dec", "type": "decimal(6,3)"},
        ]
    )
    record = {
        "ts": msgpack.Timestamp(EPOCH_2024, 0),
        "s": b"bytes",
        "j": {"b": b"\x01", 2: [1.5]},
        "d": 2,
        "dec": 0.1,
    }
    table, bad = read_all(pack(record), table_def, key="x.msgpack")
    assert bad == []
    assert table.to_pylist() == [
        {"ts": T0, "s": "bytes", "j": '{"b":"AQ==","2":[1.5]}', "d": 2.0, "dec": Decimal("0.100")}
    ]


def test_msgpack_invalid_utf8_string_is_a_bad_record() -> None:
    data = b"\x82" + msgpack.packb("ts") + msgpack.packb(EPOCH_2024) + msgpack.packb("action") + b"\xa2\xff\xfe"
    table, bad = read_all(data + pack(event_record(1)), key="x.msgpack")
    assert table.num_rows == 1
    assert bad[0].line == 1 and "not valid Unicode" in bad[0].reason


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (pack(event_record(1)) + b"\xc1", "not valid MessagePack"),
        (pack(event_record(1)) + msgpack.packb(event_record(2))[:-3], "truncated MessagePack"),
        (pack(*range(50)), "none of 50 items is a map or an array"),
        (pack(event_record(1)) + ext(-1, b"12345"), "not valid MessagePack"),
    ],
)
def test_unreadable_msgpack(data: bytes, message: str) -> None:
    with pytest.raises(UnreadableObject, match=message):
        read_all(data, key="x.msgpack")


def test_msgpack_batches_split_forward_messages() -> None:
    entries = [[EPOCH_2024 + i, {"action": "a", "n": i}] for i in range(250)]
    batches = read_batches(pack(["tag", entries]), key="x.msgpack", batch_rows=100)
    assert [batch.records_in for batch in batches] == [100, 100, 50]


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.sampled_from(["map", "entry", "forward", "wrong-shape", "wrong-type", "no-time"]), max_size=30),
    st.integers(1, 7),
)
def test_msgpack_good_plus_bad_equals_records_in(kinds: list[str], batch_rows: int) -> None:
    items = []
    expected_good = []
    expected_bad = []
    index = 0
    for kind in kinds:
        if kind == "forward":
            items.append(["tag", [[EPOCH_2024, {"action": "f", "n": index + 1}], [EPOCH_2024, "junk"]]])
            expected_good.append(index + 1)
            expected_bad.append(index + 2)
            index += 2
            continue
        index += 1
        if kind == "map":
            items.append(event_record(index))
            expected_good.append(index)
        elif kind == "entry":
            items.append([tv.encode_fluentd_event_time(EPOCH_2024, 5), {"action": "e", "n": index}])
            expected_good.append(index)
        else:
            items.append(
                {
                    "wrong-shape": [1, 2, 3],
                    "wrong-type": event_record(index, n=1.5),
                    "no-time": {"action": "x"},
                }[kind]
            )
            expected_bad.append(index)
    if kinds and set(kinds) == {"wrong-shape"}:  # no item is a record: not MessagePack records at all
        with pytest.raises(UnreadableObject, match="none of .* items is a map or a Fluentd entry"):
            read_all(pack(*items), key="x.msgpack", batch_rows=batch_rows)
        return
    table, bad = read_all(pack(*items), key="x.msgpack", batch_rows=batch_rows)
    assert table.column("n").to_pylist() == expected_good
    assert [record.line for record in bad] == expected_bad


def test_a_msgpack_item_whose_entries_fail_to_unpack_is_one_bad_record(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(data: bytes, option: object) -> list:
        raise MemoryError("entries too large to unpack")

    monkeypatch.setattr(msgpack_format, "_packed_entries", broken)
    forward = ["tag", msgpack.packb([EPOCH_2024, event_record(9)])]
    table, bad = read_all(pack(event_record(1), forward, event_record(2)), key="x.msgpack")
    assert table.column("n").to_pylist() == [1, 2]
    assert [(record.line, record.reason) for record in bad] == [
        (2, "MessagePack item does not decode: MemoryError: entries too large to unpack")
    ]
