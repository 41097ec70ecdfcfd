"""The Glue Data Catalog target against moto's Glue service (the S3 suite's moto server on 127.0.0.1): databases,
tables with their columns and storage, partitions added, moved to each new version's symlink manifest (the merged
one when the day switches), removed by TTL and reap, renames and added columns, and runs resumed after a crash."""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path

import boto3
import pytest

from siltlake.config import Config, load_config
from siltlake.deployment import Deployment
from siltlake.errors import ConfigError
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.publish.hive import PARQUET_SERDE, SYMLINK_INPUT, SYMLINK_OUTPUT
from siltlake.storage.keys import symlink_directory
from siltlake.tabledef import Column

from .conftest import make_config
from .merge_helpers import add_small_objects, rows_for
from .s3_server import MotoS3, s3_config
from .test_merge import DAY, make_table
from .test_publish import tokyo

NEXT = DAY + dt.timedelta(days=1)
ACCOUNT = "123456789012"  # moto's account: the Data Catalog a catalog_id names


def glue_section(moto_s3: MotoS3, **settings: object) -> dict:
    return {
        "targets": ["glue"],
        "glue": {
            "region": "us-east-1",
            "endpoint_url": f"http://{moto_s3.endpoint}",
            "database_prefix": f"g{uuid.uuid4().hex[:8]}_",
            **settings,
        },
    }


@pytest.fixture
def glue(moto_s3: MotoS3):  # a boto3 client
    return boto3.client("glue", region_name="us-east-1", endpoint_url=f"http://{moto_s3.endpoint}")


@pytest.fixture
def glue_deployment(tmp_path: Path, catalog_url: str, spark, moto_s3: MotoS3) -> Deployment:
    config = make_config(tmp_path, catalog_url).model_dump()
    config["publish"] = glue_section(moto_s3, catalog_id=ACCOUNT)
    deployment = Deployment(Config.model_validate(config))
    deployment.init()
    deployment.use_spark(spark)
    yield deployment
    deployment.close()


def partitions(glue, database: str, table: str) -> dict[str, dict]:
    found = glue.get_partitions(DatabaseName=database, TableName=table)["Partitions"]
    return {p["Values"][0]: p["StorageDescriptor"] for p in found}


def manifest_lines(location: str) -> list[str]:
    directory = Path(location.removeprefix("file://"))
    assert [p.name for p in directory.iterdir()] == ["manifest"]
    return (directory / "manifest").read_text().splitlines()


def kinds(statements: list[str]) -> list[str]:
    return [s.removeprefix("glue: ").split(" ")[0] for s in statements]


@pytest.mark.spark  # the merge
def test_glue_follows_tables_columns_and_partitions(glue_deployment: Deployment, glue) -> None:
    deployment, catalog, lake = glue_deployment, glue_deployment.catalog, glue_deployment.lake
    database = deployment.config.publish.glue.database_prefix + "web"
    table = make_table(deployment)
    catalog.tables.add_column("web.access", Column(name="score", type="int"), now=tokyo(DAY, 11))
    table = catalog.tables.get("web.access")
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 40, s) for s in range(3)])

    first = publish_once(deployment, now=tokyo(DAY, 12))
    assert first.target_errors == []
    assert kinds(first.external) == ["CreateDatabase", "CreateTable", "BatchCreatePartition"]
    described = glue.get_table(CatalogId=ACCOUNT, DatabaseName=database, Name="access")["Table"]
    storage = described["StorageDescriptor"]
    assert [(c["Name"], c["Type"]) for c in storage["Columns"]] == [
        ("utc_event_time", "timestamp"),
        ("user_id", "bigint"),
        ("action", "string"),
        ("score", "int"),
    ]
    assert described["PartitionKeys"] == [{"Name": "dt", "Type": "date"}]
    assert described["TableType"] == "EXTERNAL_TABLE" and described["Parameters"]["EXTERNAL"] == "TRUE"
    assert storage["Location"] == lake.uri(table.layout(deployment.instance_key).live_prefix())
    assert (storage["InputFormat"], storage["OutputFormat"]) == (SYMLINK_INPUT, SYMLINK_OUTPUT)
    assert storage["SerdeInfo"]["SerializationLibrary"] == PARQUET_SERDE
    (live,) = first.live_versions
    day = partitions(glue, database, "access")[str(DAY)]
    assert day["Location"] == lake.uri(symlink_directory(live.file_list_key)) and "/symlink-live-" in day["Location"]
    assert day["InputFormat"] == SYMLINK_INPUT and day["SerdeInfo"]["SerializationLibrary"] == PARQUET_SERDE
    assert len(manifest_lines(day["Location"])) == 3, "the three live objects"

    assert publish_once(deployment, now=tokyo(DAY, 13)).external == [], "nothing new: no Glue call"
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 5, 7)])
    again = publish_once(deployment, now=tokyo(DAY, 14))
    (newer,) = again.live_versions
    assert kinds(again.external) == ["BatchUpdatePartition"], "a new live version moves the partition"
    assert partitions(glue, database, "access")[str(DAY)]["Location"] == lake.uri(
        symlink_directory(newer.file_list_key)
    )

    # Close the day (the next one's first object arrives), then switch it to its merged version.
    merge_once(deployment)
    add_small_objects(deployment, table, NEXT, [rows_for(NEXT, 9, 8)])
    closing = publish_once(deployment, now=tokyo(NEXT, 1))
    assert closing.closed and kinds(closing.external) == ["BatchCreatePartition"]
    switching = publish_once(deployment, now=tokyo(NEXT, 2))
    (merged,) = switching.merged_versions
    assert switching.target_errors == [] and kinds(switching.external) == ["BatchUpdatePartition"]
    shown = partitions(glue, database, "access")
    merged_location = lake.uri(symlink_directory(merged.manifest_key))
    assert shown[str(DAY)]["Location"] == merged_location, "points at the manifest published in this run"
    assert "/live/" not in merged_location and "/merged/" not in merged_location
    assert len(manifest_lines(merged_location)) == 1, "one merged object listed"
    assert sorted(shown) == [str(DAY), str(NEXT)]

    # An added and a widened column: the table is updated in place, its partitions kept.
    catalog.tables.add_column("web.access", Column(name="referer", type="string"), now=tokyo(NEXT, 2))
    catalog.tables.alter_column_type("web.access", "score", "bigint", now=tokyo(NEXT, 2) + dt.timedelta(minutes=1))
    altered = publish_once(deployment, now=tokyo(NEXT, 3))
    assert altered.external == [f"glue: UpdateTable {database}.access columns score bigint, referer string"]
    columns = glue.get_table(DatabaseName=database, Name="access")["Table"]["StorageDescriptor"]["Columns"]
    assert [(c["Name"], c["Type"]) for c in columns][3:] == [("score", "bigint"), ("referer", "string")]
    assert partitions(glue, database, "access")[str(DAY)]["Location"] == merged_location

    # A rename (Glue has none): the table is recreated under its new name with every partition.
    catalog.tables.rename("web.access", "logs.hits")
    renamed = publish_once(deployment, now=tokyo(NEXT, 4))
    assert renamed.target_errors == []
    assert kinds(renamed.external) == ["DeleteTable", "CreateDatabase", "CreateTable", "BatchCreatePartition"]
    with pytest.raises(glue.exceptions.EntityNotFoundException):
        glue.get_table(DatabaseName=database, Name="access")
    hits = partitions(glue, deployment.config.publish.glue.database_prefix + "logs", "hits")
    assert sorted(hits) == [str(DAY), str(NEXT)] and hits[str(DAY)]["Location"] == merged_location
    assert publish_once(deployment, now=tokyo(NEXT, 5)).external == []

    catalog.tables.drop("logs.hits")
    dropped = publish_once(deployment, now=tokyo(NEXT, 6))
    assert dropped.external == [f"glue: DeleteTable {deployment.config.publish.glue.database_prefix}logs.hits"]


def test_partitions_reaped_past_their_ttl_leave_glue(glue_deployment: Deployment, glue) -> None:
    from siltlake.reap import reap_once

    deployment = glue_deployment
    database = deployment.config.publish.glue.database_prefix + "web"
    table = make_table(deployment, ttl_days=1)
    for day in (DAY, NEXT):
        add_small_objects(deployment, table, day, [rows_for(day, 5, day.day)])
    assert publish_once(deployment, now=tokyo(NEXT, 12)).target_errors == []
    assert sorted(partitions(glue, database, "access")) == [str(DAY), str(NEXT)]

    later = tokyo(NEXT + dt.timedelta(days=1), 12)
    assert reap_once(deployment, now=later, force=True).reasons["ttl"].rows == 1
    report = publish_once(deployment, now=later)
    assert report.target_errors == []
    assert report.external == [f"glue: BatchDeletePartition {database}.access dt={DAY}"]
    assert sorted(partitions(glue, database, "access")) == [str(NEXT)]
    assert publish_once(deployment, now=later + dt.timedelta(hours=1)).external == [], "nothing more to drop"


def test_a_run_that_died_before_recording_is_resumed(
    glue_deployment: Deployment, glue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run stops after its Glue calls and before the catalog recorded them (table, then partitions): the next
    run finds the table its own (same location) and recreates it, and finds the partitions in Glue and points
    them at the newest file list instead of failing on 'already exists'."""
    deployment, sync = glue_deployment, glue_deployment.catalog.external_sync
    database = deployment.config.publish.glue.database_prefix + "web"
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, 1)])

    def died(*args: object, **kwargs: object) -> None:
        raise RuntimeError("stopped")

    with monkeypatch.context() as m:
        m.setattr(sync, "record_table", died)
        assert publish_once(deployment, now=tokyo(DAY, 12)).target_errors == ["glue: stopped"]
    assert glue.get_table(DatabaseName=database, Name="access")  # created, not recorded
    with monkeypatch.context() as m:
        m.setattr(sync, "record_partitions", died)
        stopped = publish_once(deployment, now=tokyo(DAY, 13))
    assert kinds(stopped.external) == ["DeleteTable", "CreateTable", "BatchCreatePartition"]
    assert stopped.target_errors == ["glue: stopped"]
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 4, 2)])
    resumed = publish_once(deployment, now=tokyo(DAY, 14))
    assert resumed.target_errors == []
    assert kinds(resumed.external) == ["BatchUpdatePartition"], "Glue was asked which partitions it has"
    (newest,) = resumed.live_versions
    location = partitions(glue, database, "access")[str(DAY)]["Location"]
    assert location == deployment.lake.uri(symlink_directory(newest.file_list_key))
    assert len(manifest_lines(location)) == 2
    assert publish_once(deployment, now=tokyo(DAY, 15)).external == [], "recorded now: idempotent"


def test_a_glue_table_of_the_same_name_that_is_not_ours_is_left_alone(glue_deployment: Deployment, glue) -> None:
    database = glue_deployment.config.publish.glue.database_prefix + "web"
    glue.create_database(DatabaseInput={"Name": database})
    glue.create_table(
        DatabaseName=database,
        TableInput={
            "Name": "access",
            "StorageDescriptor": {"Columns": [{"Name": "x", "Type": "int"}], "Location": "s3://elsewhere/x"},
        },
    )
    make_table(glue_deployment)
    (error,) = publish_once(glue_deployment, now=tokyo(DAY, 12)).target_errors
    assert "Glue table" in error and "is not siltlake's table web.access (its location is s3://elsewhere/x)" in error
    assert "publish.glue.database_prefix" in error
    kept = glue.get_table(DatabaseName=database, Name="access")["Table"]["StorageDescriptor"]["Columns"]
    assert kept == [{"Name": "x", "Type": "int"}]


def test_a_partition_someone_else_added_is_pointed_at_the_file_list(glue_deployment: Deployment, glue) -> None:
    """A crawler or `MSCK REPAIR TABLE` added the day at its live directory (where uncommitted objects sit) before
    siltlake published it: the run's create finds it there and moves it to its version's file list."""
    deployment = glue_deployment
    database = deployment.config.publish.glue.database_prefix + "web"
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 3, 1)])
    assert publish_once(deployment, now=tokyo(DAY, 12)).target_errors == []
    live_dir = deployment.lake.uri(table.layout(deployment.instance_key).live_partition(NEXT))
    glue.batch_create_partition(
        DatabaseName=database,
        TableName="access",
        PartitionInputList=[{"Values": [str(NEXT)], "StorageDescriptor": {"Location": live_dir}}],
    )
    add_small_objects(deployment, table, NEXT, [rows_for(NEXT, 3, 2)])
    report = publish_once(deployment, now=tokyo(DAY, 13))
    assert report.target_errors == [] and kinds(report.external) == ["BatchCreatePartition", "BatchUpdatePartition"]
    (version,) = report.live_versions
    shown = partitions(glue, database, "access")[str(NEXT)]
    assert shown["Location"] == deployment.lake.uri(symlink_directory(version.file_list_key))
    assert shown["InputFormat"] == SYMLINK_INPUT


def test_locations_on_an_object_store_are_s3_uris_athena_reads(tmp_path: Path, spark, moto_s3: MotoS3, glue) -> None:
    """Spark's connector reads s3a://; Athena, Spectrum and EMR read the s3:// the symlink manifests list."""
    bucket = moto_s3.create_bucket()
    publish = glue_section(moto_s3)
    deployment = Deployment(
        s3_config(bucket, moto_s3.endpoint, f"sqlite:///{tmp_path / 'catalog.db'}", publish=publish)
    )
    deployment.init()
    deployment.use_spark(spark)
    try:
        table = make_table(deployment)
        add_small_objects(deployment, table, DAY, [rows_for(DAY, 6, 1)])
        assert publish_once(deployment, now=tokyo(DAY, 12)).target_errors == []
        database = publish["glue"]["database_prefix"] + "web"
        location = partitions(glue, database, "access")[str(DAY)]["Location"]
        assert location.startswith(f"s3://{bucket}/lake/") and "/symlink-live-" in location
        table_location = glue.get_table(DatabaseName=database, Name="access")["Table"]["StorageDescriptor"]
        assert table_location["Location"].startswith(f"s3://{bucket}/lake/")
        listed = deployment.lake.read_bytes(deployment.lake.key_in_uri(location) + "/manifest").decode().split()
        assert listed and all(uri.startswith(f"s3://{bucket}/lake/") for uri in listed)
    finally:
        deployment.close()


def test_missing_region_or_credentials_are_named(
    tmp_path: Path, moto_s3: MotoS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    config = make_config(tmp_path, f"sqlite:///{tmp_path / 'catalog.db'}").model_dump()
    config["publish"] = glue_section(moto_s3, region=None)
    deployment = Deployment(Config.model_validate(config))
    deployment.init()
    make_table(deployment)
    with pytest.raises(ConfigError, match=r"no AWS region is set: set publish.glue.region"):
        publish_once(deployment, now=tokyo(DAY, 12))
    deployment.config.publish.glue.region = "eu-west-1"
    with pytest.raises(
        ConfigError,
        match=r"no AWS credentials were found \(eu-west-1\): give them as "
        r"AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
    ):
        publish_once(deployment, now=tokyo(DAY, 12))
    deployment.close()


def test_glue_configuration() -> None:
    config = load_config(
        environ={
            "SILTLAKE_PUBLISH__TARGETS": "glue",
            "SILTLAKE_PUBLISH__GLUE__REGION": "eu-west-1",
            "SILTLAKE_PUBLISH__GLUE__CATALOG_ID": "210987654321",
            "SILTLAKE_PUBLISH__GLUE__DATABASE_PREFIX": "lake_",
        }
    )
    glue = config.publish.glue
    assert config.publish.targets == ["glue"] and (glue.region, glue.catalog_id, glue.database_prefix) == (
        "eu-west-1",
        "210987654321",
        "lake_",
    )
    for setting, value in (("DATABASE_PREFIX", "Lake-"), ("CATALOG_ID", "acct"), ("ENDPOINT_URL", "glue.local")):
        with pytest.raises(ConfigError, match=f"publish.glue.{setting.lower()}"):
            load_config(environ={f"SILTLAKE_PUBLISH__GLUE__{setting}": value})
