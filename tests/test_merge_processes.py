"""Merge workers as real `silt merge` processes: SIGKILLed mid-job and taken over; two daemons on one catalog.

Every worker runs in its own session (start_new_session), so a kill takes the Python driver, its Spark
JVM and the JVM's Python executors down together, as a lost machine would, and the finally blocks can
end every process a test started by its session id.
"""

from __future__ import annotations

import collections
import datetime as dt
import itertools
import json
import math
import os
import random
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from siltlake.catalog import PartitionRow, TableRecord
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE, make_config
from .merge_helpers import add_small_objects, merged_rows, rows_for, small_rows
from .processes import (
    SUCCESS,
    SiltProcess,
    held_jobs,
    kill_session,
    owner_pid,
    silt_env,
    silt_status,
    successes,
    wait_until,
)

pytestmark = pytest.mark.spark


# --- set-up ---------------------------------------------------------------------------------------------


@pytest.fixture
def open_deployment(tmp_path: Path) -> Iterator[Callable[[str], Deployment]]:
    """Open (and afterwards close) the test's own deployment on a catalog; no Spark in the test process."""
    opened: list[Deployment] = []

    def open_(url: str) -> Deployment:
        deployment = Deployment(make_config(tmp_path, url))
        opened.append(deployment)
        deployment.init()
        return deployment

    yield open_
    for deployment in opened:
        deployment.close()


def create_table(deployment: Deployment, name: str, **options: object) -> TableRecord:
    """An access-like table whose merge jobs are due as soon as a partition gets its first object."""
    return deployment.catalog.tables.create(
        TableDef.from_mapping({**ACCESS_TABLE, "name": name, "merge_interval": 0, **options})
    )


def fill(deployment: Deployment, plan: list[tuple[TableRecord, dt.date, int]], rng: random.Random) -> int:
    """Give each (table, date) its number of small objects, round-robin so ids interleave; returns rows."""
    seeds = itertools.count(1)
    total = 0
    for round_ in range(max(count for _, _, count in plan)):
        for table, date, count in plan:
            if round_ < count:
                batch = rows_for(date, rng.randrange(5, 40), next(seeds))
                add_small_objects(deployment, table, date, [batch])
                total += len(batch)
    return total


# --- catalog and lake observations ----------------------------------------------------------------------


def jobs_held_by(deployment: Deployment, worker: SiltProcess) -> list[int]:
    return [row.id for row in held_jobs(deployment) if owner_pid(row.owner) == worker.pid]


def lake_merged_files(root: Path) -> set[str]:
    """Merged objects on disk, temporary ones included, committed or not."""
    return {
        os.path.join(folder, name) for folder, _, names in os.walk(root) if "/merged/" in folder + "/" for name in names
    }


def idle(status: list[dict]) -> bool:
    return all(t["unmerged_objects"] == 0 and not any(t["jobs"].values()) for t in status)


# --- checks ---------------------------------------------------------------------------------------------


def rows_of(table: pa.Table) -> list[tuple]:
    return sorted((r["user_id"], r["utc_event_time"], r["action"]) for r in table.to_pylist())


def check_partition(deployment: Deployment, table: TableRecord, partition: PartitionRow) -> int:
    """Ranges chain from the sentinel to the last small object; each merged object holds exactly the rows
    of the small objects its range names. Returns the partition's row count."""
    date = partition.partition_date
    layout = table.layout(deployment.instance_key)
    objects = sorted(
        (o for o in deployment.catalog.partitions.small_objects(table.id) if o.partition_date == date),
        key=lambda o: o.id,
    )
    ranges = deployment.catalog.merge_queue.ranges(partition.id)
    where = f"{table.qualified_name} {date}"
    assert ranges and (ranges[0].lower, ranges[0].upper) == (None, 0), f"{where}: no sentinel first: {ranges}"
    for previous, current in itertools.pairwise(ranges):
        assert current.lower == previous.upper, f"{where}: ranges do not chain: {ranges}"
    assert ranges[-1].upper == partition.desired_manifest_version == objects[-1].id, where
    for merged in ranges[1:]:
        data = pq.read_table(
            deployment.lake.path(layout.merged_object(date, merged.lower, merged.upper)),
            filesystem=deployment.lake.filesystem,
        )
        inputs = [
            pq.read_table(
                deployment.lake.path(layout.small_object(date, o.id, o.delayed)), filesystem=deployment.lake.filesystem
            )
            for o in objects
            if merged.lower < o.id <= merged.upper
        ]
        assert inputs, f"{where}: range ({merged.lower}, {merged.upper}] names no small object"
        assert data.num_rows == merged.row_count, where
        assert rows_of(data) == rows_of(pa.concat_tables(inputs)), (
            f"{where}: range ({merged.lower}, {merged.upper}] does not hold exactly its small objects' rows"
        )
    everything = merged_rows(deployment, table, partition.id, date)
    assert rows_of(everything) == rows_of(
        small_rows(deployment, table, partition.id, date, partition.desired_manifest_version)
    ), where
    return everything.num_rows


def check_merged(deployment: Deployment, tables: list[TableRecord], expected_rows: int) -> None:
    total = 0
    for table in tables:
        partitions = deployment.catalog.partitions.list(table.id)
        assert partitions
        for partition in partitions:
            total += check_partition(deployment, table, partition)
    assert total == expected_rows


def check_log(log: list[dict]) -> None:
    """Each job finishes (or continues) once; a partition's successful jobs never ran at the same time."""
    done = collections.Counter(entry["job_id"] for entry in log if entry["outcome"] in SUCCESS)
    assert [job for job, count in done.items() if count > 1] == []
    by_partition: dict[int, list[dict]] = collections.defaultdict(list)
    for entry in log:
        if entry["outcome"] in SUCCESS:
            by_partition[entry["partition_id"]].append(entry)
    for partition_id, entries in by_partition.items():
        entries.sort(key=lambda e: e["start_time"])
        for before, after in itertools.pairwise(entries):
            assert before["end_time"] <= after["start_time"], (
                f"partition {partition_id}: jobs {before['job_id']} ({before['start_time']} - {before['end_time']})"
                f" and {after['job_id']} ({after['start_time']} - {after['end_time']}) overlap"
            )


def check_job_counts(log: list[dict], plan: list[tuple[TableRecord, dt.date, int]]) -> None:
    """A partition of n objects takes ceil(n / merge_batch_size) successful jobs, the last one finished."""
    continuing = sum(math.ceil(count / table.definition.merge_batch_size) - 1 for table, _, count in plan)
    assert continuing > 0
    assert sum(e["outcome"] == "continuing" for e in log) == continuing
    assert sum(e["outcome"] == "finished" for e in log) == len(plan)


def check_status(env: dict[str, str], tables: list[TableRecord]) -> None:
    status = silt_status(env)
    assert sorted(t["table"] for t in status) == sorted(t.qualified_name for t in tables)
    for entry in status:
        assert entry["unmerged_objects"] == 0, entry
        assert entry["jobs"] == {"scheduled": 0, "due": 0, "running": 0, "stale": 0, "continuing": 0, "failed": 0}, (
            entry
        )


# --- 1. workers killed mid-job --------------------------------------------------------------------------

JOB_TIMEOUT = 4


def test_killed_merge_workers_are_taken_over_and_lose_nothing(
    tmp_path: Path, open_deployment: Callable[[str], Deployment]
) -> None:
    """Four `silt merge --once` workers are SIGKILLed in turn (before claiming, with claimed jobs while Spark
    starts, mid-stage, right after a commit), then a fifth runs after the job timeout and finishes.

    On SQLite: the chaos test (test_chaos.py) kills merge daemons at these phases on PostgreSQL."""
    catalog_url = f"sqlite:///{tmp_path / 'catalog.db'}"
    rng = random.Random(20261121)
    deployment = open_deployment(catalog_url)
    tables = [
        create_table(deployment, "crash_auto", merge_batch_size=2, merged_object_size=5000),
        create_table(deployment, "crash_shallow", merge_mode="shallow", merge_batch_size=2),
    ]
    first = dt.date(2026, 11, 1)
    plan = [(table, first + dt.timedelta(days=day), rng.randrange(3, 6)) for table in tables for day in range(4)]
    expected_rows = fill(deployment, plan, rng)
    # in_driver_bytes=0: these jobs are small enough to merge in-process, and the kills aim at the Spark stage
    env = silt_env(
        tmp_path,
        catalog_url,
        merge=dict(
            slots=4, job_timeout=JOB_TIMEOUT, heartbeat_interval=1, retry_backoff=1, poll_interval=1, in_driver_bytes=0
        ),
    )
    lake = tmp_path / "lake"

    def before_claim(worker: SiltProcess) -> str:
        time.sleep(max(0.0, worker.started + rng.uniform(0.2, 1.0) - time.monotonic()))
        return "before claiming"

    def after_claim(worker: SiltProcess) -> str:
        wait_until(lambda: jobs_held_by(deployment, worker), [worker], 120, "claim")
        time.sleep(rng.uniform(0.0, 2.5))
        return "with claimed jobs, Spark starting"

    def in_stage(worker: SiltProcess) -> str:
        files, done = lake_merged_files(lake), successes(deployment)
        wait_until(
            lambda: lake_merged_files(lake) - files or successes(deployment) > done,
            [worker],
            180,
            "merged object written",
        )
        time.sleep(rng.uniform(0.0, 0.05))
        return "in the Spark stage" if successes(deployment) == done else "in the Spark stage (just committed)"

    def at_commit(worker: SiltProcess) -> str:
        done = successes(deployment)
        wait_until(lambda: successes(deployment) > done, [worker], 180, "commit")
        time.sleep(rng.uniform(0.0, 0.06))  # amid the commits of the stage's other jobs, or the next claim
        return "right after a commit"

    workers: list[SiltProcess] = []
    kills: list[tuple[str, list[int]]] = []
    held_at_kill: collections.Counter[int] = collections.Counter()
    last_kill = time.monotonic()
    try:
        for number, point in enumerate((before_claim, after_claim, in_stage, at_commit), 1):
            worker = SiltProcess(tmp_path, f"killed{number}", env, "merge", "--once")
            workers.append(worker)
            where = point(worker)
            assert worker.alive(), f"{worker.name} finished before its kill point ({where})\n{worker.tail()}"
            worker.kill()
            last_kill = time.monotonic()
            held = jobs_held_by(deployment, worker)  # the dead worker's claims: they must be taken over
            held_at_kill.update(held)
            kills.append((where, held))
            print(
                f"killed {worker.name} {time.monotonic() - worker.started:.1f} s after its start, {where}, "
                f"holding jobs {held}"
            )
        assert sum(held_at_kill.values()) > 0, kills
        # Past the timeout every job the last worker held is stale: the survivor takes them all over.
        time.sleep(max(0.0, last_kill + JOB_TIMEOUT + 0.5 - time.monotonic()))
        survivor = SiltProcess(tmp_path, "survivor", env, "merge", "--once", "--json")
        workers.append(survivor)
        assert survivor.proc.wait(timeout=300) == 0, survivor.tail()
    finally:
        for worker in workers:
            kill_session(worker.pid)
            worker.proc.wait(timeout=30)
    report = json.loads(survivor.out.read_text())
    print(f"the survivor took {time.monotonic() - survivor.started:.1f} s: {report}")
    assert report["failed"] == report["lost"] == report["conflicts"] == 0, report

    check_status(env, tables)
    check_merged(deployment, tables, expected_rows)
    log = deployment.catalog.merge_queue.log()
    check_log(log)
    # Each claim a worker held when it died was taken over once, by a later worker, and logged as such.
    lost_marker = f"(timeout {JOB_TIMEOUT} s); taken over by "
    takeovers = [
        (entry["job_id"], owner_pid(entry["error"].split(lost_marker, 1)[1]))
        for entry in log
        if entry["outcome"] == "failed" and entry["error"].startswith("worker lost") and lost_marker in entry["error"]
    ]
    assert collections.Counter(job for job, _ in takeovers) == held_at_kill, kills
    assert {taker for _, taker in takeovers} <= {worker.pid for worker in workers[1:]}
    assert sum(taker == survivor.pid for _, taker in takeovers) == report["taken_over"]
    assert [e for e in log if e["outcome"] == "failed" and e["job_id"] not in held_at_kill] == []
    assert sum(e["outcome"] == "failed" for e in log) == sum(held_at_kill.values())
    check_job_counts(log, plan)


# --- 2. two daemons on one PostgreSQL catalog -----------------------------------------------------------

REPORT = re.compile(
    r"merge: (?P<claimed>\d+) jobs in\s+(?P<stages>\d+) Spark\s+stages:\s+(?P<finished>\d+)\s+"
    r"finished,\s+(?P<continuing>\d+)\s+continuing,\s+(?P<failed>\d+)\s+failed\s+\((?P<parked>\d+)"
    r"\s+parked\),\s+(?P<taken_over>\d+)\s+taken\s+over"
)


def last_report(daemon: SiltProcess) -> dict[str, int] | None:
    """The counts of the daemon's latest merge report (printed whenever it idles after new claims)."""
    reports = list(REPORT.finditer(daemon.err.read_text()))
    return {key: int(value) for key, value in reports[-1].groupdict().items()} if reports else None


def reports_add_up(daemons: list[SiltProcess], done: dict[str, int]) -> bool:
    reports = [last_report(daemon) for daemon in daemons]
    return all(reports) and all(sum(r[outcome] for r in reports) == count for outcome, count in done.items())


@pytest.mark.postgres
def test_two_merge_daemons_on_one_postgres_catalog(
    tmp_path: Path, postgres_url: str, open_deployment: Callable[[str], Deployment]
) -> None:
    """Two `silt merge` daemons drain 36 partitions of two tables (some needing continuing jobs) side by side,
    then stop on SIGINT and SIGTERM. No partition is merged by both at once, and nothing is lost or merged twice."""
    rng = random.Random(4242)
    deployment = open_deployment(postgres_url)
    tables = [
        create_table(deployment, "daemon_auto", merge_batch_size=3, merged_object_size=6000),
        create_table(deployment, "daemon_deep", merge_mode="deep", merge_batch_size=2),
    ]
    first = dt.date(2026, 10, 1)
    plan = [
        (table, first + dt.timedelta(days=day), rng.choice([1, 1, 2, 2, 3, 5, 7]))
        for table in tables
        for day in range(18)
    ]
    expected_rows = fill(deployment, plan, rng)
    env = silt_env(
        tmp_path,
        postgres_url,
        merge=dict(slots=2, poll_interval=1, job_timeout=10, heartbeat_interval=2, retry_backoff=1),
    )
    daemons: list[SiltProcess] = []
    owners: set[int | None] = set()
    try:
        daemons = [SiltProcess(tmp_path, f"daemon{n}", env, "merge") for n in (1, 2)]
        deadline = time.monotonic() + 300
        while True:
            owners.update(owner_pid(row.owner) for row in held_jobs(deployment))
            if idle(deployment.catalog.merge_queue.status(utcnow(), 10)):
                break
            for daemon in daemons:
                assert daemon.alive(), f"{daemon.name} exited with {daemon.proc.returncode}\n{daemon.tail()}"
            assert time.monotonic() < deadline, "merging did not finish in 300 s\n" + "\n".join(
                d.tail() for d in daemons
            )
            time.sleep(0.05)
        # An idle daemon reports what it did; wait for both reports to add up to the log, then stop them.
        log = deployment.catalog.merge_queue.log()
        done = {outcome: sum(e["outcome"] == outcome for e in log) for outcome in SUCCESS}
        wait_until(lambda: reports_add_up(daemons, done), daemons, 60, f"daemon reports adding up to {done}")
        # Ctrl-C for one, SIGTERM for the other, each sent to the driver process only.
        stops = dict(zip(daemons, (signal.SIGINT, signal.SIGTERM), strict=True))
        for daemon, signum in stops.items():
            daemon.proc.send_signal(signum)
        for daemon, signum in stops.items():
            try:
                returncode = daemon.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{daemon.name} did not stop within 60 s of {signum.name}\n{daemon.tail()}")
            assert returncode == 0, daemon.tail()
            if signum == signal.SIGINT:
                assert "stopped" in daemon.err.read_text(), daemon.tail()
    finally:
        for daemon in daemons:
            kill_session(daemon.pid)
            daemon.proc.wait(timeout=30)

    # Both daemons ran jobs: seen holding them in the catalog (owner host:pid:...), and saying so.
    for daemon in daemons:
        assert daemon.pid in owners, (owners, daemon.pid)
        report = last_report(daemon)
        assert report is not None and report["finished"] + report["continuing"] > 0, daemon.tail()
        assert report["failed"] == report["taken_over"] == 0, daemon.tail()
    check_status(env, tables)
    check_merged(deployment, tables, expected_rows)
    log = deployment.catalog.merge_queue.log()
    check_log(log)
    assert [e for e in log if e["outcome"] == "failed"] == []
    check_job_counts(log, plan)
