"""Hostile bytes for every parser: any mutation of a valid object, a corrupt gzip stream, inputs built to loop.

The contract is tests/test_fuzz_parsers.py's: the object parses, each record a good row or a named bad record,
or the whole object is unreadable; nothing else escapes, nothing hangs. tests/test_fuzz_parsers_load.py feeds
the corrupt-bytes generators below to the load task.
"""

from __future__ import annotations

import gzip
import json
import struct
import zlib

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from siltlake.records import UnreadableObject, framing

from .test_fuzz_parsers import (
    CSV_HEADER,
    EXAMPLES,
    TIME,
    fuzz,
    gzip_jsonl,
    packed,
    parse,
    parse_or_unreadable,
)

# A parser that loops fails here instead of stalling CI; each example takes well under 0.5 s.
pytestmark = pytest.mark.timeout(120 + EXAMPLES // 2)


# --- Corrupt bytes: any mutation of a valid object of any format --------------------------------


def valid_object(kind: str, count: int) -> tuple[bytes, str]:
    records = [{"ts": TIME, "n": i, "user": f"u{i}"} for i in range(count)]
    if kind == "jsonl":
        return "".join(json.dumps(r) + "\n" for r in records).encode(), "x.jsonl"
    if kind == "msgpack":
        return b"".join(packed(r) for r in records), "x.msgpack"
    return (CSV_HEADER + "\n" + "".join(f"{TIME},{i},u{i}\n" for i in range(count))).encode(), "x.csv"


MUTATIONS = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("flip"), st.floats(0, 1), st.integers(1, 255)),
    st.tuples(
        st.just("insert"),
        st.floats(0, 1),
        st.sampled_from(
            [
                b"\0",
                b"\0" * 100,
                b"\xff\xfe",
                b"\xc3",
                framing.UTF8_BOM,
                framing.GZIP_MAGIC,
                b"\n",
                b'"',
                b"\xdd\xff\xff\xff\xff",
                b"\xc1",
            ]
        ),
    ),
    st.tuples(st.just("trailer"), st.binary(min_size=1, max_size=40)),
    st.tuples(st.just("overwrite"), st.floats(0, 1), st.binary(min_size=1, max_size=64)),
)


def mutate(data: bytes, mutation: tuple) -> bytes:
    where = int(mutation[1] * len(data)) if isinstance(mutation[1], float) else 0
    if mutation[0] == "truncate":
        return data[:where]
    if mutation[0] == "flip":
        return data[:where] + bytes([data[where] ^ mutation[2]]) + data[where + 1 :] if where < len(data) else data
    if mutation[0] == "insert":
        return data[:where] + mutation[2] + data[where:]
    if mutation[0] == "trailer":
        return data + mutation[1]
    return data[:where] + mutation[2] + data[where + len(mutation[2]) :]


@fuzz
@given(
    st.sampled_from(["jsonl", "msgpack", "csv"]),
    st.integers(0, 300),
    st.booleans(),
    st.lists(MUTATIONS, min_size=1, max_size=3),
    st.integers(1, 50),
)
def test_corrupted_objects_parse_consistently_or_are_unreadable(
    kind: str, count: int, compress: bool, mutations: list[tuple], batch_rows: int
) -> None:
    data, key = valid_object(kind, count)
    if compress:
        data = gzip.compress(data)
    for mutation in mutations:
        data = mutate(data, mutation)
    parse_or_unreadable(data, key, batch_rows=batch_rows)


# --- Gzip: what a corrupt compressed object means -----------------------------------------------


@fuzz
@given(st.integers(1, 2000), st.data())
def test_gzip_truncated_anywhere_is_unreadable_naming_the_compressed_bytes(count: int, data: st.DataObject) -> None:
    whole = gzip_jsonl(count)
    cut = data.draw(st.integers(len(framing.GZIP_MAGIC), len(whole) - 1))  # one byte is not yet gzip
    with pytest.raises(UnreadableObject, match=r"(truncated|corrupt) gzip stream .*\d+ compressed bytes"):
        parse(whole[:cut], "x.jsonl.gz", batch_rows=64)


@fuzz
@given(st.integers(50, 3000), st.floats(0.05, 0.95), st.binary(min_size=8, max_size=64))
def test_gzip_with_a_corrupt_deflate_block_is_never_partly_loaded(count: int, where: float, junk: bytes) -> None:
    whole = bytearray(gzip_jsonl(count))
    start = 10 + int(where * (len(whole) - 18 - len(junk)))  # inside the deflate data, before the trailer
    if whole[start : start + len(junk)] == junk:
        return
    whole[start : start + len(junk)] = junk
    try:
        table, bad = parse(bytes(whole), "x.jsonl.gz", batch_rows=64)
    except UnreadableObject as exc:
        assert "gzip" in exc.reason or "UTF-8" in exc.reason or "JSON" in exc.reason
        event("unreadable")
        return
    # Deflate can decode corrupted bits into other bytes; the CRC-32 in the trailer then must refuse them.
    # So reaching here means the junk left the decompressed bytes intact.
    assert table.column("n").to_pylist() == list(range(count)) and bad == []
    event("junk did not change the output")


def test_gzip_members_padding_and_empty_members_read_whole() -> None:
    members = [gzip.compress(json.dumps({"ts": TIME, "n": i}).encode() + b"\n") for i in range(300)]
    data = gzip.compress(b"") + b"".join(members) + gzip.compress(b"") * 50 + b"\0" * 1000
    table, bad = parse(data, "x.jsonl.gz")
    assert table.column("n").to_pylist() == list(range(300)) and bad == []


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (b"garbage after the member", "corrupt gzip stream within the first"),
        (framing.GZIP_MAGIC, "truncated gzip stream after"),
        (b"\0\0\0x", "gzip stream"),
    ],
)
def test_gzip_trailing_garbage_is_unreadable(tail: bytes, message: str) -> None:
    with pytest.raises(UnreadableObject, match=message):
        parse(gzip_jsonl(100) + tail, "x.jsonl.gz")


def test_zero_bytes_and_empty_gzip_are_empty_objects() -> None:
    for data, key in [(b"", "x.jsonl"), (b"", "x.msgpack"), (b"", "x.csv"), (gzip.compress(b""), "x.jsonl.gz")]:
        assert parse(data, key)[0].num_rows == 0 and parse(data, key)[1] == []


# --- Inputs built to loop: a parser that could spin on them would hit the timeout ---------------


def stored_empty_blocks(count: int) -> bytes:
    """A gzip member whose deflate stream is `count` empty stored blocks: input consumed, no output."""
    empty_block = b"\x00\x00\x00\xff\xff"  # BFINAL=0, stored, LEN=0, NLEN=~0
    final = b"\x01" + struct.pack("<HH", 0, 0xFFFF)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
    return header + empty_block * count + final + struct.pack("<II", zlib.crc32(b""), 0)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "case",
    [
        "empty-stored-blocks",
        "empty-members",
        "zero-padding",
        "nil-items",
        "unclosed-quote",
        "no-newline",
        "blank-lines",
        "trickled-gzip",
    ],
)
def test_inputs_that_would_loop_a_careless_parser_end(case: str) -> None:
    one = json.dumps({"ts": TIME, "n": 1}).encode() + b"\n"
    data, key, records = {
        "empty-stored-blocks": (stored_empty_blocks(400_000) + gzip.compress(one), "x.jsonl.gz", 1),
        "empty-members": (gzip.compress(b"") * 50_000 + gzip.compress(one), "x.jsonl.gz", 1),
        "zero-padding": (gzip.compress(one) + b"\0" * (8 << 20), "x.jsonl.gz", 1),
        "nil-items": (packed({"ts": TIME, "n": 1}) + b"\xc0" * 20_000, "x.msgpack", 20_001),
        "unclosed-quote": ((CSV_HEADER + f'\n{TIME},1,"' + "x," * 2_000_000).encode(), "x.csv", 1),
        "no-newline": (b" " * (8 << 20) + one, "x.jsonl", 1),
        "blank-lines": (b"\n" * (4 << 20) + one, "x.jsonl", 1),
        "trickled-gzip": (gzip.compress(one * 300), "x.jsonl.gz", 300),
    }[case]
    table, bad = parse(data, key, batch_rows=4096, trickle=case == "trickled-gzip")
    assert table.num_rows + len(bad) == records
