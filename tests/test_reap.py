"""Reap (docs/design.md): what it deletes for each reason, what it never deletes, dry runs, interrupted runs,
and enemy reaping between deployments that share a storage root."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from siltlake.catalog import schema as s
from siltlake.clock import utcnow
from siltlake.config import Config
from siltlake.deployment import Deployment, InstanceKeyRefused
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.read import table as read_table
from siltlake.reap import ReapRefused, reap_once
from siltlake.storage.keys import symlink_key
from siltlake.write.update import delete_rows, prepare_delete

from .merge_helpers import add_small_objects, rows_for, silt_in_process
from .test_merge import DAY, make_table, only_partition
from .test_publish import tokyo

NEXT_DAY = DAY + dt.timedelta(days=1)
WEEK = dt.timedelta(days=8)


def files(deployment: Deployment, key: str | None = None) -> set[str]:
    return {info.key for info in deployment.lake.list((key or deployment.instance_key) + "/")}


def age(deployment: Deployment, keys: set[str] | list[str], days: float = 5) -> None:
    """Make objects look written `days` ago (an orphan's age is its modification time)."""
    when = (utcnow() - dt.timedelta(days=days)).replace(tzinfo=dt.UTC).timestamp()
    for key in keys:
        os.utime(deployment.lake.path(key), (when, when))


def visible(spark, deployment: Deployment, name: str = "web.access", **as_of: object) -> Counter:
    frame = read_table(spark, name, deployment, **as_of)
    return Counter((r.user_id, r.action) for r in frame.select("user_id", "action").collect())


def expected(*batches: tuple[int, int], date: dt.date = DAY) -> Counter:
    rows: Counter = Counter()
    for seed, count in batches:
        rows.update((r["user_id"], r["action"]) for r in rows_for(date, count, seed))
    return rows


def counts(report) -> dict[str, tuple[int, int, int]]:  # a ReapReport
    return {name: (t.objects, t.bytes, t.rows) for name, t in report.reasons.items()}


def switched_day(deployment: Deployment):  # (table, small object ids)
    """A day with two live versions, merged in two runs (the first range object is superseded by the
    extension), then closed, switched and published as a compaction version."""
    table = make_table(deployment)
    ids = add_small_objects(deployment, table, DAY, [rows_for(DAY, 30, seed) for seed in range(3)])
    publish_once(deployment, now=tokyo(DAY, 12))
    merge_once(deployment)
    ids += add_small_objects(deployment, table, DAY, [rows_for(DAY, 30, seed) for seed in range(3, 5)])
    publish_once(deployment, now=tokyo(DAY, 13))
    merge_once(deployment)
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))
    assert publish_once(deployment, now=tokyo(NEXT_DAY, 2)).merged_versions
    return table, ids


def test_a_switched_day_keeps_what_retained_versions_show_and_loses_the_rest_after_retention(
    deployment: Deployment, spark
) -> None:
    table, ids = switched_day(deployment)
    layout = table.layout(deployment.instance_key)
    first_range = layout.merged_object(DAY, 0, ids[2])
    everything = expected(*((seed, 30) for seed in range(5)))
    before = files(deployment)
    assert first_range in before

    # Right after the switch every version is retained: v1 and v2 show the small objects live.
    first_size = deployment.lake.info(first_range).size
    report = reap_once(deployment, now=tokyo(NEXT_DAY, 3))
    assert counts(report)["superseded"] == (1, first_size, 0) and counts(report)["covered"] == (0, 0, 0)
    assert files(deployment) == before - {first_range}, "only the extended range's old object goes"
    assert visible(spark, deployment, as_of_version=1) == expected(*((seed, 30) for seed in range(3)))
    assert visible(spark, deployment, as_of=tokyo(DAY, 13)) == everything

    # A week later v1 and v2 expire: the small objects are only in the current manifest now.
    small_bytes = sum(o.content_length for o in deployment.catalog.partitions.small_objects(table.id))
    live_lists = [
        v.file_list_key for v in deployment.catalog.versions.of_partitions([only_partition(deployment, table).id])[:2]
    ]
    list_keys = {k for key in live_lists for k in (key, symlink_key(key))}
    assert len(list_keys) == 4 and list_keys <= files(deployment), "each live version has its file list, both forms"
    list_bytes = sum(deployment.lake.info(k).size for k in list_keys)
    dry = reap_once(deployment, now=tokyo(NEXT_DAY, 3) + WEEK, dry_run=True)
    assert files(deployment) == before - {first_range}, "a dry run deletes nothing"
    real = reap_once(deployment, now=tokyo(NEXT_DAY, 3) + WEEK)
    assert counts(dry) == counts(real)
    small_keys = {layout.small_object(DAY, i, False) for i in ids}
    assert counts(real)["covered"] == (5, small_bytes, 5)
    assert counts(real)["expired"] == (4, list_bytes, 2), "two live versions: their file lists go with them"
    assert not (list_keys & files(deployment))
    assert not (small_keys & files(deployment))
    assert deployment.catalog.partitions.small_objects(table.id) == []
    versions = deployment.catalog.versions.of_partitions([only_partition(deployment, table).id])
    assert [(v.version, v.commit_op) for v in versions] == [(3, "compaction")]
    assert visible(spark, deployment) == everything
    assert visible(spark, deployment, as_of_version=3) == everything
    again = reap_once(deployment, now=tokyo(NEXT_DAY, 3) + WEEK)
    assert again.objects == 0 and all(t.rows == 0 for t in again.reasons.values()), "nothing left to do"


def test_an_update_leaves_the_objects_it_replaced_until_the_versions_that_list_them_expire(
    deployment: Deployment, spark
) -> None:
    table, ids = switched_day(deployment)
    layout = table.layout(deployment.instance_key)
    merged = layout.merged_object(DAY, 0, ids[-1])
    update = delete_rows(deployment, "web.access", DAY, "action = 'a1'", now=tokyo(NEXT_DAY, 4))
    kept = Counter({row: n for row, n in expected(*((seed, 30) for seed in range(5))).items() if row[1] != "a1"})
    # Later objects extend the update's object into a range named by its bounds again.
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, 9)])  # delayed: the day is closed
    merge_once(deployment)
    publish_once(deployment, now=tokyo(NEXT_DAY, 5))
    kept += expected((9, 10))
    assert visible(spark, deployment) == kept

    first = reap_once(deployment, now=tokyo(NEXT_DAY, 6))
    assert counts(first)["covered"][0] == 1, "the delayed object is merged, and never shown live"
    assert {merged, update.object_key} <= files(deployment), "listed by retained versions 3 and 4"
    assert visible(spark, deployment, as_of_version=3) == expected(*((seed, 30) for seed in range(5)))
    assert visible(spark, deployment, as_of_version=4) == kept - expected((9, 10))

    report = reap_once(deployment, now=tokyo(NEXT_DAY, 6) + WEEK)
    assert not ({merged, update.object_key} & files(deployment))
    assert counts(report)["superseded"][0] == 2 and counts(report)["expired"][2] == 4
    assert counts(report)["expired"][0] == 8, (
        "the manifests of versions 1 to 4 (two live versions' file lists, v3's and v4's), JSON and symlink forms"
    )
    (newest,) = deployment.catalog.versions.of_partitions([only_partition(deployment, table).id])
    assert newest.version == 5 and visible(spark, deployment) == kept
    assert counts(report)["covered"][0] == 5, "every small object is inside the current manifest now"


def test_orphans_of_killed_writers_go_after_the_grace_period_unless_a_live_merge_may_commit_them(
    deployment: Deployment, spark
) -> None:
    table = make_table(deployment)
    layout = table.layout(deployment.instance_key)
    ids = add_small_objects(deployment, table, DAY, [rows_for(DAY, 20, seed) for seed in range(2)])
    merge_once(deployment)
    publish_once(deployment, now=tokyo(DAY, 12))
    data = pa.Table.from_pylist(rows_for(DAY, 5, 50), schema=table.definition.arrow_schema())

    def write(key: str) -> str:
        with deployment.lake.open_output(key) as sink:
            pq.write_table(data, sink)
        return key

    # A stream writer killed between moving its object into place and committing its row.
    no_row = write(layout.small_object(DAY, 9_999_999, False))
    fresh_no_row = write(layout.small_object(DAY, 9_999_998, False))
    # A stream run killed mid-wave: its temporary objects.
    tmp = write(layout.task_temporary("deadrun", 7, "2026-11-20.parquet"))
    # A merge worker killed after writing the next range's object; its job is running again elsewhere.
    more = add_small_objects(deployment, table, DAY, [rows_for(DAY, 20, 2)])
    interrupted = write(layout.merged_object(DAY, ids[-1], more[-1]))
    (job,) = deployment.catalog.merge_queue.claim(
        "elsewhere:1:x", limit=1, now=utcnow(), timeout=600, per_table_limit=16
    )
    # An update whose process died before its commit (one whose commit is refused deletes what it wrote).
    prepared = prepare_delete(deployment, "web.access", DAY, "action = 'a1'")
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 20, 3)])
    update_files = {
        prepared.object_key,
        prepared.manifest_key,
        prepared.manifest_key.replace("/manifest-", "/symlink-").removesuffix(".json") + "/manifest",
    }
    assert update_files <= files(deployment)
    orphans = {no_row, tmp, interrupted, *update_files}
    age(deployment, orphans)
    before = files(deployment)

    report = reap_once(deployment)
    assert report.kept_running == 1, "the running job may commit exactly this object"
    assert files(deployment) == before - (orphans - {interrupted})
    assert not Path(deployment.lake.path(f"{deployment.instance_key}/_tmp/deadrun")).exists()
    assert counts(report)["orphan"][0] == len(orphans) - 1 and fresh_no_row in files(deployment)

    # The worker went silent: once its heartbeat is older than merge.job_timeout the object is an orphan too.
    later = reap_once(deployment, now=utcnow() + dt.timedelta(seconds=deployment.config.merge.job_timeout + 60))
    assert interrupted not in files(deployment) and counts(later)["orphan"][0] == 1
    assert job.partition_id == only_partition(deployment, table).id
    assert visible(spark, deployment) == expected((0, 20), (1, 20), (2, 20), (3, 20))


def test_partitions_past_their_ttl_go_whole_with_their_catalog_rows(deployment: Deployment, spark) -> None:
    table = make_table(deployment, ttl_days=2)
    later_day = DAY + dt.timedelta(days=3)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 20, seed) for seed in range(2)])
    merge_once(deployment)
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))
    publish_once(deployment, now=tokyo(NEXT_DAY, 2))  # DAY switched: merged objects and manifests
    add_small_objects(deployment, table, later_day, [rows_for(later_day, 20, 7)])
    publish_once(deployment, now=tokyo(later_day, 10))
    old = {k for k in files(deployment) if f"/dt={DAY}/" in k}
    assert {k.split("/")[2] for k in old} == {"live", "merged", "manifests"}

    report = reap_once(deployment, now=tokyo(later_day, 12))
    assert counts(report)["ttl"][0] == len(old) and counts(report)["ttl"][2] == 1
    assert not any(f"/dt={DAY}/" in k for k in files(deployment))
    (partition,) = deployment.catalog.partitions.list(table.id)
    assert partition.partition_date == later_day
    with deployment.catalog.engine.connect() as c:
        for t in (s.small_objects, s.merge_ranges, s.partition_versions, s.merge_jobs, s.merge_job_log):
            partition_ids = set(c.execute(t.select().with_only_columns(t.c.partition_id)).scalars())
            assert partition_ids <= {partition.id}, t.name
    assert visible(spark, deployment) == expected((7, 20), date=later_day)


def test_a_dropped_table_goes_after_the_grace_period_and_frees_its_physical_name(deployment: Deployment) -> None:
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 20, seed) for seed in range(2)])
    merge_once(deployment)
    publish_once(deployment, now=tokyo(DAY, 12))
    deployment.catalog.tables.drop("web.access")
    before = files(deployment)
    prefix = table.layout(deployment.instance_key).prefix

    report = reap_once(deployment)
    assert files(deployment) == before and report.kept_young == len(before) - 1, "a writer may still finish"
    report = reap_once(deployment, now=utcnow() + dt.timedelta(days=4))
    assert counts(report)["dropped"] == (len(before) - 1, counts(report)["dropped"][1], 1)
    assert files(deployment) == {f"{deployment.instance_key}/_instance.json"}
    assert not Path(deployment.lake.path(prefix)).exists()
    assert deployment.catalog.partitions.list(table.id) == []
    again = make_table(deployment)
    assert again.physical_table_name == "access", "the physical name is free again"


def test_an_interrupted_reap_is_finished_by_the_next_one(deployment: Deployment, spark, monkeypatch) -> None:
    table, ids = switched_day(deployment)
    layout = table.layout(deployment.instance_key)

    def crash(*_args: object) -> int:
        raise RuntimeError("killed between deleting objects and deleting their rows")

    monkeypatch.setattr(deployment.catalog.reaping, "delete_small_object_rows", crash)
    with pytest.raises(RuntimeError):
        reap_once(deployment, now=tokyo(NEXT_DAY, 3) + WEEK)
    assert not any(deployment.lake.exists(layout.small_object(DAY, i, False)) for i in ids)
    assert len(deployment.catalog.partitions.small_objects(table.id)) == len(ids), "rows still there"
    monkeypatch.undo()

    report = reap_once(deployment, now=tokyo(NEXT_DAY, 3) + WEEK)
    assert counts(report)["covered"] == (0, 0, len(ids)) and counts(report)["expired"][2] == 2
    assert deployment.catalog.partitions.small_objects(table.id) == []
    assert visible(spark, deployment) == expected(*((seed, 30) for seed in range(5)))


def test_short_retention_and_grace_need_force(deployment: Deployment) -> None:
    with pytest.raises(ReapRefused, match="below one day"):
        reap_once(deployment, retention=3600)
    with pytest.raises(ReapRefused, match="below one hour"):
        reap_once(deployment, grace=60)
    assert reap_once(deployment, retention=3600, grace=0, force=True).objects == 0


def test_reap_command_prints_the_same_table_for_a_dry_run_and_a_real_run(deployment: Deployment, monkeypatch) -> None:
    switched_day(deployment)
    silt = silt_in_process(deployment, monkeypatch)
    now = (tokyo(NEXT_DAY, 3) + WEEK).isoformat() + "Z"
    dry = json.loads(silt("reap", "--dry-run", "--now", now, "--json"))
    assert dry["dry_run"] and dry["reasons"]["covered"]["objects"] == 5
    table = silt("reap", "--now", now)
    assert "small objects in the current manifest" in table and "deleted" in table and "5 small objects" in table
    real_counts = {k: v["objects"] for k, v in dry["reasons"].items()}
    assert real_counts["covered"] == 5 and real_counts["superseded"] == 1
    assert "below one day" in silt("reap", "--retention", "2h", code=2)
    assert "not a duration" in silt("reap", "--grace", "soon", code=2)
    # On the test's clock: a run on the real one would be the newest once the real date passes the test's dates.
    assert json.loads(silt("reap", "--retention", "2h", "--force", "--now", now, "--json"))["objects"] == 0
    # The run at `now` above is the newest: later runs are measured from it.
    later = [(tokyo(NEXT_DAY, 3) + WEEK + dt.timedelta(hours=h)).isoformat() + "Z" for h in (1, 2)]
    assert json.loads(silt("reap", "--full", "--now", later[0], "--json"))["full_sweep"]
    assert not json.loads(silt("reap", "--now", later[1], "--json"))["full_sweep"], "a full sweep ran just now"


# --- never another deployment's objects -------------------------------------------------------------------------


def other_deployment(
    tmp_path: Path, lake_root: str, spark, *, instance_key: str | None, catalog_path: Path, init: bool = True
) -> Deployment:
    config = Config.model_validate(
        {
            "instance_key": instance_key,
            "catalog": {"url": f"sqlite:///{catalog_path}"},
            "storage": {"root": lake_root, "staging_root": str(tmp_path / f"staging-{catalog_path.parent.name}")},
        }
    )
    other = Deployment(config)
    if init:
        other.init()
    other.use_spark(spark)
    return other


def test_two_deployments_on_one_root_never_reap_each_other_even_with_the_other_catalog_gone(
    deployment: Deployment, tmp_path: Path, spark
) -> None:
    (tmp_path / "b").mkdir()
    neighbour = other_deployment(
        tmp_path,
        deployment.config.storage.root,
        spark,
        instance_key="neighbour2",
        catalog_path=tmp_path / "b" / "catalog.db",
    )
    theirs = make_table(neighbour)
    add_small_objects(neighbour, theirs, DAY, [rows_for(DAY, 10, seed) for seed in range(3)])
    merge_once(neighbour)
    publish_once(neighbour, now=tokyo(NEXT_DAY, 1))
    publish_once(neighbour, now=tokyo(NEXT_DAY, 2))
    # Their objects, old and unreferenced by our catalog, and with their catalog unreachable.
    neighbour_files = files(neighbour, "neighbour2")
    age(neighbour, neighbour_files, days=30)
    neighbour.close()
    (tmp_path / "b" / "catalog.db").unlink()

    ours = make_table(deployment)
    (first,) = add_small_objects(deployment, ours, DAY, [rows_for(DAY, 10, 1)])
    layout = ours.layout(deployment.instance_key)
    orphan = layout.small_object(DAY, 8_888_888, False)
    shutil.copy(deployment.lake.path(layout.small_object(DAY, first, False)), deployment.lake.path(orphan))
    age(deployment, [orphan], days=30)

    report = reap_once(deployment, now=utcnow() + dt.timedelta(days=30))
    assert report.other_instances == ["neighbour2"]
    assert counts(report)["orphan"][0] == 1 and not deployment.lake.exists(orphan), "our own orphan goes"
    assert files(deployment, "neighbour2") == neighbour_files, "not one of theirs"
    with deployment.catalog.engine.connect() as c:
        registry = {r.instance_key: r.is_self for r in c.execute(s.instances.select())}
    assert registry == {deployment.instance_key: True, "neighbour2": False}

    # Configured with their key, our catalog refuses to reap under it.
    pointed = other_deployment(
        tmp_path,
        deployment.config.storage.root,
        spark,
        instance_key="neighbour2",
        catalog_path=tmp_path / "unused" / "catalog.db",
        init=False,
    )
    pointed.catalog = deployment.catalog
    with pytest.raises(ReapRefused, match="not this catalog's key"):
        reap_once(pointed, now=utcnow() + dt.timedelta(days=30))
    assert files(deployment, "neighbour2") == neighbour_files


def test_a_copy_of_another_deployments_catalog_refuses_to_reap_its_objects(tmp_path: Path, spark) -> None:
    lake = str(tmp_path / "lake")
    (tmp_path / "a").mkdir()
    original = other_deployment(tmp_path, lake, spark, instance_key=None, catalog_path=tmp_path / "a" / "catalog.db")
    table = make_table(original)
    add_small_objects(original, table, DAY, [rows_for(DAY, 10, seed) for seed in range(3)])
    merge_once(original)
    publish_once(original, now=tokyo(NEXT_DAY, 1))
    publish_once(original, now=tokyo(NEXT_DAY, 2))
    original.catalog.close()  # checkpoints the WAL: the file is the whole catalog
    (tmp_path / "c").mkdir()
    shutil.copy(tmp_path / "a" / "catalog.db", tmp_path / "c" / "catalog.db")
    # The original carries on: objects the copy knows nothing about, superseded ranges, expired versions.
    add_small_objects(original, table, DAY, [rows_for(DAY, 10, seed) for seed in range(3, 5)])
    merge_once(original)
    publish_once(original, now=tokyo(NEXT_DAY, 3))
    key = original.instance_key
    before = files(original, key)
    age(original, before, days=30)

    copy = other_deployment(
        tmp_path, lake, spark, instance_key=None, catalog_path=tmp_path / "c" / "catalog.db", init=False
    )
    assert copy.instance_key == key, "resolved from the copied catalog"
    for claim in (False, True):  # the original is alive: the copy may not take its key
        with pytest.raises(InstanceKeyRefused, match="copy" if not claim else "still registers the key"):
            copy.init(claim=claim)
    for dry_run in (True, False):
        with pytest.raises(ReapRefused, match="belongs to another deployment's catalog.*copy"):
            reap_once(copy, now=utcnow() + dt.timedelta(days=30), dry_run=dry_run)
    assert files(original, key) == before
    copy.close()

    # The original reaps normally; a catalog moved (not copied) claims the key back with `silt init --claim`.
    report = reap_once(original, now=utcnow() + dt.timedelta(days=30))
    assert counts(report)["covered"][0] == 5 and counts(report)["superseded"][0] == 1
    original.close()
    (tmp_path / "moved").mkdir()
    shutil.move(tmp_path / "a" / "catalog.db", tmp_path / "moved" / "catalog.db")
    moved = other_deployment(
        tmp_path, lake, spark, instance_key=None, catalog_path=tmp_path / "moved" / "catalog.db", init=False
    )
    with pytest.raises(ReapRefused, match="silt init --claim"):
        reap_once(moved)
    moved.init(claim=True)
    assert reap_once(moved).objects == 0
    moved.close()


def test_a_version_once_expired_stays_expired_whatever_is_published_later() -> None:
    """Retention counts from when the next version superseded a version: a newer version published after a reap
    expired one (and, killed, left its row behind) does not bring it back as retained with its files gone."""
    import datetime as dt

    from siltlake.catalog.reap_rows import ReapVersion
    from siltlake.reap.retention import retained_versions

    start = dt.datetime(2026, 12, 1, 10)

    def version(number: int, minutes: int) -> ReapVersion:
        return ReapVersion(
            number, 1, number, "merged", None, f"m-{number}.json", number, start + dt.timedelta(minutes=minutes)
        )

    history = [version(1, 0), version(2, 10), version(3, 20)]
    cutoff = start + dt.timedelta(minutes=15)  # version 2 was superseded at minute 20, version 1 at minute 10
    kept, gone = retained_versions(history, cutoff)
    assert [v.version for v in kept] == [2, 3] and [v.version for v in gone] == [1]
    later = [*history, version(4, 40)]
    kept, gone = retained_versions(later, start + dt.timedelta(minutes=16))
    assert [v.version for v in gone] == [1] and [v.version for v in kept] == [2, 3, 4]
    kept, gone = retained_versions(later, start + dt.timedelta(minutes=30))
    assert [v.version for v in gone] == [1, 2] and [v.version for v in kept] == [3, 4]
    # A publisher whose clock stamped the superseding version earlier: the version's own time counts.
    skewed = [version(1, 30), version(2, 5)]
    kept, _ = retained_versions(skewed, start + dt.timedelta(minutes=20))
    assert [v.version for v in kept] == [1, 2]
