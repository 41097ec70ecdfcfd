"""Publish runs drive the partition lifecycle: live versions, close, switch, merged versions, manifests."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from siltlake.deployment import Deployment
from siltlake.errors import VersionOutOfRange
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.read import table as read_table
from siltlake.storage.manifests import read_manifest

from .merge_helpers import add_small_objects, rows_for, silt_in_process
from .test_merge import DAY, make_table, only_partition

TOKYO = dt.timedelta(hours=9)


def tokyo(date: dt.date, hour: int) -> dt.datetime:
    """Naive UTC of a Tokyo wall-clock hour."""
    return dt.datetime.combine(date, dt.time(hour)) - TOKYO


def manifest_rows(deployment: Deployment, json_key: str) -> Counter:
    rows: Counter = Counter()
    for uri, size in read_manifest(deployment.lake, json_key):
        path = uri.removeprefix("file://")
        assert Path(path).stat().st_size == size
        table = pq.read_table(path)
        rows.update(zip(table.column("user_id").to_pylist(), table.column("action").to_pylist(), strict=True))
    return rows


def test_a_day_lives_closes_switches_and_shows_delayed_objects_once_merged(deployment: Deployment, spark) -> None:
    table = make_table(deployment)
    catalog = deployment.catalog
    first = add_small_objects(deployment, table, DAY, [rows_for(DAY, 40, s) for s in range(3)])
    partition = only_partition(deployment, table)

    noon = publish_once(deployment, now=tokyo(DAY, 12))
    assert [v.commit_op for v in noon.live_versions] == ["append"] and noon.closed == []
    assert noon.live_versions[0].live_watermark == max(first) and noon.live_versions[0].row_count == 120
    assert only_partition(deployment, table).current_manifest_version == 0
    assert publish_once(deployment, now=tokyo(DAY, 13)).live_versions == [], "nothing new, no new version"

    merge_once(deployment)
    after_midnight = publish_once(deployment, now=tokyo(DAY + dt.timedelta(days=1), 0) + dt.timedelta(minutes=5))
    assert after_midnight.closed == [partition.id] and after_midnight.switched == [], "closed, not yet switched"
    assert only_partition(deployment, table).last_live_object_id == max(first)

    late = add_small_objects(deployment, table, DAY, [rows_for(DAY, 7, 99)])
    assert catalog.partitions.small_objects(table.id, delayed=True)[0].id == late[0]

    second = publish_once(deployment, now=tokyo(DAY + dt.timedelta(days=1), 1))
    assert second.switched == [partition.id]
    (merged,) = second.merged_versions
    assert merged.commit_op == "compaction" and merged.row_count == 120, "the delayed object is not merged yet"
    assert only_partition(deployment, table).current_manifest_version == max(first)
    assert sum(manifest_rows(deployment, merged.manifest_key).values()) == 120
    assert read_table(spark, "web.access", deployment).count() == 120, "the delayed object stays invisible"

    merge_once(deployment)
    third = publish_once(deployment, now=tokyo(DAY + dt.timedelta(days=1), 2))
    (with_late,) = third.merged_versions
    assert with_late.row_count == 127 and only_partition(deployment, table).current_manifest_version == late[0]
    expected = Counter()
    for seed, count in [(0, 40), (1, 40), (2, 40), (99, 7)]:
        expected.update((row["user_id"], row["action"]) for row in rows_for(DAY, count, seed))
    assert manifest_rows(deployment, with_late.manifest_key) == expected

    # An engine we did not write reads the manifest's object list and finds the same rows.
    paths = [uri.removeprefix("file://") for uri, _ in read_manifest(deployment.lake, with_late.manifest_key)]
    with duckdb.connect() as connection:  # its own connection: the module-level one is shared across tests
        by_duckdb = Counter(connection.sql(f"SELECT user_id, action FROM read_parquet({paths!r})").fetchall())
    assert by_duckdb == expected

    current = read_table(spark, "web.access", deployment)
    assert Counter((r.user_id, r.action) for r in current.collect()) == expected
    assert {r.dt for r in current.select("dt").distinct().collect()} == {DAY}
    # Time travel: the live version, then before anything was published.
    assert read_table(spark, "web.access", deployment, as_of_version=1).count() == 120
    assert read_table(spark, "web.access", deployment, as_of_version=2).count() == 120
    with pytest.raises(VersionOutOfRange, match="first version"):
        read_table(spark, "web.access", deployment, as_of=tokyo(DAY, 11))
    assert read_table(spark, "web.access", deployment, as_of=tokyo(DAY + dt.timedelta(days=1), 1)).count() == 120

    versions = catalog.versions.of_partitions([partition.id])
    assert [(v.version, v.commit_op) for v in versions] == [(1, "append"), (2, "compaction"), (3, "compaction")]


def test_a_closed_day_does_not_switch_before_its_live_objects_are_merged(deployment: Deployment) -> None:
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, s) for s in range(2)])
    partition = only_partition(deployment, table)
    next_day = DAY + dt.timedelta(days=1)
    assert publish_once(deployment, now=tokyo(next_day, 1)).closed == [partition.id]
    assert publish_once(deployment, now=tokyo(next_day, 2)).switched == [], "never merged: stays live"
    merge_once(deployment)
    assert publish_once(deployment, now=tokyo(next_day, 3)).switched == [partition.id]


def test_publish_and_history_commands(deployment: Deployment, monkeypatch) -> None:
    import json

    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 5, s) for s in range(2)])
    merge_once(deployment)
    silt = silt_in_process(deployment, monkeypatch)

    assert "1 closed" in silt("publish", "--once", "--now", "2026-11-21T00:30:00+09:00")
    assert "1 partitions switched" in silt("publish", "--once", "--now", "2026-11-20T16:00:00Z")
    assert "not an ISO-8601 time" in silt("publish", "--once", "--now", "tomorrow", code=2)
    versions = json.loads(silt("history", "web.access", "--format", "json"))
    assert [(v["version"], v["op"], v["rows"]) for v in versions] == [(1, "append", 10), (2, "compaction", 10)]
    assert versions[1]["shows"].endswith(".json") and versions[0]["date"] == "2026-11-20"
    assert "compaction" in silt("history", "web.access", "--date", "2026-11-20")
    assert "no partition" in silt("history", "web.access", "--date", "2026-01-01", code=2)


def test_a_reader_plans_with_the_same_number_of_catalog_queries_for_any_number_of_partitions(
    deployment: Deployment, spark
) -> None:
    import sqlalchemy as sa

    table = make_table(deployment)

    def add_days(first: int, count: int) -> None:
        for offset in range(first, first + count):
            day = DAY - dt.timedelta(days=offset)
            add_small_objects(deployment, table, day, [rows_for(day, 3, offset)])

    def queries_to_read() -> tuple[int, int]:
        statements: list[str] = []

        def count(_conn, _cursor, statement, *_args) -> None:
            statements.append(statement)

        sa.event.listen(deployment.catalog.engine, "before_cursor_execute", count)
        try:
            rows = read_table(spark, "web.access", deployment).count()
        finally:
            sa.event.remove(deployment.catalog.engine, "before_cursor_execute", count)
        return len([s for s in statements if not s.strip().upper().startswith(("BEGIN", "PRAGMA"))]), rows

    add_days(0, 3)
    merge_once(deployment)
    publish_once(deployment, now=tokyo(DAY + dt.timedelta(days=1), 1))
    publish_once(deployment, now=tokyo(DAY + dt.timedelta(days=1), 2))  # switches and publishes merged
    add_days(3, 1)  # and one live partition: both reads mix merged and live partitions
    few, few_rows = queries_to_read()
    add_days(4, 16)
    merge_once(deployment)
    publish_once(deployment, now=tokyo(DAY + dt.timedelta(days=1), 3))
    publish_once(deployment, now=tokyo(DAY + dt.timedelta(days=1), 4))
    add_days(20, 5)  # live (not yet closed by a publish run) partitions too
    many, many_rows = queries_to_read()
    assert (few_rows, many_rows) == (12, 75)
    assert few == many <= 4, f"{few} catalog queries for 4 partitions, {many} for 25"


def test_merged_versions_publish_in_one_batch_and_skip_only_the_partition_that_moved(deployment: Deployment) -> None:
    from siltlake.storage.manifests import write_manifests

    table = make_table(deployment)
    catalog = deployment.catalog
    layout = table.layout(deployment.instance_key)
    days = [DAY - dt.timedelta(days=d) for d in range(3)]
    for day in days:
        add_small_objects(deployment, table, day, [rows_for(day, 3, day.day)])
    next_day = DAY + dt.timedelta(days=1)
    ran = publish_once(deployment, now=tokyo(next_day, 1))
    by_date = {p.partition_date: p.id for p in catalog.partitions.list(table.id)}
    assert ran.closed == sorted(by_date.values()) and len(ran.live_versions) == 3
    merge_once(deployment)
    assert catalog.versions.switch_partitions() == sorted(by_date.values())
    pending = catalog.versions.merged_to_publish()
    keys = [
        write_manifests(
            deployment.lake,
            layout,
            p.partition_date,
            p.desired,
            [(r.key(layout, p.partition_date), r.content_length) for r in p.ranges],
        )[0]
        for p in pending
    ]
    # A delayed object merged meanwhile moves one partition's desired: only that one is left for later.
    add_small_objects(deployment, table, days[0], [rows_for(days[0], 2, 77)])
    merge_once(deployment)
    published = catalog.versions.publish_merged_many(list(zip(pending, keys, strict=True)), tokyo(next_day, 2))
    assert sorted(v.partition_id for v in published) == sorted(by_date[d] for d in days[1:])
    assert {(v.version, v.commit_op, v.row_count) for v in published} == {(2, "compaction", 3)}
    again = publish_once(deployment, now=tokyo(next_day, 3))
    (late,) = again.merged_versions
    assert (late.partition_id, late.version, late.row_count) == (by_date[days[0]], 2, 5)
    assert publish_once(deployment, now=tokyo(next_day, 4)).merged_versions == []


def test_version_times_only_go_forward(deployment: Deployment, monkeypatch) -> None:
    """A --now earlier than the table's newest version is refused; a clock behind it is moved past it, so
    TIMESTAMP AS OF never shows a state that did not exist."""
    import pytest

    from siltlake.catalog import VersionTimeBehind
    from siltlake.lake import Lake
    from siltlake.write.update import delete_rows

    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 40, 0)])
    noon = tokyo(DAY, 12)
    publish_once(deployment, now=noon)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, 1)])
    with pytest.raises(VersionTimeBehind, match=r"web\.access.*2026-11-\d\d 03:00:00 UTC"):
        publish_once(deployment, now=noon - dt.timedelta(minutes=1))
    silt = silt_in_process(deployment, monkeypatch)
    refused = silt("publish", "--once", "--now", "2026-11-01T00:00:00Z", code=2)
    assert "before it" in refused, refused
    assert Lake(deployment).table("web.access").version == 1, "nothing was published"

    # A host whose clock is behind: the version is stamped just after the newest one.
    monkeypatch.setattr("siltlake.publish.runner.utcnow", lambda: noon - dt.timedelta(hours=1))
    (appended,) = publish_once(deployment).live_versions
    assert appended.created_at == noon + dt.timedelta(microseconds=1)
    access = Lake(deployment).table("web.access")
    assert access.to_arrow(as_of=noon).num_rows == 40
    assert access.to_arrow(as_of=appended.created_at).num_rows == 50
    monkeypatch.setattr("siltlake.write.update.utcnow", lambda: noon - dt.timedelta(hours=2))
    deleted = delete_rows(deployment, "web.access", DAY, "user_id < 5")
    assert deleted.version is not None
    assert deleted.version.created_at == noon + dt.timedelta(microseconds=2)
    assert access.to_arrow(as_of=appended.created_at).num_rows == 50
    assert access.to_arrow().num_rows == 45
