"""partition_by: parsing, Iceberg's bucket transform, the values path and its parsing back, the rules a table
definition keeps, and the column changes a partition column refuses."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import DateType, IntegerType, LongType, StringType

from siltlake.catalog.table_changes import with_column_renamed, with_column_type, without_column
from siltlake.errors import DefinitionError
from siltlake.partspec import NULL_TEXT, PartitionField, bucket_of, parse_field, parse_values, row_values, values_text
from siltlake.storage.keys import TableLayout, date_in_key, split_key
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE

TWO_LEVELS = ["action", "bucket(4, user_id)"]
TYPES = {"action": "string", "user_id": "bigint"}


def test_fields_parse_and_name_themselves_as_iceberg_does() -> None:
    assert parse_field(" service ") == PartitionField("service")
    bucket = parse_field("bucket( 16 ,user_id)")
    assert (bucket.column, bucket.buckets, bucket.name, bucket.transform) == (
        "user_id",
        16,
        "user_id_bucket",
        "bucket[16]",
    )
    assert str(bucket) == "bucket(16, user_id)"
    for wrong in ("bucket(0, a)", "bucket(2000, a)", "truncate(4, a)", "a b", ""):
        with pytest.raises(DefinitionError, match="partition_by"):
            parse_field(wrong)


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1), st.integers(min_value=1, max_value=1024))
def test_integer_buckets_are_icebergs(value: int, buckets: int) -> None:
    assert bucket_of(value, buckets) == BucketTransform(buckets).transform(LongType())(value)
    if -(2**31) <= value < 2**31:  # an int column hashes as a long too
        assert bucket_of(value, buckets) == BucketTransform(buckets).transform(IntegerType())(value)


@given(st.text(), st.dates(), st.integers(min_value=1, max_value=1024))
def test_string_and_date_buckets_are_icebergs(text: str, date: dt.date, buckets: int) -> None:
    assert bucket_of(text, buckets) == BucketTransform(buckets).transform(StringType())(text)
    days = (date - dt.date(1970, 1, 1)).days
    assert bucket_of(date, buckets) == BucketTransform(buckets).transform(DateType())(days)


def test_the_spec_examples_of_the_bucket_transform() -> None:
    # Iceberg's spec, "Appendix B": 34 hashes to 2017239379, "iceberg" to 1210000089.
    assert bucket_of(34, 2**31 - 1) == 2017239379 % (2**31 - 1)
    assert bucket_of("iceberg", 2**31 - 1) == 1210000089 % (2**31 - 1)


@given(st.one_of(st.none(), st.text()), st.one_of(st.none(), st.integers(min_value=-(2**63), max_value=2**63 - 1)))
def test_a_values_path_parses_back_to_its_values(action: str | None, user_id: int | None) -> None:
    fields = [parse_field(f) for f in TWO_LEVELS]
    values = [fields[0].value(action), fields[1].value(user_id)]
    text = values_text(fields, values)
    assert text.count("/") == 1 and " " not in text  # one segment per field, whatever the value holds
    if action != NULL_TEXT:
        assert parse_values(fields, TYPES, text) == {"action": action, "user_id_bucket": values[1]}


def test_row_values_name_each_rows_partition() -> None:
    fields = [parse_field(f) for f in TWO_LEVELS]
    rows = pa.table({"action": ["a", None, "a/b", "a"], "user_id": pa.array([1, 2, None, 1], pa.int64())})
    assert row_values(fields, rows).to_pylist() == [
        f"action=a/user_id_bucket={bucket_of(1, 4)}",
        f"action={NULL_TEXT}/user_id_bucket={bucket_of(2, 4)}",
        f"action=a%2Fb/user_id_bucket={NULL_TEXT}",
        f"action=a/user_id_bucket={bucket_of(1, 4)}",
    ]


def test_keys_carry_the_values_below_dt_and_parse_back() -> None:
    layout = TableLayout("k", "web", "access")
    day, values = dt.date(2026, 11, 20), "action=a1/user_id_bucket=3"
    for key in (
        layout.small_object(day, 7, False, values),
        layout.merged_object(day, 0, 9, values),
        layout.manifest_keys(day, 9, None, values)[0],
        layout.manifest_keys(day, 9, None, values)[1],
    ):
        parts = split_key("k", key)
        assert parts is not None and (parts.partition_date, parts.partition_values) == (day, values), key
        assert date_in_key(key) == day
    assert split_key("k", layout.small_object(day, 7, False)).partition_values == ""


def _table(**settings: object) -> TableDef:
    return TableDef.from_mapping({**ACCESS_TABLE, **settings})


def test_a_definition_checks_its_partition_fields() -> None:
    assert [f.name for f in _table(partition_by=TWO_LEVELS).partition_fields] == ["action", "user_id_bucket"]
    assert _table().partition_fields == () and "partition_by" not in _table().to_json()
    for settings, message in (
        ({"partition_by": ["nope"]}, "'nope' is not one of the columns"),
        ({"partition_by": ["utc_event_time"]}, "already partitions by dt"),
        ({"partition_by": ["action", "action"]}, "names a column twice"),
        ({"partition_by": ["action", "bucket(2, action)"]}, "names a column twice"),
        ({"partition_by": ["bucket(4, utc_event_time)"]}, "already partitions by dt"),
    ):
        with pytest.raises(DefinitionError, match=message):
            _table(**settings)
    keyed = {"primary_key": ["user_id"], "columns": [{**c, "nullable": False} for c in ACCESS_TABLE["columns"]]}
    assert _table(**keyed, partition_by=["bucket(8, user_id)"]).keyed
    with pytest.raises(DefinitionError, match="partitions by its primary_key columns only"):
        _table(**keyed, partition_by=["action"])
    float_column = [*ACCESS_TABLE["columns"], {"name": "score", "type": "double"}]
    with pytest.raises(DefinitionError, match="has type double"):
        _table(columns=float_column, partition_by=["score"])
    stored = _table(partition_by=TWO_LEVELS)
    assert TableDef.from_json(stored.to_json()).partition_by == tuple(TWO_LEVELS)


def test_a_partition_column_keeps_its_name_type_and_place() -> None:
    table = _table(partition_by=TWO_LEVELS).with_field_ids()
    with pytest.raises(DefinitionError, match="partition_by column"):
        with_column_renamed(table, "action", "verb")
    with pytest.raises(DefinitionError, match="partition_by column"):
        without_column(table, "user_id")
    with pytest.raises(DefinitionError, match="partition_by column"):
        with_column_type(table, "action", "int", rewrite=True)


def test_the_demo_table_takes_levels_below_dt(tmp_path) -> None:
    from siltlake.demo.__main__ import parse_arguments
    from siltlake.demo.sample import write_table_definition
    from siltlake.tabledef import load_table_file

    levels = parse_arguments(["--partition-by", "host", "--partition-by", "bucket(4, user_id)"])
    write_table_definition(tmp_path / "t.toml", levels)
    assert load_table_file(tmp_path / "t.toml").partition_by == ("host", "bucket(4, user_id)")
    write_table_definition(tmp_path / "plain.toml", parse_arguments([]))
    assert load_table_file(tmp_path / "plain.toml").partition_by == ()
