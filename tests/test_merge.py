"""Merge workers on a real catalog and Spark: modes, readers, continuing jobs, failures, takeover, fairness."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import threading
import time
from collections import Counter

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from siltlake.catalog import JobOutcome, LostMergeJob, TableRecord
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.merge import MergeWorker, merge_once
from siltlake.tabledef import Column, TableDef

from .conftest import ACCESS_TABLE
from .merge_helpers import add_small_objects, merged_rows, point_cli_at, rows_for, small_rows

DAY = dt.date(2026, 11, 20)


def make_table(deployment: Deployment, name: str = "access", **settings: object) -> TableRecord:
    return deployment.catalog.tables.create(
        TableDef.from_mapping({**ACCESS_TABLE, "name": name, "merge_interval": 0, **settings})
    )


def row_multiset(table: pa.Table) -> Counter:
    return Counter(
        zip(*(table.column(name).to_pylist() for name in ("utc_event_time", "user_id", "action")), strict=True)
    )


def only_partition(deployment: Deployment, table: TableRecord):
    (partition,) = deployment.catalog.partitions.list(table.id)
    return partition


def assert_exact(deployment: Deployment, table: TableRecord, partition_id: int, date: dt.date) -> None:
    """Merged objects hold exactly the small objects' rows up to desired_manifest_version; ranges chain."""
    partition = next(p for p in deployment.catalog.partitions.list(table.id) if p.id == partition_id)
    ranges = deployment.catalog.merge_queue.ranges(partition_id)
    if ranges:
        assert ranges[0].lower is None and ranges[0].upper == 0, "the sentinel (null, 0) comes first"
        for previous, current in itertools.pairwise(ranges):
            assert current.lower == previous.upper
        assert ranges[-1].upper == partition.desired_manifest_version
    merged = merged_rows(deployment, table, partition_id, date)
    expected = small_rows(deployment, table, partition_id, date, partition.desired_manifest_version)
    assert row_multiset(merged) == row_multiset(expected)


def assert_sorted_row_groups(path: str, filesystem) -> None:
    parquet = pq.ParquetFile(path, filesystem=filesystem)
    for index in range(parquet.num_row_groups):
        times = parquet.read_row_group(index, columns=["utc_event_time"]).column(0).to_pylist()
        assert times == sorted(times), f"row group {index} of {path} is not sorted by event time"


@pytest.mark.parametrize("where", ["in-process", "spark"])
@pytest.mark.parametrize("mode", ["deep", "shallow", "auto"])
def test_modes_extend_the_open_range_and_every_reader_agrees(
    deployment: Deployment, spark, mode: str, where: str
) -> None:
    if where == "spark":
        deployment.config.merge.in_driver_bytes = 0
    table = make_table(deployment, merge_mode=mode, row_group_bytes=16 * 1024)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 700, seed) for seed in range(4)])
    first = merge_once(deployment)
    assert (first.claimed, first.finished, first.failed) == (1, 1, 0)
    assert (first.stages, first.in_driver) == ((1, 0) if where == "spark" else (0, 1))
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 300, seed) for seed in range(4, 9)])
    second = merge_once(deployment)
    assert (second.claimed, second.finished, second.failed) == (1, 1, 0)

    partition = only_partition(deployment, table)
    ranges = deployment.catalog.merge_queue.ranges(partition.id)
    assert [(r.lower, r.upper) for r in ranges] == [(None, 0), (0, 9)]  # extended, not a second range
    assert ranges[1].row_count == 4 * 700 + 5 * 300
    assert partition.desired_manifest_version == 9
    assert_exact(deployment, table, partition.id, DAY)
    assert deployment.catalog.merge_queue.jobs(partition.id) == []

    log = deployment.catalog.merge_queue.log(partition.id)
    assert [entry["outcome"] for entry in log] == ["finished", "finished"]
    assert [entry["mode"] for entry in log] == {
        "deep": ["deep", "deep"],
        "shallow": ["shallow", "shallow"],
        "auto": ["deep", "auto"],
    }[mode]
    assert log[1]["objects_in"] == 5 and log[1]["rows_out"] == 4 * 700 + 5 * 300
    if mode == "auto":  # the open object's well-sized row groups were copied, not decoded
        assert 0 < log[1]["bytes_decoded"] < log[1]["bytes_in"] + ranges[1].content_length
        assert log[1]["bytes_decoded"] < log[0]["bytes_decoded"] + log[1]["bytes_in"]

    key = table.layout(deployment.instance_key).merged_object(DAY, 0, 9)
    path = deployment.lake.path(key)
    assert_sorted_row_groups(path, deployment.lake.filesystem)
    by_pyarrow = sorted(pq.read_table(path).to_pylist(), key=lambda r: (r["utc_event_time"], r["user_id"]))
    with duckdb.connect() as connection:  # its own connection: the module-level one is shared across tests
        by_duckdb = connection.sql(
            f"SELECT epoch_us(utc_event_time), user_id, action FROM read_parquet('{path}') ORDER BY 1, 2"
        ).fetchall()
    by_spark = spark.read.parquet(path).orderBy("utc_event_time", "user_id").collect()
    assert len(by_pyarrow) == len(by_duckdb) == len(by_spark) == 4 * 700 + 5 * 300
    for arrow_row, duck_row, spark_row in zip(by_pyarrow, by_duckdb, by_spark, strict=True):
        expected = (arrow_row["utc_event_time"], arrow_row["user_id"], arrow_row["action"])
        epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        assert (epoch + dt.timedelta(microseconds=duck_row[0]), duck_row[1], duck_row[2]) == expected
        assert (spark_row.utc_event_time.replace(tzinfo=dt.UTC), spark_row.user_id, spark_row.action) == expected


def test_auto_falls_back_to_deep_when_the_columns_changed(deployment: Deployment) -> None:
    table = make_table(deployment, row_group_bytes=8 * 1024)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 500, seed) for seed in range(3)])
    merge_once(deployment)
    table = deployment.catalog.tables.add_column("web.access", Column(name="referrer", type="string"))
    add_small_objects(
        deployment, table, DAY, [[{**row, "referrer": "https://example.com/"} for row in rows_for(DAY, 100, 3)]]
    )
    report = merge_once(deployment)
    assert report.failed == 0
    partition = only_partition(deployment, table)
    last = deployment.catalog.merge_queue.log(partition.id)[-1]
    assert last["mode"] == "deep" and "columns changed" in last["note"]
    merged = merged_rows(deployment, table, partition.id, DAY)
    referrers = Counter(merged.column("referrer").to_pylist())
    assert referrers == {None: 1500, "https://example.com/": 100}


def test_batch_limit_makes_continuing_jobs_and_size_limit_chains_ranges(deployment: Deployment) -> None:
    table = make_table(deployment, merge_batch_size=3, merged_object_size=30_000, merge_mode="deep")
    ids = add_small_objects(deployment, table, DAY, [rows_for(DAY, 400, seed) for seed in range(10)])
    report = merge_once(deployment)
    assert (report.claimed, report.continuing, report.finished, report.failed) == (4, 3, 1, 0)
    partition = only_partition(deployment, table)
    log = deployment.catalog.merge_queue.log(partition.id)
    assert [entry["outcome"] for entry in log] == ["continuing"] * 3 + ["finished"]
    assert [entry["objects_in"] for entry in log] == [3, 3, 3, 1]
    ranges = deployment.catalog.merge_queue.ranges(partition.id)
    assert len(ranges) > 2, "merged_object_size must split the partition into several chained ranges"
    assert all(r.content_length <= 30_000 or r.upper - (r.lower or 0) == 1 for r in ranges[1:])
    assert ranges[-1].upper == max(ids)
    assert_exact(deployment, table, partition.id, DAY)
    status = deployment.catalog.merge_queue.status(utcnow(), 600)[0]
    assert status["unmerged_objects"] == 0 and sum(status["jobs"].values()) == 0


def test_a_failing_job_backs_off_then_parks_while_other_jobs_finish(deployment: Deployment) -> None:
    deployment.config.merge.max_attempts = 2
    deployment.config.merge.retry_backoff = 60
    table = make_table(deployment)
    broken_day, good_day = DAY, DAY + dt.timedelta(days=1)
    broken_ids = add_small_objects(deployment, table, broken_day, [rows_for(broken_day, 50, s) for s in range(3)])
    add_small_objects(deployment, table, good_day, [rows_for(good_day, 50, s) for s in range(3, 5)])
    layout = table.layout(deployment.instance_key)
    missing = layout.small_object(broken_day, broken_ids[1], False)
    deployment.lake.move(missing, missing + ".aside")

    start = utcnow() + dt.timedelta(seconds=1)
    first = MergeWorker(deployment, clock=lambda: start).run(once=True)
    assert (first.claimed, first.finished, first.failed, first.parked) == (2, 1, 1, 0)
    assert missing.rsplit("/", 1)[1] in first.errors[0][2]
    partitions = {p.partition_date: p for p in deployment.catalog.partitions.list(table.id)}
    (job,) = deployment.catalog.merge_queue.jobs(partitions[broken_day].id)
    assert job["ongoing_mark"] == 0 and job["schedule_time"] == start + dt.timedelta(seconds=60)
    assert "obj-" in job["last_error"]

    early = MergeWorker(deployment, clock=lambda: start + dt.timedelta(seconds=30)).run(once=True)
    assert early.claimed == 0, "the retry waits out its backoff"
    second = MergeWorker(deployment, clock=lambda: start + dt.timedelta(seconds=61)).run(once=True)
    assert (second.claimed, second.failed, second.parked) == (1, 1, 1)
    status = deployment.catalog.merge_queue.status(start + dt.timedelta(seconds=62), 600)[0]
    assert status["jobs"]["failed"] == 1 and status["failed_jobs"][0]["attempts"] == 2
    assert status["failed_jobs"][0]["date"] == broken_day.isoformat()
    later = MergeWorker(deployment, clock=lambda: start + dt.timedelta(days=1)).run(once=True)
    assert later.claimed == 0, "a parked job stays parked"

    deployment.lake.move(missing + ".aside", missing)
    assert deployment.catalog.merge_queue.retry_parked(start + dt.timedelta(days=1)) == 1
    fixed = MergeWorker(deployment, clock=lambda: start + dt.timedelta(days=1)).run(once=True)
    assert (fixed.finished, fixed.failed) == (1, 0)
    assert_exact(deployment, table, partitions[broken_day].id, broken_day)
    assert_exact(deployment, table, partitions[good_day].id, good_day)
    outcomes = [e["outcome"] for e in deployment.catalog.merge_queue.log(partitions[broken_day].id)]
    assert outcomes == ["failed", "failed", "finished"]


def test_a_job_whose_worker_went_silent_is_taken_over(deployment: Deployment) -> None:
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 80, s) for s in range(3)])
    catalog = deployment.catalog
    claimed_at = utcnow() + dt.timedelta(seconds=1)
    (job,) = catalog.merge_queue.claim("dead-worker", limit=5, now=claimed_at, timeout=600, per_table_limit=4)
    assert catalog.merge_queue.claim("other", limit=5, now=claimed_at, timeout=600, per_table_limit=4) == []
    assert MergeWorker(deployment, clock=lambda: claimed_at + dt.timedelta(seconds=599)).run(once=True).claimed == 0

    after_timeout = claimed_at + dt.timedelta(seconds=601)
    report = MergeWorker(deployment, owner="rescuer", clock=lambda: after_timeout).run(once=True)
    assert (report.taken_over, report.finished) == (1, 1)
    partition = only_partition(deployment, table)
    log = catalog.merge_queue.log(partition.id)
    assert log[0]["outcome"] == "failed" and "worker lost" in log[0]["error"] and "rescuer" in log[0]["error"]
    assert log[1]["outcome"] == "finished"
    assert_exact(deployment, table, partition.id, DAY)
    # The silent worker wakes up: it can neither beat nor commit.
    assert catalog.merge_queue.heartbeat([job.id], "dead-worker", after_timeout) == {job.id}
    with pytest.raises(LostMergeJob):
        catalog.merge_queue.commit(
            job,
            "dead-worker",
            base_upper=None,
            writes=[],
            continuing=False,
            result=JobOutcome(mode="deep"),
            now=after_timeout,
        )


def add_catalog_backlog(
    deployment: Deployment, table: TableRecord, date: dt.date, count: int, now: dt.datetime
) -> None:
    """Bulk-insert catalog rows of `count` unmerged small objects (no files) into an existing partition."""

    from siltlake.catalog import schema as s

    (partition,) = [p for p in deployment.catalog.partitions.list(table.id) if p.partition_date == date]
    with deployment.catalog.partitions.stream_commit() as tx:
        connection = tx._c
        staging_ids = (
            connection.execute(
                s.staging_objects.insert().returning(s.staging_objects.c.id, sort_by_parameter_order=True),
                [
                    {
                        "uri": f"file:///backlog/{table.id}/{n}",
                        "table_id": table.id,
                        "size": 1,
                        "receive_time": now,
                        "processed_time": now,
                        "records_in": 1,
                        "bad_records": 0,
                    }
                    for n in range(count)
                ],
            )
            .scalars()
            .all()
        )
        connection.execute(
            s.small_objects.insert(),
            [
                {
                    "id": object_id,
                    "staging_object_id": staging_ids[n],
                    "partition_id": partition.id,
                    "delayed": False,
                    "content_length": 1000,
                    "row_count": 1,
                    "min_event_time": now,
                    "max_event_time": now,
                    "upload_start_time": now,
                }
                for n, object_id in enumerate(tx.allocate_ids(count))
            ],
        )


def test_a_backlogged_table_does_not_delay_another_tables_job(deployment: Deployment) -> None:
    deployment.config.merge.per_table_limit = 2
    busy = make_table(deployment, name="busy")
    quiet = make_table(deployment, name="quiet")
    start = utcnow()
    # 10,000 unmerged objects in one partition, and 20 more due partitions, all due before the quiet table's job.
    add_small_objects(deployment, busy, DAY, [rows_for(DAY, 1, 0)], now=start, write_files=False)
    add_catalog_backlog(deployment, busy, DAY, 9_999, start)
    for offset in range(1, 21):
        day = DAY - dt.timedelta(days=offset)
        add_small_objects(deployment, busy, day, [rows_for(day, 1, offset)], now=start, write_files=False)
    add_small_objects(
        deployment, quiet, DAY, [rows_for(DAY, 1, 0)], now=start + dt.timedelta(seconds=5), write_files=False
    )
    catalog = deployment.catalog
    later = start + dt.timedelta(seconds=10)
    first_round = catalog.merge_queue.claim("w1", limit=4, now=later, timeout=600, per_table_limit=2)
    tables = Counter(job.table.physical_table_name for job in first_round)
    assert tables == {"busy": 2, "quiet": 1}, "the per-table limit leaves the quiet table a slot in round one"
    # Another worker in the same round gets nothing more of the busy table while its two jobs run.
    assert catalog.merge_queue.claim("w2", limit=4, now=later, timeout=600, per_table_limit=2) == []


def test_many_due_partitions_run_as_one_spark_stage(deployment: Deployment) -> None:
    table = make_table(deployment)
    for offset in range(60):
        day = DAY - dt.timedelta(days=offset)
        add_small_objects(deployment, table, day, [rows_for(day, 20, offset)])
    deployment.config.merge.per_table_limit = 100
    deployment.config.merge.in_driver_bytes = 0
    report = MergeWorker(deployment, slots=100).run(once=True)
    assert (report.claimed, report.finished, report.stages, report.in_driver) == (60, 60, 1, 0)
    for partition in deployment.catalog.partitions.list(table.id):
        assert_exact(deployment, table, partition.id, partition.partition_date)


def test_a_batch_up_to_in_driver_bytes_runs_in_process_and_a_larger_one_on_spark(
    deployment: Deployment, monkeypatch
) -> None:
    table = make_table(deployment)
    days = [DAY - dt.timedelta(days=offset) for offset in range(3)]
    for day in days:
        add_small_objects(deployment, table, day, [rows_for(day, 200, seed) for seed in range(3)])

    def batch_bytes() -> int:
        """What the due jobs read: their new small objects and the open objects they extend."""
        total = 0
        for partition in deployment.catalog.partitions.list(table.id):
            last, _, pending = deployment.catalog.merge_queue.unmerged_objects(partition.id, 100)
            total += sum(o.content_length for o in pending) + (last.content_length if last else 0)
        return total

    started = []
    session = deployment.spark()
    monkeypatch.setattr(deployment, "spark", lambda: started.append(1) or session)

    deployment.config.merge.in_driver_bytes = batch_bytes()  # the three jobs read exactly this: in-process
    report = merge_once(deployment)
    assert (report.finished, report.stages, report.in_driver, started) == (3, 0, 1, [])
    for partition in deployment.catalog.partitions.list(table.id):
        assert_exact(deployment, table, partition.id, partition.partition_date)

    for day in days:
        add_small_objects(deployment, table, day, [rows_for(day, 200, seed) for seed in range(3, 6)])
    deployment.config.merge.in_driver_bytes = batch_bytes() - 1  # one byte short of the next batch: Spark
    report = merge_once(deployment)
    assert (report.finished, report.stages, report.in_driver) == (3, 1, 0) and started
    for partition in deployment.catalog.partitions.list(table.id):
        assert_exact(deployment, table, partition.id, partition.partition_date)


def test_merge_and_status_commands(deployment: Deployment, monkeypatch) -> None:
    from siltlake.cli import main

    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, s) for s in range(4)])
    point_cli_at(deployment, monkeypatch)
    runner = CliRunner()
    before = json.loads(runner.invoke(main, ["status", "--json"], catch_exceptions=False).output)
    (entry,) = before["tables"]
    assert entry["table"] == "web.access" and entry["unmerged_objects"] == 4 and entry["jobs"]["due"] == 1
    assert entry["oldest_unmerged_age_seconds"] is not None
    merged = runner.invoke(main, ["merge", "--once"], catch_exceptions=False)
    assert merged.exit_code == 0, merged.output
    assert "1 finished" in merged.output and "4 small objects" in merged.output
    shown = runner.invoke(main, ["status"], catch_exceptions=False).output
    assert "0 small objects" in shown and "0 due" in shown


def test_a_drained_queue_is_claimed_again_only_when_a_stage_may_have_made_jobs_due(
    deployment: Deployment, monkeypatch
) -> None:
    table = make_table(deployment)
    days = [DAY - dt.timedelta(days=offset) for offset in range(3)]
    for day in days:
        add_small_objects(deployment, table, day, [rows_for(day, 20, 1)])
    queue = deployment.catalog.merge_queue
    claims: list[tuple[int, int]] = []  # (jobs taken, due jobs passed over)
    claim = queue.claim

    def counted(*args, **kwargs):
        taken = claim(*args, **kwargs)
        claims.append((len(taken), taken.passed_over))
        return taken

    monkeypatch.setattr(queue, "claim", counted)
    # One job a table at a time: each claim passes the others over, and each stage's end is looked after.
    deployment.config.merge.per_table_limit = 1
    report = MergeWorker(deployment, slots=4).run(once=True)
    assert report.finished == 3
    assert claims == [(1, 1), (1, 1), (1, 0)]  # a claim looks one job beyond each table's cap
    # Nothing passed over and nothing continued: the stage's end is not followed by another claim.
    claims.clear()
    add_small_objects(deployment, table, days[0], [rows_for(days[0], 20, 2)])
    deployment.config.merge.per_table_limit = 4
    report = MergeWorker(deployment, slots=4).run(once=True)
    assert (report.finished, claims) == (1, [(1, 0)])


def test_a_stage_thread_slow_to_exit_after_its_last_job_does_not_look_running(
    deployment: Deployment, monkeypatch
) -> None:
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 20, 1)])
    worker = MergeWorker(deployment, slots=4)

    class SlowToExit(threading.Event):
        def set(self) -> None:
            super().set()
            if threading.current_thread() is not threading.main_thread():
                time.sleep(0.7)  # the stage thread, alive a while after waking the loop

    monkeypatch.setattr(worker, "_wake", SlowToExit())
    claims: list[int] = []
    claim = worker.claim

    def counted(limit: int):
        taken = claim(limit)
        claims.append(len(taken))
        return taken

    monkeypatch.setattr(worker, "claim", counted)
    report = worker.run(once=True)
    # Seen as running, the stage would have made the loop wait out its 0.5 s poll and claim again.
    assert (report.finished, claims) == (1, [1])
