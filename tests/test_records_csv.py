"""siltlake.records.csv_format: CSV with a header line."""

from __future__ import annotations

import gzip

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from siltlake.records import UnreadableObject

from .records_helpers import BASIC_COLUMNS, T0, make_table, read_all, read_batches

# --- CSV ---------------------------------------------------------------------------------------


def test_csv_with_quoted_newlines_reports_starting_lines() -> None:
    data = (
        b"ts,user,n,action\r\n"
        b'2024-05-01T12:34:56Z,"multi\nline",1,login\r\n'
        b"2024-05-01T12:34:56Z,bob,x,login\r\n"
        b"\r\n"
        b'2024-05-01T12:34:56Z,"a ""quoted"" name",3,"logout, later"\r\n'
        b"2024-05-01T12:34:56Z,carol\r\n"
        b'2024-05-01T12:34:56Z,"two\nline\nbad",4,,\r\n'
    )
    table, bad = read_all(data, key="x.csv")
    assert table.column("user").to_pylist() == ["multi\nline", 'a "quoted" name']
    assert table.column("action").to_pylist() == ["login", "logout, later"]
    assert [(record.line, record.reason) for record in bad] == [
        (4, "column n: 'x' is not a bigint"),
        (7, "row has 2 fields, the header has 4"),
        (8, "row has 5 fields, the header has 4"),
    ]
    assert bad[0].raw == "2024-05-01T12:34:56Z,bob,x,login"
    assert bad[2].raw == '2024-05-01T12:34:56Z,"two\nline\nbad",4,,'


def test_csv_empty_fields() -> None:
    table_def = make_table(
        [
            {"name": "ts", "type": "timestamp"},
            {"name": "s", "type": "string"},
            {"name": "i", "type": "int"},
            {"name": "j", "type": "json"},
            {"name": "b", "type": "boolean"},
        ]
    )
    data = b'ts,s,i,j,b\n2024-05-01T12:34:56Z,,,,\n1714566896,x,5,"{""a"": [1]}",TRUE\n,x,5,,\n'
    table, bad = read_all(data, table_def, key="x.csv")
    assert table.to_pylist() == [
        {"ts": T0, "s": "", "i": None, "j": None, "b": None},
        {"ts": T0, "s": "x", "i": 5, "j": '{"a":[1]}', "b": True},
    ]
    assert [(record.line, record.reason) for record in bad] == [(4, "missing event time (field ts)")]


def test_csv_unknown_columns() -> None:
    data = b"ts,action,extra\n2024-05-01T12:34:56Z,a,\n2024-05-01T12:34:56Z,b,x\n"
    strict, bad = read_all(data, make_table(BASIC_COLUMNS, unknown_fields="reject"), key="x.csv")
    assert strict.column("action").to_pylist() == ["a"]
    assert [(record.line, record.reason) for record in bad] == [(3, "unknown field extra")]
    loose, bad = read_all(data, key="x.csv")
    assert loose.num_rows == 2 and bad == []


def test_csv_bom_and_gzip() -> None:
    data = "\ufeffts,action\n2024-05-01T12:34:56Z,é\n".encode()
    table, bad = read_all(gzip.compress(data), key="upload/x.csv.gz")
    assert bad == [] and table.column("action").to_pylist() == ["é"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"2024-05-01T12:34:56Z,a,1\n2024-05-01T12:34:56Z,b,2\n", "CSV has no header"),
        (b"ts,action,ts\n", "names 'ts' twice"),
        (b"ts,action\n2024-05-01T12:34:56Z,\xff\n", "invalid UTF-8 in CSV"),
    ],
)
def test_unreadable_csv(data: bytes, message: str) -> None:
    with pytest.raises(UnreadableObject, match=message):
        read_all(data, key="x.csv")


def test_csv_header_only_or_empty_is_fine() -> None:
    assert read_batches(b"ts,action\n", key="x.csv") == []
    assert read_batches(b"", key="x.csv") == []


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.sampled_from(["good", "quoted-newline", "short", "wrong-type", "blank", "no-time"]), max_size=30),
    st.integers(1, 7),
)
def test_csv_good_plus_bad_equals_records_in(kinds: list[str], batch_rows: int) -> None:
    lines = ["ts,user,n,action"]
    line_number = 1
    expected_good = []
    expected_bad = []
    for record_number, kind in enumerate(kinds, start=1):
        start = line_number + 1
        row = {
            "good": f"2024-05-01T12:34:56Z,u,{record_number},a",
            "quoted-newline": f'2024-05-01T12:34:56Z,"two\nlines",{record_number},a',
            "short": "2024-05-01T12:34:56Z,u",
            "wrong-type": "2024-05-01T12:34:56Z,u,x,a",
            "blank": "",
            "no-time": f",u,{record_number},a",
        }[kind]
        lines.append(row)
        line_number += row.count("\n") + 1
        if kind in ("good", "quoted-newline"):
            expected_good.append(record_number)
        elif kind != "blank":
            expected_bad.append(start)
    table, bad = read_all(("\r\n".join(lines) + "\r\n").encode(), key="x.csv", batch_rows=batch_rows)
    assert table.column("n").to_pylist() == expected_good
    assert [record.line for record in bad] == expected_bad
