"""Iceberg snapshots carry their table version's time: an engine's TIMESTAMP AS OF an instant finds the version
siltlake finds then, for appends, an erasure and a column change published together some time later."""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter

import pyarrow as pa

from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.publish import publish_once
from siltlake.publish.iceberg.catalog import VERSION_PROPERTY, VERSION_TIME_PROPERTY, open_catalog
from siltlake.publish.iceberg.manifests import snapshot_millis

from .test_append_arrow import times

MS = dt.timedelta(milliseconds=1)


def millis(at: dt.datetime) -> int:
    return -(-((at - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)) // 1000)


def test_snapshots_are_stamped_with_their_versions_time_and_read_as_siltlake_at_every_instant(
    plain_deployment: Deployment,
) -> None:
    deployment = plain_deployment
    deployment.config.publish.targets = ["iceberg"]
    table = Lake(deployment).table("web.access")
    table.append(pa.table({"utc_event_time": times(6, 0), "user_id": [1, 1, 2, 2, 3, 3], "action": ["a"] * 6}))
    publish_once(deployment)  # the Iceberg table exists from here: later versions are published late
    time.sleep(0.3)
    table.append(pa.table({"utc_event_time": times(2, 10), "user_id": [4, 4], "action": ["b"] * 2}))
    time.sleep(0.3)
    table.delete("user_id = 2", dates="all")  # an erasure, published with the others below
    time.sleep(0.3)
    deployment.catalog.tables.rename_column("web.access", "action", "event")
    time.sleep(0.3)
    report = publish_once(deployment)  # published together, some time after the erasure
    assert not report.target_errors, report.target_errors

    newest = deployment.catalog.version_reads.newest(table.record.id)
    version_times = deployment.catalog.version_reads.version_times(table.record.id, 0, newest)
    assert sorted(version_times) == list(range(1, newest + 1)) and newest >= 3
    iceberg = open_catalog(deployment).load_table(("web", "access"))
    by_version = {int(s.summary[VERSION_PROPERTY]): s for s in iceberg.snapshots()}
    for version, at in version_times.items():
        assert by_version[version].timestamp_ms == millis(at), f"version {version}"
        assert by_version[version].summary[VERSION_TIME_PROPERTY] == at.isoformat() + "Z", f"version {version}"

    def siltlake_users(at: dt.datetime) -> Counter:
        return Counter(Lake(deployment).table("web.access").to_arrow(as_of=at).column("user_id").to_pylist())

    def iceberg_users(at: dt.datetime) -> Counter:
        snapshot = iceberg.snapshot_as_of_timestamp(millis(at))
        return Counter(iceberg.scan(snapshot_id=snapshot.snapshot_id).to_arrow().column("user_id").to_pylist())

    instants = sorted(
        {t + d for t in version_times.values() for d in (-MS, dt.timedelta(0), MS)}
        | {
            a + (b - a) / 2
            for a, b in zip(sorted(version_times.values()), sorted(version_times.values())[1:], strict=False)
        }
    )
    first = min(version_times.values())
    for at in instants:
        if at < first:
            assert iceberg.snapshot_as_of_timestamp(millis(at)) is None, "no snapshot before the first version"
            continue
        assert iceberg_users(at) == siltlake_users(at), at
    # The erasure is the first version without user 2 (the delete took the live append into its rewrite).
    erasure = min(v for v, t in version_times.items() if siltlake_users(t)[2] == 0)
    assert iceberg_users(version_times[erasure] - MS)[2] == 2 and iceberg_users(version_times[erasure])[2] == 0


def test_a_version_older_than_the_tables_last_change_is_stamped_no_more_than_the_limit_before_it() -> None:
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
    from pyiceberg.schema import Schema
    from pyiceberg.table.metadata import new_table_metadata
    from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

    metadata = new_table_metadata(Schema(), UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER, "file:///t", {})
    long_ago = dt.datetime(2020, 1, 1)
    # Java's Iceberg refuses metadata updated more than a minute before the metadata it replaces.
    assert metadata.last_updated_ms - snapshot_millis(metadata, long_ago) <= 60_000
    recent = dt.datetime.fromtimestamp(metadata.last_updated_ms / 1000, dt.UTC).replace(tzinfo=None) - dt.timedelta(
        seconds=5
    )
    assert snapshot_millis(metadata, recent) == millis(recent)
