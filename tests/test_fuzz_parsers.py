"""Hostile input for every parser: generated malformed gzip, MessagePack, CSV and JSON lines.

The contract (docs/design.md, "Hostile input"): a staging object either parses, and then every input
record is a good row or a bad record naming its line (its item number for MessagePack) and a reason, or
the whole object is unreadable (UnreadableObject: the stream records it as unknown, commits nothing of
it). Nothing else escapes, nothing hangs. The load task's side of the contract is in
tests/test_fuzz_parsers_load.py, corrupt bytes and gzip in tests/test_fuzz_parsers_corrupt.py. SILTLAKE_FUZZ_EXAMPLES
scales the examples (`make fuzz` runs many more); `--hypothesis-show-statistics` counts the cases and
the outcomes (the `event`s below).
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import struct
from pathlib import Path
from typing import Any

import msgpack
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from siltlake.records import BadRecord, UnreadableObject, coerce, framing, read_staging_object
from siltlake.tabledef import TableDef

from .records_helpers import OneWayStream, TrickleStream

EXAMPLES = int(os.environ.get("SILTLAKE_FUZZ_EXAMPLES", "40"))
fuzz = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
# A parser that loops fails here instead of stalling CI; each example takes well under 0.5 s.
pytestmark = pytest.mark.timeout(120 + EXAMPLES // 2)

TABLE = TableDef.from_mapping(
    {
        "schema": "logs",
        "name": "events",
        "time_column": "ts",
        "columns": [
            {"name": "ts", "type": "timestamp"},
            {"name": "n", "type": "bigint"},
            {"name": "user", "type": "string"},
            {"name": "payload", "type": "json"},
        ],
    }
)
TIME = "2024-05-01T12:34:56Z"
DEPTHS = st.sampled_from([1, 20, 400, 1000, 5000])
# JSON's decoder gives up near Python's recursion limit, which counts the caller's frames too: depths near
# 1000 may go either way, so the JSON cases stay clear of it.
JSON_DEPTHS = st.sampled_from([1, 20, 400, 5000])


def parse(data: bytes, key: str, batch_rows: int = 7, trickle: bool = False) -> tuple[pa.Table, list[BadRecord]]:
    """Every batch of the object, checked for the per-batch accounting; UnreadableObject passes through."""
    stream = TrickleStream(data) if trickle else OneWayStream(data)
    batches = list(read_staging_object(stream, key, TABLE, batch_rows))
    for batch in batches:
        assert batch.records_in == batch.table.num_rows + len(batch.bad)
        assert 0 < batch.records_in <= batch_rows
        for bad in batch.bad:
            assert bad.line >= 1 and bad.reason and isinstance(bad.raw, str)
            json.dumps(bad.raw, ensure_ascii=False).encode()  # the error file can hold it
    table = pa.concat_tables([b.table for b in batches]) if batches else TABLE.arrow_schema().empty_table()
    return table, [bad for batch in batches for bad in batch.bad]


def parse_or_unreadable(data: bytes, key: str, **options: Any) -> tuple[pa.Table, list[BadRecord]] | None:
    """The contract for corrupt input: parsed (and consistent) or UnreadableObject with a reason."""
    try:
        result = parse(data, key, **options)
    except UnreadableObject as exc:
        assert exc.reason
        event(f"unreadable: {exc.reason.split(':')[0][:40]}")
        return None
    event(f"parsed, {'with' if result[1] else 'no'} bad records")
    return result


def deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def deep_msgpack(depth: int) -> bytes:
    return b"\x91" * depth + b"\xc0"  # fixarray of one element, nested: the packer itself refuses this depth


def ext8(code: int, data: bytes) -> bytes:
    """An ext 8 item with any type code and length (msgpack.ExtType refuses codes below 0)."""
    return b"\xc7" + bytes([len(data)]) + struct.pack("b", code) + data


def msgpack_map(fields: list[tuple[bytes, bytes]]) -> bytes:
    """A map from already packed keys and values, so values can be hand-made malformed bytes."""
    return bytes([0x80 | len(fields)]) + b"".join(key + value for key, value in fields)


def packed(value: object) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def gzip_jsonl(count: int) -> bytes:
    return gzip.compress("".join(json.dumps({"ts": TIME, "n": i}) + "\n" for i in range(count)).encode())


# --- JSON lines ---------------------------------------------------------------------------------

# (line text, verdict): "good", "bad", or "either" when the outcome depends on a limit (nesting depth)
JSON_LINES = {
    "good": lambda n, depth: (json.dumps({"ts": TIME, "n": n, "user": "u"}), "good"),
    "escaped-nul": lambda n, depth: (json.dumps({"ts": TIME, "n": n, "user": "a\u0000b"}), "good"),
    "unicode": lambda n, depth: (json.dumps({"ts": TIME, "n": n, "user": "ﬁ\u202e𝔘"}, ensure_ascii=False), "good"),
    "crlf": lambda n, depth: (json.dumps({"ts": TIME, "n": n}) + "\r", "good"),
    "deep-field": lambda n, depth: (f'{{"ts":"{TIME}","n":{n},"payload":{deep_json(depth)}}}', "either"),
    "deep-line": lambda n, depth: (deep_json(depth), "bad"),
    "raw-nul": lambda n, depth: (f'{{"ts":"{TIME}","n":{n},"user":"a\0b"}}', "bad"),
    "truncated": lambda n, depth: (f'{{"ts":"{TIME}","n":{n},"user":"', "bad"),
    "array": lambda n, depth: ("[1,2,3]", "bad"),
    "number": lambda n, depth: (str(n), "bad"),
    "wrong-type": lambda n, depth: (json.dumps({"ts": TIME, "n": [n]}), "bad"),
    "no-time": lambda n, depth: (json.dumps({"n": n}), "bad"),
    "two-objects": lambda n, depth: (json.dumps({"ts": TIME, "n": n}) * 2, "bad"),
    "huge": lambda n, depth: (json.dumps({"ts": TIME, "n": n, "user": "x" * (2 << 20)}), "good"),
    "blank": lambda n, depth: (" \t", None),
}
OBJECT_KINDS = {"good", "escaped-nul", "unicode", "crlf", "deep-field", "wrong-type", "no-time", "huge"}


def is_object_line(kind: str, depth: int) -> bool:
    """Whether the line decodes to a JSON object (json's own nesting limit is near 1000, see JSON_DEPTHS)."""
    return kind in OBJECT_KINDS and not (kind == "deep-field" and depth >= 1000)


@fuzz
@given(
    st.lists(st.tuples(st.sampled_from(sorted(JSON_LINES)), JSON_DEPTHS), max_size=40),
    st.sampled_from(["plain", "gzip", "gzip-members", "bom"]),
    st.integers(1, 16),
    st.booleans(),
)
def test_json_lines_every_record_is_good_or_a_named_bad_record(
    lines: list[tuple[str, int]], packing: str, batch_rows: int, trickle: bool
) -> None:
    texts, verdicts = [], {}
    for number, (kind, depth) in enumerate(lines, start=1):
        text, verdict = JSON_LINES[kind](number, depth)
        texts.append(text)
        if verdict is not None:
            verdicts[number] = verdict
    body = "\n".join(texts).encode()
    data = {
        "plain": body,
        "bom": framing.UTF8_BOM + body,
        "gzip": gzip.compress(body),
        "gzip-members": b"".join(gzip.compress(line.encode() + b"\n") for line in texts),
    }[packing]
    trickle = trickle and "huge" not in {kind for kind, _ in lines}  # 7-byte reads of megabytes: just slow
    if verdicts and not any(is_object_line(kind, depth) for kind, depth in lines):
        with pytest.raises(UnreadableObject, match="not JSON lines"):
            parse(data, "in/x.jsonl", batch_rows, trickle)
        event("unreadable: no line is an object")
        return
    table, bad = parse(data, "in/x.jsonl", batch_rows, trickle)
    good_lines = table.column("n").to_pylist()
    bad_lines = [record.line for record in bad]
    assert sorted(good_lines + bad_lines) == sorted(verdicts)  # good + bad == input, each exactly once
    assert {n for n, v in verdicts.items() if v == "good"} <= set(good_lines)
    assert {n for n, v in verdicts.items() if v == "bad"} <= set(bad_lines)
    raw_by_line = dict(zip(range(1, len(texts) + 1), texts, strict=True))
    for record in bad:
        assert record.raw == raw_by_line[record.line].removesuffix("\r")
    event(f"{len(good_lines)} good, {len(bad_lines)} bad")


def test_json_lines_invalid_utf8_and_overlong_lines_make_the_object_unreadable() -> None:
    good = json.dumps({"ts": TIME, "n": 1}).encode() + b"\n"
    with pytest.raises(UnreadableObject, match="invalid UTF-8 at line 2"):
        parse(good + b'{"ts":"' + TIME.encode() + b'","user":"\xc3\x28"}\n', "x.jsonl")
    # A line without an end is bounded (MAX_LINE_BYTES), however it arrives.
    endless = gzip.compress(b'{"user":"' + b"a" * (framing.MAX_LINE_BYTES + 10), compresslevel=1)
    with pytest.raises(UnreadableObject, match="longer than"):
        parse(endless, "x.jsonl.gz")


# --- MessagePack --------------------------------------------------------------------------------


def _mp_good(n: int, depth: int) -> tuple[bytes, str]:
    return packed({"ts": TIME, "n": n, "user": "u"}), "good"


MSGPACK_ITEMS = {
    "good": _mp_good,
    "entry": lambda n, depth: (packed([1714566896, {"n": n}]), "good"),
    "event-time-entry": lambda n, depth: (
        b"\x92" + ext8(0, struct.pack(">II", 1714566896, 5)) + packed({"n": n}),
        "good",
    ),
    "ext-values": lambda n, depth: (
        packed(
            {
                "ts": TIME,
                "n": n,
                "user": msgpack.ExtType(42, b"\x00\xff"),
                "payload": [b"\x00bin", msgpack.ExtType(7, b"")],
            }
        ),
        "good",
    ),
    "timestamp-ext": lambda n, depth: (
        msgpack_map([(packed("ts"), ext8(-1, struct.pack(">I", 1714566896))), (packed("n"), packed(n))]),
        "good",
    ),
    "bad-event-time-length": lambda n, depth: (
        msgpack_map([(packed("ts"), ext8(0, b"\x01" * (depth % 7))), (packed("n"), packed(n))]),
        "bad",
    ),
    "bad-entry-time-length": lambda n, depth: (b"\x92" + ext8(0, b"\x01" * (depth % 7)) + packed({"n": n}), "bad"),
    "int-keys": lambda n, depth: (packed({1: 2, "ts": TIME, "n": n, b"bin": None}), "good"),
    "invalid-utf8-str": lambda n, depth: (
        msgpack_map([(packed("ts"), packed(TIME)), (packed("n"), packed(n)), (packed("user"), b"\xa2\xc3\x28")]),
        "bad",
    ),
    "deep-field": lambda n, depth: (
        msgpack_map(
            [
                (packed("ts"), packed(TIME)),
                (packed("n"), packed(n)),
                (packed("payload"), deep_msgpack(min(depth, 1000))),
            ]
        ),
        "either",
    ),
    "deep-item": lambda n, depth: (deep_msgpack(min(depth, 1000)), "bad"),
    "wrong-type": lambda n, depth: (packed({"ts": TIME, "n": "x" * 3}), "bad"),
    "no-time": lambda n, depth: (packed({"n": n}), "bad"),
    "int": lambda n, depth: (packed(n), "bad"),
    "string": lambda n, depth: (packed("a string"), "bad"),
    "array": lambda n, depth: (packed(list(range(depth % 9 if depth % 9 not in (2, 3, 4) else 5))), "bad"),
    "nil": lambda n, depth: (b"\xc0", "bad"),
}


@fuzz
@given(
    st.lists(st.tuples(st.sampled_from(sorted(MSGPACK_ITEMS)), DEPTHS), max_size=30), st.booleans(), st.integers(1, 9)
)
def test_msgpack_every_item_is_good_or_a_named_bad_record(
    items: list[tuple[str, int]], compress: bool, batch_rows: int
) -> None:
    chunks, verdicts = [], {}
    for index, (kind, depth) in enumerate(items, start=1):
        data, verdict = MSGPACK_ITEMS[kind](index, depth)
        chunks.append(data)
        verdicts[index] = verdict
    data = b"".join(chunks)
    data = gzip.compress(data) if compress else data
    if items and all(kind in ("int", "string", "nil") for kind, _ in items):
        with pytest.raises(UnreadableObject, match="none of"):
            parse(data, "x.msgpack", batch_rows)
        return
    if items and all(kind in ("int", "string", "nil", "array", "deep-item") for kind, _ in items):
        with pytest.raises(UnreadableObject, match="none of .* is a map or a Fluentd entry"):  # no record at all
            parse(data, "x.msgpack", batch_rows)
        return
    table, bad = parse(data, "x.msgpack", batch_rows)
    good_items = table.column("n").to_pylist()
    bad_items = [record.line for record in bad]
    assert sorted(good_items + bad_items) == sorted(verdicts)
    assert {i for i, v in verdicts.items() if v == "good"} <= set(good_items)
    assert {i for i, v in verdicts.items() if v == "bad"} <= set(bad_items)
    event(f"{len(good_items)} good, {len(bad_items)} bad")


@pytest.mark.parametrize("length", [0, 1, 3, 5, 7, 9, 11, 13, 16])
def test_msgpack_timestamp_ext_of_an_invalid_length_makes_the_object_unreadable_naming_the_byte(length: int) -> None:
    # The spec allows 4, 8 or 12 bytes; msgpack decodes ext -1 itself, so the stream cannot go past it.
    good = packed({"ts": TIME, "n": 1})
    data = good + msgpack_map([(packed("ts"), ext8(-1, b"\x01" * length))])
    with pytest.raises(UnreadableObject, match=rf"at byte {len(good)} \(item 2\): invalid timestamp"):
        parse(data, "x.msgpack")


def test_msgpack_deeper_than_the_unpacker_allows_is_unreadable_not_a_crash() -> None:
    with pytest.raises(UnreadableObject, match="not valid MessagePack at byte 0"):
        parse(deep_msgpack(5000), "x.msgpack")


def test_deep_values_render_like_json_dumps() -> None:
    value = {"a": [1, {"b": "é\u0000"}, [], {}], "c": msgpack.ExtType(3, b"x"), 5: b"\xff"}
    assert coerce._render_deep_json(value) == coerce.render_json(value)
    deep: list = []
    for _ in range(3000):
        deep = [deep]
    assert coerce.render_json(deep) == deep_json(3001)


@fuzz
@given(st.lists(st.sampled_from(["good", "no-time"]), min_size=1, max_size=12), st.data())
def test_msgpack_truncated_anywhere_is_unreadable_or_whole(kinds: list[str], data: st.DataObject) -> None:
    items = [packed({"ts": TIME, "n": i} if kind == "good" else {"n": i}) for i, kind in enumerate(kinds)]
    whole = b"".join(items)
    cut = data.draw(st.integers(1, len(whole) - 1))
    boundaries = {sum(len(item) for item in items[:k]) for k in range(len(items) + 1)}
    if cut in boundaries:  # a stream may end after any whole item
        table, bad = parse(whole[:cut], "x.msgpack")
        assert table.num_rows + len(bad) == sorted(boundaries).index(cut)
        return
    with pytest.raises(UnreadableObject, match="truncated MessagePack stream: the item at byte"):
        parse(whole[:cut], "x.msgpack")


# --- CSV ----------------------------------------------------------------------------------------

CSV_HEADER = "ts,n,user"
LINE_BREAK = re.compile(r"\r\n|\r|\n")  # what the CSV reader counts as lines (universal newlines)
CSV_ROWS = {
    "good": lambda n: (f"{TIME},{n},u", "good"),
    "quoted-newline": lambda n: (f'{TIME},{n},"two\nlines, and a ""quote"""', "good"),
    "quoted-cr": lambda n: (f'{TIME},{n},"a\rb"', "good"),
    "nul": lambda n: (f"{TIME},{n},a\0b", "good"),
    "unicode": lambda n: (f"{TIME},{n},ﬁ\u202e", "good"),
    "huge-field": lambda n: (f"{TIME},{n},{'x' * 300_000}", "good"),
    "short": lambda n: (f"{TIME},{n}", "bad"),
    "long": lambda n: (f"{TIME},{n},u,extra", "bad"),
    "semicolons": lambda n: (f"{TIME};{n};u", "bad"),
    "tabs": lambda n: (f"{TIME}\t{n}\tu", "bad"),
    "wrong-type": lambda n: (f"{TIME},n{n},u", "bad"),
    "no-time": lambda n: (f",{n},u", "bad"),
    "bom-inside": lambda n: (f"\ufeff{TIME},{n},u", "bad"),
    "blank": lambda n: ("", None),
}


@fuzz
@given(
    st.lists(st.sampled_from(sorted(CSV_ROWS)), max_size=30),
    st.booleans(),
    st.booleans(),
    st.sampled_from(["\n", "\r\n"]),
    st.booleans(),
    st.integers(1, 9),
)
def test_csv_every_record_is_good_or_a_named_bad_record(
    kinds: list[str], bom: bool, compress: bool, newline: str, unbalanced_last: bool, batch_rows: int
) -> None:
    lines, expected, line = [CSV_HEADER], {}, 1
    for number, kind in enumerate(kinds, start=1):
        text, verdict = CSV_ROWS[kind](number)
        lines.append(text)
        if verdict is not None:
            expected[line + 1] = (number, verdict)
        line += len(LINE_BREAK.findall(text)) + 1
    if unbalanced_last:
        # A quote that never closes runs to the end of the object: one more record, with too few fields.
        lines.append(f'{TIME},"{len(kinds) + 1},never closed')
        expected[line + 1] = (len(kinds) + 1, "bad")
    body = newline.join(lines).encode() + (b"" if unbalanced_last else newline.encode())
    data = (framing.UTF8_BOM if bom else b"") + body
    table, bad = parse(gzip.compress(data) if compress else data, "x.csv", batch_rows)
    good = table.column("n").to_pylist()
    assert sorted(good) == [n for n, verdict in expected.values() if verdict == "good"]
    assert [record.line for record in bad] == [line for line, (_, v) in sorted(expected.items()) if v == "bad"]
    assert len(good) + len(bad) == len(expected)
    event(f"{len(good)} good, {len(bad)} bad")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"ts;n;user\n" + f"{TIME};1;u\n".encode(), "CSV has no header"),
        (b"ts,n,ts\n", "names 'ts' twice"),
        (f"{CSV_HEADER}\n{TIME},1,u\n{TIME},2,\xe9\n".encode("latin-1"), "invalid UTF-8 in CSV at line 3"),
    ],
)
def test_csv_unreadable_objects(data: bytes, message: str) -> None:
    with pytest.raises(UnreadableObject, match=message):
        parse(data, "x.csv")


# --- End to end: hostile objects through the real stream driver ----------------------------------


@pytest.mark.spark
@pytest.mark.timeout(300)
@pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)
def test_hostile_objects_through_the_stream_driver(deployment, tmp_path: Path) -> None:
    from siltlake.read import table as read_table
    from siltlake.stream import stream_once
    from siltlake.stream.replay import _as_object, replay_errors

    deployment.catalog.tables.create(
        TableDef.from_mapping({**TABLE.model_dump(by_alias=True), "error_policy": "file", "timezone": "UTC"})
    )
    rng = random.Random(11)
    staged: dict[str, tuple[bytes, int | None]] = {}  # name -> (bytes, input records; None: unreadable)
    lines = [
        JSON_LINES[kind](n, rng.choice([1, 400, 5000]))[0]
        for n, kind in enumerate(rng.choices(sorted(set(JSON_LINES) - {"blank", "huge"}), k=60), start=1)
    ]
    staged["mixed.jsonl.gz"] = (gzip.compress("\n".join(lines).encode()), len(lines))
    items = [
        MSGPACK_ITEMS[kind](n, rng.choice([1, 400, 1000]))[0]
        for n, kind in enumerate(rng.choices(sorted(MSGPACK_ITEMS), k=40), start=1)
    ]
    staged["mixed.msgpack"] = (b"".join(items), 40)
    csv_rows = [
        CSV_ROWS[kind](n)[0]
        for n, kind in enumerate(rng.choices(sorted(set(CSV_ROWS) - {"blank", "huge-field"}), k=40), start=1)
    ]
    staged["mixed.csv"] = (framing.UTF8_BOM + (CSV_HEADER + "\r\n" + "\r\n".join(csv_rows) + "\r\n").encode(), 40)
    staged["truncated.jsonl.gz"] = (gzip_jsonl(3000)[:-100], None)
    corrupt = bytearray(gzip_jsonl(3000))
    corrupt[200:240] = b"\x55" * 40
    staged["corrupt-deflate.jsonl.gz"] = (bytes(corrupt), None)
    staged["trailer.jsonl.gz"] = (gzip_jsonl(10) + b"junk", None)
    staged["deep.msgpack"] = (packed({"ts": TIME, "n": 1}) + deep_msgpack(5000), None)
    for name, (data, _) in staged.items():
        path = Path(deployment.staging.path(f"f.logs.events/2024/05/01/{name}"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    report = stream_once(deployment)

    readable = {name: count for name, (_, count) in staged.items() if count is not None}
    assert report.failed == []
    assert sorted(uri.rsplit("/", 1)[-1] for uri, _ in report.unknown) == sorted(set(staged) - set(readable))
    assert report.records_in == sum(readable.values())  # good + bad == input, over every readable object
    assert report.records_loaded + report.bad_records == report.records_in
    assert 0 < report.bad_records < report.records_in
    kept = [json.loads(line) for key in report.error_files for line in deployment.lake.read_bytes(key).splitlines()]
    assert len(kept) == report.bad_records
    assert all(entry["line"] >= 1 and entry["reason"] and entry["source"].startswith("file://") for entry in kept)
    assert read_table(deployment.spark(), "logs.events", deployment).count() == report.records_loaded
    assert not any("/_tmp/" in info.key for info in deployment.lake.list())

    # The kept records that are JSON objects replay as a new staging object; the rest stay in their files.
    replayable = sum(1 for entry in kept if _as_object(entry["raw"]) is not None)
    replay = replay_errors(deployment, "logs.events")
    assert (replay.records, replay.records + replay.kept) == (replayable, len(kept))
    again = stream_once(deployment)
    assert again.records_in == replayable and again.records_loaded + again.bad_records == replayable
