"""siltlake.records.framing and read_staging_object: gzip, format detection, streaming in bounded chunks."""

from __future__ import annotations

import gzip
import io
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from siltlake.records import UnreadableObject, detect_format, framing, read_staging_object

from .records_helpers import (
    BASIC,
    BASIC_COLUMNS,
    OneWayStream,
    TrickleStream,
    event_record,
    jsonl,
    make_table,
    pack,
    read_all,
)

# --- gzip ------------------------------------------------------------------------------------


def test_gzip_is_detected_by_magic_bytes_not_name() -> None:
    data = jsonl(*(event_record(i) for i in range(10)))
    plain, _ = read_all(data)
    zipped, _ = read_all(gzip.compress(data), key="in/obj.jsonl")
    named, _ = read_all(gzip.compress(data), key="in/obj.jsonl.gz")
    assert plain.equals(zipped) and plain.equals(named)


def test_multi_member_gzip_and_zero_padding() -> None:
    first, second = jsonl(event_record(1)), jsonl(event_record(2))
    table, bad = read_all(gzip.compress(first) + gzip.compress(second) + b"\0" * 10, key="x.jsonl.gz")
    assert bad == [] and table.column("n").to_pylist() == [1, 2]


def test_truncated_gzip_is_unreadable() -> None:
    data = gzip.compress(jsonl(*(event_record(i) for i in range(2000))))
    with pytest.raises(UnreadableObject, match="truncated gzip") as caught:
        read_all(data[: len(data) // 2], key="x.jsonl.gz")
    assert "truncated" in caught.value.reason


def test_corrupt_gzip_is_unreadable() -> None:
    data = bytearray(gzip.compress(jsonl(*(event_record(i) for i in range(2000)))))
    data[len(data) // 2 : len(data) // 2 + 40] = b"\x55" * 40
    with pytest.raises(UnreadableObject, match="gzip"):
        read_all(bytes(data), key="x.jsonl.gz")


def test_garbage_after_a_gzip_member_is_unreadable() -> None:
    with pytest.raises(UnreadableObject, match="gzip"):
        read_all(gzip.compress(jsonl(event_record(1))) + b"trailing junk", key="x.jsonl.gz")


def test_random_bytes_with_gz_name_are_unreadable() -> None:
    noise = random.Random(7).randbytes(100_000)
    assert not noise.startswith(framing.GZIP_MAGIC)
    with pytest.raises(UnreadableObject):
        read_all(noise, key="in/obj.jsonl.gz")


# --- formats -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "head", "configured", "expected"),
    [
        ("a/b.json", b"", "auto", "jsonl"),
        # The content decides when it shows its format beyond doubt, whatever the name says.
        ("a/b.ndjson.gz", b"\x81", "auto", "msgpack"),
        ("a/b.log.gzip", b"", "auto", "jsonl"),
        ("a/b.JSONL", b"", "auto", "jsonl"),
        ("a/b.mpk", b"{", "auto", "jsonl"),
        ("a/b.mp.gz", b"", "auto", "msgpack"),
        ("a/b.msgpack", b"", "auto", "msgpack"),
        ("a/b.csv.gz", b"{", "auto", "jsonl"),
        ("a/b.log", b"\x82\xa4time\xce\x66\x31\xf9\x80", "auto", "msgpack"),
        ("a/b.log", b"\x92\xce\x66\x31\xf9\x80\x81\xa1a\x01", "auto", "msgpack"),
        ("a/b.log", b"\xdc\x00\x02\xce", "auto", "msgpack"),
        ("a/b.csv", b"\xdc\xa9ber,x\n", "auto", "csv"),  # U+0729 then text: UTF-8, not an array16
        ("a/b.log", b'2024-05-01T12:34:56+09:00\tweb.access\t{"a":1}\n', "auto", "fluentd_line"),
        ("a/b.json", b'1714567890\t{"a":1}\n', "auto", "fluentd_line"),
        ("a/b.log", b'web.access\tx\t{"a":1}\n', "auto", "jsonl"),  # no time first: not out_file's line
        ("a/b.log", b"time:2024-05-01T12:34:56Z\thost:h1\tstatus:200\n", "auto", "ltsv"),
        ("a/b.ltsv", b"", "auto", "ltsv"),
        ("a/b", b"ERROR: something broke\n", "auto", "jsonl"),  # one field: not taken for LTSV
        ("a/b.csv", b"time:x\thost\n", "auto", "csv"),  # a field without a label: not LTSV
        ("a/b.csv", b"\n\n  \n{}", "auto", "jsonl"),
        ("a/b", b'\xef\xbb\xbf  {"a":1}', "auto", "jsonl"),
        ("a/b.gz", b"\x93\xa3tag", "auto", "msgpack"),
        ("a/b.dat", b"\xde\x00\x01", "auto", "msgpack"),
        ("a/b", b"ts,action\n1,2\n", "auto", "csv"),
        ("a/b", b"just text\n", "auto", "jsonl"),
        ("a/b", b"\x00\x01\xff\xfe binary", "auto", "msgpack"),
        ("a/b.json", b"", "csv", "csv"),
        ("a/b.csv", b"", "msgpack", "msgpack"),
        ("a/b.log", b"{", "ltsv", "ltsv"),
        ("a/b.log", b"\x81", "fluentd_line", "fluentd_line"),
    ],
)
def test_detect_format(key: str, head: bytes, configured: str, expected: str) -> None:
    assert detect_format(key, head, configured) == expected


def test_ltsv_sniff_ignores_a_field_cut_by_the_sniff_window() -> None:
    line = b"time:2024-05-01T00:00:00Z\thost:h1\t" + b"x" * (framing.SNIFF_BYTES - 30)
    head = line[: framing.SNIFF_BYTES]
    assert detect_format("a/b", head, "auto") == "ltsv"


@pytest.mark.parametrize(
    ("magic", "name"),
    [
        (b"\x28\xb5\x2f\xfd\x00", "zstd"),
        (b"\xfd7zXZ\x00\x00", "xz"),
        (b"BZh91AY&SY\x00", "bzip2"),
        (b"\x04\x22\x4d\x18", "LZ4"),
        (b"PK\x03\x04", "zip"),
    ],
)
def test_other_compressions_are_named(magic: bytes, name: str) -> None:
    with pytest.raises(UnreadableObject, match=f"{name}-compressed.*gzip"):
        detect_format("a/b.log.zst", magic + b"rest", "auto")
    with pytest.raises(UnreadableObject, match=f"{name}-compressed"):
        detect_format("a/b.log", magic + b"rest", "jsonl")


def test_configured_format_overrides_the_name() -> None:
    table_def = make_table(BASIC_COLUMNS, format="msgpack")
    table, _ = read_all(pack(event_record(1)), table_def, key="x.json")
    assert table.num_rows == 1


# --- streaming ---------------------------------------------------------------------------------


def test_pyarrow_filesystem_streams(tmp_path: Path) -> None:
    path = tmp_path / "obj.jsonl.gz"
    path.write_bytes(gzip.compress(jsonl(*(event_record(i) for i in range(100)))))
    with pafs.LocalFileSystem().open_input_stream(str(path)) as stream:
        batches = list(read_staging_object(stream, "obj.jsonl.gz", BASIC, batch_rows=30))
    assert [batch.records_in for batch in batches] == [30, 30, 30, 10]
    with open(path, "rb") as stream:
        assert sum(b.table.num_rows for b in read_staging_object(stream, "obj.jsonl.gz", BASIC)) == 100


def test_big_gzip_object_streams_in_bounded_batches(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl.gz"
    records = 0
    with gzip.open(path, "wb", compresslevel=1) as out:
        for chunk in range(30):
            lines = [
                f'{{"ts":"2024-05-01T12:{i % 60:02d}:{(i * 7) % 60:02d}.{i % 999_983:06d}Z",'
                f'"user":"user-{i * 7919}","n":{i},"action":"{("login", "logout", "view")[i % 3]}",'
                f'"path":"/api/items/{i * 31 % 100_003}",'
                f'"agent":"Mozilla/5.0 (X11; Linux x86_64) build {i * 13}"}}\n'
                for i in range(chunk * 10_000, (chunk + 1) * 10_000)
            ]
            out.write("".join(lines).encode())
            records += len(lines)
    assert path.stat().st_size > 5_000_000
    stream = OneWayStream(path.read_bytes())
    total = 0
    expected_n = 0
    peak = 0
    first_batch_position = None
    for batch in read_staging_object(stream, "big.jsonl.gz", BASIC, batch_rows=20_000):
        assert batch.bad == []
        assert 0 < batch.records_in <= 20_000
        ns = batch.table.column("n").to_pylist()
        assert ns == list(range(expected_n, expected_n + len(ns)))
        expected_n += len(ns)
        total += batch.records_in
        peak = max(peak, pa.total_allocated_bytes())
        if first_batch_position is None:
            first_batch_position = stream.position
    assert total == records == 300_000
    # decompressed this is ~50 MB; never more than a few blocks of it are held
    assert first_batch_position is not None and first_batch_position < stream.position / 4
    assert peak < 100 * 2**20


def test_zlib_bomb_is_inflated_in_bounded_chunks() -> None:
    data = gzip.compress(b" " * (48 << 20), compresslevel=9)  # 48 MiB of spaces in ~50 KB
    source = framing.ObjectBytes(io.BytesIO(data))
    assert max(len(chunk) for chunk in source.chunks()) <= framing.MAX_INFLATE_CHUNK


@pytest.mark.parametrize(
    ("key", "data"),
    [
        ("x.jsonl", b"\xef\xbb\xbf" + jsonl(*(event_record(i) for i in range(50)))),
        ("x.jsonl.gz", gzip.compress(jsonl(*(event_record(i) for i in range(50))))),
        ("x.msgpack", pack(*(event_record(i) for i in range(50)))),
        (
            "x.csv",
            ("ts,user,n,action\n" + "".join(f"2024-05-01T12:34:56Z,u,{i},a\n" for i in range(50))).encode(),
        ),
    ],
)
def test_tiny_reads(key: str, data: bytes) -> None:
    batches = list(read_staging_object(TrickleStream(data), key, BASIC, batch_rows=16))
    assert [batch.records_in for batch in batches] == [16, 16, 16, 2]
    assert pa.concat_tables(batch.table for batch in batches).column("n").to_pylist() == list(range(50))
