"""The keyed tables' row rule (siltlake.records.keyed) and the definition checks of primary keys."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from siltlake.errors import DefinitionError
from siltlake.records.keyed import DELETE_MARKER, latest_rows, needs_merge_on_read
from siltlake.tabledef import TableDef


def _keyed(**overrides) -> dict:
    definition = {
        "schema": "web",
        "name": "events",
        "time_column": "t",
        "columns": [
            {"name": "t", "type": "timestamp", "nullable": False},
            {"name": "event_id", "type": "string", "nullable": False},
            {"name": "seq", "type": "bigint"},
            {"name": "v", "type": "string"},
        ],
        "primary_key": ["event_id"],
    }
    definition.update(overrides)
    return definition


def test_the_last_committed_row_of_a_key_wins_and_order_is_kept():
    rows = pa.table({"id": [1, 2, 1, 3, 2], "v": ["a", "b", "c", "d", "e"]})
    assert latest_rows(rows, ["id"]).to_pydict() == {"id": [1, 3, 2], "v": ["c", "d", "e"]}
    unique = pa.table({"id": [3, 1, 2], "v": ["x", "y", "z"]})
    assert latest_rows(unique, ["id"]) is unique  # nothing to drop: the same table back


def test_a_sequence_column_decides_before_commit_order_and_null_is_smallest():
    rows = pa.table(
        {"id": [1, 1, 1, 2, 2, 3, 3], "s": [5, 3, 5, None, 1, None, None], "v": ["a", "b", "c", "d", "e", "f", "g"]}
    )
    kept = latest_rows(rows, ["id"], "s").to_pydict()
    assert kept == {"id": [1, 2, 3], "s": [5, 1, None], "v": ["c", "e", "g"]}


def test_delete_markers_remove_their_key_unless_a_later_row_restores_it():
    rows = pa.table(
        {"id": [1, 2, 1, 2, 3], "v": ["a", "b", None, None, "c"], DELETE_MARKER: [None, False, True, True, None]}
    )
    assert latest_rows(rows, ["id"]).to_pydict() == {"id": [3], "v": ["c"]}
    restored = pa.concat_tables([rows, pa.table({"id": [1], "v": ["again"], DELETE_MARKER: [False]})])
    assert latest_rows(restored, ["id"]).to_pydict() == {"id": [3, 1], "v": ["c", "again"]}


def test_compound_keys():
    rows = pa.table({"a": [1, 1, 1], "b": ["x", "y", "x"], "v": [1, 2, 3]})
    assert latest_rows(rows, ["a", "b"]).to_pydict() == {"a": [1, 1], "b": ["y", "x"], "v": [2, 3]}


def test_which_partitions_need_a_merge_on_read():
    small = "file:///lake/i/web.e/live/dt=2026-11-20/obj-0000000000000000007.parquet"
    merged = "file:///lake/i/web.e/merged/dt=2026-11-20/part-0-7.parquet"
    assert needs_merge_on_read([small])
    assert needs_merge_on_read([merged, merged.replace("part-0-7", "part-7-9")])
    assert not needs_merge_on_read([merged])
    assert not needs_merge_on_read([])


def test_primary_key_definitions_are_checked():
    table = TableDef.from_mapping(_keyed(sequence_column="seq"))
    assert table.keyed and table.primary_key == ("event_id",)
    assert not TableDef.from_mapping({k: v for k, v in _keyed().items() if k != "primary_key"}).keyed
    refusals = {
        "not one of the columns": _keyed(primary_key=["nope"]),
        "must be declared nullable = false": _keyed(primary_key=["v"]),
        "names a column twice": _keyed(primary_key=["event_id", "event_id"]),
        "needs a primary_key": _keyed(primary_key=[], sequence_column="seq"),
        "is part of the primary_key": _keyed(primary_key=["event_id", "t"], sequence_column="t"),
        "must be one of": _keyed(sequence_column="v"),
    }
    for message, definition in refusals.items():
        with pytest.raises(DefinitionError, match=message):
            TableDef.from_mapping(definition)
    json_key = _keyed(
        columns=[
            {"name": "t", "type": "timestamp", "nullable": False},
            {"name": "event_id", "type": "json", "nullable": False},
        ]
    )
    with pytest.raises(DefinitionError, match="cannot be a key"):
        TableDef.from_mapping(json_key)


@given(
    st.lists(
        st.tuples(
            st.integers(0, 5),
            st.sampled_from(["a", "b"]),
            st.one_of(st.none(), st.integers(0, 3)),
            st.one_of(st.none(), st.booleans()),
        ),
        max_size=40,
    ),
    st.booleans(),
)
def test_latest_rows_matches_a_row_by_row_reading_of_the_rule(rows, with_sequence) -> None:
    """Against the rule read literally: walk the rows in commit order, a row replaces its key's row when its
    (sequence, position) is not smaller; then drop keys whose winner is a delete marker."""
    best: dict[tuple, tuple] = {}
    for position, (a, b, sequence, _deleted) in enumerate(rows):
        rank = ((-1 if sequence is None else sequence) if with_sequence else 0, position)
        if (a, b) not in best or rank >= best[(a, b)][0]:
            best[(a, b)] = (rank, position)
    expected = sorted(position for _, position in best.values() if not rows[position][3])
    table = pa.table(
        {
            "a": [r[0] for r in rows],
            "b": [r[1] for r in rows],
            "s": [r[2] for r in rows],
            "position": list(range(len(rows))),
            DELETE_MARKER: pa.array([r[3] for r in rows], pa.bool_()),
        },
        schema=pa.schema(
            [
                ("a", pa.int64()),
                ("b", pa.string()),
                ("s", pa.int64()),
                ("position", pa.int64()),
                (DELETE_MARKER, pa.bool_()),
            ]
        ),
    )
    kept = latest_rows(table, ["a", "b"], "s" if with_sequence else "")
    assert kept.column("position").to_pylist() == expected
    assert DELETE_MARKER not in kept.column_names
