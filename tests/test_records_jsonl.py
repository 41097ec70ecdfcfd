"""siltlake.records.jsonl: JSON lines, through the vectorised fast path and the exact per-record decoder."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from siltlake.records import UnreadableObject
from siltlake.records import jsonl as json_lines
from siltlake.tabledef import TableDef

from .records_helpers import (
    BASIC,
    BASIC_COLUMNS,
    EPOCH_2024,
    T0,
    US,
    both_paths,
    event_record,
    jsonl,
    make_table,
    read_all,
    read_batches,
)
from .records_strategies import (
    EDGE_VALUES,
    FIELDS,
    GOOD_VALUES,
    PROPERTY_COLUMNS,
    TYPES,
    anything,
    epoch_edges,
    sometimes_anything,
    time_styles,
)

# --- JSON lines -------------------------------------------------------------------------------


def test_jsonl_rows_are_typed_in_schema_order() -> None:
    table, bad = read_all(jsonl(event_record(1), event_record(2, extra="dropped")))
    assert bad == []
    assert table.schema == BASIC.arrow_schema()
    assert table.to_pylist() == [
        {"ts": T0.replace(second=1), "user": "u1", "n": 1, "action": "login"},
        {"ts": T0.replace(second=2), "user": "u2", "n": 2, "action": "login"},
    ]


def test_not_json_at_all_is_unreadable() -> None:
    text = "".join(f"Apr 30 12:00:{i:02d} host sshd[42]: session opened\n" for i in range(40))
    with pytest.raises(UnreadableObject, match="none of 40 lines is a JSON object"):
        read_all(text.encode())


def test_json_values_that_are_never_objects_are_unreadable() -> None:
    with pytest.raises(UnreadableObject, match="none of 3 lines"):
        read_all(b'[1]\n2\n"x"\n')


def test_invalid_utf8_is_unreadable_with_its_line() -> None:
    data = jsonl(event_record(1), event_record(2)) + b'{"ts":"2024-05-01T00:00:00Z","user":"\xff\xfe"}\n'
    with pytest.raises(UnreadableObject, match="invalid UTF-8 at line 3"):
        read_all(data)


def test_bad_lines_are_bad_records_with_line_numbers() -> None:
    data = jsonl(
        event_record(1),
        "",
        "[1, 2]",
        event_record(4, n="abc"),
        "   ",
        '{"ts": "2024-05-01T00:00:00Z", "action": ',
        event_record(7, action=None),
        {"user": "x", "action": "a"},
        event_record(9, ts="soon"),
        event_record(10),
    )
    table, bad = read_all(data)
    assert table.column("n").to_pylist() == [1, 10]
    by_line = {record.line: record for record in bad}
    assert sorted(by_line) == [3, 4, 6, 7, 8, 9]
    assert by_line[3].reason == "not a JSON object but an array"
    assert by_line[3].raw == "[1, 2]"
    assert by_line[4].reason == "column n: 'abc' is not a bigint"
    assert by_line[6].reason.startswith("invalid JSON: ")
    assert by_line[7].reason == "missing non-null field action"
    assert by_line[8].reason == "missing event time (field ts)"
    assert by_line[9].reason.startswith("event time ts: 'soon' is not a timestamp")
    assert json.loads(by_line[4].raw) == event_record(4, n="abc")


def test_empty_objects_yield_nothing() -> None:
    assert read_batches(b"") == []
    assert read_batches(gzip.compress(b""), key="x.jsonl.gz") == []
    assert read_batches(b"\n\n  \n\r\n") == []


def test_crlf_bom_blank_lines_and_surrounding_spaces() -> None:
    lines = [json.dumps(event_record(i)) for i in range(4)]
    data = b"\xef\xbb\xbf" + f"{lines[0]}\r\n\r\n  {lines[1]}  \r\n\t{lines[2]}\r\n{lines[3]}".encode()
    table, bad = read_all(data)
    assert bad == [] and table.column("n").to_pylist() == [0, 1, 2, 3]


def test_two_objects_on_one_line_are_a_bad_record() -> None:
    good = json.dumps(event_record(1))
    block = f"{good}\n{good}{good}\n{good}\n".encode()
    fast, slow = both_paths(BASIC, block)
    assert fast is None
    assert [record.line for record in slow.bad] == [2]
    assert slow.bad[0].reason.startswith("invalid JSON: Extra data")


def test_an_object_spread_over_lines_is_bad_records() -> None:
    block = b'{"ts": "2024-05-01T00:00:00Z", "action": "a",\n"n": 1}\n' + jsonl(event_record(3))
    fast, slow = both_paths(BASIC, block)
    assert fast is None
    assert [record.line for record in slow.bad] == [1, 2]
    assert slow.table.num_rows == 1


def test_duplicate_keys_last_one_wins() -> None:
    table, bad = read_all(b'{"ts":"2024-05-01T00:00:00Z","action":"a","n":1,"n":2}\n')
    assert bad == [] and table.column("n").to_pylist() == [2]


def test_escaped_keys_and_unicode_values() -> None:
    block = ('{"t\\u0073":"2024-05-01T00:00:00Z","action":"\\u00e9t\\u00e9 ☀ 😀","user":"\\ud83d\\ude00"}\n').encode()
    fast, slow = both_paths(BASIC, block)
    assert fast is not None
    assert slow.table.column("action").to_pylist() == ["été ☀ 😀"]
    assert slow.table.column("user").to_pylist() == ["😀"]


def test_lone_surrogates_are_bad_records() -> None:
    table, bad = read_all(jsonl(event_record(1, user="x")).replace(b'"x"', b'"\\ud800"'))
    assert table.num_rows == 0
    assert bad[0].reason.startswith("column user: '\\ud800' is not valid Unicode")


def test_unknown_fields_reject() -> None:
    strict = make_table(BASIC_COLUMNS, unknown_fields="reject")
    data = jsonl(event_record(1), event_record(2, extra=1, other="x"), event_record(3, extra=None))
    table, bad = read_all(data, strict)
    assert table.column("n").to_pylist() == [1, 3]  # a null field carries nothing to lose
    assert [(record.line, record.reason) for record in bad] == [(2, "unknown fields extra, other")]
    loose, _ = read_all(data)
    assert loose.column("n").to_pylist() == [1, 2, 3]


def test_columns_read_their_source_field() -> None:
    table_def = make_table(
        [
            {"name": "ts", "type": "timestamp", "source": "@timestamp"},
            {"name": "user_id", "type": "bigint", "source": "uid"},
            {"name": "raw_time", "type": "string", "source": "@timestamp"},
        ]
    )
    block = jsonl({"@timestamp": "2024-05-01T12:34:56Z", "uid": 7, "user_id": "ignored"})
    fast, slow = both_paths(table_def, block)
    assert slow.table.to_pylist() == [{"ts": T0, "user_id": 7, "raw_time": "2024-05-01T12:34:56Z"}]
    _, slow = both_paths(table_def, jsonl({"@timestamp": "2024-05-01T12:34:56Z", "uid": "x"}))
    assert slow.bad[0].reason == "column user_id (field uid): 'x' is not a bigint"


@pytest.mark.parametrize(
    ("unit", "value", "expected"),
    [
        ("s", EPOCH_2024, EPOCH_2024 * US),
        ("s", EPOCH_2024 + 0.25, EPOCH_2024 * US + 250_000),
        ("ms", EPOCH_2024 * 1000 + 1, EPOCH_2024 * US + 1000),
        ("us", EPOCH_2024 * US + 1, EPOCH_2024 * US + 1),
        ("ns", EPOCH_2024 * US * 1000 + 1999, EPOCH_2024 * US + 1),
        ("ns", -1, -1),
        ("s", "2024-05-01T21:34:56+09:00", EPOCH_2024 * US),
        ("ms", "2024-05-01T12:34:56.5Z", EPOCH_2024 * US + 500_000),
        ("s", str(EPOCH_2024), EPOCH_2024 * US),
    ],
)
def test_epoch_units_for_the_time_column(unit: str, value: object, expected: int) -> None:
    table_def = make_table(BASIC_COLUMNS, epoch_unit=unit)
    block = jsonl(*(event_record(i, ts=value) for i in range(3)))
    fast, slow = both_paths(table_def, block)
    assert slow.bad == []
    assert slow.table.column("ts").cast(pa.int64()).to_pylist() == [expected] * 3
    if not isinstance(value, str) or not value.isdigit():
        assert fast is not None


# --- the vectorised path ---------------------------------------------------------------------


@pytest.fixture
def slow_lines(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Line counts of the blocks that went to the per-record decoder."""
    counted: list[int] = []
    original = json_lines._slow_json_block

    def counting(block: bytes, first_line: int, converter: Any) -> json_lines._Piece:
        counted.append(block.count(b"\n"))
        return original(block, first_line, converter)

    monkeypatch.setattr(json_lines, "_slow_json_block", counting)
    return counted


def test_fast_path_takes_clean_blocks(slow_lines: list[int]) -> None:
    rows = [event_record(i, ts=f"2024-05-01T12:34:56.{i:06d}+09:00") for i in range(5000)]
    table, bad = read_all(jsonl(*rows))
    assert bad == [] and table.num_rows == 5000 and slow_lines == []


def test_one_bad_line_does_not_send_the_whole_block_to_the_slow_path(slow_lines: list[int]) -> None:
    rows: list[Any] = [event_record(i) for i in range(30_000)]
    rows[12_345] = event_record(12_345, n="twelve")
    table, bad = read_all(jsonl(*rows), batch_rows=100_000)
    assert [record.line for record in bad] == [12_346]
    assert table.num_rows == 29_999
    assert table.column("n").to_pylist() == [i for i in range(30_000) if i != 12_345]
    assert sum(slow_lines) < 3000


def test_batches_mix_fast_and_slow_pieces_in_order() -> None:
    rows: list[Any] = [event_record(i) for i in range(1000)]
    for i in range(0, 1000, 97):
        rows[i] = "{broken"
    batches = read_batches(jsonl(*rows), batch_rows=64)
    assert all(0 < batch.records_in <= 64 for batch in batches)
    assert sum(batch.records_in for batch in batches) == 1000
    table = pa.concat_tables(batch.table for batch in batches)
    assert table.column("n").to_pylist() == [i for i in range(1000) if i % 97]
    assert [bad.line for batch in batches for bad in batch.bad] == list(range(1, 1001, 97))


@st.composite
def json_blocks(draw: Any) -> tuple[TableDef, bytes, str]:
    columns = [dict(column) for column in PROPERTY_COLUMNS]
    for column in columns[1:]:
        column["nullable"] = draw(st.integers(0, 3)) > 0
    table_def = make_table(
        columns,
        epoch_unit=draw(st.sampled_from(["s", "ms", "us", "ns"])),
        unknown_fields=draw(st.sampled_from(["ignore", "reject"])),
    )
    # Mostly-clean blocks so the fast path often accepts; the noise puts rejected values
    # (and values only the slow path handles) where a careless fast path would take them.
    noise = draw(st.sampled_from([0, 0, 0, 0, 50, 200, 4]))
    style_name = draw(st.sampled_from(["canonical", "loose", "int", "float", "mixed"]))
    time_style = time_styles(table_def.epoch_unit)[style_name]
    strategies = {
        name: sometimes_anything(time_style if name in ("ts", "t2") else GOOD_VALUES[name], noise) for name in FIELDS
    }
    lines = []
    for _ in range(draw(st.integers(1, 4))):
        if noise and draw(st.integers(0, noise)) == 0:
            lines.append(draw(st.sampled_from(["", "  ", "[1]", "{", "{}{}", '{"ts":1}\r', "null", "{} "])))
            continue
        absent = draw(st.sets(st.sampled_from(FIELDS), max_size=2)) if noise else set()
        nulls = draw(st.sets(st.sampled_from(FIELDS), max_size=1)) if noise else set()
        fields = [
            f'"{name}":{"null" if name in nulls else draw(strategies[name])}' for name in FIELDS if name not in absent
        ]
        if noise and draw(st.integers(0, 3)) == 0:
            fields.insert(draw(st.integers(0, len(fields))), f'"extra":{draw(anything)}')
        if draw(st.booleans()):
            fields.reverse()
        lines.append("{" + ",".join(fields) + "}")
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    text = ending.join(lines) + draw(st.sampled_from(["", ending]))
    return table_def, text.encode(), style_name


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_blocks())
def test_fast_path_equals_slow_path(case: tuple[TableDef, bytes, str]) -> None:
    table_def, block, time_style = case
    fast, slow = both_paths(table_def, block)
    event(f"fast path {'accepted' if fast is not None else 'declined'} ({time_style} times)")


@st.composite
def one_column_blocks(draw: Any) -> tuple[TableDef, bytes]:
    """Edge values of one column type, with clean times, so the fast path is often tempted."""
    name = draw(st.sampled_from(sorted(TYPES) + ["t2"]))
    unit = draw(st.sampled_from(["s", "ms", "us", "ns"]))
    column = {"name": "v", "type": TYPES.get(name, "timestamp"), "nullable": draw(st.booleans())}
    table_def = make_table([{"name": "ts", "type": "timestamp"}, column], epoch_unit=unit)
    if name == "t2":
        values = st.one_of(*time_styles(unit).values(), epoch_edges(unit))
    else:
        values = st.one_of(GOOD_VALUES[name], EDGE_VALUES[name], anything)
    lines = [f'{{"ts":"2024-05-01T12:34:56Z","v":{draw(values)}}}' for _ in range(draw(st.integers(1, 3)))]
    return table_def, ("\n".join(lines) + "\n").encode()


@settings(max_examples=300, deadline=None)
@given(one_column_blocks())
def test_fast_path_equals_slow_path_for_each_type(case: tuple[TableDef, bytes]) -> None:
    table_def, block = case
    fast, _ = both_paths(table_def, block)
    event(f"fast path {'accepted' if fast is not None else 'declined'}")


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.sampled_from(["good", "bad-json", "array", "wrong-type", "missing", "blank", "big"]), max_size=60),
    st.integers(1, 25),
    st.booleans(),
)
def test_good_plus_bad_equals_records_in(kinds: list[str], batch_rows: int, compress: bool) -> None:
    lines = []
    expected_good = []
    expected_bad = []
    for number, kind in enumerate(kinds, start=1):
        if kind == "good":
            lines.append(json.dumps(event_record(number)))
            expected_good.append(number)
        elif kind == "big":
            lines.append(json.dumps(event_record(number, user="x" * 5000)))
            expected_good.append(number)
        elif kind == "blank":
            lines.append("")
        else:
            lines.append(
                {
                    "bad-json": '{"ts": ',
                    "array": "[1, 2]",
                    "wrong-type": json.dumps(event_record(number, n=[1])),
                    "missing": json.dumps({"ts": "2024-05-01T00:00:00Z", "n": number}),
                }[kind]
            )
            expected_bad.append(number)
    data = "\n".join(lines).encode()
    if compress:
        data = gzip.compress(data)
    if expected_bad and not expected_good and kinds.count("wrong-type") + kinds.count("missing") == 0:
        with pytest.raises(UnreadableObject):
            read_all(data, batch_rows=batch_rows)
        return
    table, bad = read_all(data, batch_rows=batch_rows)
    assert table.column("n").to_pylist() == expected_good
    assert [record.line for record in bad] == expected_bad
    assert table.num_rows + len(bad) == len(kinds) - kinds.count("blank")


def test_a_failing_fast_path_leaves_the_block_to_the_per_record_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("a fast path bug")

    monkeypatch.setattr(json_lines.JsonFastPath, "_column", broken)
    table, bad = read_all(jsonl(*(event_record(i) for i in range(100))))
    assert table.column("n").to_pylist() == list(range(100)) and bad == []
