"""The change feed (Table.changes, `silt changes`): what each kind of table version yields, on SQLite and
PostgreSQL catalogs."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from siltlake.catalog import VersionOutOfRange
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.reap import reap_once
from siltlake.write.update import delete_rows
from siltlake.write.upsert import upsert

from .merge_helpers import add_small_objects, rows_for, silt_in_process
from .test_merge import DAY, make_table
from .test_publish import tokyo
from .test_upsert import KEYED, upsert_rows

NEXT_DAY = DAY + dt.timedelta(days=1)


def changed(feed: pa.Table) -> list[tuple]:
    """(version, change type, user id, action) of each change row."""
    return list(
        zip(
            *(feed.column(n).to_pylist() for n in ("_commit_version", "_change_type", "user_id", "action")), strict=True
        )
    )


def test_appends_compactions_delayed_objects_and_deletes(deployment: Deployment) -> None:
    record = make_table(deployment)
    table = Lake(deployment).table("web.access")
    first, second = rows_for(DAY, 3, 1), rows_for(DAY, 2, 2)
    add_small_objects(deployment, record, DAY, [first])
    publish_once(deployment, now=tokyo(DAY, 12))  # version 1: an append
    add_small_objects(deployment, record, DAY, [second])
    publish_once(deployment, now=tokyo(DAY, 13))  # version 2: an append of the second object only
    assert sorted(changed(table.changes(1))) == sorted((2, "insert", r["user_id"], r["action"]) for r in second)
    merge_once(deployment)
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))  # closes DAY
    publish_once(deployment, now=tokyo(NEXT_DAY, 2))  # switches it and publishes its compaction
    assert table.version == 3 and [h["op"] for h in table.history()][-1] == "compaction"
    assert table.changes(2).num_rows == 0, "a compaction changes no row"

    late = rows_for(DAY, 2, 3)
    add_small_objects(deployment, record, DAY, [late])  # delayed: the day is closed
    publish_once(deployment, now=tokyo(NEXT_DAY, 3))
    assert table.version == 3, "a delayed object is not shown before its merge"
    merge_once(deployment)
    publish_once(deployment, now=tokyo(NEXT_DAY, 4))
    assert sorted(changed(table.changes(3))) == sorted((4, "insert", r["user_id"], r["action"]) for r in late)

    delete_rows(deployment, "web.access", DAY, "user_id = 3000001", now=tokyo(NEXT_DAY, 5))
    feed = table.changes(4)
    assert changed(feed) == [(5, "delete", 3_000_001, "a4")]
    assert feed.column("_commit_timestamp").to_pylist() == [tokyo(NEXT_DAY, 5).replace(tzinfo=dt.UTC)]
    assert feed.column("dt").to_pylist() == [DAY]
    everything = table.changes(0)
    assert everything.num_rows == 3 + 2 + 2 + 1 and table.changes(0, 2).num_rows == 5
    assert table.changes(1, 4, columns=["user_id", "_change_type"]).column_names == ["user_id", "_change_type"]

    with pytest.raises(VersionOutOfRange, match="no version 9"):
        table.changes(0, 9)
    # Reap removes the versions older than a day before `now`: their changes can no longer be read.
    reap_once(deployment, now=utcnow() + dt.timedelta(days=30), retention=86400, grace=3600)
    oldest, newest = table.versions()
    assert oldest == newest == 5
    with pytest.raises(VersionOutOfRange, match="versions before 5 were reaped"):
        table.changes(3)
    assert table.changes(5).num_rows == 0


def test_upserts_and_resent_rows_of_a_keyed_table(deployment: Deployment) -> None:
    record = make_table(deployment, **KEYED)
    table = Lake(deployment).table("web.access")
    add_small_objects(deployment, record, DAY, [rows_for(DAY, 3, 0)])
    publish_once(deployment, now=tokyo(DAY, 12))
    rows = upsert_rows([0, 1, 7], "new").append_column("gone", pa.array([False, True, False]))
    upsert(deployment, "web.access", rows, "gone", now=tokyo(DAY, 13))
    assert changed(table.changes(1)) == [
        (2, "delete", 1, "a1"),
        (2, "update_preimage", 0, "a0"),
        (2, "update_postimage", 0, "new"),
        (2, "insert", 7, "new"),
    ]
    # A re-sent row that equals what the table holds changes nothing; a different one is an update.
    add_small_objects(deployment, record, DAY, [[{**rows_for(DAY, 3, 0)[2]}, {**rows_for(DAY, 1, 5)[0]}]])
    publish_once(deployment, now=tokyo(DAY, 14))
    assert changed(table.changes(2)) == [(3, "insert", 5_000_000, "a0")]
    merge_once(deployment)
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))
    publish_once(deployment, now=tokyo(NEXT_DAY, 2))
    assert [h["op"] for h in table.history()][-1] == "compaction" and table.changes(3).num_rows == 0


def test_changes_command(deployment: Deployment, monkeypatch, tmp_path) -> None:
    record = make_table(deployment)
    add_small_objects(deployment, record, DAY, [rows_for(DAY, 2, 1)])
    publish_once(deployment, now=tokyo(DAY, 12))
    silt = silt_in_process(deployment, monkeypatch)
    listed = json.loads(silt("changes", "web.access", "--from", "0", "--format", "json"))
    assert [(r["_change_type"], r["_commit_version"], r["user_id"]) for r in listed] == [
        ("insert", 1, 1_000_000),
        ("insert", 1, 1_000_001),
    ]
    assert silt("changes", "web.access", "--from", "1", "--format", "csv", "--column", "user_id").splitlines() == [
        "user_id,_change_type,_commit_version,_commit_timestamp"
    ]
    out = tmp_path / "feed.parquet"
    silt("changes", "web.access", "--from", "0", "--format", "parquet", "--output", str(out))
    assert pq.read_table(out).num_rows == 2
    assert "no version 4" in silt("changes", "web.access", "--from", "0", "--to", "4", code=2)
    assert "--output" in silt("changes", "web.access", "--from", "0", "--format", "parquet", code=2)
