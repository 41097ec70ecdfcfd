"""The demo sample generator: determinism, an exact summary, and the MessagePack entry layouts."""

from __future__ import annotations

import gzip
import io
import json
import struct
import zlib
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import msgpack
import pytest

from siltlake.demo.bench_inputs import write_big_object, write_jsonl_gz_objects
from siltlake.demo.sample import SampleSummary, event_time_ext, generate_sample, write_table_definition
from siltlake.tabledef import load_table_file

TOKYO = ZoneInfo("Asia/Tokyo")
START = date(2026, 11, 20)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SMALL = dict(days=2, servers=3, objects_per_server_day=12, records_per_object=80)


def read_tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def default_sample(tmp_path_factory) -> tuple[Path, SampleSummary]:
    root = tmp_path_factory.mktemp("staging")
    return root, generate_sample(root, START)


# --------------------------------------------------------------------------------------------------
# an independent decoder: how a correct loader should see the staging objects


def _time_from_json(value) -> datetime | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return EPOCH + timedelta(seconds=value)
    if isinstance(value, float):
        return EPOCH + timedelta(milliseconds=round(value * 1000))
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
        return parsed if parsed.tzinfo else None
    return None


def _good_json_record(line: str) -> datetime | None:
    """The event time of a line a loader should accept, or None for a bad record."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    user_id = record.get("user_id")
    if user_id is not None and (not isinstance(user_id, int) or isinstance(user_id, bool)):
        return None
    for name, kind in (
        ("host", str),
        ("method", str),
        ("path", str),
        ("user_agent", str),
        ("status", int),
        ("bytes", int),
        ("latency_ms", (int, float)),
    ):
        if record.get(name) is not None and not isinstance(record[name], kind):
            return None
    return _time_from_json(record.get("time"))


def _msgpack_times(data: bytes) -> list[datetime]:
    times = []
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(data)
    for entry in unpacker:
        assert isinstance(entry, list)
        if len(entry) == 3:
            tag, stamp, record = entry
            assert tag == "web.access"
            assert isinstance(stamp, msgpack.ExtType) and stamp.code == 0 and len(stamp.data) == 8
            seconds, nanos = struct.unpack(">II", stamp.data)
        else:
            stamp, record = entry
            assert isinstance(stamp, msgpack.Timestamp)
            seconds, nanos = stamp.seconds, stamp.nanoseconds
        assert nanos < 1_000_000_000
        assert "time" not in record
        times.append(EPOCH + timedelta(seconds=seconds, microseconds=nanos // 1000))
    return times


def decode_staging(root: Path) -> dict:
    good: Counter[str] = Counter()
    bad = 0
    malformed = []
    kinds: Counter[str] = Counter()
    for key, data in read_tree(root).items():
        table = key.split("/", 1)[0].split(".", 1)[1]
        if table != "web.access":
            malformed.append(key)
            continue
        if key.endswith(".msgpack"):
            kinds["msgpack"] += 1
            for when in _msgpack_times(data):
                good[when.astimezone(TOKYO).date().isoformat()] += 1
            continue
        assert key.endswith(".jsonl.gz")
        try:
            text = gzip.decompress(data).decode("utf-8")
        except (OSError, EOFError, zlib.error, UnicodeDecodeError):
            malformed.append(key)
            continue
        lines = text.splitlines()
        if not any(line.startswith("{") for line in lines):
            malformed.append(key)
            continue
        kinds["jsonl"] += 1
        for line in lines:
            when = _good_json_record(line)
            if when is None:
                bad += 1
            else:
                good[when.astimezone(TOKYO).date().isoformat()] += 1
    return {"good": good, "bad": bad, "malformed": sorted(malformed), "kinds": kinds}


# --------------------------------------------------------------------------------------------------


def test_table_definition_loads(tmp_path):
    path = tmp_path / "web_access.toml"
    write_table_definition(path)
    table = load_table_file(path)
    assert table.qualified_name == "web.access"
    assert table.time_column == "utc_event_time"
    assert table.column("utc_event_time").source_field == "time"
    assert table.timezone == "Asia/Tokyo"
    assert table.merge_interval == 0
    assert [c.name for c in table.columns] == [
        "utc_event_time",
        "host",
        "user_id",
        "method",
        "path",
        "status",
        "bytes",
        "latency_ms",
        "user_agent",
    ]
    assert [c.type for c in table.columns][1:4] == ["string", "bigint", "string"]


def test_same_seed_same_bytes(tmp_path):
    first = generate_sample(tmp_path / "a", START, seed=11, **SMALL)
    second = generate_sample(tmp_path / "b", START, seed=11, **SMALL)
    assert first == second
    assert read_tree(tmp_path / "a") == read_tree(tmp_path / "b")
    other = generate_sample(tmp_path / "c", START, seed=12, **SMALL)
    assert read_tree(tmp_path / "c") != read_tree(tmp_path / "a")
    assert other.good_records != first.good_records or other.records_by_date != first.records_by_date


def test_summary_matches_the_files(default_sample):
    root, summary = default_sample
    decoded = decode_staging(root)
    assert summary.objects == len(read_tree(root))
    assert 250 <= summary.objects <= 400
    assert summary.malformed_objects == decoded["malformed"]
    assert len(summary.malformed_objects) == 5
    assert summary.bad_records == decoded["bad"]
    assert summary.good_records == sum(decoded["good"].values())
    assert summary.records_by_date == dict(sorted(decoded["good"].items()))
    assert list(summary.records_by_date) == ["2026-11-20", "2026-11-21"]
    assert sum(summary.records_by_date.values()) == summary.good_records
    # about 1 bad record in 200, about 10% of the loadable objects in MessagePack
    assert 0.002 < summary.bad_records / summary.good_records < 0.01
    loadable = decoded["kinds"]["msgpack"] + decoded["kinds"]["jsonl"]
    assert 0.04 < decoded["kinds"]["msgpack"] / loadable < 0.2


def test_keys_and_time_spellings(default_sample):
    root, summary = default_sample
    keys = list(read_tree(root))
    shippers = {key.split(".", 1)[0] for key in keys}
    assert shippers == {"fluentd01", "fluentd02"}
    # date directories are the UTC shipping date: the first Tokyo day starts on the previous UTC day
    assert any("/2026/11/19/" in key for key in keys)
    assert any(key.startswith("fluentd01.web.nosuch/") for key in summary.malformed_objects)
    spellings: Counter[str] = Counter()
    for key, data in read_tree(root).items():
        if not key.endswith(".jsonl.gz") or key in summary.malformed_objects:
            continue
        for line in gzip.decompress(data).decode().splitlines():
            try:
                value = json.loads(line).get("time")
            except ValueError:
                continue
            if isinstance(value, str):
                spellings["Z" if value.endswith("Z") else "+09:00" if value.endswith("+09:00") else "?"] += 1
            elif value is not None:
                spellings[type(value).__name__] += 1
    assert set(spellings) == {"Z", "+09:00", "int", "float"}
    assert spellings["Z"] > spellings["+09:00"] > 0


def test_every_object_has_a_ship_time_after_its_events(default_sample):
    """The demo delivers objects by ship time: each is shipped on its date directory's UTC day, after its
    last event (a gzip JSON-lines object's latest readable time)."""
    root, summary = default_sample
    assert set(summary.shipped) == set(read_tree(root))
    for key, shipped in summary.shipped.items():
        assert shipped.tzinfo is not None and f"/{shipped:%Y/%m/%d}/" in key, (key, shipped)
    for key, data in read_tree(root).items():
        if not key.endswith(".jsonl.gz") or key in summary.malformed_objects:
            continue
        times = []
        for line in gzip.decompress(data).decode().splitlines():
            try:
                value = json.loads(line).get("time")
            except ValueError:
                continue
            times.append(_time_from_json(value))
        assert max(t for t in times if t is not None) < summary.shipped[key], key


def test_malformed_objects_are_what_they_claim(default_sample):
    root, summary = default_sample
    tree = read_tree(root)
    contents = [tree[key] for key in summary.malformed_objects if ".web.access/" in key]
    problems = set()
    for data in contents:
        if data[:2] != b"\x1f\x8b":
            problems.add("not gzip")
            continue
        try:
            raw = gzip.decompress(data)
        except EOFError:
            problems.add("truncated")
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            problems.add("invalid utf-8")
            continue
        if not text.startswith("{"):
            problems.add("not json")
    assert problems == {"not gzip", "truncated", "invalid utf-8", "not json"}


def test_event_time_layout():
    us = 1_795_000_000_123_456
    ext = event_time_ext(us)
    assert ext.code == 0 and len(ext.data) == 8
    assert struct.unpack(">II", ext.data) == (1_795_000_000, 123_456_000)
    packed = msgpack.packb(["web.access", ext, {"host": "web01"}])
    assert packed[0] == 0x93  # fixarray of 3
    position = packed.index(b"\xd7\x00")  # fixext 8, type 0
    assert packed[position + 2 : position + 10] == ext.data


def test_sample_msgpack_entries(default_sample):
    root, _ = default_sample
    forward = timestamp = 0
    for key, data in read_tree(root).items():
        if not key.endswith(".msgpack"):
            continue
        first = next(iter(msgpack.Unpacker(io.BytesIO(data), raw=False)))
        if len(first) == 3:
            forward += 1
            assert data[0] == 0x93 and b"\xd7\x00" in data[:40]
        else:
            timestamp += 1
            assert data[0] == 0x92 and data[1] in (0xD6, 0xD7, 0xC7)  # timestamp 32/64/96 ext -1
        assert _msgpack_times(data) == sorted(_msgpack_times(data))
    assert forward > timestamp > 0


def test_tiny_sample_has_every_kind(tmp_path):
    summary = generate_sample(tmp_path, START, days=1, servers=1, objects_per_server_day=3, records_per_object=20)
    decoded = decode_staging(tmp_path)
    assert decoded["kinds"]["msgpack"] == 2
    assert summary.good_records == sum(decoded["good"].values())
    assert summary.objects == 8


def test_bench_objects(tmp_path):
    records, size = write_jsonl_gz_objects(tmp_path, 3, 40_000, seed=3)
    files = sorted(tmp_path.rglob("*.jsonl.gz"))
    assert len(files) == 3
    assert size == sum(f.stat().st_size for f in files)
    seen = 0
    for f in files:
        assert 30_000 < f.stat().st_size < 50_000
        lines = gzip.decompress(f.read_bytes()).decode().splitlines()
        seen += len(lines)
        times = [json.loads(line)["time"] for line in lines]
        assert times == sorted(times)
        assert all(t.endswith("Z") and len(t) == 27 for t in times)
        assert f.relative_to(tmp_path).as_posix().startswith("fluentd01.web.access/2026/11/")
    assert seen == records
    again = tmp_path / "again"
    assert write_jsonl_gz_objects(again, 3, 40_000, seed=3) == (records, size)


def test_big_object_is_one_gzip_member(tmp_path):
    path = tmp_path / "big.jsonl.gz"
    records, size = write_big_object(path, 400_000, chunk_lines=3_000)
    assert size == path.stat().st_size
    assert 360_000 < size < 440_000
    raw = zlib.decompressobj(31)
    text = raw.decompress(path.read_bytes())
    assert raw.eof and raw.unused_data == b""  # a single member, nothing after it
    lines = text.decode().splitlines()
    assert len(lines) == records
    times = [json.loads(line)["time"] for line in lines]
    assert times == sorted(times)
    assert times[0].startswith("2026-11-19T15:") and times[-1].startswith("2026-11-20T14:")
