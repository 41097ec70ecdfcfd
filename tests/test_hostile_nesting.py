"""A JSON line nested far deeper than any record: pyarrow's JSON reader must never see it (records.nesting).

pyarrow's reader recursed once per level while inferring the fields that are no column, so one line nested
20,000 deep killed the decoding process with a segfault. The decode runs in a child process here, so that a
crash fails the test instead of the test run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from siltlake.records.nesting import MAX_FAST_DEPTH, nests_within


def deep_line(depth: int, field: str = "a") -> bytes:
    return b'{"' + field.encode() + b'":' + b"[" * depth + b"]" * depth + b"}"


DECODE = textwrap.dedent("""
    import io, json, sys
    from collections import Counter
    from siltlake.records import read_staging_object
    from siltlake.tabledef import TableDef
    table = TableDef.from_mapping({"schema": "logs", "name": "events", "time_column": "ts", "columns": [
        {"name": "ts", "type": "timestamp"}, {"name": "n", "type": "bigint"}]})
    data = sys.stdin.buffer.read()
    batches = list(read_staging_object(io.BytesIO(data), "deep.json", table, 1000, dropped=Counter()))
    print(json.dumps({"rows": sum(b.table.num_rows for b in batches),
                      "bad": [[bad.line, bad.reason] for b in batches for bad in b.bad]}))
""")


def decode_in_a_child(data: bytes) -> dict:
    done = subprocess.run([sys.executable, "-c", DECODE], input=data, capture_output=True, timeout=120)
    assert done.returncode == 0, f"the decoding process ended with code {done.returncode}: {done.stderr[-2000:]!r}"
    return json.loads(done.stdout)


@pytest.mark.parametrize(("depth", "field"), [(20_000, "deep"), (200_000, "deep"), (20_000, "extra")])
def test_a_line_nested_20000_deep_is_a_bad_record_and_the_rest_loads(depth: int, field: str) -> None:
    """`deep` is a field no other line has (its type is inferred from the deep value alone: what crashed)."""
    good = [b'{"ts":"2024-05-01T12:34:56Z","n":%d,"extra":{"k":[1,2]}}' % n for n in range(50)]
    data = b"\n".join([*good[:20], deep_line(depth, field), *good[20:]]) + b"\n"
    outcome = decode_in_a_child(data)
    assert outcome["rows"] == 50
    assert outcome["bad"] == [[21, "invalid JSON: nested too deeply"]]


def test_nesting_is_measured_per_line_and_strings_do_not_count() -> None:
    shallow = deep_line(MAX_FAST_DEPTH - 1)  # the object's own braces are a level
    assert nests_within(shallow) and not nests_within(deep_line(MAX_FAST_DEPTH))
    # Many brackets over many lines, or many shallow ones in one line, are no depth.
    assert nests_within(b"\n".join([shallow] * 50))
    assert nests_within(b'{"a":[' + b",".join([b'{"b":[1]}'] * 1000) + b"]}")
    # Brackets in strings are text; closers in a string cannot hide real depth.
    assert nests_within(b'{"a":"' + b"[" * 5000 + b'"}')
    assert not nests_within(b'{"a":"' + b"]" * 5000 + b'\\"]","b":' + b"[" * 300 + b"]" * 300 + b"}")
    # Lines longer than the 1 MiB the check reads at a time, deep or shallow, before and after other lines.
    wide = b'{"a":[' + b",".join([b'{"b":[1]}'] * 300_000) + b"]}"
    assert len(wide) > 2 << 20 and nests_within(b"\n".join([shallow, wide, shallow]))
    deep_far = b'{"pad":"' + b"x" * (3 << 20) + b'","a":' + b"[" * 300 + b"]" * 300 + b"}"
    assert not nests_within(b"\n".join([shallow, deep_far, shallow]))
    assert not nests_within(b"\n" * (1 << 20) + b"[" * (2 << 20))
    # A line that is not JSON counts at least as deep as it nests.
    assert not nests_within(b"[" * 300)
    assert not nests_within(b'{"a":"x\n' + b"[" * 300 + b"\n")


def test_upsert_refuses_a_file_nested_too_deep_for_pyarrow_instead_of_crashing(tmp_path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'{"id":1}\n' + deep_line(20_000) + b"\n")
    script = textwrap.dedent(f"""
        from pathlib import Path
        from siltlake.cli.upsert import read_rows
        from siltlake.errors import SiltError
        from siltlake.tabledef import TableDef
        table = TableDef.from_mapping({{"schema": "s", "name": "t", "time_column": "ts", "columns": [
            {{"name": "ts", "type": "timestamp"}}, {{"name": "id", "type": "bigint"}}]}})
        try:
            read_rows(Path({str(path)!r}), table)
        except SiltError as exc:
            print(exc)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert done.returncode == 0, f"ended with code {done.returncode}: {done.stderr[-2000:]!r}"
    assert done.stdout.decode().strip() == f"cannot read {path}: a line nests deeper than {MAX_FAST_DEPTH} levels"


def test_load_makes_a_line_nested_20000_deep_a_bad_record(tmp_path) -> None:
    from .test_fuzz_parsers_load import LOAD_TIME, load_file

    lines = [b'{"time":"%s","n":%d,"name":"a"}' % (LOAD_TIME.encode(), n) for n in range(5)]
    lines.insert(2, deep_line(20_000, "deep"))
    report = load_file(tmp_path, "x.jsonl", b"\n".join(lines) + b"\n", "jsonl")
    assert report["status"] == "ok" and report["loaded_n"] == [0, 1, 2, 3, 4]
    assert [(error["line"], error["reason"]) for error in report["errors"]] == [(3, "invalid JSON: nested too deeply")]


@pytest.mark.spark
def test_a_stream_task_in_spark_makes_the_deep_line_a_bad_record(tmp_path, catalog_url: str, spark) -> None:
    """The Spark path decodes with the same reader: in Spark's Python worker the deep line is a bad record too."""
    import datetime as dt

    from siltlake.deployment import Deployment
    from siltlake.stream import stream_once
    from siltlake.tabledef import TableDef

    from .conftest import ACCESS_TABLE, make_config
    from .test_stream import event, stage

    deployment = Deployment(make_config(tmp_path, catalog_url, in_driver_bytes=0, wave_engine="spark"))
    deployment.init()
    deployment.use_spark(spark)
    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    when = dt.datetime(2026, 11, 20, 10, 0, tzinfo=dt.UTC)
    good = [json.dumps(event(when, n)).encode() for n in range(4)]
    stage(
        deployment,
        "f.web.access/2026/11/20/deep.jsonl",
        b"\n".join([*good[:2], deep_line(20_000, "deep"), *good[2:]]) + b"\n",
    )
    try:
        report = stream_once(deployment)
        assert (report.local_waves, report.processed, report.records_loaded, report.bad_records) == (0, 1, 4, 1)
        assert report.failed == [] and "nested too deeply" in report.bad_samples[0][1]
    finally:
        deployment.close()


def test_lines_of_flat_records_pass_on_their_bracket_count_and_a_deep_line_among_them_does_not() -> None:
    flat = [b'{"ts":"2024-05-01T12:34:56Z","n":%d}' % n for n in range(2000)]
    block = b"\n".join(flat)
    assert nests_within(block, bracketed_lines=len(flat))
    deep = deep_line(MAX_FAST_DEPTH)  # one line too deep among 2,000 flat ones, each counted as a bracketed line
    assert not nests_within(b"\n".join([*flat[:1000], deep, *flat[1000:]]), bracketed_lines=len(flat) + 1)
    # Brackets in strings spread over many lines leave the block to the line-by-line count, which passes it.
    stringy = [b'{"s":"%s"}' % (b"[" * 10) for _ in range(100)]
    assert nests_within(b"\n".join(stringy), bracketed_lines=100)
