"""Keyed tables' readers: every engine shows one row per (dt, primary key), merging on read the partitions that
hold several rows of a key, applying filters after that; files() refuses those partitions, and external
catalogs show a keyed partition once it is one merged object."""

from __future__ import annotations

import datetime as dt
import gzip
import json
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

from siltlake.catalog import PartitionToSync
from siltlake.deployment import Deployment
from siltlake.errors import SiltError
from siltlake.lake import Lake
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.publish.hive import HiveTarget
from siltlake.publish.iceberg.catalog import open_catalog
from siltlake.read import sql as read_sql
from siltlake.read import table as read_table
from siltlake.stream import stream_once
from siltlake.tabledef import TableDef

from .test_merge import DAY
from .test_publish import tokyo

pytestmark = pytest.mark.spark

NEXT_DAY = DAY + dt.timedelta(days=1)
_staged = iter(range(1_000_000))


def keyed_table(name: str, **settings: object) -> TableDef:
    return TableDef.from_mapping(
        {
            "schema": "web",
            "name": name,
            "time_column": "utc_event_time",
            "timezone": "Asia/Tokyo",
            "merge_interval": 0,
            "primary_key": ["event_id"],
            **settings,
            "columns": [
                {"name": "utc_event_time", "type": "timestamp", "nullable": False, "source": "time"},
                {"name": "event_id", "type": "string", "nullable": False},
                {"name": "seq", "type": "bigint"},
                {"name": "v", "type": "string"},
            ],
        }
    )


def stage(deployment: Deployment, table: str, date: dt.date, rows: list[tuple]) -> None:
    """One staging object of (event_id, v[, seq]) rows at noon of a Tokyo date."""
    time = (tokyo(date, 12)).isoformat() + "Z"
    lines = [
        {"time": time, "event_id": row[0], "v": row[1], **({"seq": row[2]} if len(row) > 2 else {})} for row in rows
    ]
    path = Path(deployment.staging.path(f"f1.web.{table}/{date:%Y/%m/%d}/{next(_staged)}.jsonl.gz"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress("".join(json.dumps(line) + "\n" for line in lines).encode()))


def stream(deployment: Deployment) -> None:
    report = stream_once(deployment)
    assert report.bad_records == 0


@pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)
def test_every_reader_merges_a_keyed_partition_on_read_and_filters_after(deployment: Deployment, spark) -> None:
    deployment.config.publish.targets = ["iceberg"]
    deployment.catalog.tables.create(keyed_table("events"))
    deployment.catalog.tables.create(keyed_table("ordered", sequence_column="seq"))
    stage(deployment, "events", DAY, [("e1", "a1"), ("e2", "a2"), ("e3", "a3")])
    stage(deployment, "ordered", DAY, [("k1", "newest", 5), ("k2", "old", 1)])
    stream(deployment)
    # A shipper re-sends e2 and e3 (newer values) with e4 under a new staging key; then one object holds e5 twice.
    stage(deployment, "events", DAY, [("e2", "b2"), ("e3", "b3"), ("e4", "b4")])
    stage(deployment, "ordered", DAY, [("k1", "older", 3), ("k2", "new", 2), ("k3", "none", None)])
    stream(deployment)
    stage(deployment, "events", DAY, [("e5", "c5-first"), ("e1", "c1"), ("e5", "c5-second")])
    stream(deployment)
    publish_once(deployment, now=tokyo(DAY, 13))
    lake = Lake(deployment)
    events, ordered = lake.table("web.events"), lake.table("web.ordered")
    expected = Counter({("e1", "c1"): 1, ("e2", "b2"): 1, ("e3", "b3"): 1, ("e4", "b4"): 1, ("e5", "c5-second"): 1})

    def pairs(rows) -> Counter:  # rows of (event_id, v)
        return Counter((r[0], r[1]) for r in rows)

    arrow = events.to_arrow()
    assert pairs(zip(*arrow.select(["event_id", "v"]).to_pydict().values(), strict=True)) == expected
    assert arrow.column("dt").to_pylist() == [DAY] * 5 and arrow.schema == events.schema
    # The filter sees the merged rows: e1's older row "a1" matches it but is not what readers see.
    assert events.to_arrow(filter=pc.field("v") == "a1").num_rows == 0
    assert events.to_arrow(filter=pc.field("v").isin(["a2", "b2"]), columns=["event_id"]).to_pylist() == [
        {"event_id": "e2"}
    ]
    assert events.to_arrow(filter=pc.field("dt") == NEXT_DAY).num_rows == 0
    with duckdb.connect() as connection:
        relation = events.to_duckdb(connection)
        assert pairs(relation.select("event_id, v").fetchall()) == expected
        assert relation.filter("v = 'a1'").count("*").fetchall() == [(0,)]
    assert pairs(read_table(spark, "web.events", deployment).select("event_id", "v").collect()) == expected
    assert read_sql(
        spark, "SELECT count(*), count(DISTINCT event_id), count_if(v = 'a3') FROM web.events", deployment
    ).collect()[0][:] == (5, 5, 0)
    assert sorted(tuple(r) for r in read_sql(spark, "SELECT event_id, v FROM web.ordered", deployment).collect()) == [
        ("k1", "newest"),
        ("k2", "new"),
        ("k3", "none"),
    ], "the larger sequence wins, whatever the commit order"
    assert sorted(ordered.to_arrow(columns=["event_id", "v"]).column("v").to_pylist()) == ["new", "newest", "none"]
    with pytest.raises(SiltError, match=r"web\.events .*2026-11-20.*to_arrow\(\).*silt merge --once --now"):
        events.files()
    with pytest.raises(SiltError, match="2026-11-20"):
        events.data_files(as_of_version=1)
    iceberg = open_catalog(deployment).load_table(("web", "events"))
    assert (
        pairs(zip(*iceberg.scan(selected_fields=("event_id", "v")).to_arrow().to_pydict().values(), strict=True))
        == expected
    ), "Iceberg shows the partition merged on read (position deletes), before it is merged"
    assert sorted(
        open_catalog(deployment).load_table(("web", "ordered")).scan().to_arrow().column("v").to_pylist()
    ) == ["new", "newest", "none"]

    # The day closes and is merged into one object: read plainly, its files listed; the next day merges on read.
    stage(deployment, "events", NEXT_DAY, [("e1", "n1"), ("e1", "n1-again")])
    stream(deployment)
    merge_once(deployment)
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))
    merge_once(deployment)
    report = publish_once(deployment, now=tokyo(NEXT_DAY, 2))
    assert [
        v.commit_op
        for v in report.merged_versions
        if v.partition_id in {p.id for p in deployment.catalog.partitions.list(events.record.id)}
    ] == ["compaction"]
    (merged,) = events.files(dates=DAY)
    assert "/merged/" in merged
    assert isinstance(events.to_pyarrow_dataset(dates=DAY), ds.FileSystemDataset), "a merged partition reads plainly"
    both = events.to_pyarrow_dataset()
    assert isinstance(both, ds.UnionDataset)
    assert both.to_table(filter=pc.field("dt") == NEXT_DAY).column("v").to_pylist() == ["n1-again"]
    with pytest.raises(SiltError, match="2026-11-21"):
        events.files()
    scanned = open_catalog(deployment).load_table(("web", "events")).scan().to_arrow()
    assert Counter(zip(scanned.column("dt").to_pylist(), scanned.column("v").to_pylist(), strict=True)) == Counter(
        zip(events.to_arrow().column("dt").to_pylist(), events.to_arrow().column("v").to_pylist(), strict=True)
    ), "Iceberg shows the merged day and the next day merged on read"
    # Hive: the day at its merged version, the next day (small objects only) left out.
    partitions = deployment.catalog.partitions.list(events.record.id)
    newest = {v.partition_id: v for v in deployment.catalog.versions.of_partitions([p.id for p in partitions])}
    shown = HiveTarget(deployment).keyed_partitions(
        [PartitionToSync(p.id, p.table_id, p.partition_date, newest[p.id].file_list_key) for p in partitions]
    )
    assert [(p.partition_date, newest[p.partition_id].commit_op, p.file_list_key) for p in shown] == [
        (DAY, "compaction", next(v.file_list_key for v in newest.values() if v.commit_op == "compaction"))
    ]
