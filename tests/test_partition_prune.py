"""What a SQL condition pins a column to (siltlake.read.partition_prune): only literals every engine compares the
same way, so that leaving a partition out never drops a row Spark, DuckDB or pyarrow would return."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlglot

from siltlake.partspec import NULL_TEXT, PartitionField, bucket_of
from siltlake.read.partition_prune import column_values, partitions_of_values

TYPES = {"user_id": "bigint", "action": "string", "day": "date", "ok": "boolean", "n": "int"}


def pinned(where: str, qualifiers: set[str] | None = None) -> dict:
    return column_values([sqlglot.parse_one(where, read="spark")], TYPES, qualifiers)


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("action = 'a1'", {"action": {"a1"}}),
        ("'a1' = action", {"action": {"a1"}}),
        ("ACTION = 'a1'", {"action": {"a1"}}),
        ("action IN ('a1', 'a2') AND action = 'a2'", {"action": {"a2"}}),
        ("action = 'a1' OR action IS NULL", {"action": {"a1", None}}),
        ("(user_id = 5 OR user_id = -7) AND n IN (1, '2')", {"user_id": {5, -7}, "n": {1, 2}}),
        ("user_id = '42'", {"user_id": {42}}),
        ("day = DATE '2026-11-20' AND ok = true", {"day": {dt.date(2026, 11, 20)}, "ok": {True}}),
        ("day = '2026-11-20'", {"day": {dt.date(2026, 11, 20)}}),
        # Not sure what an engine compares: nothing pinned.
        ("action = 'a1' OR user_id = 5", {}),
        ("user_id = 5.0", {}),
        ("user_id = '9007199254740993'", {}),  # a text an engine may compare as a double, inexact here
        ("user_id = 99999999999999999999", {}),  # past a long: compared as decimals
        ("action = 5", {}),
        ("day = '2026-1-2'", {}),
        ("user_id = NULL", {}),
        ("action IN ('a1', NULL)", {}),
        ("user_id + 0 = 5", {}),
        ("NOT action = 'a1'", {}),
        ("other.action = 'a1'", {}),
        ("action = user_id", {}),
    ],
)
def test_only_literals_every_engine_reads_alike_pin_a_column(where: str, expected: dict) -> None:
    assert {column: set(values) for column, values in pinned(where).items()} == expected


def test_a_qualified_column_pins_when_the_qualifier_is_the_tables() -> None:
    assert pinned("t.action = 'a1'", {"t"}) == {"action": frozenset({"a1"})}
    assert pinned("u.action = 'a1'", {"t"}) == {}


def test_pinned_values_keep_their_identity_partitions_and_buckets_nulls_included() -> None:
    fields = [PartitionField("action"), PartitionField("user_id", 4)]
    day = dt.date(2026, 11, 20)
    present = [
        (day, f"action={action}/user_id_bucket={bucket}") for action in ("a1", "a2", NULL_TEXT) for bucket in range(4)
    ] + [(day, f"action=a1/user_id_bucket={NULL_TEXT}")]
    kept = partitions_of_values({"user_id": frozenset({5, None})}, present, fields, TYPES)
    assert kept == {
        key for key in present if key[1].endswith((f"user_id_bucket={bucket_of(5, 4)}", f"bucket={NULL_TEXT}"))
    }
    kept = partitions_of_values({"action": frozenset({None})}, present, fields, TYPES)
    assert kept == {key for key in present if key[1].startswith(f"action={NULL_TEXT}/")}
    assert partitions_of_values({"other": frozenset({1})}, present, fields, TYPES) == set(present)
