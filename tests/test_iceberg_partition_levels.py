"""The Iceberg target of a table partitioned below dt: its Iceberg table carries the whole partition spec.

A two-level table (partition_by action, bucket(4, user_id)) walked through stream, a delayed object, merges, the
switch, deletes, an added column and an update: its Iceberg table's spec is dt, action (identity) and
user_id_bucket (bucket[4]) over the right columns, every data file's partition record names the values of the rows
it holds, PyIceberg prunes files by the spec for filters on action and on user_id and returns exactly siltlake's
rows, and the reader matrix of tests/test_iceberg_readers.py (PyIceberg, polars, DataFusion; DuckDB's iceberg_scan
and REST ATTACH in the readers venv) answers every query shape as siltlake at every version. A keyed table
bucketed by its key: each position delete file lies in its data file's partition, every reader applies it, and an
Iceberg table whose spec is not siltlake's is reported. A file's partition record equals PyIceberg's own partition
value of its rows' values (identity on string, date and boolean columns, buckets, nulls).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.merge import merge_once
from siltlake.partspec import bucket_of
from siltlake.publish import publish_once
from siltlake.publish.iceberg.catalog import open_catalog
from siltlake.publish.iceberg.deletes import snapshot_deletes, target_of
from siltlake.publish.iceberg.manifests import partition_date
from siltlake.publish.iceberg.snapshots import snapshot_files, snapshot_of_version
from siltlake.publish.iceberg.target import IcebergTarget

from .test_iceberg_keyed import python_readers
from .test_iceberg_keyed import upsert_rows as keyed_rows
from .test_iceberg_readers import (
    assert_current_through_version_hint,
    disagreements,
    duckdb_disagreements,
    published,
    require_readers_venv,
    rows_of,
)
from .test_merge import DAY, make_table
from .test_publish import tokyo
from .test_table_api import stream
from .test_upsert import KEYED

NEXT_DAY = DAY + dt.timedelta(days=1)
IDENT = ("web", "access")
TWO_LEVELS = ["action", "bucket(4, user_id)"]
BUCKETS = 4


def two_level_walk(deployment: Deployment) -> list[int]:
    """tests/test_iceberg_readers.py's walk-through on a two-level table: the table versions made."""
    deployment.config.publish.targets = ["iceberg"]
    make_table(deployment, partition_by=TWO_LEVELS)
    stream(deployment, DAY, 0)
    stream(deployment, DAY, 1)
    versions = [published(deployment, tokyo(DAY, 12))]
    merge_once(deployment)
    stream(deployment, NEXT_DAY, 3)
    versions.append(published(deployment, tokyo(NEXT_DAY, 1)))  # closes DAY
    stream(deployment, DAY, 4)  # delayed: shown once merged
    versions.append(published(deployment, tokyo(NEXT_DAY, 2)))  # switches DAY to its merged objects
    merge_once(deployment)
    stream(deployment, NEXT_DAY, 5)
    versions.append(published(deployment, tokyo(NEXT_DAY, 3)))  # merges the delayed object in
    lake = Lake(deployment)
    lake.table("web.access").delete("action = 'a1'", dates=DAY, now=tokyo(NEXT_DAY, 4))
    versions.append(lake.table("web.access").version)
    lake.table("web.access").add_column("referrer", "string", now=tokyo(NEXT_DAY, 4))
    stream(deployment, NEXT_DAY, 6, referrer=True)
    versions.append(published(deployment, tokyo(NEXT_DAY, 5)))
    lake.table("web.access").delete("action = 'a2'", dates=NEXT_DAY, now=tokyo(NEXT_DAY, 6))
    versions.append(published(deployment, tokyo(NEXT_DAY, 7)))
    assert versions == sorted(set(versions)) and len(versions) == 7, versions
    return versions


def assert_two_level_spec(iceberg: Any) -> None:  # a pyiceberg Table
    """dt, action and user_id_bucket, over dt, action and user_id, with Iceberg's ids by position."""
    from pyiceberg.transforms import BucketTransform, IdentityTransform

    schema = iceberg.schema()
    fields = [(f.field_id, f.name, f.transform, f.source_id) for f in iceberg.spec().fields]
    assert fields == [
        (1000, "dt", IdentityTransform(), schema.find_field("dt").field_id),
        (1001, "action", IdentityTransform(), schema.find_field("action").field_id),
        (1002, "user_id_bucket", BucketTransform(BUCKETS), schema.find_field("user_id").field_id),
    ]
    assert len(iceberg.specs()) == 1, "the spec is the table's first and only one"


def partition_values(data_file: Any) -> tuple[Any, ...]:  # a pyiceberg DataFile
    """A data file's partition record as (date, action, bucket)."""
    record = data_file.partition
    return (partition_date(data_file), record[1], record[2])


def rows_values(path: str) -> set[tuple[Any, ...]]:
    """The (dt, action, bucket of user_id) of each row of a data file."""
    rows = pq.read_table(path.removeprefix("file://"), columns=["dt", "action", "user_id"])
    columns = (rows.column(name).to_pylist() for name in ("dt", "action", "user_id"))
    return {(date, action, bucket_of(user_id, BUCKETS)) for date, action, user_id in zip(*columns, strict=True)}


def assert_records_name_the_rows(iceberg: Any, versions: list[int]) -> None:
    """At every version, each data file's partition record is the one partition its rows lie in, and the files
    of one version name several partitions of each level."""
    for version in versions:
        files = snapshot_files(iceberg, snapshot_of_version(iceberg, version))
        assert len({f.partition[1] for f in files}) > 1 and len({f.partition[2] for f in files}) > 1, version
        for data_file in files:
            # <=: an update that deleted all of a partition's rows leaves it an object with none.
            assert rows_values(data_file.file_path) <= {partition_values(data_file)}, (version, data_file.file_path)


def planned(iceberg: Any, row_filter: Any) -> list[Any]:  # a pyiceberg Table and filter; its data files
    return [task.file for task in iceberg.scan(row_filter=row_filter).plan_files()]


def spec_keeps(iceberg: Any, row_filter: Any, data_file: Any) -> bool:  # PyIceberg's Table, expression, DataFile
    """Whether the spec alone keeps a file for a filter: the filter projected onto the partition (Iceberg's
    inclusive projection) and evaluated on the file's partition record, no column statistics involved."""
    from pyiceberg.expressions.visitors import expression_evaluator, inclusive_projection
    from pyiceberg.schema import Schema

    spec = iceberg.spec()
    projected = inclusive_projection(iceberg.schema(), spec)(row_filter)
    partition_schema = Schema(*spec.partition_type(iceberg.schema()).fields)
    return expression_evaluator(partition_schema, projected, case_sensitive=True)(data_file.partition)


def assert_pruned_scans(deployment: Deployment, iceberg: Any) -> None:
    """Filters on action and on user_id: PyIceberg plans only files of matching partitions, fewer than an
    unfiltered scan, and returns exactly siltlake's rows; the spec alone leaves the other partitions' files out."""
    from pyiceberg.expressions import EqualTo

    table = Lake(deployment).table("web.access")
    every = planned(iceberg, "true")
    user_id = table.to_arrow(filter=pc.field("dt") == DAY, columns=["user_id"]).column("user_id")[0].as_py()
    for row_filter, expression, name, value in (
        (EqualTo("action", "a3"), pc.field("action") == "a3", "action", "a3"),
        (EqualTo("user_id", user_id), pc.field("user_id") == user_id, "user_id_bucket", bucket_of(user_id, BUCKETS)),
    ):
        files = planned(iceberg, row_filter)
        position = [f.name for f in iceberg.spec().fields].index(name)
        assert files and len(files) < len(every), (row_filter, len(files), len(every))
        assert all(f.partition[position] == value for f in files), row_filter
        kept = [f for f in every if spec_keeps(iceberg, row_filter, f)]
        assert kept and {f.file_path for f in kept} == {f.file_path for f in every if f.partition[position] == value}, (
            f"{row_filter}: the spec alone prunes to the partitions of {name}={value}"
        )
        columns = ("utc_event_time", "user_id", "action", "dt")
        expected = rows_of(table.to_arrow(filter=expression, columns=list(columns)), columns)
        assert expected and rows_of(iceberg.scan(row_filter=row_filter).to_arrow(), columns) == expected, row_filter


def assert_keys_name_the_values(deployment: Deployment, iceberg: Any) -> None:
    """A file registered without its catalog row's values path takes it from its key: the same record."""
    target = IcebergTarget(deployment)
    record = Lake(deployment).table("web.access").record
    for data_file in snapshot_files(iceberg, iceberg.current_snapshot()):
        again = target._data_file(record, iceberg, data_file.file_path, partition_date(data_file), "", None)
        assert partition_values(again) == partition_values(data_file), data_file.file_path


def assert_rest_serves_the_spec(deployment: Deployment, iceberg: Any) -> None:
    """The REST catalog siltlake serves gives the same spec (it serves the table's metadata as it is)."""
    from pyiceberg.catalog.rest import RestCatalog

    from siltlake.publish.iceberg.rest import IcebergRestServer

    server = IcebergRestServer(deployment, "127.0.0.1", 0).start()
    try:
        served = RestCatalog("siltlake", uri=server.url).load_table(IDENT)
        assert served.spec() == iceberg.spec() and served.metadata.default_spec_id == iceberg.metadata.default_spec_id
    finally:
        server.close()


def test_a_two_level_tables_iceberg_spec_records_pruning_and_readers(deployment: Deployment) -> None:
    versions = two_level_walk(deployment)
    iceberg = open_catalog(deployment).load_table(IDENT)
    assert_two_level_spec(iceberg)
    assert_records_name_the_rows(iceberg, versions)
    summary = iceberg.current_snapshot().summary
    assert any(
        name.startswith(f"partitions.dt={NEXT_DAY}/action=") and "/user_id_bucket=" in name
        for name in summary.additional_properties
    ), "snapshot summaries name each partition by its whole spec"
    assert_pruned_scans(deployment, iceberg)
    assert_keys_name_the_values(deployment, iceberg)
    assert_rest_serves_the_spec(deployment, iceberg)
    wrong = disagreements(deployment, versions)
    assert not wrong, "\n".join(wrong)
    assert_current_through_version_hint(deployment)


@pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)
def test_duckdb_reads_a_two_level_table_as_siltlake_at_every_version(deployment: Deployment) -> None:
    """DuckDB's iceberg_scan and REST ATTACH, by snapshot id and by time, through the two-level walk-through."""
    require_readers_venv()
    versions = two_level_walk(deployment)
    wrong = duckdb_disagreements(deployment, versions)
    assert not wrong, "\n".join(wrong)


def test_a_keyed_bucketed_tables_delete_files_lie_in_their_data_files_partitions(deployment: Deployment) -> None:
    """A keyed table partitioned by bucket(4, user_id): upserts leave merge-on-read partitions whose position
    delete files carry their data file's partition record; every Python reader returns siltlake's rows."""
    deployment.config.publish.targets = ["iceberg"]
    make_table(deployment, **KEYED, partition_by=["bucket(4, user_id)"])
    table = Lake(deployment).table("web.access")
    stream(deployment, DAY, 0)
    stream(deployment, NEXT_DAY, 2)
    first = published(deployment, tokyo(DAY, 12))
    table.upsert(keyed_rows([*range(10), 5_000_000], ("action", "upgraded")), now=tokyo(DAY, 13))
    deletes = keyed_rows([3, 4, 12], ("action", "gone"), minute=45).append_column("drop", pa.array([True, True, False]))
    table.upsert(deletes, delete_column="drop", now=tokyo(DAY, 14))
    last = published(deployment, tokyo(DAY, 15))
    iceberg = open_catalog(deployment).load_table(IDENT)
    assert [(f.name, str(f.transform)) for f in iceberg.spec().fields] == [
        ("dt", "identity"),
        ("user_id_bucket", "bucket[4]"),
    ]
    files = {f.file_path: f for f in snapshot_files(iceberg, iceberg.current_snapshot())}
    delete_files = snapshot_deletes(iceberg, iceberg.current_snapshot())
    assert delete_files, "the upserts leave rows hidden by position deletes"
    for data_file in files.values():
        rows = pq.read_table(data_file.file_path.removeprefix("file://"), columns=["user_id"])
        assert {bucket_of(u, BUCKETS) for u in rows.column("user_id").to_pylist()} == {data_file.partition[1]}
    for delete_file in delete_files:
        target = files[target_of(delete_file)]
        assert partition_date(delete_file) == partition_date(target) == DAY
        assert delete_file.partition[1] == target.partition[1], delete_file.file_path
        assert f"/user_id_bucket={target.partition[1]}/" in delete_file.file_path
    assert Counter(table.to_arrow().column("action").to_pylist())["upgraded"] == 9
    wrong = python_readers(deployment, list(range(first, last + 1)))
    assert not wrong, "\n".join(wrong)

    # An Iceberg table whose spec is not siltlake's (an older siltlake's dt alone, or changed by an engine) is
    # reported, not filled with records of another spec.
    with iceberg.update_spec() as update:
        update.remove_field("user_id_bucket")
    stream(deployment, NEXT_DAY, 3)
    report = publish_once(deployment, now=tokyo(NEXT_DAY, 12))
    assert "is partitioned by (identity(dt)), siltlake's table web.access by (dt, bucket(4, user_id))" in str(
        report.target_errors
    ), report.target_errors


@pytest.mark.parametrize(
    "row",
    [
        {"action": "a/b c", "day": dt.date(2026, 1, 2), "flag": True, "user_id": 42},
        {"action": None, "day": None, "flag": None, "user_id": None},
        {"action": "", "day": dt.date(1969, 12, 31), "flag": False, "user_id": -7},
    ],
)
def test_a_files_partition_record_is_pyicebergs_for_its_rows_values(row: dict[str, Any]) -> None:
    """The record built from a values path (identity on string, date and boolean columns, a bucket, nulls) equals
    PyIceberg's own partition value of the row's values under the table's spec, as PyIceberg's writers make it."""
    from types import SimpleNamespace

    from pyiceberg.partitioning import partition_record_value

    from siltlake.partspec import values_text
    from siltlake.publish.iceberg.partitioning import partition_record, partition_spec
    from siltlake.publish.iceberg.snapshots import iceberg_schema
    from siltlake.tabledef import TableDef

    from .conftest import ACCESS_TABLE

    definition = TableDef.from_mapping(
        {
            **ACCESS_TABLE,
            "columns": [*ACCESS_TABLE["columns"], {"name": "day", "type": "date"}, {"name": "flag", "type": "boolean"}],
            "partition_by": ["action", "day", "flag", "bucket(8, user_id)"],
        }
    ).with_field_ids()
    schema = iceberg_schema(SimpleNamespace(definition=definition, qualified_name="web.access"))
    spec = partition_spec(definition, schema)
    fields = definition.partition_fields
    values = values_text(fields, [field.value(row[field.column]) for field in fields])
    raw = {"dt": DAY, **row}
    # PyIceberg's internal form of the row's value (a date as days), then the field's transform of it.
    expected = [
        f.transform.transform(schema.find_type(f.source_id))(
            partition_record_value(f, raw[schema.find_column_name(f.source_id)], schema)
        )
        for f in spec.fields
    ]
    assert list(partition_record(definition, DAY, values)) == expected
