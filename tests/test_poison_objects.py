"""Poison objects: one record never fails its object, and an object that fails every time is moved
to unknown objects after stream.max_failures attempts instead of being retried forever; outages never count."""

from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import json
from pathlib import Path

import msgpack
import pytest

from siltlake.catalog import PendingStagingObject
from siltlake.config import load_config
from siltlake.deployment import Deployment
from siltlake.errors import CatalogUnreachable, ConfigError
from siltlake.read import table
from siltlake.storage.filesystem import Storage
from siltlake.stream import commit, stream_once
from siltlake.stream import stage as wave_stage
from siltlake.stream.replay import error_files, replay_errors
from siltlake.stream.report import StreamReport
from siltlake.stream.task import process_staging_object
from siltlake.tabledef import TableDef
from siltlake.workers import WorkersLost

from .conftest import ACCESS_TABLE, make_config
from .merge_helpers import silt_in_process

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("objects_alone")]  # a stand-in task sees one object

NEW_YORK_TABLE = {**ACCESS_TABLE, "name": "east", "timezone": "America/New_York", "error_policy": "file"}
NO_PARTITION = "so it has no partition date (partition dates are in years 1..9999)"
BATCH_ROWS_ZERO = "ValueError: batch_rows must be at least 1"


def stage(deployment: Deployment, key: str, data: bytes) -> str:
    path = Path(deployment.staging.path(key))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return deployment.staging.uri(key)


def events(count: int, start: int = 0) -> list[dict]:
    return [
        {"time": f"2026-11-20T01:{(start + i) % 60:02d}:00Z", "user_id": start + i, "action": "view"}
        for i in range(count)
    ]


def jsonl(records: list[dict]) -> bytes:
    return "".join(json.dumps(record) + "\n" for record in records).encode()


def csv_bytes(records: list[dict]) -> bytes:
    text = io.StringIO()
    writer = csv.DictWriter(text, ["time", "user_id", "action"])
    writer.writeheader()
    writer.writerows(records)
    return text.getvalue().encode()


def user_ids(deployment: Deployment, name: str) -> list[int]:
    return sorted(row.user_id for row in table(deployment.spark(), name, deployment).select("user_id").collect())


def test_records_without_a_partition_date_are_bad_records_and_their_objects_load(
    deployment: Deployment, access_table
) -> None:
    deployment.catalog.tables.create(TableDef.from_mapping(NEW_YORK_TABLE))
    edge_west = {"time": "0001-01-01T03:00:00Z", "user_id": -1, "action": "edge"}  # 0000-12-31 in New York
    edge_east = {"time": "9999-12-31T23:59:59.999999Z", "user_id": -2, "action": "edge"}  # 10000-01-01 in Tokyo
    ts96 = {"time": msgpack.Timestamp(-62_135_596_800), "user_id": -3, "action": "edge"}  # 0001-01-01T00:00Z
    stage(deployment, "f.web.access/2026/11/20/tokyo.jsonl", jsonl([*events(3), edge_east, *events(2, 3)]))
    stage(deployment, "f.web.east/2026/11/20/ny.jsonl.gz", gzip.compress(jsonl([*events(2), edge_west])))
    stage(deployment, "f.web.east/2026/11/20/ny.csv", csv_bytes([edge_west, *events(2, 10)]))
    stage(
        deployment,
        "f.web.east/2026/11/20/ny.msgpack",
        b"".join(msgpack.packb(record) for record in [*events(2, 20), ts96]),
    )

    report = stream_once(deployment)

    assert report.failed == [] and report.unknown == []
    assert (report.processed, report.records_in, report.bad_records, report.records_loaded) == (4, 15, 4, 11)
    assert user_ids(deployment, "web.access") == [0, 1, 2, 3, 4]
    assert user_ids(deployment, "web.east") == [0, 1, 10, 11, 20, 21]
    samples = {uri.rsplit("/", 1)[1]: sample for uri, sample in report.bad_samples}
    assert samples["tokyo.jsonl"] == (
        f"line 4: event time time: 9999-12-31T23:59:59.999999Z is after 9999-12-31 in "
        f"the table's time zone Asia/Tokyo, {NO_PARTITION}"
    )
    before = "is before 0001-01-01 in the table's time zone America/New_York"
    assert samples["ny.jsonl.gz"] == f"line 3: event time time: 0001-01-01T03:00:00.000000Z {before}, {NO_PARTITION}"
    assert samples["ny.csv"] == f"line 2: event time time: 0001-01-01T03:00:00.000000Z {before}, {NO_PARTITION}"
    assert samples["ny.msgpack"] == f"line 3: event time time: 0001-01-01T00:00:00.000000Z {before}, {NO_PARTITION}"
    # The table keeps its bad records (error_policy = "file"): visible in `silt errors list`, replayable.
    assert sorted(count for _, count in error_files(deployment, "web.east")) == [1, 1, 1]
    assert stream_once(deployment).processed == 0
    # A dry run of the replay counts them and changes nothing.
    rehearsed = replay_errors(deployment, "web.east", dry_run=True)
    assert rehearsed.records + rehearsed.kept == 3 and rehearsed.staging_uris == [], rehearsed
    assert sorted(count for _, count in error_files(deployment, "web.east")) == [1, 1, 1]
    assert deployment.catalog.staging.pending(10) == []


def poison(monkeypatch: pytest.MonkeyPatch, uri: str) -> None:
    """Make the stream task fail inside its own error handling for one staging object, on every attempt.

    The task runs in a worker process (siltlake/workers.py) or a Spark worker, so the stand-in is a closure (shipped
    by value): it runs the real task
    with a batch size the record reader refuses."""
    real = process_staging_object

    def failing_for_one(task):  # a StreamTask in, the task's report out
        return real(dataclasses.replace(task, batch_rows=0) if task.uri == uri else task)

    monkeypatch.setattr(wave_stage, "process_wave_item", failing_for_one)


def failing(deployment: Deployment) -> list[tuple[str, int, str]]:
    return [(item.uri, item.failure_count, item.last_failure) for item in deployment.catalog.staging.failing()]


def test_an_object_failing_every_time_moves_to_unknown_after_three_runs(
    deployment: Deployment, access_table, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert deployment.config.stream.max_failures == 3
    bad = stage(deployment, "f.web.access/2026/11/20/poison.jsonl", jsonl(events(5, 100)))
    stage(deployment, "f.web.access/2026/11/20/good-0.jsonl", jsonl(events(2)))
    poison(monkeypatch, bad)
    silt = silt_in_process(deployment, monkeypatch)

    for attempt in (1, 2):
        report = stream_once(deployment)
        assert report.processed == 1 and report.unknown == []  # the other object of the run flows
        assert report.failed == [
            (
                bad,
                f"{BATCH_ROWS_ZERO} (failed {attempt} of stream.max_failures=3 times; "
                "then it moves to unknown objects)",
            )
        ]
        assert failing(deployment) == [(bad, attempt, BATCH_ROWS_ZERO)]
        shown = json.loads(silt("status", "--json"))["failing_staging_objects"]
        assert [(f["uri"], f["table_name"], f["failure_count"], f["last_failure"]) for f in shown] == [
            (bad, "web.access", attempt, BATCH_ROWS_ZERO)
        ]
        text = silt("status")
        assert "failing staging objects" in text and f"{attempt} of 3 failures" in text and bad in text
        stage(deployment, f"f.web.access/2026/11/20/good-{attempt}.jsonl", jsonl(events(2, 10 * attempt)))

    third = stream_once(deployment)
    assert third.failed == [] and third.processed == 1
    assert third.unknown == [(bad, f"failed 3 times: {BATCH_ROWS_ZERO}")]
    assert failing(deployment) == [] and "failing staging objects" not in silt("status")
    (unknown,) = deployment.catalog.staging.unknown()
    assert (unknown.uri, unknown.reason, unknown.table_name) == (
        bad,
        f"failed 3 times: {BATCH_ROWS_ZERO}",
        "web.access",
    )
    assert bad in silt("unknown", "list")
    fourth = stream_once(deployment)
    assert (fourth.processed, fourth.failed, fourth.unknown) == (0, [], [])
    assert user_ids(deployment, "web.access") == [0, 1, 10, 11, 20, 21]

    # A replay streams it again from a failure count of zero: still failing, it is counted from one.
    assert "1 objects will be streamed again" in silt("unknown", "replay", bad)
    again = stream_once(deployment)
    # The replay registers it itself (discover.readmit), unless a settle wait leaves that to the round.
    assert again.registered <= 1 and [uri for uri, _ in again.failed] == [bad]
    assert failing(deployment) == [(bad, 1, BATCH_ROWS_ZERO)]
    monkeypatch.setattr(wave_stage, "process_wave_item", process_staging_object)  # the fix is deployed
    fixed = stream_once(deployment)
    assert (fixed.processed, fixed.failed, fixed.records_loaded) == (1, [], 5)
    assert failing(deployment) == [] and deployment.catalog.staging.unknown() == []
    assert user_ids(deployment, "web.access") == [0, 1, 10, 11, 20, 21, 100, 101, 102, 103, 104]


def test_a_commit_that_raises_for_one_object_counts_against_it_alone(
    tmp_path: Path, catalog_url: str, spark, monkeypatch: pytest.MonkeyPatch
) -> None:
    deployment = Deployment(make_config(tmp_path, catalog_url, max_failures=2, group_bytes=0))
    deployment.init()
    deployment.use_spark(spark)
    try:
        deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
        bad = stage(deployment, "f.web.access/2026/11/20/b-poison.jsonl", jsonl(events(3, 100)))
        for name in ("a", "c"):
            stage(deployment, f"f.web.access/2026/11/20/{name}.jsonl", jsonl(events(2, ord(name))))
        real = commit.commit_parts

        def commit_raising_for_one(tx, lake, table_record, layout, staging_object_id, parts, *rest):
            moved = real(tx, lake, table_record, layout, staging_object_id, parts, *rest)
            if parts and parts[0]["rows"] == 3:  # the poison's rows are written and moved, then the commit fails
                raise ArithmeticError("the poison's commit step")
            return moved

        monkeypatch.setattr(commit, "commit_parts", commit_raising_for_one)
        first = stream_once(deployment)
        assert first.processed == 2 and first.records_loaded == 4  # committed in the same transaction
        assert first.failed == [
            (
                bad,
                "ArithmeticError: the poison's commit step (failed 1 of stream.max_failures=2 "
                "times; then it moves to unknown objects)",
            )
        ]
        assert failing(deployment) == [(bad, 1, "ArithmeticError: the poison's commit step")]
        rows = deployment.catalog.partitions.small_objects(deployment.catalog.tables.get("web.access").id)
        assert sum(row.row_count for row in rows) == 4  # the poison's rows were rolled back with its savepoint
        second = stream_once(deployment)
        assert second.unknown == [(bad, "failed 2 times: ArithmeticError: the poison's commit step")]
        assert user_ids(deployment, "web.access") == [97, 98, 99, 100]
    finally:
        deployment.close()


def test_outages_never_count_against_objects(
    deployment: Deployment, access_table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = stage(deployment, "f.web.access/2026/11/20/a.jsonl", jsonl(events(3)))
    real_task, real_commit = process_staging_object, commit.commit_parts
    real_run_on_workers, real_run_tasks = wave_stage.run_on_workers, wave_stage.run_tasks
    # An I/O error: the storage's failure, not the object's (its root cannot be opened as a directory).
    (tmp_path / "not-a-root").write_bytes(b"")
    broken = Storage(str(tmp_path / "not-a-root"))

    def storage_down(task):
        return real_task(dataclasses.replace(task, staging=broken, uri=broken.uri("f.web.access/2026/11/20/a.jsonl")))

    def catalog_down(*args, **kwargs):
        raise CatalogUnreachable("the catalog server restarts")

    def spark_gone(*args, **kwargs):
        raise ConnectionRefusedError("the Spark JVM is gone")

    def workers_lost(*args, **kwargs):
        raise WorkersLost("a worker process (pid 1) ended with code -9 during a task")

    monkeypatch.setattr(wave_stage, "process_wave_item", storage_down)
    for _ in range(4):  # more than stream.max_failures
        report = stream_once(deployment)
        ((failed_uri, reason),) = report.failed
        assert failed_uri == uri and reason.startswith("NotADirectoryError: ") and "Not a directory" in reason
        assert report.unknown == []
    monkeypatch.setattr(wave_stage, "process_wave_item", real_task)
    monkeypatch.setattr(commit, "commit_parts", catalog_down)
    for _ in range(4):
        with pytest.raises(CatalogUnreachable):
            stream_once(deployment)
    monkeypatch.setattr(commit, "commit_parts", real_commit)
    # The worker processes lost (a wave then goes to Spark), and Spark gone too.
    monkeypatch.setattr(wave_stage, "run_on_workers", workers_lost)
    monkeypatch.setattr(wave_stage, "run_tasks", spark_gone)
    for _ in range(4):
        with pytest.raises(ConnectionRefusedError):
            stream_once(deployment)
    assert failing(deployment) == [] and deployment.catalog.staging.unknown() == []
    monkeypatch.setattr(wave_stage, "run_on_workers", real_run_on_workers)
    monkeypatch.setattr(wave_stage, "run_tasks", real_run_tasks)

    report = stream_once(deployment)
    assert (report.processed, report.failed, report.records_loaded) == (1, [], 3)


def test_max_failures_is_at_least_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no siltlake.toml here
    assert load_config(environ={}).stream.max_failures == 3
    assert load_config(environ={"SILTLAKE_STREAM__MAX_FAILURES": "1"}).stream.max_failures == 1
    with pytest.raises(ConfigError, match="max_failures"):
        load_config(environ={"SILTLAKE_STREAM__MAX_FAILURES": "0"})


def test_a_failure_reported_after_another_process_committed_the_object_counts_for_nothing(
    deployment: Deployment, access_table
) -> None:
    uri = stage(deployment, "f.web.access/2026/11/20/a.jsonl", jsonl(events(1)))
    stream_once(deployment)
    assert deployment.catalog.staging.pending(10) == []
    stale = PendingStagingObject(1, uri, 0, access_table)
    late = StreamReport()
    commit.commit_results(
        deployment,
        [{"staging_object_id": 1, "status": "failed", "reason": "RuntimeError: late"}],
        {1: stale},
        late,
        deployment.catalog.versions.mark(),
    )
    assert late.failed == [] and late.unknown == [] and failing(deployment) == []
