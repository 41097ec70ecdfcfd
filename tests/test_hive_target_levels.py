"""The Hive target on a table partitioned below dt (dt, an identity field, hash buckets): one metastore partition per
siltlake partition (date, values), typed partition columns, each at its newest version's symlink manifest (the merged
one once its date switches), dropped by TTL and reap; and the rows a symlink reader gets through the metastore are
exactly the table's, pruned by the metastore on the identity column and on the bucket.

Spark cannot read a symlink table itself (tests/test_hive_target.py), so the rows are read as Trino and Athena read
them: the partitions and their locations from the metastore, the Parquet files each location's manifest lists (read
by Spark), each partition column's value from the partition; then Spark SQL queries that.

A location is the path itself, unescaped (the metastore, Hadoop and Trino do not decode it): a partition value a
path escapes ("a b/c=%" is action=a%20b%2Fc%3D%25) is located at the directory of that name."""

from __future__ import annotations

import datetime as dt
import gzip
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote, unquote

import pytest

from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.merge import merge_once
from siltlake.partspec import NULL_TEXT, bucket_of
from siltlake.publish import publish_once
from siltlake.read.expression_sql import spark_string
from siltlake.reap import reap_once
from siltlake.storage.keys import symlink_directory
from siltlake.stream import stream_once

from .test_external_catalogs import hive_deployment, same_location  # noqa: F401 - a fixture
from .test_merge import DAY, make_table
from .test_publish import tokyo
from .test_table_api import NEXT_DAY, arrow_rows, stream

pytestmark = pytest.mark.spark
TWO_LEVELS = ["action", "bucket(4, user_id)"]
# An identity value a path must escape, and a null (Hive's default partition).
ESCAPED_ACTION = "a b/c=%"
ODD_ACTIONS = (ESCAPED_ACTION, None)
_odd_objects = iter(range(1_000_000))


def stream_odd_actions(deployment: Deployment, date: dt.date) -> Counter:
    """Stage and stream one object whose rows carry ODD_ACTIONS; returns its rows as arrow_rows counts them."""
    base = dt.datetime.combine(date, dt.time(3), tzinfo=dt.UTC) - dt.timedelta(hours=9)
    rows = [(base + dt.timedelta(minutes=i), 900_000 + i, ODD_ACTIONS[i % len(ODD_ACTIONS)]) for i in range(8)]
    lines = "".join(
        json.dumps({"time": t.isoformat().replace("+00:00", "Z"), "user_id": u, "action": a}) + "\n" for t, u, a in rows
    )
    path = Path(deployment.staging.path(f"f1.web.access/{date:%Y/%m/%d}/odd-{next(_odd_objects)}.jsonl.gz"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(lines.encode()))
    assert stream_once(deployment).records_loaded == len(rows)
    return Counter((int(t.timestamp() * 1_000_000), u, a) for t, u, a in rows)


def newest_file_lists(deployment: Deployment) -> dict[tuple[dt.date, str], tuple[str, str]]:
    """Per (date, values) partition of web.access: its newest version's file list key and commit op."""
    catalog = deployment.catalog
    table = catalog.tables.get("web.access")
    partitions = {p.id: (p.partition_date, p.partition_values) for p in catalog.partitions.list(table.id)}
    newest: dict[tuple[dt.date, str], tuple[int, str, str]] = {}
    for v in catalog.versions.of_partitions(list(partitions)):
        named = partitions[v.partition_id]
        assert v.file_list_key is not None
        if named not in newest or newest[named][0] < v.version:
            newest[named] = (v.version, v.file_list_key, v.commit_op)
    return {named: (key, op) for named, (_, key, op) in newest.items()}


def decoded(date: dt.date, values: str) -> tuple[str, ...]:
    """A partition as (dt, then each field's value text): the same whether named by siltlake or a metastore."""
    return (str(date), *(unquote(segment.partition("=")[2]) for segment in values.split("/")))


def symlink_rows(
    spark,
    partition_columns: Sequence[tuple[str, str]],
    data_columns: Sequence[str],
    partitions: Sequence[tuple[Sequence[str], str]],
    where: str = "",
) -> Counter:
    """What an engine reading symlink tables returns for `SELECT ... WHERE where` over these partitions (values in
    partition_columns' order, location): the files each manifest lists, each partition column's value (Hive's
    default partition name is null) from the partition. Rows as (event time in µs, user id, action)."""
    from pyspark.sql import functions as F

    placed = []  # (file as Spark names it, the values of its partition)
    for values, location in partitions:
        directory = local_path(location)
        assert [p.name for p in directory.iterdir()] == ["manifest"], location
        placed += [(file, values) for file in (directory / "manifest").read_text().split()]
    if not placed:
        return Counter()
    names = [name for name, _ in partition_columns]
    of_file = spark.createDataFrame(
        [(_same_file(file), *(None if text == NULL_TEXT else text for text in values)) for file, values in placed],
        ["file", *names],
    ).select("file", *(F.col(name).cast(kind) for name, kind in partition_columns))
    files = spark.read.parquet(*(file for file, _ in placed)).select(
        *data_columns, F.regexp_replace(F.input_file_name(), "^file:///", "file:/").alias("file")
    )
    files.join(of_file, "file").drop("file").createOrReplaceTempView("symlink_reader")
    query = "SELECT unix_micros(utc_event_time), user_id, action FROM symlink_reader" + (
        f" WHERE {where}" if where else ""
    )
    return Counter(tuple(r) for r in spark.sql(query).collect())


def _same_file(uri: str) -> str:
    """A symlink manifest's line (the path itself, unescaped) as Spark's input_file_name() names it: Hadoop's
    URI of that path, which escapes '%' and what a URI path may not hold."""
    return "file:" + quote(uri.removeprefix("file://"), safe="/=:@!$&'()*+,;~")


def local_path(location: str) -> Path:
    """The directory a file: location names, its text taken as the path itself."""
    return Path(location.replace("file:///", "file:/").removeprefix("file:"))


def hive_partitions(spark, hive: str, spec: str = "") -> list[tuple[list[str], str]]:
    """The values (dt first) and location of each partition the metastore lists, pruned by a partial spec."""
    found = []
    for row in spark.sql(f"SHOW PARTITIONS {hive} {spec}").collect():
        pairs = [(n, unquote(v)) for n, _, v in (s.partition("=") for s in row[0].split("/"))]
        named = ", ".join(f"`{n}` = {spark_string(v)}" for n, v in pairs)
        described = spark.sql(f"DESCRIBE FORMATTED {hive} PARTITION ({named})").collect()
        start = next(i for i, r in enumerate(described) if r.col_name == "# Detailed Partition Information")
        location = next(r.data_type for r in described[start:] if r.col_name == "Location")
        found.append(([v for _, v in pairs], location))
    return found


def expected_rows(lake: Lake, where=lambda row: True) -> Counter:
    return Counter(row for row in arrow_rows(lake.table("web.access").to_arrow()).elements() if where(row))


def test_hive_follows_a_table_partitioned_below_dt(hive_deployment: Deployment, spark) -> None:  # noqa: F811
    deployment, lake = hive_deployment, Lake(hive_deployment)
    prefix = deployment.config.publish.hive.database_prefix
    hive = f"{prefix}web.access"
    make_table(deployment, partition_by=TWO_LEVELS, ttl_days=1)
    stream(deployment, DAY, 0) + stream(deployment, DAY, 1)
    stream_odd_actions(deployment, DAY)

    first = publish_once(deployment, now=tokyo(DAY, 12))
    assert first.target_errors == []
    (created,) = [s for s in first.external if "CREATE EXTERNAL TABLE" in s]
    assert "(`utc_event_time` TIMESTAMP, `user_id` BIGINT) PARTITIONED BY (`dt` DATE, `action` STRING, " in created
    assert "`user_id_bucket` INT)" in created
    columns = {c.name: (c.dataType, c.isPartition) for c in spark.catalog.listColumns(hive)}
    assert columns == {
        "utc_event_time": ("timestamp", False),
        "user_id": ("bigint", False),
        "dt": ("date", True),
        "action": ("string", True),
        "user_id_bucket": ("int", True),
    }, "an identity partition column is a partition column only"
    partition_columns = [("dt", "date"), ("action", "string"), ("user_id_bucket", "int")]
    data_columns = ["utc_event_time", "user_id"]

    def assert_partitions_follow_the_catalog() -> None:
        newest = newest_file_lists(deployment)
        shown = {tuple(values): location for values, location in hive_partitions(spark, hive)}
        assert sorted(shown) == sorted(decoded(*named) for named in newest)
        for named, (file_list_key, _) in newest.items():
            location = shown[decoded(*named)]
            expected = unquote(deployment.lake.engine_uri(symlink_directory(file_list_key)))
            assert same_location(location, expected), named
            assert "/live/" not in location and f"/dt={named[0]}/{named[1]}/symlink-" in location
            assert [p.name for p in local_path(location).iterdir()] == ["manifest"]

    def assert_rows_exact() -> None:
        everything = hive_partitions(spark, hive)
        assert symlink_rows(spark, partition_columns, data_columns, everything) == expected_rows(lake, lambda row: True)
        # The metastore prunes on the identity column and on the bucket, and the rows it leaves are those
        # a WHERE on the same column keeps.
        a1 = hive_partitions(spark, hive, "PARTITION (`action` = 'a1')")
        assert a1 and all(values[1] == "a1" for values, _ in a1)
        assert symlink_rows(spark, partition_columns, data_columns, a1, "action = 'a1'") == expected_rows(
            lake, lambda row: row[2] == "a1"
        )
        assert symlink_rows(spark, partition_columns, data_columns, everything, "action IS NULL") == expected_rows(
            lake, lambda row: row[2] is None
        )
        b2 = hive_partitions(spark, hive, "PARTITION (`user_id_bucket` = 2)")
        assert b2 and all(values[2] == "2" for values, _ in b2)
        in_b2 = expected_rows(lake, lambda row: bucket_of(row[1], 4) == 2)
        assert symlink_rows(spark, partition_columns, data_columns, b2, "user_id_bucket = 2") == in_b2
        assert symlink_rows(spark, partition_columns, data_columns, everything, "user_id_bucket = 2") == in_b2

    assert_partitions_follow_the_catalog()
    assert any(values[1] == ESCAPED_ACTION for values, _ in hive_partitions(spark, hive))
    assert any(values[1] == NULL_TEXT for values, _ in hive_partitions(spark, hive))
    assert sum(expected_rows(lake, lambda row: row[2] is None).values()) == 4, "the null rows, read below"
    assert_rows_exact()

    # A merge, the next day's first objects (closing DAY), then the switch: DAY's partitions at merged manifests.
    merge_once(deployment)
    stream(deployment, NEXT_DAY, 3)
    assert publish_once(deployment, now=tokyo(NEXT_DAY, 1)).closed
    switching = publish_once(deployment, now=tokyo(NEXT_DAY, 2))
    assert switching.switched and switching.target_errors == []
    assert any("SET LOCATION" in s and "`action` = 'a1'" in s for s in switching.external), switching.external
    assert all(op == "compaction" for (date, _), (_, op) in newest_file_lists(deployment).items() if date == DAY)
    assert_partitions_follow_the_catalog()
    assert_rows_exact()

    # TTL: DAY's partitions are reaped, and dropped from the metastore one by one.
    day_partitions = [named for named in newest_file_lists(deployment) if named[0] == DAY]
    later = tokyo(NEXT_DAY + dt.timedelta(days=1), 12)
    assert reap_once(deployment, now=later, force=True).reasons["ttl"].rows == len(day_partitions)
    report = publish_once(deployment, now=later)
    assert report.target_errors == []
    (dropped,) = report.external
    assert dropped.count("PARTITION (") == len(day_partitions)
    assert f"PARTITION (`dt` = '{DAY}', `action` = 'a1', `user_id_bucket` = " in dropped
    assert all(values[0] == str(NEXT_DAY) for values, _ in hive_partitions(spark, hive))
    assert_partitions_follow_the_catalog()
    assert_rows_exact()
    assert publish_once(deployment, now=later + dt.timedelta(hours=1)).external == [], "nothing more to drop"


def test_a_run_that_died_before_recording_asks_the_metastore_by_date_and_values(
    hive_deployment: Deployment,  # noqa: F811
    spark,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The metastore's partitions, escaped values and nulls included, are matched to siltlake's by date and values:
    a resumed run finds each there and moves it (adds none twice), at its newest file list."""
    deployment, sync = hive_deployment, hive_deployment.catalog.external_sync
    hive = f"{deployment.config.publish.hive.database_prefix}web.access"
    make_table(deployment, partition_by=TWO_LEVELS)
    stream(deployment, DAY, 0)
    stream_odd_actions(deployment, DAY)

    def died(*args: object, **kwargs: object) -> None:
        raise RuntimeError("stopped")

    with monkeypatch.context() as m:
        m.setattr(sync, "record_partitions", died)
        assert publish_once(deployment, now=tokyo(DAY, 12)).target_errors == ["hive: stopped"]
    added = hive_partitions(spark, hive)
    resumed = publish_once(deployment, now=tokyo(DAY, 13))
    assert resumed.target_errors == []
    assert not any(" ADD " in s for s in resumed.external), resumed.external
    newest = newest_file_lists(deployment)
    shown = {tuple(values): location for values, location in hive_partitions(spark, hive)}
    assert len(shown) == len(newest) == len(added)
    for named, (file_list_key, _) in newest.items():
        expected = unquote(deployment.lake.engine_uri(symlink_directory(file_list_key)))
        assert same_location(shown[decoded(*named)], expected)
    assert publish_once(deployment, now=tokyo(DAY, 14)).external == [], "recorded now: idempotent"
