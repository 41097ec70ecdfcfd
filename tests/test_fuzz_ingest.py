"""Hostile input for ingestion as a whole: nesting, file names and notification bodies (docs/design.md, "Hostile
input"). The property: no round fails for every table because of one input; each bad input becomes an unknown
object or a bad record with its reason, and what is good beside it loads.

SILTLAKE_FUZZ_EXAMPLES scales the examples (`make fuzz` runs many more); the rounds through the catalog take a
tenth of them, as each is a whole stream round.
"""

from __future__ import annotations

import datetime as dt
import gzip
import itertools
import json
import os
from collections import Counter

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from siltlake.records import read_staging_object
from siltlake.records.nesting import MAX_FAST_DEPTH, nests_within
from siltlake.stream import stream_once
from siltlake.stream.discover import is_in_flight
from siltlake.stream.notifications import Malformed, parse_message
from siltlake.tabledef import TableDef

from .test_sqs_notifications import aws_event

EXAMPLES = int(os.environ.get("SILTLAKE_FUZZ_EXAMPLES", "40"))
fuzz = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
rounds = settings(
    fuzz,
    max_examples=max(3, EXAMPLES // 10),
    suppress_health_check=[*fuzz.suppress_health_check, HealthCheck.function_scoped_fixture],
)
pytestmark = pytest.mark.timeout(120 + EXAMPLES)

TABLE = TableDef.from_mapping(
    {
        "schema": "logs",
        "name": "events",
        "time_column": "ts",
        "columns": [
            {"name": "ts", "type": "timestamp"},
            {"name": "n", "type": "bigint"},
            {"name": "user", "type": "string"},
        ],
    }
)
TIME = "2024-05-01T12:34:56Z"
DEPTHS = st.sampled_from([1, 2, 50, MAX_FAST_DEPTH - 1, MAX_FAST_DEPTH, MAX_FAST_DEPTH + 1, 900, 5_000, 20_000, 60_000])


def nested(depth: int, opener: str) -> str:
    closer = "]" if opener == "[" else "}"
    inner = "" if opener == "[" else '"k":1'
    return (opener if opener == "[" else '{"k":') * (depth - 1) + opener + inner + closer * depth


LINES = st.one_of(
    st.tuples(st.just("good"), st.integers(0, 10**6)).map(lambda t: (f'{{"ts":"{TIME}","n":{t[1]}}}', "good")),
    st.tuples(DEPTHS, st.sampled_from(["[", "{"]), st.sampled_from(["n", "fresh", "user"])).map(
        lambda t: (f'{{"ts":"{TIME}","n":1,"{t[2]}":{nested(*t[:2])}}}', "either")
    ),
    DEPTHS.map(lambda depth: (nested(depth, "["), "bad")),  # a whole line that is an array
    DEPTHS.map(lambda depth: ("[" * depth, "bad")),  # cut off
    DEPTHS.map(lambda depth: (f'{{"ts":"{TIME}","n":2,"user":"{"]" * depth}","x":{nested(depth, "[")}}}', "either")),
    DEPTHS.map(lambda depth: (f'{{"ts":"{TIME}","n":3,"user":"{"[{" * depth}"}}', "good")),  # brackets in text
)


@fuzz
@given(lines=st.lists(LINES, min_size=1, max_size=30), batch_rows=st.sampled_from([1, 7, 1000]), counted=st.booleans())
def test_json_lines_of_any_nesting_are_rows_or_named_bad_records(
    lines: list[tuple[str, str]], batch_rows: int, counted: bool
) -> None:
    """Every line is a row or a bad record with its line and reason; none ever reaches pyarrow's reader nested
    deeper than records.nesting allows (a crash would end this test process). A good first line keeps the object
    readable (one with no JSON object at all is unknown: tests/test_fuzz_parsers.py)."""
    lines = [(f'{{"ts":"{TIME}","n":0}}', "good"), *lines]
    data = ("\n".join(text for text, _ in lines) + "\n").encode()
    event(f"deepest line within the bound: {nests_within(data)}")
    batches = list(
        read_staging_object(gzip_or_not(data), "x.jsonl", TABLE, batch_rows, dropped=Counter() if counted else None)
    )
    rows = sum(batch.table.num_rows for batch in batches)
    bad = {record.line: record.reason for batch in batches for record in batch.bad}
    assert rows + len(bad) == len(lines)
    for number, (_, kind) in enumerate(lines, start=1):
        if kind == "good":
            assert number not in bad, bad[number]
        elif kind == "bad":
            assert bad[number], number


def gzip_or_not(data: bytes):  # a binary stream
    import io

    return io.BytesIO(gzip.compress(data) if len(data) % 2 else data)


NAMES = st.binary(min_size=1, max_size=60).filter(
    lambda name: b"/" not in name and b"\0" not in name and name not in (b".", b"..")
)
BODIES = st.sampled_from(["good", "deep", "cut", "empty", "lines"])
_days = itertools.count()


def _body(kind: str, n: int) -> bytes:
    record = {"time": TIME, "user_id": n, "action": "view"}
    if kind == "deep":
        return (json.dumps(record)[:-1] + f',"extra":{nested(40_000, "[")}}}\n').encode()
    if kind == "cut":
        return gzip.compress(json.dumps(record).encode())[:-7]
    if kind == "empty":
        return b""
    if kind == "lines":
        return "".join(json.dumps({**record, "user_id": n * 10 + i}) + "\n" for i in range(3)).encode()
    return (json.dumps(record) + "\n").encode()


@rounds
@given(
    files=st.lists(
        st.tuples(st.one_of(st.none(), NAMES), NAMES, BODIES), min_size=1, max_size=6, unique_by=lambda item: item[:2]
    )
)
def test_a_round_over_hostile_names_and_bodies_accounts_for_every_file(plain_deployment, files) -> None:
    """Local file names of any bytes (some in a directory of any name) beside a good file: the round never fails;
    each file is processed or unknown (with its reason), and the good one's row loads."""
    day = f"f.web.access/{dt.date(2026, 1, 1) + dt.timedelta(days=next(_days)):%Y/%m/%d}"
    directory = os.fsencode(plain_deployment.staging.path(day))
    os.makedirs(directory)
    written = []
    for number, (sub, name, kind) in enumerate(files):
        path = os.path.join(directory, name) if sub is None else os.path.join(directory, sub, name)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as file:
                file.write(_body(kind, number))
        except OSError:  # a file and a directory of one name, or a name too long
            continue
        written.append(name)
    assume(written)
    with open(os.path.join(directory, b"good.jsonl"), "wb") as file:
        file.write(_body("good", 999))
    report = stream_once(plain_deployment)
    taken = [name for name in written if not is_in_flight(os.fsdecode(name))]
    unknown = [
        item
        for item in plain_deployment.catalog.staging.unknown()
        if item.uri.startswith(plain_deployment.staging.uri(day) + "/")
    ]
    assert report.failed == []
    assert report.processed + len(unknown) == len(taken) + 1
    assert all(item.reason for item in unknown)
    assert report.records_loaded >= 1  # good.jsonl
    event(f"unknown: {len(unknown)} of {len(taken) + 1}")


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)
RECORD = json.loads(aws_event("bucket", "staging/x.jsonl"))["Records"][0]


def _record_with(path: list[str], value: object) -> dict:
    record = json.loads(json.dumps(RECORD))
    target = record
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return record


FIELDS = st.sampled_from(
    [
        ["eventName"],
        ["eventTime"],
        ["s3"],
        ["s3", "bucket"],
        ["s3", "bucket", "name"],
        ["s3", "object"],
        ["s3", "object", "key"],
        ["s3", "object", "size"],
    ]
)
BODY_TEXTS = st.one_of(
    st.text(max_size=200),
    DEPTHS.map(lambda depth: "[" * depth * 3),
    DEPTHS.map(lambda depth: '{"Records":' + nested(depth * 3, "[") + "}"),
    DEPTHS.map(lambda depth: json.dumps({"Type": "Notification", "Message": nested(depth * 3, "{")})),
    st.tuples(FIELDS, JSON_VALUES).map(lambda t: json.dumps({"Records": [_record_with(*t)]}, allow_nan=True)),
    st.tuples(FIELDS, st.sampled_from([1e308, -1, "1e400", [], {}, "%FF%FE", "a+b%2"])).map(
        lambda t: json.dumps({"Records": [_record_with(*t)]}).replace("1e+308", "1e400")
    ),
)


@fuzz
@given(body=BODY_TEXTS)
def test_a_notification_body_is_parsed_or_malformed_with_a_reason(body: str) -> None:
    """Whatever a message holds, parse_message gives its records or raises Malformed naming why: nothing else,
    so one message never costs the others of its batch."""
    try:
        created, ignored = parse_message(body)
    except Malformed as exc:
        assert str(exc)
        event(f"malformed: {str(exc).split(' (')[0][:40]}")
        return
    assert ignored >= 0 and all(isinstance(record.key, str) for record in created)
    event("parsed")


def test_nesting_of_the_examples_is_judged_as_json_would() -> None:
    """The bound check against Python's own parser, on the generators' shapes."""
    for depth in (1, MAX_FAST_DEPTH - 1, MAX_FAST_DEPTH, MAX_FAST_DEPTH + 5):
        for opener in "[{":
            line = f'{{"a":{nested(depth, opener)}}}'.encode()
            assert nests_within(line) == (depth + 1 <= MAX_FAST_DEPTH), (depth, opener)
