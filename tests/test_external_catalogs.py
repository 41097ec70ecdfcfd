"""Publish targets: the Hive metastore (embedded Derby, in the test session's Spark) follows tables,
renames, added and widened columns, and partitions from live objects to their merged version's manifest."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from siltlake.config import Config, load_config
from siltlake.deployment import Deployment
from siltlake.errors import ConfigError
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.publish.hive import PARQUET_SERDE, SYMLINK_INPUT
from siltlake.storage.keys import TableLayout, symlink_directory
from siltlake.tabledef import Column

from .conftest import make_config
from .merge_helpers import add_small_objects, rows_for
from .test_merge import DAY, make_table
from .test_publish import tokyo

NEXT = DAY + dt.timedelta(days=1)


@pytest.fixture
def hive_deployment(tmp_path: Path, catalog_url: str, spark, hive_metastore_dir: Path) -> Deployment:
    config = make_config(tmp_path, catalog_url).model_dump()
    # One metastore for the whole test session: each test gets databases of its own.
    config["publish"] = {
        "targets": ["hive"],
        "hive": {"metastore_dir": str(hive_metastore_dir), "database_prefix": f"t{uuid.uuid4().hex[:8]}_"},
    }
    deployment = Deployment(Config.model_validate(config))
    deployment.init()
    deployment.use_spark(spark)
    yield deployment
    deployment.close()


def partition_storage(spark, table: str, date: dt.date) -> dict[str, str]:
    rows = spark.sql(f"DESCRIBE FORMATTED {table} PARTITION (dt='{date}')").collect()
    start = next(i for i, r in enumerate(rows) if r.col_name == "# Detailed Partition Information")
    end = next(i for i, r in enumerate(rows) if r.col_name == "# Storage Information")  # the table's own follow
    wanted = ("Location", "InputFormat", "Serde Library")
    return {r.col_name: r.data_type for r in rows[start:end] if r.col_name in wanted}


def columns(spark, table: str) -> list[tuple[str, str]]:
    described = []
    for row in spark.sql(f"DESCRIBE {table}").collect():
        if row.col_name.startswith("#"):
            break
        described.append((row.col_name, row.data_type))
    return described


def same_location(found: str, expected_uri: str) -> bool:
    return found.replace("file:///", "file:/").rstrip("/") == expected_uri.replace("file:///", "file:/").rstrip("/")


def manifest_lines(location: str) -> list[str]:
    """The data files a symlink partition's location lists (its directory holds one manifest file)."""
    directory = Path(location.replace("file:///", "file:/").removeprefix("file:"))
    assert [p.name for p in directory.iterdir()] == ["manifest"]
    return (directory / "manifest").read_text().splitlines()


def test_hive_metastore_follows_tables_columns_and_partitions(hive_deployment: Deployment, spark) -> None:
    deployment, catalog = hive_deployment, hive_deployment.catalog
    prefix = deployment.config.publish.hive.database_prefix
    table = make_table(deployment)
    catalog.tables.add_column("web.access", Column(name="score", type="int"), now=tokyo(DAY, 11))
    table = catalog.tables.get("web.access")
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 40, s) for s in range(3)])
    hive = f"{prefix}web.access"

    first = publish_once(deployment, now=tokyo(DAY, 12))
    assert first.target_errors == []
    assert [s.split(" (")[0].split(" `")[0] for s in first.external] == [
        "hive: CREATE DATABASE IF NOT EXISTS",
        "hive: CREATE EXTERNAL TABLE",
        "hive: ALTER TABLE",
    ]
    assert columns(spark, hive) == [
        ("utc_event_time", "timestamp"),
        ("user_id", "bigint"),
        ("action", "string"),
        ("score", "int"),
        ("dt", "date"),
    ]
    (live_version,) = first.live_versions
    live = partition_storage(spark, hive, DAY)
    assert same_location(live["Location"], deployment.lake.engine_uri(symlink_directory(live_version.file_list_key)))
    assert "/symlink-live-" in live["Location"], "a live partition points at its version's file list, not live/"
    assert live["InputFormat"] == SYMLINK_INPUT and live["Serde Library"] == PARQUET_SERDE
    assert len(manifest_lines(live["Location"])) == 3, "the three live objects"

    assert publish_once(deployment, now=tokyo(DAY, 13)).external == [], "nothing new: no DDL"
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 5, 7)])
    again = publish_once(deployment, now=tokyo(DAY, 14))
    (newer,) = again.live_versions
    assert len(again.external) == 1 and "SET LOCATION" in again.external[0], "a new live version moves it"
    moved_live = partition_storage(spark, hive, DAY)
    assert same_location(moved_live["Location"], deployment.lake.engine_uri(symlink_directory(newer.file_list_key)))
    assert moved_live["InputFormat"] == SYMLINK_INPUT and len(manifest_lines(moved_live["Location"])) == 4

    # Close the day (a live partition of the next day arrives), then switch it to its merged version.
    merge_once(deployment)
    add_small_objects(deployment, table, NEXT, [rows_for(NEXT, 9, 8)])
    closing = publish_once(deployment, now=tokyo(NEXT, 1))
    assert closing.closed and [s for s in closing.external if "ADD IF NOT EXISTS PARTITION" in s]
    next_live = partition_storage(spark, hive, NEXT)
    assert "/symlink-live-" in next_live["Location"] and next_live["InputFormat"] == SYMLINK_INPUT, (
        "a new partition takes the table's symlink storage"
    )
    switching = publish_once(deployment, now=tokyo(NEXT, 2))
    (merged,) = switching.merged_versions
    assert switching.target_errors == [] and len(switching.external) == 1
    storage = partition_storage(spark, hive, DAY)
    symlink_dir = deployment.lake.engine_uri(symlink_directory(merged.manifest_key))
    assert same_location(storage["Location"], symlink_dir), "points at the manifest published in this run"
    assert storage["InputFormat"] == SYMLINK_INPUT and storage["Serde Library"] == PARQUET_SERDE
    assert len(manifest_lines(symlink_dir)) == 1, "one merged object listed"
    assert [r.partition for r in spark.sql(f"SHOW PARTITIONS {hive}").collect()] == [f"dt={DAY}", f"dt={NEXT}"]

    # Rename, add a column and widen one: one run, DDL on the renamed table, partitions kept.
    catalog.tables.rename("web.access", "web.hits")
    catalog.tables.add_column(
        "web.hits", Column(name="referer", type="string"), now=tokyo(NEXT, 2) + dt.timedelta(minutes=1)
    )
    catalog.tables.alter_column_type("web.hits", "score", "bigint", now=tokyo(NEXT, 2) + dt.timedelta(minutes=2))
    changed = publish_once(deployment, now=tokyo(NEXT, 3))
    assert changed.target_errors == []
    assert [s.split("`.`")[1].split("`")[0] for s in changed.external] == ["access", "hits", "hits"]
    assert "RENAME TO" in changed.external[0] and "ADD COLUMNS" in changed.external[1]
    assert "CHANGE COLUMN `score` `score` BIGINT" in changed.external[2]
    hits = f"{prefix}web.hits"
    assert not spark.catalog.tableExists(f"{prefix}web.access")
    assert columns(spark, hits)[3:] == [("score", "bigint"), ("referer", "string"), ("dt", "date")]
    assert partition_storage(spark, hits, DAY)["InputFormat"] == SYMLINK_INPUT

    # Another schema: Spark renames within a database only, so the table is recreated with its partitions.
    catalog.tables.rename("web.hits", "logs.hits")
    moved = publish_once(deployment, now=tokyo(NEXT, 4))
    assert moved.target_errors == [] and not spark.catalog.tableExists(f"{prefix}web.hits")
    shown = [r.partition for r in spark.sql(f"SHOW PARTITIONS {prefix}logs.hits").collect()]
    assert shown == [f"dt={DAY}", f"dt={NEXT}"]
    assert same_location(partition_storage(spark, f"{prefix}logs.hits", DAY)["Location"], symlink_dir)
    assert publish_once(deployment, now=tokyo(NEXT, 5)).external == []

    catalog.tables.drop("logs.hits")
    dropped = publish_once(deployment, now=tokyo(NEXT, 6))
    assert dropped.external == [f"hive: DROP TABLE IF EXISTS `{prefix}logs`.`hits`"]
    assert not spark.catalog.tableExists(f"{prefix}logs.hits")


def test_a_table_of_the_same_name_that_is_not_ours_is_left_alone(
    hive_deployment: Deployment, spark, tmp_path: Path
) -> None:
    prefix = hive_deployment.config.publish.hive.database_prefix
    spark.sql(f"CREATE DATABASE `{prefix}web`")
    spark.sql(
        f"CREATE EXTERNAL TABLE `{prefix}web`.`access` (x INT) STORED AS PARQUET "
        f"LOCATION '{(tmp_path / 'elsewhere').as_uri()}'"
    )
    make_table(hive_deployment)
    report = publish_once(hive_deployment, now=tokyo(DAY, 12))
    (error,) = report.target_errors
    assert "already exists and is not siltlake's table web.access" in error and "database_prefix" in error
    assert columns(spark, f"{prefix}web.access") == [("x", "int")]


def test_symlink_directory_matches_the_manifest_writer() -> None:
    layout = TableLayout("k1", "web", "access")
    for version, label in ((42, None), (7, "update-3")):
        json_key, symlink_key = layout.manifest_keys(DAY, version, label)
        assert symlink_directory(json_key) + "/manifest" == symlink_key


def test_target_configuration() -> None:
    config = load_config(
        environ={"SILTLAKE_PUBLISH__TARGETS": "hive", "SILTLAKE_PUBLISH__HIVE__METASTORE_URIS": "thrift://meta:9083"}
    )
    assert config.publish.targets == ["hive"] and config.publish.hive.metastore_uris == "thrift://meta:9083"
    from siltlake.spark import hive_session_conf

    assert hive_session_conf(config.publish.hive) == {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.hive.metastore.uris": "thrift://meta:9083",
    }
    with pytest.raises(ConfigError, match="publish.hive.database_prefix"):
        load_config(environ={"SILTLAKE_PUBLISH__HIVE__DATABASE_PREFIX": "Bad-Prefix"})


def test_unknown_target_is_refused(deployment: Deployment) -> None:
    deployment.config.publish.targets = ["nessie"]
    with pytest.raises(ConfigError, match="unknown target 'nessie'; known targets: glue, hive, iceberg"):
        publish_once(deployment)


def test_a_locked_embedded_metastore_is_reported_in_one_line(tmp_path: Path, spark, hive_metastore_dir: Path) -> None:
    """Derby allows one JVM: a second process (here `silt publish`) on this test session's metastore fails clearly.
    (One catalog kind only: the catalog plays no part, and a second JVM costs a Spark start.)"""
    spark.sql("SHOW DATABASES").collect()  # this JVM has the embedded metastore booted
    deployment = Deployment(make_config(tmp_path, f"sqlite:///{tmp_path / 'catalog.db'}"))
    deployment.init()
    make_table(deployment)
    config = deployment.config
    env = {
        **os.environ,
        "SILTLAKE_CATALOG__URL": config.catalog.url,
        "SILTLAKE_STORAGE__ROOT": config.storage.root,
        "SILTLAKE_STORAGE__STAGING_ROOT": config.storage.staging_root,
        "SILTLAKE_INSTANCE_KEY": config.instance_key,
        "SILTLAKE_SPARK__MASTER": "local[1]",
        "SILTLAKE_PUBLISH__TARGETS": "hive",
        "SILTLAKE_PUBLISH__HIVE__METASTORE_DIR": str(hive_metastore_dir),
    }
    result = subprocess.run(
        [str(Path(sys.executable).with_name("silt")), "publish", "--once"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"the embedded Hive metastore at {hive_metastore_dir} is in use by another process" in result.stderr


def test_partitions_follow_every_version_and_an_earlier_siltlakes_table_is_taken_over(
    hive_deployment: Deployment, spark
) -> None:
    """A table and partition left by a siltlake before file lists (Parquet table, live directory, a live
    version without a file list): the partition keeps its directory until its next version, then every
    version (live, merged, updated) moves it to that version's symlink manifest directory."""
    import sqlalchemy as sa

    from siltlake.catalog import schema as s
    from siltlake.write.update import delete_rows

    deployment, catalog = hive_deployment, hive_deployment.catalog
    prefix = deployment.config.publish.hive.database_prefix
    hive, lake = f"{prefix}web.access", deployment.lake
    table = make_table(deployment)
    layout = table.layout(deployment.instance_key)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, 1)])
    deployment.config.publish.targets = []
    publish_once(deployment, now=tokyo(DAY, 10))
    with catalog.engine.begin() as c:  # published before migration 0006: no file list
        c.execute(sa.update(s.partition_versions).values(file_list_key=None))
    live_dir = lake.engine_uri(f"{layout.live_prefix()}/dt={DAY}")
    spark.sql(f"CREATE DATABASE `{prefix}web`")
    spark.sql(
        f"CREATE EXTERNAL TABLE {hive} (`utc_event_time` TIMESTAMP, `user_id` BIGINT, `action` STRING) "
        f"PARTITIONED BY (`dt` DATE) STORED AS PARQUET LOCATION '{lake.engine_uri(layout.live_prefix())}'"
    )
    spark.sql(f"ALTER TABLE {hive} ADD PARTITION (`dt` = '{DAY}') LOCATION '{live_dir}'")
    catalog.external_sync.record_table(
        "hive",
        table.id,
        f"{prefix}web",
        "access",
        (("utc_event_time", "timestamp"), ("user_id", "bigint"), ("action", "string")),
    )
    (partition_id,) = [p.id for p in catalog.partitions.list(table.id)]
    catalog.external_sync.record_partitions("hive", [(partition_id, None, live_dir)])
    deployment.config.publish.targets = ["hive"]

    def points_at_file_list(date: dt.date, file_list_key: str) -> None:
        storage = partition_storage(spark, hive, date)
        assert same_location(storage["Location"], lake.engine_uri(symlink_directory(file_list_key))), storage
        assert storage["InputFormat"] == SYMLINK_INPUT and storage["Serde Library"] == PARQUET_SERDE

    add_small_objects(deployment, table, NEXT, [rows_for(NEXT, 4, 2)])
    taken_over = publish_once(deployment, now=tokyo(DAY, 11))
    assert taken_over.target_errors == []
    assert any("SET SymlinkTextInputFormat" in x for x in taken_over.external), taken_over.external
    (next_version,) = taken_over.live_versions
    points_at_file_list(NEXT, next_version.file_list_key)
    kept = partition_storage(spark, hive, DAY)
    assert same_location(kept["Location"], live_dir), "no file list yet: keeps its directory until its next version"
    assert kept["InputFormat"] == "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat"

    add_small_objects(deployment, table, DAY, [rows_for(DAY, 5, 3)])
    (live_version,) = publish_once(deployment, now=tokyo(DAY, 12)).live_versions
    points_at_file_list(DAY, live_version.file_list_key)
    assert len(manifest_lines(partition_storage(spark, hive, DAY)["Location"])) == 2

    merge_once(deployment)
    publish_once(deployment, now=tokyo(NEXT, 1))  # closes DAY
    (merged,) = publish_once(deployment, now=tokyo(NEXT, 2)).merged_versions
    points_at_file_list(DAY, merged.file_list_key)

    update = delete_rows(deployment, "web.access", DAY, "action = 'a1'", now=tokyo(NEXT, 3))
    assert update.version is not None
    report = publish_once(deployment, now=tokyo(NEXT, 4))
    assert report.target_errors == [] and len(report.external) == 1
    points_at_file_list(DAY, update.version.file_list_key)
    assert "/symlink-update-" in partition_storage(spark, hive, DAY)["Location"]
    for date in (DAY, NEXT):
        assert "/live/" not in partition_storage(spark, hive, date)["Location"]


def test_partitions_reaped_past_their_ttl_leave_the_metastore(hive_deployment: Deployment, spark) -> None:
    from siltlake.reap import reap_once

    deployment = hive_deployment
    prefix = deployment.config.publish.hive.database_prefix
    table = make_table(deployment, ttl_days=1)
    for day in (DAY, NEXT):
        add_small_objects(deployment, table, day, [rows_for(day, 5, day.day)])
    assert publish_once(deployment, now=tokyo(NEXT, 12)).target_errors == []
    hive = f"{prefix}web.access"
    assert [r.partition for r in spark.sql(f"SHOW PARTITIONS {hive}").collect()] == [f"dt={DAY}", f"dt={NEXT}"]

    later = tokyo(NEXT + dt.timedelta(days=1), 12)
    assert reap_once(deployment, now=later, force=True).reasons["ttl"].rows == 1
    report = publish_once(deployment, now=later)
    assert report.target_errors == []
    assert f"hive: ALTER TABLE `{prefix}web`.`access` DROP IF EXISTS PARTITION (`dt` = '{DAY}')" in report.external
    assert [r.partition for r in spark.sql(f"SHOW PARTITIONS {hive}").collect()] == [f"dt={NEXT}"]
    assert "/dt=2026-11-21/symlink-live-" in partition_storage(spark, hive, NEXT)["Location"]
    assert publish_once(deployment, now=later + dt.timedelta(hours=1)).external == [], "nothing more to drop"
