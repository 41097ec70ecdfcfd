"""Updates (delete where, overwrite) and the conflict matrix between concurrent writers.

Every conflict test interleaves two real writers' read and commit steps deterministically: the first
writer reads (and writes its objects), the second commits, then the first commits.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter

import pytest

from siltlake.catalog import UpdateConflict
from siltlake.deployment import Deployment
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.read import table as read_table
from siltlake.storage.manifests import write_manifests
from siltlake.stream import Progress, stream_once
from siltlake.write.update import delete_rows, overwrite_partition, prepare_delete, prepare_overwrite

from .merge_helpers import add_small_objects, rows_for, silt_in_process
from .test_merge import DAY, make_table, only_partition
from .test_publish import manifest_rows, tokyo
from .test_stream import jsonl_gz, stage

pytestmark = pytest.mark.spark
NEXT_DAY = DAY + dt.timedelta(days=1)


def expected_rows(batches: list[tuple[int, int]], drop=lambda row: False) -> Counter:
    """(user_id, action) of rows_for(DAY, count, seed) batches, without the dropped ones."""
    rows = Counter()
    for seed, count in batches:
        rows.update((r["user_id"], r["action"]) for r in rows_for(DAY, count, seed) if not drop(r))
    return rows


def visible(spark, deployment: Deployment, **as_of: object) -> Counter:
    frame = read_table(spark, "web.access", deployment, **as_of)
    return Counter((r.user_id, r.action) for r in frame.select("user_id", "action").collect())


def switched_partition(deployment: Deployment) -> list[int]:
    """A day of 3 small objects, merged, closed and switched to its merged version."""
    table = make_table(deployment)
    ids = add_small_objects(deployment, table, DAY, [rows_for(DAY, 40, s) for s in range(3)])
    merge_once(deployment)
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))
    assert publish_once(deployment, now=tokyo(NEXT_DAY, 2)).merged_versions, "switched and published"
    return ids


def test_a_delete_on_a_live_day_is_one_version_and_later_appends_merges_and_the_switch_keep_it(
    deployment: Deployment, spark
) -> None:
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 40, s) for s in range(3)])
    publish_once(deployment, now=tokyo(DAY, 12))
    merge_once(deployment)  # merged ranges exist before the update: it replaces them

    # Stamped on the test's clock: a version time cannot go back to tokyo(DAY, 13) after the real clock's.
    report = delete_rows(deployment, "web.access", DAY, "action = 'a1'", now=tokyo(DAY, 12))
    without_a1 = expected_rows([(0, 40), (1, 40), (2, 40)], drop=lambda r: r["action"] == "a1")
    assert report.rows_before == 120 and report.rows_after == sum(without_a1.values()) < 120
    assert (report.version.version, report.version.commit_op) == (2, "update")
    assert visible(spark, deployment) == without_a1
    assert manifest_rows(deployment, report.version.manifest_key) == without_a1, "other engines read the manifest"
    again = delete_rows(deployment, "web.access", DAY, "action = 'a1'", now=tokyo(DAY, 12))
    assert again.version is None and again.rows_after == again.rows_before, "nothing matched: no new version"

    # Appended after the update: readers see the update plus the new live object at once.
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 40, 3)])
    everything = without_a1 + expected_rows([(3, 40)])
    assert visible(spark, deployment) == everything
    (appended,) = publish_once(deployment, now=tokyo(DAY, 13)).live_versions
    assert appended.manifest_key == report.version.manifest_key and appended.row_count == sum(everything.values())
    assert visible(spark, deployment, as_of_version=1) == expected_rows([(0, 40), (1, 40), (2, 40)])
    assert visible(spark, deployment, as_of_version=2) == without_a1

    # Merges extend the update's object; the day then switches to it as usual.
    merge_once(deployment)
    partition_id = only_partition(deployment, table).id
    (merged_range,) = [r for r in deployment.catalog.merge_queue.ranges(partition_id) if r.lower is not None]
    assert (merged_range.lower, merged_range.object_key) == (0, None), "extended: named by its bounds again"
    assert merged_range.row_count == sum(everything.values())
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))
    (compaction,) = publish_once(deployment, now=tokyo(NEXT_DAY, 2)).merged_versions
    assert manifest_rows(deployment, compaction.manifest_key) == everything
    assert visible(spark, deployment) == everything
    ops = [v.commit_op for v in deployment.catalog.versions.of_partitions([only_partition(deployment, table).id])]
    assert ops == ["append", "update", "append", "compaction"]


def test_a_delete_on_a_switched_day_includes_its_merged_but_unpublished_delayed_objects(
    deployment: Deployment, spark
) -> None:
    switched_partition(deployment)
    table = deployment.catalog.tables.get("web.access")
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, 7)])  # delayed: the day is closed
    merge_once(deployment)  # merged, not yet published: invisible
    assert visible(spark, deployment) == expected_rows([(0, 40), (1, 40), (2, 40)])

    report = delete_rows(deployment, "web.access", DAY, "user_id % 2 = 0")
    odd = expected_rows([(0, 40), (1, 40), (2, 40), (7, 10)], drop=lambda r: r["user_id"] % 2 == 0)
    assert report.rows_before == 130 and visible(spark, deployment) == odd
    partition = only_partition(deployment, table)
    assert partition.current_manifest_version == partition.desired_manifest_version == report.version.covered_upper
    assert publish_once(deployment, now=tokyo(NEXT_DAY, 3)).merged_versions == [], "nothing left to publish"


def test_overwrite_replaces_a_partition_and_refuses_rows_that_do_not_fit(deployment: Deployment, spark) -> None:
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 20, 0)])
    replacement = rows_for(DAY, 5, 9)
    frame = spark.createDataFrame(
        [(r["utc_event_time"], r["user_id"]) for r in replacement], "utc_event_time timestamp, user_id bigint"
    )
    report = overwrite_partition(deployment, "web.access", DAY, frame)
    assert (report.rows_before, report.rows_after) == (20, 5)
    assert visible(spark, deployment) == Counter((r["user_id"], None) for r in replacement), "action reads as null"

    other_day = spark.createDataFrame([(tokyo(NEXT_DAY, 3), 1)], "utc_event_time timestamp, user_id bigint")
    with pytest.raises(Exception, match=r"1 of the new rows do not belong to dt=2026-11-20 in Asia/Tokyo"):
        overwrite_partition(deployment, "web.access", DAY, other_day)
    with pytest.raises(Exception, match="columns not in the table: colour"):
        overwrite_partition(deployment, "web.access", DAY, frame.withColumnRenamed("user_id", "colour"))
    with pytest.raises(Exception, match="required columns missing: utc_event_time"):
        overwrite_partition(deployment, "web.access", DAY, frame.drop("utc_event_time"))
    with pytest.raises(Exception, match="no partition 2026-11-21"):
        overwrite_partition(deployment, "web.access", NEXT_DAY, frame)
    with pytest.raises(Exception, match="cannot use --where 'no_such_column = 1' on web.access"):
        delete_rows(deployment, "web.access", DAY, "no_such_column = 1")
    assert visible(spark, deployment) == Counter((r["user_id"], None) for r in replacement), "refusals change nothing"
    assert len(deployment.catalog.versions.of_partitions([only_partition(deployment, table).id])) == 1


# --- the conflict matrix (docs/design.md) -------------------------------------------------------------


def test_update_vs_update_the_later_commit_fails_and_a_retry_applies_both(deployment: Deployment, spark) -> None:
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 30, s) for s in range(2)])
    first = prepare_delete(deployment, "web.access", DAY, "action = 'a1'")
    second = prepare_delete(deployment, "web.access", DAY, "action = 'a2'")
    second.commit()
    with pytest.raises(UpdateConflict, match=r"version 1 \(update\) was published after version 0.*run the update"):
        first.commit()
    delete_rows(deployment, "web.access", DAY, "action = 'a1'")
    assert visible(spark, deployment) == expected_rows([(0, 30), (1, 30)], drop=lambda r: r["action"] in ("a1", "a2"))


def test_two_updates_committing_at_once_one_wins(deployment: Deployment, spark) -> None:
    """Both updates read the same version, then commit at the same moment from two threads."""
    import threading

    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 30, s) for s in range(2)])
    prepared = [prepare_delete(deployment, "web.access", DAY, f"action = '{a}'") for a in ("a1", "a2")]
    start = threading.Barrier(2)
    outcomes: list[object] = [None, None]

    def commit(index: int) -> None:
        start.wait()
        try:
            outcomes[index] = prepared[index].commit()
        except UpdateConflict as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    conflicts = [o for o in outcomes if isinstance(o, UpdateConflict)]
    assert len(conflicts) == 1 and "run the update again" in str(conflicts[0])
    winner = "a1" if conflicts[0] is outcomes[1] else "a2"
    assert visible(spark, deployment) == expected_rows([(0, 30), (1, 30)], drop=lambda r: r["action"] == winner)


def test_append_then_update_the_update_fails(deployment: Deployment, spark) -> None:
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 30, 0)])
    update = prepare_delete(deployment, "web.access", DAY, "action = 'a1'")
    (late,) = add_small_objects(deployment, table, DAY, [rows_for(DAY, 30, 1)])  # a stream commit meanwhile
    with pytest.raises(UpdateConflict, match=f"small object {late} was appended after the update read it"):
        update.commit()
    assert visible(spark, deployment) == expected_rows([(0, 30), (1, 30)]), "the failed update changed nothing"
    delete_rows(deployment, "web.access", DAY, "action = 'a1'")
    assert visible(spark, deployment) == expected_rows([(0, 30), (1, 30)], drop=lambda r: r["action"] == "a1")


def test_update_then_append_the_append_fails_and_streams_again_next_run(deployment: Deployment, spark) -> None:
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 30, 0)])
    incoming = rows_for(DAY, 12, 5)
    stage(
        deployment,
        "fluentd01.web.access/2026/11/20/batch.jsonl.gz",
        jsonl_gz(
            [
                {"time": r["utc_event_time"].isoformat(), "user_id": r["user_id"], "action": r["action"]}
                for r in incoming
            ]
        ),
    )

    class UpdateWhileDecoding(Progress):
        """Commits an update after the stream's wave started and before it commits."""

        updates: list = []

        def advance(self, count: int) -> None:
            if not self.updates:
                self.updates.append(delete_rows(deployment, "web.access", DAY, "action = 'a1'"))

    first = stream_once(deployment, UpdateWhileDecoding())
    (update,) = UpdateWhileDecoding.updates
    ((uri, reason),) = first.failed
    assert uri.endswith("batch.jsonl.gz") and first.processed == 0
    assert f"web.access dt=2026-11-20 was updated (version {update.version.version})" in reason
    assert "streamed again on the next run" in reason
    second = stream_once(deployment)
    assert second.processed == 1 and not second.failed
    assert visible(spark, deployment) == expected_rows(
        [(0, 30), (5, 12)], drop=lambda r: r["action"] == "a1"
    ) + Counter((r["user_id"], r["action"]) for r in incoming if r["action"] == "a1")


def test_update_vs_compaction_the_update_wins_whichever_commits_first(deployment: Deployment, spark) -> None:
    switched_partition(deployment)
    table = deployment.catalog.tables.get("web.access")
    layout = table.layout(deployment.instance_key)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, 7)])  # delayed
    merge_once(deployment)

    # Compaction commits first, while the update is running: the update still wins.
    update = prepare_delete(deployment, "web.access", DAY, "action = 'a0'")
    (published,) = publish_once(deployment, now=tokyo(NEXT_DAY, 3)).merged_versions
    assert update.commit().version.version == published.version + 1
    without_a0 = expected_rows([(0, 40), (1, 40), (2, 40), (7, 10)], drop=lambda r: r["action"] == "a0")
    assert visible(spark, deployment) == without_a0

    # The update commits first, while a compaction is being published: the compaction is discarded.
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, 8)])
    merge_once(deployment)
    (compaction,) = deployment.catalog.versions.merged_to_publish()
    json_key, _ = write_manifests(
        deployment.lake,
        layout,
        DAY,
        compaction.desired,
        [(r.key(layout, DAY), r.content_length) for r in compaction.ranges],
    )
    delete_rows(deployment, "web.access", DAY, "action = 'a3'")
    assert deployment.catalog.versions.publish_merged(compaction, json_key, tokyo(NEXT_DAY, 4)) is None
    assert visible(spark, deployment) == expected_rows(
        [(0, 40), (1, 40), (2, 40), (7, 10)], drop=lambda r: r["action"] in ("a0", "a3")
    ) + expected_rows([(8, 10)], drop=lambda r: r["action"] == "a3"), "seed 8 came after the first delete"
    ops = [v.commit_op for v in deployment.catalog.versions.of_partitions([only_partition(deployment, table).id])]
    assert ops == ["append", "compaction", "compaction", "update", "update"]


def test_append_vs_compaction_and_append_vs_append_never_conflict(deployment: Deployment, spark) -> None:
    switched_partition(deployment)
    table = deployment.catalog.tables.get("web.access")
    layout = table.layout(deployment.instance_key)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, 7)])
    merge_once(deployment)
    (compaction,) = deployment.catalog.versions.merged_to_publish()
    json_key, _ = write_manifests(
        deployment.lake,
        layout,
        DAY,
        compaction.desired,
        [(r.key(layout, DAY), r.content_length) for r in compaction.ranges],
    )
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, 8)])  # an append between read and commit
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, 9)])  # and another: appends chain
    assert deployment.catalog.versions.publish_merged(compaction, json_key, tokyo(NEXT_DAY, 3)) is not None
    assert visible(spark, deployment) == expected_rows([(0, 40), (1, 40), (2, 40), (7, 10)])
    merge_once(deployment)
    publish_once(deployment, now=tokyo(NEXT_DAY, 4))
    assert visible(spark, deployment) == expected_rows([(0, 40), (1, 40), (2, 40), (7, 10), (8, 10), (9, 10)])


def test_compaction_vs_compaction_the_later_is_discarded(deployment: Deployment, spark) -> None:
    """Two publishers read the same merged state and write its manifests; the first commits the compaction
    version, the second's compare-and-swap finds current already moved and publishes nothing."""
    switched_partition(deployment)
    table = deployment.catalog.tables.get("web.access")
    layout = table.layout(deployment.instance_key)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, 7)])
    merge_once(deployment)
    prepared = []
    for _ in range(2):
        (compaction,) = deployment.catalog.versions.merged_to_publish()
        json_key, _ = write_manifests(
            deployment.lake,
            layout,
            DAY,
            compaction.desired,
            [(r.key(layout, DAY), r.content_length) for r in compaction.ranges],
        )
        prepared.append((compaction, json_key))
    first = deployment.catalog.versions.publish_merged(*prepared[0], tokyo(NEXT_DAY, 3))
    assert first is not None and first.commit_op == "compaction"
    assert deployment.catalog.versions.publish_merged(*prepared[1], tokyo(NEXT_DAY, 3)) is None
    ops = [v.commit_op for v in deployment.catalog.versions.of_partitions([only_partition(deployment, table).id])]
    assert ops == ["append", "compaction", "compaction"], "one version for the two publishers"
    assert visible(spark, deployment) == expected_rows([(0, 40), (1, 40), (2, 40), (7, 10)])


def test_a_merge_job_racing_an_update_is_retried_and_merges_only_what_came_after(deployment: Deployment, spark) -> None:
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 20, s) for s in range(2)])
    update = prepare_overwrite(
        deployment,
        "web.access",
        DAY,
        spark.createDataFrame(
            [(r["utc_event_time"], r["user_id"], "x") for r in rows_for(DAY, 3, 4)],
            "utc_event_time timestamp, user_id bigint, action string",
        ),
        now=tokyo(DAY, 12),
    )
    merge_once(deployment)  # merges the two objects the update replaces
    update.commit()
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 5, 6)])
    merge_once(deployment)
    ranges = [
        r for r in deployment.catalog.merge_queue.ranges(only_partition(deployment, table).id) if r.lower is not None
    ]
    assert [(r.lower, r.row_count) for r in ranges] == [(0, 8)], "the update's object, extended by the new object"
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))
    publish_once(deployment, now=tokyo(NEXT_DAY, 2))
    assert visible(spark, deployment) == Counter((r["user_id"], "x") for r in rows_for(DAY, 3, 4)) + expected_rows(
        [(6, 5)]
    )


def test_delete_command(deployment: Deployment, monkeypatch) -> None:
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, 0)])
    silt = silt_in_process(deployment, monkeypatch)

    output = silt(
        "delete", "web.access", "--where", "user_id = 3", "--date", "2026-11-20", "--now", "2026-11-20T05:00:00Z"
    )
    assert "2026-11-20" in output and " 1 " in output
    assert "unchanged" in silt("delete", "web.access", "--where", "user_id = 3", "--all-dates")
    # Neither option: the days --where's conditions on dt allow (Table.write_partitions); both: refused.
    assert "--date YYYY-MM-DD (repeatable) or --all-dates, not both" in silt(
        "delete", "web.access", "--where", "true", "--all-dates", "--date", "2026-11-20", code=2
    )
    assert "unchanged" in silt("delete", "web.access", "--where", "dt = '2026-11-20' AND user_id = 3")
    assert "cannot use --where" in silt("delete", "web.access", "--where", "nope(", "--date", "2026-11-20", code=2)
    history = json.loads(silt("history", "web.access", "--format", "json"))
    assert [(v["op"], v["rows"], v["created_at"]) for v in history] == [("update", 9, "2026-11-20 05:00:00")]


def update_objects(deployment: Deployment) -> list[str]:
    """Keys of the update objects and update manifests under the lake."""
    return sorted(
        info.key
        for info in deployment.lake.list(f"{deployment.instance_key}/")
        if "update-" in info.key.rsplit("/", 2)[-2] + info.key.rsplit("/", 1)[-1]
    )


def test_a_delete_over_several_dates_is_one_table_version_all_or_nothing(
    deployment: Deployment, spark, monkeypatch
) -> None:
    from siltlake.lake import Lake
    from siltlake.write.update import prepare_deletes

    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 40, 0)])
    add_small_objects(deployment, table, NEXT_DAY, [rows_for(NEXT_DAY, 40, 1)])
    publish_once(deployment, now=tokyo(NEXT_DAY, 12))
    access = Lake(deployment).table("web.access")
    before = access.to_arrow().num_rows
    silt = silt_in_process(deployment, monkeypatch)

    # A missing date is refused, naming it, before any partition is rewritten.
    refused = silt(
        "delete", "web.access", "--where", "user_id % 2 = 0", "--date", str(DAY), "--date", "2026-11-25", code=2
    )
    assert "2026-11-25" in refused and str(DAY) not in refused.split("2026-11-25")[0].split("no partition")[-1]
    assert access.to_arrow().num_rows == before and update_objects(deployment) == []

    # A conflict on one partition (an append committed meanwhile) fails all of it; its objects are deleted.
    prepared = prepare_deletes(deployment, "web.access", [DAY, NEXT_DAY], "user_id % 2 = 0")
    assert update_objects(deployment), "both partitions' objects are written"
    add_small_objects(deployment, table, NEXT_DAY, [rows_for(NEXT_DAY, 5, 2)])
    with pytest.raises(UpdateConflict, match=str(NEXT_DAY)):
        prepared.commit()
    assert update_objects(deployment) == [] and access.version == 1
    assert access.to_arrow().num_rows == before + 5

    # Several dates: one table version holding a version of each partition.
    output = silt("delete", "web.access", "--where", "user_id % 2 = 0", "--date", str(DAY), "--date", str(NEXT_DAY))
    assert str(DAY) in output and str(NEXT_DAY) in output
    assert access.version == 2 and access.to_arrow().num_rows == 20 + 20 + 2, "odd user ids"
    silt("delete", "web.access", "--where", "user_id % 3 = 1", "--all-dates")
    assert access.version == 3
    versions = deployment.catalog.versions.of_partitions([p.id for p in deployment.catalog.partitions.list(table.id)])
    assert sorted((v.table_version, v.commit_op) for v in versions if v.commit_op == "update") == [
        (2, "update"),
        (2, "update"),
        (3, "update"),
        (3, "update"),
    ]
