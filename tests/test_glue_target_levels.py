"""The Glue target on a table partitioned below dt, against moto's Glue: partition keys dt, the identity column (not a
data column too) and the bucket; one Glue partition per siltlake partition (date, values), each at its newest
version's symlink manifest (the merged one once its date switches), deleted by TTL and reap; a symlink reader over
Glue's partitions gets exactly the table's rows; a resumed run matches Glue's partitions by date and values."""

from __future__ import annotations

import datetime as dt
from urllib.parse import unquote

import pytest

from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.merge import merge_once
from siltlake.partspec import NULL_TEXT, bucket_of
from siltlake.publish import publish_once
from siltlake.publish.hive import SYMLINK_INPUT
from siltlake.reap import reap_once
from siltlake.storage.keys import symlink_directory

from .test_glue_target import ACCOUNT, glue, glue_deployment, kinds  # noqa: F401 - fixtures
from .test_hive_target_levels import (
    ESCAPED_ACTION,
    TWO_LEVELS,
    decoded,
    expected_rows,
    newest_file_lists,
    stream_odd_actions,
    symlink_rows,
)
from .test_merge import DAY, make_table
from .test_publish import tokyo
from .test_table_api import NEXT_DAY, stream

pytestmark = pytest.mark.spark
PARTITION_COLUMNS = [("dt", "date"), ("action", "string"), ("user_id_bucket", "int")]
DATA_COLUMNS = ["utc_event_time", "user_id"]


def glue_partitions(glue, database: str, expression: str = "") -> dict[tuple[str, ...], dict]:  # noqa: F811
    """Glue's partitions of database.access (those an expression selects), by values: their storage."""
    found: dict[tuple[str, ...], dict] = {}
    token = ""
    while True:
        more = {"NextToken": token} if token else {}
        selected = {"Expression": expression} if expression else {}
        answer = glue.get_partitions(DatabaseName=database, TableName="access", **selected, **more)
        found |= {tuple(p["Values"]): p["StorageDescriptor"] for p in answer["Partitions"]}
        token = answer.get("NextToken", "")
        if not token:
            return found


def located(shown: dict[tuple[str, ...], dict]) -> list[tuple[list[str], str]]:
    return [(list(values), storage["Location"]) for values, storage in shown.items()]


def test_glue_follows_a_table_partitioned_below_dt(glue_deployment: Deployment, glue, spark) -> None:  # noqa: F811
    deployment, lake = glue_deployment, Lake(glue_deployment)
    database = deployment.config.publish.glue.database_prefix + "web"
    make_table(deployment, partition_by=TWO_LEVELS, ttl_days=1)
    stream(deployment, DAY, 0) + stream(deployment, DAY, 1)
    stream_odd_actions(deployment, DAY)

    first = publish_once(deployment, now=tokyo(DAY, 12))
    assert first.target_errors == []
    assert kinds(first.external) == ["CreateDatabase", "CreateTable", "BatchCreatePartition"]
    described = glue.get_table(CatalogId=ACCOUNT, DatabaseName=database, Name="access")["Table"]
    assert described["PartitionKeys"] == [
        {"Name": "dt", "Type": "date"},
        {"Name": "action", "Type": "string"},
        {"Name": "user_id_bucket", "Type": "int"},
    ]
    columns = [(c["Name"], c["Type"]) for c in described["StorageDescriptor"]["Columns"]]
    assert columns == [("utc_event_time", "timestamp"), ("user_id", "bigint")], "action is a partition key only"

    def assert_partitions_follow_the_catalog() -> None:
        newest = newest_file_lists(deployment)
        shown = glue_partitions(glue, database)
        assert sorted(shown) == sorted(decoded(*named) for named in newest)
        for named, (file_list_key, _) in newest.items():
            storage = shown[decoded(*named)]
            assert storage["Location"] == unquote(lake_uri(symlink_directory(file_list_key))), named
            assert "/live/" not in storage["Location"] and storage["InputFormat"] == SYMLINK_INPUT
            assert [(c["Name"], c["Type"]) for c in storage["Columns"]] == columns

    def lake_uri(key: str) -> str:
        return deployment.lake.uri(key)

    def assert_rows_exact() -> None:
        everything = located(glue_partitions(glue, database))
        kept = expected_rows(lake, lambda row: True)
        assert symlink_rows(spark, PARTITION_COLUMNS, DATA_COLUMNS, everything) == kept
        # Glue selects partitions by the identity column and by the bucket (as Athena prunes), and those hold the
        # rows a WHERE on the same column keeps.
        a1 = located(glue_partitions(glue, database, "action = 'a1'"))
        assert a1 and all(values[1] == "a1" for values, _ in a1)
        in_a1 = expected_rows(lake, lambda row: row[2] == "a1")
        assert symlink_rows(spark, PARTITION_COLUMNS, DATA_COLUMNS, a1, "action = 'a1'") == in_a1
        assert symlink_rows(spark, PARTITION_COLUMNS, DATA_COLUMNS, everything, "action = 'a1'") == in_a1
        b2 = located(glue_partitions(glue, database, "user_id_bucket = 2"))
        assert b2 and all(values[2] == "2" for values, _ in b2)
        in_b2 = expected_rows(lake, lambda row: bucket_of(row[1], 4) == 2)
        assert symlink_rows(spark, PARTITION_COLUMNS, DATA_COLUMNS, b2, "user_id_bucket = 2") == in_b2
        assert symlink_rows(spark, PARTITION_COLUMNS, DATA_COLUMNS, everything, "user_id_bucket = 2") == in_b2
        nulls = expected_rows(lake, lambda row: row[2] is None)
        assert symlink_rows(spark, PARTITION_COLUMNS, DATA_COLUMNS, everything, "action IS NULL") == nulls

    assert_partitions_follow_the_catalog()
    actions = {values[1] for values in glue_partitions(glue, database)}
    assert {ESCAPED_ACTION, NULL_TEXT, "a1"} <= actions, "values unescaped, a null as Hive's default partition"
    assert sum(expected_rows(lake, lambda row: row[2] is None).values()) == 4
    assert_rows_exact()

    merge_once(deployment)
    stream(deployment, NEXT_DAY, 3)
    assert publish_once(deployment, now=tokyo(NEXT_DAY, 1)).closed
    switching = publish_once(deployment, now=tokyo(NEXT_DAY, 2))
    assert switching.switched and switching.target_errors == []
    assert kinds(switching.external) == ["BatchUpdatePartition"]
    assert all(op == "compaction" for (date, _), (_, op) in newest_file_lists(deployment).items() if date == DAY)
    assert_partitions_follow_the_catalog()
    assert_rows_exact()

    day_partitions = [named for named in newest_file_lists(deployment) if named[0] == DAY]
    later = tokyo(NEXT_DAY + dt.timedelta(days=1), 12)
    assert reap_once(deployment, now=later, force=True).reasons["ttl"].rows == len(day_partitions)
    report = publish_once(deployment, now=later)
    assert report.target_errors == [] and set(kinds(report.external)) == {"BatchDeletePartition"}
    deleted = ", ".join(report.external)
    assert all(f"dt={date}/{values}" in deleted for date, values in day_partitions)
    assert {values[0] for values in glue_partitions(glue, database)} == {str(NEXT_DAY)}
    assert_partitions_follow_the_catalog()
    assert_rows_exact()
    assert publish_once(deployment, now=later + dt.timedelta(hours=1)).external == [], "nothing more to delete"


def test_a_run_that_died_before_recording_asks_glue_by_date_and_values(
    glue_deployment: Deployment,  # noqa: F811
    glue,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deployment, sync = glue_deployment, glue_deployment.catalog.external_sync
    database = deployment.config.publish.glue.database_prefix + "web"
    make_table(deployment, partition_by=TWO_LEVELS)
    stream(deployment, DAY, 0)
    stream_odd_actions(deployment, DAY)

    def died(*args: object, **kwargs: object) -> None:
        raise RuntimeError("stopped")

    with monkeypatch.context() as m:
        m.setattr(sync, "record_partitions", died)
        assert publish_once(deployment, now=tokyo(DAY, 12)).target_errors == ["glue: stopped"]
    added = glue_partitions(glue, database)
    resumed = publish_once(deployment, now=tokyo(DAY, 13))
    assert resumed.target_errors == []
    assert kinds(resumed.external) == ["BatchUpdatePartition"], "Glue was asked which partitions it has"
    newest = newest_file_lists(deployment)
    shown = glue_partitions(glue, database)
    assert len(shown) == len(newest) == len(added)
    for named, (file_list_key, _) in newest.items():
        assert shown[decoded(*named)]["Location"] == unquote(deployment.lake.uri(symlink_directory(file_list_key)))
    assert publish_once(deployment, now=tokyo(DAY, 14)).external == [], "recorded now: idempotent"
