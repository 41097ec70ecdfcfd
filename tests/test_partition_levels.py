"""A second partition level: a table partitioned by dt, an identity field and hash buckets of a column.

The walk-through of tests/test_table_api.py (stream, a late object, merges, the switch, deletes, an added column,
reap) on a two-level table: at every version every reader returns exactly the rows put there, and every object
lies in the partition its rows' values name."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.merge import merge_once
from siltlake.partspec import bucket_of
from siltlake.publish import publish_once
from siltlake.read.version_files import data_file_key
from siltlake.reap import reap_once
from siltlake.storage.keys import split_key

from .merge_helpers import silt_in_process
from .test_merge import DAY, make_table
from .test_publish import tokyo
from .test_table_api import NEXT_DAY, assert_every_engine, assert_file_lists_exact, stream, without

pytestmark = pytest.mark.spark

TWO_LEVELS = ["action", "bucket(4, user_id)"]


def assert_objects_in_their_partitions(deployment: Deployment, lake: Lake) -> None:
    """Each object's rows carry the values its partition (and its key) names."""
    table = lake.table("web.access")
    partitions = {p.id: p for p in deployment.catalog.partitions.list(table.record.id)}
    assert all(p.partition_values for p in partitions.values())
    for uri in table.files():
        parts = split_key(deployment.instance_key, data_file_key(deployment.lake, uri))
        assert parts is not None, uri
        rows = pq.read_table(uri.removeprefix("file://"))
        action = pc.unique(rows.column("action")).to_pylist()
        buckets = {bucket_of(u, 4) for u in rows.column("user_id").to_pylist()}
        assert parts.partition_values == f"action={action[0]}/user_id_bucket={buckets.pop()}", uri
        assert len(action) == 1 and not buckets, uri


@pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)
def test_every_engine_reads_a_two_level_table_exactly_at_every_version(
    deployment: Deployment, spark, monkeypatch
) -> None:
    deployment.config.publish.targets = ["iceberg"]
    make_table(deployment, partition_by=TWO_LEVELS)
    silt = silt_in_process(deployment, monkeypatch)
    lake = Lake(deployment)
    expected: dict[int, Counter] = {}
    times: dict[int, dt.datetime] = {}

    def published(now: dt.datetime, version: int, rows: Counter) -> None:
        assert lake.table("web.access").version == version
        expected[version], times[version] = rows, now

    day = stream(deployment, DAY, 0) + stream(deployment, DAY, 1)
    publish_once(deployment, now=tokyo(DAY, 12))
    published(tokyo(DAY, 12), 1, +day)
    merge_once(deployment)

    next_day = stream(deployment, NEXT_DAY, 3)
    report = publish_once(deployment, now=tokyo(NEXT_DAY, 1))  # closes DAY: later objects of it are delayed
    assert report.closed
    published(tokyo(NEXT_DAY, 1), 2, day + next_day)

    late = stream(deployment, DAY, 4)  # delayed: shown once merged
    report = publish_once(deployment, now=tokyo(NEXT_DAY, 2))
    assert report.switched
    published(tokyo(NEXT_DAY, 2), 3, day + next_day)

    merge_once(deployment)
    report = publish_once(deployment, now=tokyo(NEXT_DAY, 3))
    day += late
    published(tokyo(NEXT_DAY, 3), 4, day + next_day)
    assert_objects_in_their_partitions(deployment, lake)

    lake.table("web.access").delete("action = 'a1'", dates=DAY, now=tokyo(NEXT_DAY, 4))
    day = without(day, "a1")
    published(tokyo(NEXT_DAY, 4), 5, day + next_day)

    lake.table("web.access").delete("action = 'a2'", dates=NEXT_DAY, now=tokyo(NEXT_DAY, 5))
    next_day = without(next_day, "a2")
    published(tokyo(NEXT_DAY, 5), 6, day + next_day)

    assert_file_lists_exact(deployment, lake)
    for version, rows in expected.items():
        assert_every_engine(deployment, spark, silt, lake, rows, as_of_version=version)
    assert_every_engine(deployment, spark, silt, lake, expected[6])

    reap_once(deployment, now=tokyo(NEXT_DAY, 8))
    assert_file_lists_exact(deployment, lake)
    for version in (1, 4, 6):
        assert_every_engine(deployment, spark, silt, lake, expected[version], as_of_version=version)
