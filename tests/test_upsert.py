"""Upserts of keyed tables (`merge` commits) and their cells of the conflict matrix.

The matrix cells run on PostgreSQL with two writers interleaved deterministically: the first writer
prepares (checks, writes its objects, reads its start state), the second commits, then the first commits.
What readers see is checked by the keyed rule itself (latest_rows over each date's files in file order),
which holds before and after readers merge on read.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from siltlake.catalog import StreamCommit, UpdateConflict
from siltlake.deployment import Deployment
from siltlake.errors import SiltError
from siltlake.lake import Lake
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.publish.runner import _write_merged_manifests
from siltlake.read.version_files import version_files
from siltlake.reap import reap_once
from siltlake.records.keyed import DELETE_MARKER, latest_rows
from siltlake.stream import Progress, stream_once
from siltlake.write.update import delete_rows, prepare_delete
from siltlake.write.upsert import prepare_upsert, upsert

from .conftest import ACCESS_TABLE, make_config
from .merge_helpers import add_small_objects, rows_for, silt_in_process
from .test_merge import DAY, make_table, only_partition
from .test_publish import tokyo
from .test_stream import jsonl_gz, stage

pytestmark = pytest.mark.spark
NEXT_DAY = DAY + dt.timedelta(days=1)
KEYED = {
    "primary_key": ["user_id"],
    "columns": [{**c, "nullable": False} if c["name"] == "user_id" else c for c in ACCESS_TABLE["columns"]],
}


def _open(tmp_path: Path, url: str, spark) -> Deployment:
    deployment = Deployment(make_config(tmp_path, url))
    deployment.init()
    deployment.use_spark(spark)
    return deployment


@pytest.fixture
def lite(tmp_path: Path, spark) -> Deployment:
    """SQLite: for what does not depend on the catalog's concurrency."""
    deployment = _open(tmp_path, f"sqlite:///{tmp_path / 'catalog.db'}", spark)
    yield deployment
    deployment.close()


@pytest.fixture
def pg(tmp_path: Path, postgres_url: str, spark) -> Deployment:
    """PostgreSQL: the matrix cells (two writers, row locks, the ordering lock)."""
    deployment = _open(tmp_path, postgres_url, spark)
    yield deployment
    deployment.close()


def keyed_table(deployment: Deployment, rows: int = 10):
    """web.access keyed by user_id, with two small objects of `rows` rows on DAY (seeds 0 and 1)."""
    table = make_table(deployment, **KEYED)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, rows, s) for s in range(2)])
    return table


def late(date: dt.date, minute: int = 30) -> dt.datetime:
    """23:<minute> in Tokyo: after every rows_for time, so a merge that orders rows by time keeps commit order."""
    return (tokyo(date, 23) + dt.timedelta(minutes=minute)).replace(tzinfo=dt.UTC)


def upsert_rows(user_ids: list[int], action: str, date: dt.date = DAY) -> pa.Table:
    """Rows of these users on `date` (late in the day) doing `action`."""
    return pa.table(
        {
            "utc_event_time": pa.array([late(date)] * len(user_ids), pa.timestamp("us", tz="UTC")),
            "user_id": pa.array(user_ids, pa.int64()),
            "action": pa.array([action] * len(user_ids)),
        }
    )


def original(seeds: range = range(2), count: int = 10) -> dict:
    return {(DAY, r["user_id"]): r["action"] for s in seeds for r in rows_for(DAY, count, s)}


def seen(deployment: Deployment, **as_of: object) -> dict:
    """(dt, user_id) -> action as readers see the table version: each date's files read in file order, the
    keyed rule applied (markers included, which Table.to_arrow's table schema leaves out)."""
    files: dict[dt.date, list[pa.Table]] = {}
    for data_file in raw_files(deployment, **as_of):
        files.setdefault(data_file.partition_date, []).append(pq.read_table(data_file.uri.removeprefix("file://")))
    shown = {}
    for date, tables in files.items():
        for row in latest_rows(pa.concat_tables(tables, promote_options="permissive"), ["user_id"]).to_pylist():
            shown[(date, row["user_id"])] = row["action"]
    return shown


def raw_files(deployment: Deployment, **as_of: object) -> list:
    """The version's files in file order, duplicates of keys included (Table.files() refuses a keyed table's
    partitions that need a merge on read)."""
    return version_files(deployment, deployment.catalog.tables.get("web.access"), **as_of)


def through_to_arrow(deployment: Deployment, **as_of: object) -> dict:
    """The same through Table.to_arrow (merged on read; applying the rule again changes nothing)."""
    frame = Lake(deployment).table("web.access").to_arrow(**as_of)
    shown = {}
    for date in set(frame.column("dt").to_pylist()):
        one = frame.filter(pa.compute.equal(frame.column("dt"), pa.scalar(date, pa.date32())))
        shown.update({(date, r["user_id"]): r["action"] for r in latest_rows(one, ["user_id"]).to_pylist()})
    return shown


def test_upserts_replace_and_delete_keys_at_their_versions_and_merges_keep_them(lite: Deployment) -> None:
    deployment = lite
    table = keyed_table(deployment)
    publish_once(deployment, now=tokyo(DAY, 12))  # table version 1: the two objects
    before = original()
    rows = pa.concat_tables(
        [upsert_rows([0, 1, 2], "new"), upsert_rows([1_000_000], "x"), upsert_rows([77], "added", NEXT_DAY)]
    ).append_column("gone", pa.array([False, None, False, True, False]))  # null: not a delete
    report = Lake(deployment).table("web.access").upsert(rows, delete_column="gone", now=tokyo(DAY, 13))
    assert [
        (p.partition_date, p.rows, p.deleted_keys, p.version.commit_op, p.version.table_version)
        for p in report.partitions
    ] == [(DAY, 4, 1, "merge", 2), (NEXT_DAY, 1, 0, "merge", 2)], "one table version"
    expected = {**before, (DAY, 0): "new", (DAY, 1): "new", (DAY, 2): "new", (NEXT_DAY, 77): "added"}
    del expected[(DAY, 1_000_000)]
    assert seen(deployment) == expected
    assert seen(deployment, as_of_version=2) == expected and seen(deployment, as_of_version=1) == before
    assert through_to_arrow(deployment, as_of_version=1) == before
    shown = through_to_arrow(deployment)
    assert shown == expected, "the delete marker removed its key"
    day = only_partition_of(deployment, DAY)
    (merge_version,) = [v for v in deployment.catalog.versions.of_partitions([day.id]) if v.commit_op == "merge"]
    upsert_object = raw_files(deployment)[-1].uri
    assert pq.read_schema(upsert_object.removeprefix("file://")).names[-1] == DELETE_MARKER
    assert merge_version.row_count == 24 and merge_version.covered_upper == merge_version.live_watermark
    at_upsert = dict(expected)

    # Appends after the upsert chain after it; a later live version carries the merge version's list forward.
    add_small_objects(
        deployment,
        table,
        DAY,
        [[{**r, "action": "later", "utc_event_time": late(DAY, 45)} for r in rows_for(DAY, 2, 0)]],
    )
    expected.update({(DAY, 0): "later", (DAY, 1): "later"})
    (live,) = publish_once(deployment, now=tokyo(DAY, 14)).live_versions
    assert live.manifest_key == merge_version.manifest_key and seen(deployment) == expected
    assert seen(deployment, as_of_version=2) == at_upsert
    ops = [v.commit_op for v in deployment.catalog.versions.of_partitions([day.id])]
    assert ops == ["append", "merge", "append"]

    # Reap keeps what versions list and deletes what an aborted upsert left (its manifest, its moved object).
    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the catalog went away")

    original_add = StreamCommit.add_merge_versions
    StreamCommit.add_merge_versions = fail
    try:
        with pytest.raises(RuntimeError):
            upsert(deployment, "web.access", upsert_rows([5], "lost"))
    finally:
        StreamCommit.add_merge_versions = original_add
    manifests = Path(
        deployment.config.storage.root,
        deployment.catalog.tables.get("web.access").layout(deployment.instance_key).prefix,
        "manifests",
        f"dt={DAY}",
    )
    aborted = list(manifests.glob("manifest-merge-000004-*.json"))
    assert len(aborted) == 1 and seen(deployment) == expected, "nothing committed"
    reap_once(
        deployment, now=dt.datetime.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(days=4), retention=100 * 365 * 86400
    )  # the versions are stamped in 2026: keep them all
    assert not aborted[0].exists() and seen(deployment) == expected
    assert seen(deployment, as_of_version=2) == at_upsert and seen(deployment, as_of_version=1) == before


def only_partition_of(deployment: Deployment, date: dt.date):
    table = deployment.catalog.tables.get("web.access")
    return next(p for p in deployment.catalog.partitions.list(table.id) if p.partition_date == date)


def test_upsert_refuses_rows_it_cannot_apply_and_changes_nothing(lite: Deployment, tmp_path: Path) -> None:
    deployment = lite
    make_table(deployment, "plain")
    with pytest.raises(SiltError, match="cannot upsert into web.plain: it has no primary_key"):
        upsert(deployment, "web.plain", upsert_rows([1], "x"))
    keyed_table(deployment, rows=3)
    good = upsert_rows([1, 2], "x")
    cases = [
        (good.append_column("colour", pa.array(["red", "blue"])), None, "columns not in the table: colour"),
        (good.drop_columns(["user_id"]), None, "required columns missing: user_id"),
        (
            good.set_column(1, "user_id", pa.array([None, None], pa.int64())),
            None,
            "column 'user_id' holds 2 nulls, and it is a primary_key column",
        ),
        (
            good.set_column(0, "utc_event_time", pa.array([None, late(DAY)], pa.timestamp("us", tz="UTC"))),
            None,
            "column 'utc_event_time' holds 1 nulls",
        ),
        (good, "gone", "the delete column 'gone' is not among the rows' columns"),
        (
            good.append_column("gone", pa.array([1, 0])),
            "gone",
            "the delete column 'gone' has type int64; it must be boolean",
        ),
        (
            pa.concat_tables([good, upsert_rows([2], "y")]),
            None,
            r"the key user_id=2 appears 2 times on dt=2026-11-20 \(first at row 2; 1 keys repeat\)",
        ),
    ]
    for rows, delete_column, message in cases:
        with pytest.raises(SiltError, match=message):
            upsert(deployment, "web.access", rows, delete_column)
    # The same key on two dates is two keys.
    assert (
        len(prepare_upsert(deployment, "web.access", pa.concat_tables([good, upsert_rows([2], "y", NEXT_DAY)])).parts)
        == 2
    )
    table = deployment.catalog.tables.get("web.access")
    assert deployment.catalog.versions.of_partitions(
        [p.id for p in deployment.catalog.partitions.list(table.id)]
    ) == [] and seen(deployment) == original(count=3)


# --- the conflict matrix: cells with a merge (docs/design.md "Upserts") ------------------------------------


@pytest.mark.postgres
def test_append_then_merge_the_upsert_fails(pg: Deployment) -> None:
    table = keyed_table(pg)
    prepared = prepare_upsert(pg, "web.access", upsert_rows([0], "new"))
    (late,) = add_small_objects(pg, table, DAY, [rows_for(DAY, 3, 5)])
    with pytest.raises(
        UpdateConflict,
        match=f"dt=2026-11-20 changed while the upsert ran: small object {late} "
        "was appended after the upsert started; run the upsert again",
    ):
        prepared.commit()
    assert not [v for v in pg.catalog.versions.of_partitions([only_partition(pg, table).id])], "nothing committed"
    upsert(pg, "web.access", upsert_rows([0], "new"))
    assert seen(pg) == {**original(), **original(range(5, 6), 3), (DAY, 0): "new"}


@pytest.mark.postgres
def test_merge_then_append_the_append_stays_pending_and_streams_again(pg: Deployment) -> None:
    keyed_table(pg)
    stage(
        pg,
        "fluentd01.web.access/2026/11/20/batch.jsonl.gz",
        jsonl_gz([{"time": tokyo(DAY, 5).isoformat() + "Z", "user_id": 0, "action": "streamed"}]),
    )

    class UpsertWhileDecoding(Progress):
        reports: list = []

        def advance(self, count: int) -> None:
            if not self.reports:
                self.reports.append(upsert(pg, "web.access", upsert_rows([0, 1], "new")))

    first = stream_once(pg, UpsertWhileDecoding())
    ((uri, reason),) = first.failed
    version = UpsertWhileDecoding.reports[0].partitions[0].version.version
    assert first.processed == 0 and f"web.access dt=2026-11-20 was updated (version {version})" in reason
    assert stream_once(pg).processed == 1
    assert seen(pg) == {**original(), (DAY, 0): "streamed", (DAY, 1): "new"}, "the append committed last wins"


@pytest.mark.postgres
def test_update_then_merge_the_upsert_fails(pg: Deployment) -> None:
    keyed_table(pg)
    prepared = prepare_upsert(pg, "web.access", upsert_rows([0], "new"))
    update = delete_rows(pg, "web.access", DAY, "user_id = 1")
    with pytest.raises(
        UpdateConflict,
        match=f"version {update.version.version} \\(update\\) was published after "
        "the upsert started; run the upsert again",
    ):
        prepared.commit()
    expected = original()
    del expected[(DAY, 1)]
    assert seen(pg) == expected


@pytest.mark.postgres
def test_merge_then_update_the_update_fails(pg: Deployment) -> None:
    keyed_table(pg)
    update = prepare_delete(pg, "web.access", DAY, "user_id = 1")
    report = upsert(pg, "web.access", upsert_rows([0], "new"))
    with pytest.raises(
        UpdateConflict,
        match=f"version {report.partitions[0].version.version} \\(merge\\) was "
        "published after version 0, which the update read; run the update",
    ):
        update.commit()
    assert seen(pg) == {**original(), (DAY, 0): "new"}


@pytest.mark.postgres
def test_merge_then_merge_the_later_fails(pg: Deployment) -> None:
    keyed_table(pg)
    first = prepare_upsert(pg, "web.access", upsert_rows([0], "first"))
    second = upsert(pg, "web.access", upsert_rows([0, 1], "second"))
    with pytest.raises(
        UpdateConflict,
        match=f"version {second.partitions[0].version.version} \\(merge\\) was published after the upsert started",
    ):
        first.commit()
    assert seen(pg) == {**original(), (DAY, 0): "second", (DAY, 1): "second"}


def switched_keyed_day(deployment: Deployment):
    """DAY merged, closed and switched to its compaction; then a delayed object of seed 2 (merged by none)."""
    table = keyed_table(deployment)
    merge_once(deployment)
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))
    assert publish_once(deployment, now=tokyo(NEXT_DAY, 2)).merged_versions
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 4, 2)])
    return table


@pytest.mark.postgres
def test_compaction_then_merge_the_upsert_commits(pg: Deployment) -> None:
    switched_keyed_day(pg)
    prepared = prepare_upsert(pg, "web.access", upsert_rows([0, 2_000_000], "new"))
    merge_once(pg)  # a merge job commits while the upsert runs
    (compaction,) = publish_once(pg, now=tokyo(NEXT_DAY, 3)).merged_versions  # and publishes
    (done,) = prepared.commit().partitions
    assert done.delayed and done.version.version == compaction.version + 1
    expected = {**original(), **original(range(2, 3), 4), (DAY, 0): "new", (DAY, 2_000_000): "new"}
    assert seen(pg) == expected


@pytest.mark.postgres
def test_merge_then_compaction_keeps_the_upsert_at_every_table_version(pg: Deployment) -> None:
    table = switched_keyed_day(pg)
    merge_once(pg)  # desired moves over the delayed object; its compaction is not published yet
    pending = pg.catalog.versions.merged_to_publish()
    tables = {table.id: table}
    key = _write_merged_manifests(pg, tables, pending[0])
    (first,) = upsert(
        pg,
        "web.access",
        upsert_rows([0, 2_000_001], "new"),  # committed between them
        now=tokyo(NEXT_DAY, 3),
    ).partitions
    assert pg.catalog.versions.publish_merged(pending[0], key, tokyo(NEXT_DAY, 3)) is None, "left for the next run"
    (compaction,) = publish_once(pg, now=tokyo(NEXT_DAY, 4)).merged_versions
    assert compaction.covered_upper == first.version.covered_upper > only_partition(pg, table).desired_manifest_version
    expected = {**original(), **original(range(2, 3), 4), (DAY, 0): "new", (DAY, 2_000_001): "new"}
    assert seen(pg) == expected
    # A second upsert, then a merge that covers both upserts' objects: every version keeps what it showed.
    (second,) = upsert(pg, "web.access", upsert_rows([1], "newer"), now=tokyo(NEXT_DAY, 4)).partitions
    merge_once(pg)
    (last,) = publish_once(pg, now=tokyo(NEXT_DAY, 5)).merged_versions
    assert last.covered_upper == second.version.covered_upper
    by_version = {v.table_version: v for v in pg.catalog.versions.of_partitions([only_partition(pg, table).id])}
    for table_version, version in sorted(by_version.items()):
        shown = seen(pg, as_of_version=table_version)
        upserted = {k for k, v in shown.items() if v in ("new", "newer")}
        covered = version.covered_upper or 0
        assert upserted == ({(DAY, 0), (DAY, 2_000_001)} if covered >= first.version.covered_upper else set()) | (
            {(DAY, 1)} if covered >= second.version.covered_upper else set()
        ), (table_version, version.commit_op)
    assert seen(pg) == {**expected, (DAY, 1): "newer"}


def test_upsert_command_with_a_file_and_with_sql(lite: Deployment, tmp_path: Path, monkeypatch) -> None:
    deployment = lite
    keyed_table(deployment, rows=3)
    silt = silt_in_process(deployment, monkeypatch)
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps(r) + "\n"
            for r in [
                {"utc_event_time": "2026-11-19T18:00:00Z", "user_id": 0, "action": "file", "gone": False},
                {"utc_event_time": "2026-11-19 19:00:00", "user_id": 1, "action": "file", "gone": True},
            ]
        )
    )
    output = silt("upsert", "web.access", str(rows), "--delete-column", "gone", "--now", "2026-11-20T05:00:00Z")
    assert "2026-11-20" in output and "1" in output
    csv = tmp_path / "rows.csv"
    csv.write_text("utc_event_time,user_id,action\n2026-11-19T20:00:00Z,2,csv\n")
    silt("upsert", "web.access", str(csv))
    silt(
        "upsert",
        "web.access",
        "--sql",
        "SELECT timestamp'2026-11-19 21:00:00' AS utc_event_time, 1000000L AS user_id, 'sql' AS action",
    )
    expected = {**original(count=3), (DAY, 0): "file", (DAY, 2): "csv", (DAY, 1_000_000): "sql"}
    del expected[(DAY, 1)]
    assert seen(deployment) == expected
    history = json.loads(silt("history", "web.access", "--format", "json"))
    assert [v["op"] for v in history] == ["merge"] * 3
    assert "primary key: user_id" in silt("table", "show", "web.access")
    assert "give the rows" in silt("upsert", "web.access", code=2)
    make_table(deployment, "plain")
    assert "has no primary_key" in silt("upsert", "web.plain", str(csv), code=2)
