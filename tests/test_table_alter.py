"""table.alter(): several column changes and typed property changes committed as ONE table version (or none), and
table.maintenance: compact and expire of one table (docs/api.md)."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest

from siltlake.deployment import Deployment
from siltlake.errors import CatalogError, DefinitionError, SiltError, VersionOutOfRange
from siltlake.lake import Lake
from siltlake.publish import publish_once

from .merge_helpers import add_small_objects, rows_for
from .test_merge import DAY, make_table
from .test_publish import tokyo

NEXT_DAY = DAY + dt.timedelta(days=1)


def published(deployment: Deployment) -> Lake:
    """web.access with DAY's 10 rows published as table version 1."""
    record = deployment.catalog.tables.get("web.access")
    add_small_objects(deployment, record, DAY, [rows_for(DAY, 10, 0)])
    publish_once(deployment, now=tokyo(DAY, 12))
    return Lake(deployment)


def test_an_alter_commits_column_and_property_changes_as_one_version(plain_deployment: Deployment) -> None:
    table = published(plain_deployment).table("web.access")
    before = table.to_arrow()
    with table.alter(now=tokyo(DAY, 13)) as change:
        change.add_column("score", "int").alter_column("score", "bigint")  # added, then widened: one step
        change.rename_column("action", "event")
        change.add_column("referrer", "string")
        change.drop_column("referrer")
        change.set_properties(
            ttl_days=30, merge_interval=dt.timedelta(hours=6), merged_object_size=64 << 20, codec="snappy"
        )
    assert change.committed and change.change is not None and change.change.table_version == 2
    assert table.version == 2 and [v["operations"] for v in table.inspect.versions().to_pylist()] == [
        ["append"],
        ["alter"],
    ]
    assert change.change.detail == (
        "add-column score int; alter-column score bigint; rename-column action -> "
        "event; add-column referrer string; drop-column referrer; set "
        "merged_object_size=67108864 ttl_days=30 codec=snappy merge_interval=6h"
    )
    assert table.schema.names == ["utc_event_time", "user_id", "event", "score", "dt"]
    assert str(table.schema.field("score").type) == "int64"
    properties = table.properties
    assert (
        properties["ttl_days"],
        properties["merge_interval"],
        properties["merged_object_size"],
        properties["codec"],
    ) == (30, 21600, 64 << 20, "snappy")
    # The version before reads the columns it had; the new one reads the renamed column's values in place.
    assert table.to_arrow(as_of_version=1).column_names == before.column_names
    now = table.to_arrow()
    assert Counter(now.column("event").to_pylist()) == Counter(before.column("action").to_pylist())
    assert now.column("score").null_count == now.num_rows
    # A fresh handle reads the same definition: it is the catalog's, not this Table's.
    assert Lake(plain_deployment).table("web.access").schema == table.schema


def test_an_alter_that_fails_changes_nothing(plain_deployment: Deployment) -> None:
    table = published(plain_deployment).table("web.access")
    schema, properties = table.schema, table.properties
    with pytest.raises(RuntimeError, match="stopped"), table.alter() as change:
        change.add_column("score", "int").set_properties(ttl_days=7)
        raise RuntimeError("stopped")
    with pytest.raises(DefinitionError, match="has no column actoin"), table.alter() as change:
        change.add_column("score", "int").rename_column("actoin", "event")  # refused at commit: the add too
    with pytest.raises(CatalogError, match="already has a column action"):
        table.alter().add_column("action", "string").commit()
    with pytest.raises(SiltError, match="was committed already"):
        change.drop_column("user_id")
    assert (table.version, table.schema, table.properties) == (1, schema, properties)
    assert Lake(plain_deployment).table("web.access").version == 1

    dry = table.alter(dry_run=True).add_column("score", "int").set_properties(ttl_days=7)
    assert dry.commit().detail == "add-column score int; set ttl_days=7"
    assert (table.version, table.schema, table.properties) == (1, schema, properties), "a dry run changes nothing"
    assert table.alter().commit() is None and table.version == 1, "nothing to change: no version"


def test_properties_are_typed_values_not_text(plain_deployment: Deployment) -> None:
    table = published(plain_deployment).table("web.access")
    assert (
        table.set_properties(
            ttl_days=30, merge_interval=dt.timedelta(minutes=30), row_group_bytes=4 << 20, merge_batch_size=500
        )
        == "row_group_bytes=4194304 merge_batch_size=500 ttl_days=30 merge_interval=30m"
    )
    assert table.set_properties(ttl_days=30) == "", "the same value: no version"
    assert table.set_properties(ttl_days=None) == "ttl_days=none" and table.properties["ttl_days"] is None
    assert (
        table.set_properties(merged_object_size="64MiB", merge_interval=3600)
        == "merged_object_size=67108864 merge_interval=1h"
    ), "text is read as silt table set reads it"
    for values, refused in [
        ({"ttl_days": "thirty"}, "ttl_days 'thirty' is not a number of days"),
        ({"ttl_days": True}, "ttl_days takes a whole number or None, not True"),
        ({"ttl_days": 0}, "ttl_days 0 is below 1"),
        ({"codec": 3}, "codec takes a str, not 3"),
        (
            {"merge_interval": dt.timedelta(seconds=1.5)},
            "merge_interval takes a whole number of seconds or a timedelta",
        ),
        ({"codec": "lz9"}, "codec 'lz9' is not one of zstd, snappy, gzip, none"),
        ({"colour": "red"}, "colour cannot be set: the keys are ttl_days, merge_mode"),
    ]:
        with pytest.raises(DefinitionError, match=refused):
            table.set_properties(**values)
    assert table.version == 4 and [v["operations"] for v in table.inspect.versions().to_pylist()][1:] == [
        ["set"],
        ["set"],
        ["set"],
    ]


def test_flat_column_methods_are_alters_of_one_change(plain_deployment: Deployment) -> None:
    table = published(plain_deployment).table("web.access")
    table.add_column("score", "int", now=tokyo(DAY, 13))
    table.rename_column("score", "points", now=tokyo(DAY, 14))
    table.drop_column("points", now=tokyo(DAY, 15))
    assert [(r["op"], r["shows"]) for r in table.history() if r["date"] is None] == [
        ("add-column", "score int"),
        ("rename-column", "score -> points"),
        ("drop-column", "points"),
    ]
    assert table.version == 4 and "points" not in table.schema.names


def test_maintenance_compacts_and_expires_one_table(deployment: Deployment) -> None:
    lake = Lake(deployment)
    for name, seed in (("access", 0), ("other", 1)):
        record = make_table(deployment, name)
        add_small_objects(deployment, record, DAY, [rows_for(DAY, 10, seed), rows_for(DAY, 10, seed + 2)])
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))  # version 1 of each: DAY's small objects, DAY closed
    access, other = lake.table("web.access"), lake.table("web.other")
    rows = Counter(access.to_arrow().column("user_id").to_pylist())
    planned = access.maintenance.compact(dates=DAY, now=tokyo(NEXT_DAY, 2), dry_run=True)
    assert planned.merge is None and planned.publish is None and planned.planned.column("dt").to_pylist() == [DAY]
    assert access.version == 1 and access.inspect.merge_jobs().num_rows == 1, "a dry run merges nothing"
    for table in (access, other):
        report = table.maintenance.compact(dates=DAY, now=tokyo(NEXT_DAY, 2))
        assert report.merge.finished == 1 and [v.commit_op for v in report.publish.merged_versions] == ["compaction"]
    assert access.version == 2 and Counter(access.to_arrow().column("user_id").to_pylist()) == rows

    later = tokyo(NEXT_DAY, 3) + dt.timedelta(days=8)
    dry = access.maintenance.expire(dry_run=True, now=later)
    assert dry.dry_run and dry.reasons["covered"].objects == 2, "access's two small objects, not other's"
    assert access.versions() == (1, 2)
    done = access.maintenance.expire(now=later)
    assert done.reasons["covered"].objects == 2 and done.reasons["expired"].rows == 1
    assert access.versions() == (2, 2) and other.versions() == (1, 2), "the other table keeps its versions"
    with pytest.raises(VersionOutOfRange):
        access.to_arrow(as_of_version=1)
    assert other.to_arrow(as_of_version=1).num_rows == 20
    assert Counter(access.to_arrow().column("user_id").to_pylist()) == rows
    # The lake's reap finds the other table's objects still there for it.
    assert lake.reap(dry_run=True, now=later).reasons["covered"].objects == 2


def test_an_iceberg_engine_reads_a_batched_alter_as_siltlake_does(deployment: Deployment) -> None:
    from siltlake.publish.iceberg.catalog import open_catalog
    from siltlake.publish.iceberg.snapshots import snapshot_of_version

    deployment.config.publish.targets = ["iceberg"]
    record = make_table(deployment)
    add_small_objects(deployment, record, DAY, [rows_for(DAY, 10, 0)])
    assert not publish_once(deployment, now=tokyo(DAY, 12)).target_errors
    table = Lake(deployment).table("web.access")
    with table.alter(now=tokyo(DAY, 13)) as change:  # one version: its snapshot's schema has all of it
        change.rename_column("action", "event").drop_column("user_id").add_column("user_id", "bigint")
    add_small_objects(deployment, table.record, DAY, [rows_for(DAY, 5, 1)])
    assert not publish_once(deployment, now=tokyo(DAY, 14)).target_errors
    iceberg = open_catalog(deployment).load_table(("web", "access"))
    for version in (2, 3):
        snapshot = snapshot_of_version(iceberg, version)
        assert snapshot is not None, version
        engine = iceberg.scan(snapshot_id=snapshot.snapshot_id).to_arrow()
        ours = table.to_arrow(as_of_version=version)
        # The same columns (Iceberg appends a column added after dt after it; siltlake keeps dt last).
        assert sorted(engine.column_names) == sorted(ours.column_names), (version, engine.column_names)
        assert Counter(
            zip(engine.column("event").to_pylist(), engine.column("user_id").to_pylist(), strict=True)
        ) == Counter(zip(ours.column("event").to_pylist(), ours.column("user_id").to_pylist(), strict=True))
    assert table.to_arrow(as_of_version=2).column("user_id").null_count == 10, "the dropped one's values never show"
    assert table.to_arrow(as_of_version=1).column("user_id").null_count == 0
