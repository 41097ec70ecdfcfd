"""Writes into a table partitioned below dt, on SQLite and PostgreSQL: the stream (a wave's objects in groups),
a late object of a value first seen after its day closed, Arrow appends and keyed upserts by bucket."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from siltlake.deployment import Deployment
from siltlake.errors import NotFoundError, SiltError
from siltlake.lake import Lake
from siltlake.merge import merge_once
from siltlake.partspec import bucket_of
from siltlake.publish import publish_once

from .merge_helpers import rows_for, silt_in_process
from .test_merge import DAY, make_table
from .test_publish import tokyo
from .test_table_api import NEXT_DAY, arrow_rows, stream
from .test_upsert import KEYED, upsert_rows

pytestmark = pytest.mark.spark


def _values(row: dict) -> str:
    return f"action={row['action']}/user_id_bucket={bucket_of(row['user_id'], 4)}"


def test_the_stream_writes_an_object_per_partition_and_a_late_value_waits_for_its_merge(
    deployment: Deployment, monkeypatch
) -> None:
    table = make_table(deployment, partition_by=["action", "bucket(4, user_id)"])
    rows = stream(deployment, DAY, 0, count=40) + stream(deployment, DAY, 1, count=40)
    catalog = deployment.catalog
    partitions = catalog.partitions.list(table.id)
    expected_places = {_values(r) for seed in (0, 1) for r in rows_for(DAY, 40, seed)}
    assert {p.partition_values for p in partitions} == expected_places
    assert {p.partition_date for p in partitions} == {DAY}
    # Each staging object's rows are in one object per partition it touches: lineage names them all once.
    lineage = catalog.partitions.lineage(table.id)
    assert sum(r.row_count for r in lineage) == sum(rows.values())
    publish_once(deployment, now=tokyo(DAY, 12))
    assert arrow_rows(Lake(deployment).table("web.access").to_arrow()) == rows

    silt = silt_in_process(deployment, monkeypatch)
    shown = json.loads(silt("table", "show", "web.access", "--format", "json"))
    assert {p["values"] for p in shown["partitions"]} == expected_places
    assert "partitioned by: dt, action, bucket(4, user_id)" in silt("table", "show", "web.access")

    publish_once(deployment, now=tokyo(NEXT_DAY, 1))  # closes every partition of DAY
    assert all(p.closed for p in catalog.partitions.list(table.id))
    # A value no object of DAY held before: its partition is born closed, its object delayed.
    late = (
        Lake(deployment)
        .table("web.access")
        .append(
            pa.table(
                {
                    "utc_event_time": pa.array([tokyo(DAY, 20).replace(tzinfo=dt.UTC)], pa.timestamp("us", tz="UTC")),
                    "user_id": pa.array([5], pa.int64()),
                    "action": ["new-action"],
                }
            )
        )
    )
    assert [o.delayed for o in late.objects] == [True]
    (born,) = [p for p in catalog.partitions.list(table.id) if p.partition_values.startswith("action=new-action/")]
    assert born.closed
    assert arrow_rows(Lake(deployment).table("web.access").to_arrow()) == rows, "delayed: shown once merged"
    merge_once(deployment)
    publish_once(deployment, now=tokyo(NEXT_DAY, 2))
    shown_rows = Lake(deployment).table("web.access").to_arrow(columns=["user_id", "action"])
    assert ("new-action", 5) in set(
        zip(shown_rows.column("action").to_pylist(), shown_rows.column("user_id").to_pylist(), strict=True)
    )
    assert shown_rows.num_rows == sum(rows.values()) + 1


def test_keyed_upserts_land_in_their_keys_buckets(deployment: Deployment) -> None:
    table = make_table(deployment, **KEYED, partition_by=["bucket(4, user_id)"])
    lake = Lake(deployment)
    first = pa.concat_tables([upsert_rows(list(range(12)), "old")])
    lake.table("web.access").upsert(first, now=tokyo(DAY, 12))
    changed = upsert_rows([0, 1, 2, 3, 4, 5], "new").append_column("gone", pa.array([False] * 5 + [True]))
    report = lake.table("web.access").upsert(changed, delete_column="gone", now=tokyo(DAY, 13))
    by_bucket = Counter(bucket_of(u, 4) for u in range(6))
    assert sorted((p.partition_values, p.rows) for p in report.partitions) == sorted(
        (f"user_id_bucket={b}", n) for b, n in by_bucket.items()
    )
    assert sum(p.deleted_keys for p in report.partitions) == 1
    deleted_in = f"user_id_bucket={bucket_of(5, 4)}"
    assert [p.deleted_keys for p in report.partitions if p.partition_values == deleted_in] == [1]
    shown = lake.table("web.access").to_arrow(columns=["user_id", "action"])
    assert dict(zip(shown.column("user_id").to_pylist(), shown.column("action").to_pylist(), strict=True)) == {
        **{u: "new" for u in range(5)},
        **{u: "old" for u in range(6, 12)},
    }
    assert {p.partition_values for p in deployment.catalog.partitions.list(table.id)} == {
        f"user_id_bucket={bucket_of(u, 4)}" for u in range(12)
    }
    # Merged, each bucket keeps one row per key; readers see the same.
    merge_once(deployment)
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))
    publish_once(deployment, now=tokyo(NEXT_DAY, 2))
    again = lake.table("web.access").to_arrow(columns=["user_id", "action"])
    assert again.sort_by("user_id").equals(shown.sort_by("user_id"))
    assert pc.count_distinct(again.column("user_id")).as_py() == again.num_rows == 11


def test_updates_overwrites_retypes_restores_and_compactions_rewrite_each_partition_of_a_date(
    deployment: Deployment,
) -> None:
    table = make_table(deployment, partition_by=["action"])
    rows = stream(deployment, DAY, 0, count=30)
    publish_once(deployment, now=tokyo(DAY, 12))
    lake = Lake(deployment)
    access = lake.table("web.access")
    first = access.version

    report = access.update({"user_id": "user_id + 1000"}, where="action = 'a1'", dates=DAY, now=tokyo(DAY, 13))
    assert [u.partition_values for u in report if u.version is not None] == ["action=a1"]
    changed = Counter({(t, u + 1000 if a == "a1" else u, a): n for (t, u, a), n in rows.items()})
    assert arrow_rows(access.to_arrow()) == changed
    with pytest.raises(SiltError, match="action partitions the table below dt"):
        access.update({"action": "'x'"}, dates=DAY)

    # Overwrite with Arrow rows: each partition of the date gets its own rows; one given none is emptied.
    kept = access.to_arrow(columns=["utc_event_time", "user_id", "action"]).filter(pc.field("action") != "a2")
    access.overwrite(kept, dates=DAY, now=tokyo(DAY, 14))
    assert arrow_rows(access.to_arrow()) == Counter({r: n for r, n in changed.items() if r[2] != "a2"})
    unknown = kept.slice(0, 1).set_column(2, "action", pa.array(["never-seen"]))
    with pytest.raises(NotFoundError, match="rows fall in partitions it does not have"):
        access.overwrite(unknown, dates=DAY)

    restored = access.restore(version=first, now=tokyo(DAY, 15))
    assert len(restored) and all(u.partition_values.startswith("action=") for u in restored)
    assert arrow_rows(access.to_arrow()) == rows

    # A rewrite of a column's type rewrites every partition holding it; history reads as it was.
    access.alter_column("user_id", "string", rewrite=True, now=tokyo(DAY, 16))
    back = access.to_arrow(columns=["user_id", "action"])
    assert Counter(zip(back.column("user_id").to_pylist(), back.column("action").to_pylist(), strict=True)) == Counter(
        {(str(u), a): n for (_, u, a), n in rows.items()}
    )
    assert arrow_rows(access.to_arrow(as_of_version=first)) == rows
    # A compaction of the date merges every partition of it.
    compacted = access.compact(dates=DAY, now=tokyo(DAY, 17))
    assert compacted is not None
    assert all(p.desired_manifest_version > 0 for p in deployment.catalog.partitions.list(table.id))


def test_a_bulk_load_writes_each_partition_below_dt(deployment: Deployment, tmp_path) -> None:
    from siltlake.load import load, parse_load_config
    from siltlake.tabledef import TableDef

    from .test_load import config, csv_file

    columns = [
        {"name": "id", "type": "bigint"},
        {"name": "event_time", "type": "timestamp", "nullable": False},
        {"name": "name", "type": "string"},
    ]
    definition = {"schema": "web", "name": "people", "time_column": "event_time", "timezone": "Asia/Tokyo"}
    table = deployment.catalog.tables.create(
        TableDef.from_mapping({**definition, "columns": columns, "partition_by": ["bucket(3, id)"]})
    )
    inputs = tmp_path / "in"
    inputs.mkdir()
    rows = csv_file(inputs / "a.csv", 0, 40) + csv_file(inputs / "b.csv.gz", 100, 30, gz=True)
    loaded = config(inputs)
    loaded["out"]["create"] = False
    load(deployment, parse_load_config(loaded))
    partitions = deployment.catalog.partitions.list(table.id)
    assert {(p.partition_date.isoformat(), p.partition_values) for p in partitions} == {
        (local[:10], f"id_bucket={bucket_of(ident, 3)}") for ident, local, _ in rows
    }
    publish_once(deployment, now=tokyo(NEXT_DAY, 12))
    shown = Lake(deployment).table("web.people").to_arrow(columns=["id"])
    assert sorted(shown.column("id").to_pylist()) == sorted(ident for ident, _, _ in rows)
