"""Bounds on what one staging object may cost: decompressed bytes and compression ratio
(stream.max_object_bytes, stream.max_compression_ratio), and blank lines skipped in bulk."""

from __future__ import annotations

import dataclasses
import gzip
from pathlib import Path

import pytest

from siltlake.deployment import Deployment
from siltlake.records import UnreadableObject, framing, json_fast, read_staging_object
from siltlake.records import jsonl as json_lines
from siltlake.records.framing import ObjectLimits
from siltlake.stream.task import process_staging_object

from .records_helpers import BASIC, OneWayStream, event_record, jsonl, read_all
from .test_hostile_names import lake, record, stream_task  # noqa: F401 - `lake`: a deployment without Spark

sqlite_only = pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)


def newlines_gz(size: int) -> bytes:
    return gzip.compress(b"\n" * size, compresslevel=9)


def read(data: bytes, limits: ObjectLimits, key: str = "obj.jsonl") -> list:
    return list(read_staging_object(OneWayStream(data), key, BASIC, limits=limits))


def test_decompressed_bytes_past_the_cap_make_the_object_unreadable() -> None:
    with pytest.raises(UnreadableObject, match=r"more than 1,048,576 bytes \(stream.max_object_bytes\)"):
        read(newlines_gz(4 << 20), ObjectLimits(max_bytes=1 << 20))


def test_the_cap_counts_plain_objects_too_and_spares_objects_within_it() -> None:
    data = jsonl(*(event_record(i) for i in range(100)))
    with pytest.raises(UnreadableObject, match="stream.max_object_bytes"):
        read(data, ObjectLimits(max_bytes=len(data) - 1))
    assert sum(batch.table.num_rows for batch in read(data, ObjectLimits(max_bytes=len(data)))) == 100


def test_a_compression_ratio_past_the_cap_makes_the_object_unreadable_early() -> None:
    bomb = newlines_gz(64 << 20)  # about 1000:1, gzip's best
    source = framing.ObjectBytes(OneWayStream(bomb), ObjectLimits(max_ratio=50, ratio_floor=1 << 20))
    seen = 0
    with pytest.raises(UnreadableObject, match=r"more than 50 times its compressed size.*max_compression_ratio"):
        for chunk in source.chunks():
            seen += len(chunk)
    assert seen < 8 << 20, "refused soon after the floor, not at the end of the object"


def test_small_objects_may_compress_as_well_as_they_like() -> None:
    data = b"\n" * 100_000 + jsonl(event_record(1))
    assert len(gzip.compress(data)) * 50 < len(data)
    (batch,) = read(gzip.compress(data), ObjectLimits(max_ratio=50, ratio_floor=1 << 20))
    assert batch.table.num_rows == 1


@sqlite_only
def test_a_task_over_the_cap_reports_the_object_unknown_with_the_setting(lake: Deployment) -> None:  # noqa: F811
    key = "f.web.access/2026/11/20/bomb.jsonl.gz"
    path = Path(lake.staging.path(key))
    path.parent.mkdir(parents=True)
    path.write_bytes(gzip.compress(record(1) + b"\n" * (1 << 20)))
    task = stream_task(lake, lake.staging.uri(key))
    assert process_staging_object(task)["status"] == "ok"

    result = process_staging_object(dataclasses.replace(task, limits=ObjectLimits(max_bytes=1 << 16)))

    assert result["status"] == "unknown" and "stream.max_object_bytes" in result["reason"], result


def test_the_stream_settings_reach_the_task(tmp_path: Path) -> None:
    from siltlake.stream.stage import object_limits

    from .conftest import make_config

    config = make_config(tmp_path, "sqlite:///x.db", max_object_bytes=1000, max_compression_ratio=20)
    assert object_limits(config.stream) == ObjectLimits(max_bytes=1000, max_ratio=20)


# --- blank lines ---------------------------------------------------------------------------------


def never(*_args: object, **_kwargs: object) -> None:
    raise AssertionError("blank lines took the per-record decoder")


def test_runs_of_blank_lines_are_skipped_in_bulk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json_lines, "_slow_json_block", never)
    layouts = []
    real = json_lines.line_layout
    monkeypatch.setattr(json_lines, "line_layout", lambda block: layouts.append(len(block)) or real(block))
    data = b"\n" * (48 << 20) + jsonl(event_record(1)) + b"\r\n \t\n" * (1 << 20) + jsonl(event_record(2))

    table, bad = read_all(data)

    assert table.num_rows == 2 and bad == []
    assert len(layouts) <= 2, "only the blocks holding the two records are split into lines"


def test_records_between_blank_lines_take_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(json_lines, "_slow_json_block", never)
    monkeypatch.setattr(json_fast, "_layout_line_by_line", never)
    data = b"".join(b"\n" * (i % 7) + jsonl(event_record(i)) for i in range(5000))
    table, bad = read_all(data)
    assert table.num_rows == 5000 and bad == []


def test_a_bad_line_among_blank_lines_keeps_its_line_number() -> None:
    data = b"\n" * 200_000 + jsonl(event_record(1)) + b"\n \n" * 1000 + b"not json\n" + jsonl(event_record(2))
    table, bad = read_all(data)
    assert table.num_rows == 2
    (only,) = bad
    assert (only.line, only.raw) == (200_000 + 1 + 2000 + 1, "not json")
