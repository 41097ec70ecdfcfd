"""Property: whatever the history of appends, merges, publish runs, updates, time-travel reads and reaps on an
advancing clock, reap never deletes what a retained version or a merge range needs, and once retention and
grace have passed with nothing new, everything else is gone."""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict
from zoneinfo import ZoneInfo

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.errors import VersionOutOfRange
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.read import table as read_table
from siltlake.reap import reap_once
from siltlake.reap.retention import retained_versions
from siltlake.storage.keys import symlink_key
from siltlake.storage.manifests import read_manifest
from siltlake.write.update import delete_rows

from .conftest import make_config
from .merge_helpers import add_small_objects, rows_for
from .test_merge import make_table

pytestmark = pytest.mark.spark
HOUR = dt.timedelta(hours=1)

append = st.tuples(st.just("append"), st.integers(0, 2), st.lists(st.integers(1, 15), min_size=1, max_size=3))
publish = st.tuples(st.just("publish"), st.sampled_from([1, 7, 13, 26]))
step = st.one_of(
    append,
    append,
    publish,
    publish,
    st.just(("merge",)),
    st.just(("read",)),
    st.tuples(st.just("reap"), st.sampled_from([1, 2]), st.booleans()),
    st.just(("update",)),
)


def rows_of(deployment: Deployment, keys: list[str]) -> Counter:
    rows: Counter = Counter()
    for key in keys:
        table = pq.read_table(
            deployment.lake.path(key), filesystem=deployment.lake.filesystem, columns=["user_id", "action"]
        )
        rows.update(zip(table.column("user_id").to_pylist(), table.column("action").to_pylist(), strict=True))
    return rows


def published_rows(deployment: Deployment, table, **as_of: object) -> Counter | None:
    """What siltlake.read shows, read with pyarrow from the reader's own snapshot (no Spark per step); None when
    the read is refused (an instant before the table's first version)."""
    layout = table.layout(deployment.instance_key)
    keys = []
    try:
        views = deployment.catalog.version_reads.reader_snapshot(table.id, **as_of)
    except VersionOutOfRange:
        return None
    for view in views:
        if view.manifest_key:
            keys += [
                uri.removeprefix(deployment.lake.root + "/")
                for uri, _ in read_manifest(deployment.lake, view.manifest_key)
            ]
        keys += [layout.small_object(view.partition_date, oid, False) for oid in view.live_object_ids]
    return rows_of(deployment, keys)


def version_objects(deployment: Deployment, layout, version, date: dt.date, small: dict) -> list[str]:
    """Every object a version shows: its manifest's objects and the live small objects above them."""
    keys = []
    if version.manifest_key:
        assert deployment.lake.exists(symlink_key(version.manifest_key)), version
        keys += [
            uri.removeprefix(deployment.lake.root + "/")
            for uri, _ in read_manifest(deployment.lake, version.manifest_key)
        ]
    low, high = version.covered_upper or 0, version.live_watermark or 0
    keys += [
        layout.small_object(date, oid, False)
        for oid, (day, delayed) in small.items()
        if not delayed and low < oid <= high and day == date
    ]
    return keys


@settings(max_examples=6, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=3, max_size=12))
def test_reap_keeps_every_retained_version_readable_and_removes_the_rest(
    spark, tmp_path_factory, monkeypatch, steps: list[tuple]
) -> None:
    root = tmp_path_factory.mktemp("reap-property")
    deployment = Deployment(make_config(root, f"sqlite:///{root / 'catalog.db'}"))
    deployment.init()
    deployment.use_spark(spark)
    clock = [utcnow()]
    # Updates stamp their versions with this clock too, so version times only move forward.
    monkeypatch.setattr("siltlake.write.update.utcnow", lambda: clock[0])
    try:
        table = make_table(deployment, merged_object_size=6_000, merge_batch_size=3, row_group_bytes=2048)
        layout = table.layout(deployment.instance_key)
        today = clock[0].replace(tzinfo=dt.UTC).astimezone(ZoneInfo(table.definition.timezone)).date()
        dates = [today - dt.timedelta(days=1), today, today + dt.timedelta(days=1)]
        held: dict[dt.date, Counter] = defaultdict(Counter)  # everything each partition holds
        small: dict[int, tuple[dt.date, bool]] = {}  # every small object ever added: (date, delayed)
        reads: list[tuple[dt.datetime, Counter | None]] = []
        seed = 0
        updated = False

        def check_after_reap(now: dt.datetime, retention: dt.timedelta, before: dict) -> None:
            partitions = {p.id: p.partition_date for p in deployment.catalog.partitions.list(table.id)}
            after = {
                (v.partition_id, v.version): v for v in deployment.catalog.versions.of_partitions(list(partitions))
            }
            for partition_id, history in before.items():
                kept, _ = retained_versions(history, now - retention)
                for v in kept:
                    assert (partition_id, v.version) in after, f"retained version {v} was deleted"
            for v in after.values():
                keys = version_objects(deployment, layout, v, partitions[v.partition_id], small)
                missing = [k for k in keys if not deployment.lake.exists(k)]
                assert not missing, f"version {v} lost {missing}"
                if v.file_list_key:
                    listed = [
                        uri.removeprefix(deployment.lake.root + "/")
                        for uri, _ in read_manifest(deployment.lake, v.file_list_key)
                    ]
                    assert listed == keys, f"version {v}'s file list names other files than it shows"
                    assert deployment.lake.exists(symlink_key(v.file_list_key)), v
                assert sum(rows_of(deployment, keys).values()) == v.row_count, v
            for when, rows in reads:
                if when >= now - retention:
                    assert published_rows(deployment, table, as_of=when) == rows, f"time travel to {when}"

        # The tail closes, merges and switches every past day, then reaps while the live versions that showed
        # those days' small objects are still retained.
        for step_ in [*steps, ("merge",), ("publish", 26), ("merge",), ("publish", 1), ("reap", 1)]:
            kind = step_[0]
            if kind == "append":
                date = dates[step_[1]]
                batches = []
                for count in step_[2]:
                    seed += 1
                    batches.append(rows_for(date, count, seed))
                    held[date].update((r["user_id"], r["action"]) for r in batches[-1])
                added = set(add_small_objects(deployment, table, date, batches))
                small.update(
                    {
                        row.id: (date, row.delayed)
                        for row in deployment.catalog.partitions.small_objects(table.id)
                        if row.id in added
                    }
                )
            elif kind == "merge":
                assert merge_once(deployment).failed == 0
            elif kind == "publish":
                clock[0] += step_[1] * HOUR
                publish_once(deployment, now=clock[0])
            elif kind == "read":
                reads.append((clock[0], published_rows(deployment, table, as_of=clock[0])))
            elif kind == "update" and not updated and held:
                updated = True  # one per history: each is a Spark job
                clock[0] += HOUR
                date = sorted(held)[0]
                delete_rows(deployment, "web.access", date, "user_id % 3 = 0")
                held[date] = Counter({row: n for row, n in held[date].items() if row[0] % 3 != 0})
            elif kind == "reap":
                retention = dt.timedelta(days=step_[1])
                partitions = [p.id for p in deployment.catalog.partitions.list(table.id)]
                before: dict[int, list] = defaultdict(list)
                for v in deployment.catalog.versions.of_partitions(partitions):
                    before[v.partition_id].append(v)
                # Full sweeps and incremental runs (the default within reap.full_sweep_interval) alike.
                full = step_[2] if len(step_) > 2 else None
                report = reap_once(
                    deployment, now=clock[0], retention=int(retention.total_seconds()), grace=86400, full=full or None
                )
                assert not report.failed and not report.warnings
                check_after_reap(clock[0], retention, before)

        # The current state reads exactly what the partitions hold (every object merged and published).
        expected = sum(held.values(), Counter())
        assert published_rows(deployment, table) == expected
        frame = read_table(spark, "web.access", deployment)
        assert Counter((r.user_id, r.action) for r in frame.select("user_id", "action").collect()) == expected

        # Long after, with nothing new: only what the newest versions and the ranges name is left.
        later = max(clock[0], utcnow()) + dt.timedelta(days=12)
        partitions = {p.id: p for p in deployment.catalog.partitions.list(table.id)}
        before = defaultdict(list)
        for v in deployment.catalog.versions.of_partitions(list(partitions)):
            before[v.partition_id].append(v)
        reap_once(deployment, now=later)
        check_after_reap(later, dt.timedelta(days=7), before)
        wanted = {f"{deployment.instance_key}/_instance.json"}
        for partition_id, partition in partitions.items():
            versions = deployment.catalog.versions.of_partitions([partition_id])
            assert len(versions) == 1, "only the newest version is left"
            (newest,) = versions
            wanted |= set(version_objects(deployment, layout, newest, partition.partition_date, small))
            if newest.manifest_key:
                wanted |= {newest.manifest_key, symlink_key(newest.manifest_key)}
            if newest.file_list_key:  # its exact file list (a live version's own; else the manifest above)
                wanted |= {newest.file_list_key, symlink_key(newest.file_list_key)}
            wanted |= {
                r.key(layout, partition.partition_date)
                for r in deployment.catalog.merge_queue.ranges(partition_id)
                if r.lower is not None
            }
            wanted |= {
                layout.small_object(o.partition_date, o.id, o.delayed)
                for o in deployment.catalog.partitions.small_objects(table.id)
                if o.partition_date == partition.partition_date and o.id > (newest.covered_upper or 0)
            }
        assert {info.key for info in deployment.lake.list(deployment.instance_key + "/")} == wanted
    finally:
        deployment.close()
