"""Writes from the table API and their request ids: Table.append (the stream's commit path), Table.update
(SET ... WHERE), request ids on upsert and delete, reap's pruning of request ids, and the CLI's --request-id,
--json and --dry-run on delete and upsert. Restore is in tests/test_restore.py."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from siltlake.catalog import UpdateConflict, WriteRequest
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.errors import SiltError
from siltlake.lake import Lake
from siltlake.publish import publish_once
from siltlake.reap import reap_once
from siltlake.write.append import append
from siltlake.write.upsert import prepare_upsert

from .merge_helpers import add_small_objects, rows_for, silt_in_process
from .test_merge import DAY, make_table
from .test_publish import tokyo
from .test_upsert import KEYED, late, upsert_rows

NEXT_DAY = DAY + dt.timedelta(days=1)


def arrow_rows(rows: list[dict]) -> pa.Table:
    return pa.table(
        {
            "utc_event_time": pa.array([r["utc_event_time"] for r in rows], pa.timestamp("us", tz="UTC")),
            "user_id": pa.array([r["user_id"] for r in rows], pa.int64()),
            "action": pa.array([r["action"] for r in rows]),
        }
    )


def current(lake: Lake, name: str = "web.access") -> Counter:
    table = lake.table(name).to_arrow(columns=["user_id", "action"])
    return Counter(zip(table.column("user_id").to_pylist(), table.column("action").to_pylist(), strict=True))


def expected(*batches: list[dict]) -> Counter:
    return Counter((r["user_id"], r["action"]) for batch in batches for r in batch)


def test_append_commits_small_objects_as_the_stream_does_once_per_request_id(plain_deployment: Deployment) -> None:
    deployment = plain_deployment
    lake = Lake(deployment)
    table = lake.table("web.access")
    first = rows_for(DAY, 30, 0) + rows_for(NEXT_DAY, 5, 1)

    report = table.append(arrow_rows(first), request_id="load-1")
    assert report.rows == 35 and report.applied_before is None and report.message is None
    assert [(o.partition_date, o.rows, o.delayed) for o in report.objects] == [(DAY, 30, False), (NEXT_DAY, 5, False)]
    assert current(lake) == expected(first), "readers of the current state see the rows at once"
    objects = deployment.catalog.partitions.small_objects(table.record.id)
    assert [(o.id, o.partition_date) for o in objects] == [(o.object_id, o.partition_date) for o in report.objects]
    for partition in deployment.catalog.partitions.list(table.record.id):
        assert [job["ongoing_mark"] for job in deployment.catalog.merge_queue.jobs(partition.id)] == [0], (
            "each partition has its waiting merge job, as after a stream commit"
        )

    again = table.append(arrow_rows(first), request_id="load-1")
    assert again.objects == () and again.applied_before is not None
    assert "was applied already (append" in again.message and "appended 35 rows" in again.message
    assert current(lake) == expected(first), "a retry changes nothing"

    # Batches (a RecordBatchReader's, or any iterable of them); missing nullable columns read as null.
    later = rows_for(DAY, 4, 2)
    batches = arrow_rows(later).drop_columns(["action"]).to_batches(max_chunksize=3)
    assert table.append(batches).rows == 4
    assert current(lake) == expected(first) + Counter((r["user_id"], None) for r in later)

    # A closed partition takes the rows as a delayed object: shown once merged, as a late staging object.
    publish_once(deployment, now=tokyo(NEXT_DAY + dt.timedelta(days=1), 1))
    (late_object,) = table.append(arrow_rows(rows_for(DAY, 2, 3))).objects
    assert late_object.delayed


def test_append_refuses_rows_it_cannot_write_and_changes_nothing(plain_deployment: Deployment) -> None:
    lake = Lake(plain_deployment)
    table = lake.table("web.access")
    rows = arrow_rows(rows_for(DAY, 3, 0))
    with pytest.raises(SiltError, match="cannot append into web.access: columns not in the table: referrer"):
        table.append(rows.append_column("referrer", pa.array(["x"] * 3)))
    with pytest.raises(SiltError, match="column 'utc_event_time' holds 1 nulls"):
        table.append(
            rows.set_column(
                0, "utc_event_time", pa.array([None, *rows.column(0).to_pylist()[1:]], pa.timestamp("us", tz="UTC"))
            )
        )
    with pytest.raises(SiltError, match="not a pyarrow RecordBatch"):
        table.append([{"user_id": 1}])
    with pytest.raises(SiltError, match="request id '' must be printable text"):
        table.append(rows, request_id="")
    assert plain_deployment.catalog.partitions.small_objects(table.record.id) == []
    assert not list(plain_deployment.lake.list(f"{plain_deployment.instance_key}/tmp")), "no temporary left"


SQLITE_ONLY = pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)  # Spark's work is the same on both


@SQLITE_ONLY
def test_an_append_prepared_before_an_update_commits_fails_and_its_retry_applies(deployment: Deployment) -> None:
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, 0)])
    lake = Lake(deployment)
    mark = deployment.catalog.versions.mark

    def update_meanwhile() -> int:  # the update commits between the append's mark and its commit
        taken = mark()
        lake.table("web.access").delete("user_id = 0", dates=DAY)
        return taken

    deployment.catalog.versions.mark = update_meanwhile
    try:
        with pytest.raises(UpdateConflict, match="nothing was appended: run the append again"):
            append(deployment, "web.access", arrow_rows(rows_for(DAY, 3, 1)), request_id="r")
    finally:
        del deployment.catalog.versions.mark
    assert deployment.catalog.requests.get(table.id, "r") is None, "a failed commit records no id"
    assert append(deployment, "web.access", arrow_rows(rows_for(DAY, 3, 1)), request_id="r").rows == 3
    assert current(lake) == expected(rows_for(DAY, 10, 0)[1:], rows_for(DAY, 3, 1))


@SQLITE_ONLY
def test_update_sets_columns_of_matching_rows_as_one_update_version(deployment: Deployment, monkeypatch) -> None:
    table = make_table(deployment)
    day, next_day = rows_for(DAY, 20, 0), rows_for(NEXT_DAY, 10, 1)
    add_small_objects(deployment, table, DAY, [day])
    add_small_objects(deployment, table, NEXT_DAY, [next_day])
    lake = Lake(deployment)
    handle = lake.table("web.access")

    dry = handle.update({"action": "upper(action)"}, where="user_id < 5", dates="all", dry_run=True)
    assert dry.changed() == [5, 0] and dry.table_version is None and handle.version == 0

    report = handle.update(
        {"action": "upper(action)"}, where="user_id < 5", dates=[DAY, NEXT_DAY], request_id="u1", now=tokyo(NEXT_DAY, 4)
    )
    assert report.changed() == [5, 0] and report.table_version == 1
    assert [(p.partition_date, p.version.commit_op if p.version else None) for p in report] == [
        (DAY, "update"),
        (NEXT_DAY, None),
    ], "a partition no row of which matched is not rewritten"
    want = Counter((r["user_id"], r["action"].upper() if r["user_id"] < 5 else r["action"]) for r in day) + expected(
        next_day
    )
    assert current(lake) == want
    retried = handle.update({"action": "upper(action)"}, where="user_id < 5", dates="all", request_id="u1")
    assert retried.applied_before is not None and retried.applied_before.table_version == 1 and len(retried) == 0
    assert handle.version == 1

    # A literal value (not SQL text), every row of a date.
    handle.update({"user_id": 7}, dates=NEXT_DAY)
    assert current(lake) == want - expected(next_day) + Counter((7, r["action"]) for r in next_day)

    with pytest.raises(SiltError, match="nope is not a column of the table"):
        handle.update({"nope": 1}, dates=DAY)
    with pytest.raises(SiltError, match="refuses no_such_function"):
        handle.update({"action": "no_such_function(action)"}, dates=DAY)
    with pytest.raises(SiltError, match="cannot update web.access: .*nope"):
        handle.update({"action": "nope"}, dates=DAY)
    with pytest.raises(SiltError, match="has no partition 2026-11-30; nothing was updated"):
        handle.update({"action": "'x'"}, dates=["2026-11-30"])
    with pytest.raises(SiltError, match="give the partitions"):
        handle.update({"action": "'x'"}, dates=[])  # none given is every partition where `where` may match
    with pytest.raises(SiltError, match="request id 'u1' was used by a update"):
        handle.delete("true", dates=DAY, request_id="u1")

    silt = silt_in_process(deployment, monkeypatch)
    shown = json.loads(
        silt(
            "update",
            "web.access",
            "--set",
            "action='seen'",
            "--where",
            "user_id = 1",
            "--date",
            "2026-11-20",
            "--request-id",
            "u2",
            "--json",
        )
    )
    assert shown["request_id"] == "u2" and [p["rows_changed"] for p in shown["partitions"]] == [1]
    again = json.loads(
        silt(
            "update",
            "web.access",
            "--set",
            "action='seen'",
            "--where",
            "user_id = 1",
            "--date",
            "2026-11-20",
            "--request-id",
            "u2",
            "--json",
        )
    )
    assert again["applied_before"]["table_version"] == shown["table_version"]
    assert "would be set" in silt("update", "web.access", "--set", "action='x'", "--date", "2026-11-21", "--dry-run")
    assert "--set" in silt("update", "web.access", "--set", "action", "--all-dates", code=2)


@SQLITE_ONLY
def test_a_keyed_tables_primary_key_is_not_updated(deployment: Deployment) -> None:
    make_table(deployment, **KEYED)
    lake = Lake(deployment)
    lake.table("web.access").upsert(upsert_rows([1, 2], "a"))
    with pytest.raises(SiltError, match="user_id belongs to its primary key"):
        lake.table("web.access").update({"user_id": 3}, dates=DAY)


def keyed_actions(lake: Lake) -> dict[int, str]:
    table = lake.table("web.access").to_arrow(columns=["user_id", "action"])
    return dict(zip(table.column("user_id").to_pylist(), table.column("action").to_pylist(), strict=True))


@SQLITE_ONLY
def test_a_stale_retried_upsert_no_longer_rolls_a_key_back(deployment: Deployment) -> None:
    make_table(deployment, **KEYED)
    lake = Lake(deployment)
    table = lake.table("web.access")
    first = table.upsert(upsert_rows([1], "old"), request_id="req-old")
    table.upsert(upsert_rows([1], "new"), request_id="req-new")
    # The first request's client never saw its answer and sends it again, after the newer one.
    retried = table.upsert(upsert_rows([1], "old"), request_id="req-old")
    assert retried.partitions == () and retried.applied_before is not None
    assert retried.applied_before.table_version == first.partitions[0].version.table_version
    assert keyed_actions(lake) == {1: "new"}, "the key keeps the newer value"
    # Two attempts of one request racing: the one that commits second changes nothing.
    racing = prepare_upsert(deployment, "web.access", upsert_rows([2], "race"))
    racing.request = WriteRequest(table.record.id, "req-race", "upsert")
    assert table.upsert(upsert_rows([2], "race"), request_id="req-race").applied_before is None
    outcome = racing.commit()
    assert outcome.partitions == () and outcome.applied_before is not None
    assert keyed_actions(lake) == {1: "new", 2: "race"}


@SQLITE_ONLY
def test_delete_and_upsert_commands_take_request_ids_json_and_dry_run(
    deployment: Deployment, monkeypatch, tmp_path
) -> None:
    make_table(deployment, **KEYED)
    lake = Lake(deployment)
    lake.table("web.access").upsert(upsert_rows([1, 2, 3], "a"))
    silt = silt_in_process(deployment, monkeypatch)

    dry = json.loads(
        silt("delete", "web.access", "--where", "user_id = 1", "--date", "2026-11-20", "--dry-run", "--json")
    )
    assert (
        dry["dry_run"]
        and [p["rows_changed"] for p in dry["partitions"]] == [1]
        and lake.table("web.access").version == 1
    )
    done = json.loads(
        silt("delete", "web.access", "--where", "user_id = 1", "--date", "2026-11-20", "--request-id", "d1", "--json")
    )
    assert done["table_version"] == 2 and done["applied_before"] is None
    assert "was applied already (delete" in silt(
        "delete", "web.access", "--where", "user_id = 1", "--date", "2026-11-20", "--request-id", "d1"
    )
    assert keyed_actions(lake) == {2: "a", 3: "a"}

    rows = tmp_path / "rows.jsonl"
    when = f"{late(DAY):%Y-%m-%dT%H:%M:%SZ}"
    rows.write_text("".join(json.dumps({"utc_event_time": when, "user_id": u, "action": "b"}) + "\n" for u in (2, 4)))
    planned = json.loads(silt("upsert", "web.access", str(rows), "--dry-run", "--json"))
    assert planned["dry_run"] and planned["partitions"] == [
        {"dt": "2026-11-20", "rows": 2, "deleted_keys": 0, "version": None, "delayed": None}
    ]
    assert keyed_actions(lake) == {2: "a", 3: "a"}
    upserted = json.loads(silt("upsert", "web.access", str(rows), "--request-id", "up1", "--json"))
    assert upserted["partitions"][0]["rows"] == 2 and upserted["applied_before"] is None
    assert "was applied already (upsert" in silt("upsert", "web.access", str(rows), "--request-id", "up1")
    assert keyed_actions(lake) == {2: "b", 3: "a", 4: "b"}


def test_reap_forgets_request_ids_past_their_retention(plain_deployment: Deployment) -> None:
    deployment = plain_deployment
    table = Lake(deployment).table("web.access")
    table.append(arrow_rows(rows_for(DAY, 2, 0)), request_id="old")
    assert deployment.config.reap.request_id_retention == 7 * 86400, "documented default"
    report = reap_once(deployment, now=utcnow() + dt.timedelta(days=6))
    assert report.request_ids == 0 and deployment.catalog.requests.get(table.record.id, "old") is not None
    report = reap_once(deployment, now=utcnow() + dt.timedelta(days=8))
    assert report.request_ids == 1 and deployment.catalog.requests.get(table.record.id, "old") is None
    assert table.append(arrow_rows(rows_for(DAY, 2, 0)), request_id="old").rows == 2, (
        "past the window, an id is applied again"
    )
    assert pc.sum(table.to_arrow(columns=["user_id"]).column("user_id")).as_py() == 2 * sum(
        r["user_id"] for r in rows_for(DAY, 2, 0)
    )
