"""A merge claim of a dead process on this host is stale at once: real processes claim through the
catalog and are SIGKILLed; another worker takes their jobs over well before merge.job_timeout, and
`silt status` shows them stale. Live processes and other hosts keep the timeout rule."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from siltlake.catalog import LocalHost, TableRecord
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.hosts import claim_host, local_host, process_alive

from .conftest import make_config
from .merge_helpers import add_small_objects, rows_for, silt_in_process
from .test_merge import DAY, make_table

TIMEOUT = 600

# A worker process: claims every due job as `silt merge` would (its own host and pid), says which, then
# waits to be killed. argv: catalog URL, claim time (ISO).
CLAIMER = textwrap.dedent("""
    import datetime as dt, json, sys, time
    from siltlake.catalog import Catalog
    from siltlake.hosts import local_host
    from siltlake.merge.runner import default_owner
    catalog = Catalog(sys.argv[1])
    jobs = catalog.merge_queue.claim(default_owner(), limit=10, now=dt.datetime.fromisoformat(sys.argv[2]),
                                    timeout=600, per_table_limit=10, local=local_host())
    print(json.dumps([job.id for job in jobs]), flush=True)
    time.sleep(600)
""")


@pytest.fixture
def deployment(tmp_path: Path, catalog_url: str) -> Iterator[Deployment]:
    """A catalog and lake without Spark: claims and status never start it."""
    deployment = Deployment(make_config(tmp_path, catalog_url))
    deployment.init()
    yield deployment
    deployment.close()


class Claimer:
    """A child process that claims the due jobs and then sleeps."""

    def __init__(self, deployment: Deployment, at: dt.datetime) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CLAIMER, deployment.config.catalog.url, at.isoformat()],
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        assert line, f"the claiming process exited with {self.proc.wait()}"
        self.jobs: list[int] = json.loads(line)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def __enter__(self) -> Claimer:
        return self

    def __exit__(self, *_: object) -> None:
        if self.proc.poll() is None:
            self.kill()
        self.proc.stdout.close()


def due_table(deployment: Deployment, name: str = "access", days: int = 1) -> TableRecord:
    table = make_table(deployment, name=name)
    for day in range(days):
        date = DAY + dt.timedelta(days=day)
        add_small_objects(deployment, table, date, [rows_for(date, 3, day)], write_files=False)
    return table


def jobs(status: list[dict]) -> dict[str, int]:
    return {kind: count for kind, count in status[0]["jobs"].items() if count}


def claim(deployment: Deployment, now: dt.datetime, local: LocalHost | None = None) -> list:
    return deployment.catalog.merge_queue.claim(
        "rescuer", limit=10, now=now, timeout=TIMEOUT, per_table_limit=10, local=local or local_host()
    )


def test_a_killed_workers_claims_are_taken_over_at_once_and_show_stale(deployment: Deployment, monkeypatch) -> None:
    table = due_table(deployment, days=2)
    claimed_at = utcnow() + dt.timedelta(seconds=1)
    with Claimer(deployment, claimed_at) as worker:
        assert len(worker.jobs) == 2
        (row,) = deployment.catalog.merge_queue.jobs(deployment.catalog.partitions.list(table.id)[0].id)
        assert (row["owner_host"], row["owner_pid"]) == (claim_host(), worker.proc.pid)
        soon = claimed_at + dt.timedelta(seconds=5)
        assert jobs(deployment.catalog.merge_queue.status(soon, TIMEOUT, local_host())) == {"running": 2}
        worker.kill()

    assert not process_alive(worker.proc.pid)
    assert jobs(deployment.catalog.merge_queue.status(soon, TIMEOUT, local_host())) == {"stale": 2}
    assert jobs(deployment.catalog.merge_queue.status(soon, TIMEOUT)) == {"running": 2}, (
        "without local: the timeout rule"
    )
    status = json.loads(silt_in_process(deployment, monkeypatch)("status", "--json"))
    assert jobs(status["tables"]) == {"stale": 2}

    taken = claim(deployment, soon)
    assert sorted(job.id for job in taken) == sorted(worker.jobs) and all(job.taken_over for job in taken)
    assert jobs(deployment.catalog.merge_queue.status(soon, TIMEOUT, local_host())) == {"running": 2}, "ours now, alive"
    lost = [entry["error"] for entry in deployment.catalog.merge_queue.log()]
    assert len(lost) == 2 and all(
        entry.startswith(f"worker lost: process {worker.proc.pid} (")
        and "exited on this host" in entry
        and entry.endswith(f"(timeout {TIMEOUT} s); taken over by rescuer")
        for entry in lost
    ), lost


def test_a_live_workers_claims_are_not_taken_over(deployment: Deployment) -> None:
    due_table(deployment)
    claimed_at = utcnow() + dt.timedelta(seconds=1)
    with Claimer(deployment, claimed_at) as worker:
        assert len(worker.jobs) == 1
        soon = claimed_at + dt.timedelta(seconds=5)
        assert claim(deployment, soon) == []
        assert jobs(deployment.catalog.merge_queue.status(soon, TIMEOUT, local_host())) == {"running": 1}
        # Its heartbeat (not beaten here) goes stale after the timeout: then it is taken over, as before.
        late = claimed_at + dt.timedelta(seconds=TIMEOUT + 1)
        assert [job.id for job in claim(deployment, late)] == worker.jobs


def test_a_claim_from_another_host_waits_out_the_timeout(deployment: Deployment) -> None:
    due_table(deployment)
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    claimed_at = utcnow() + dt.timedelta(seconds=1)
    # Another machine's worker whose pid happens to be one that does not run here.
    elsewhere = dataclasses.replace(local_host(), name="other-host 0b2c pid:[4026531836]", pid=int(ended.stdout))
    assert not process_alive(elsewhere.pid)
    (job,) = claim(deployment, claimed_at, elsewhere)
    soon = claimed_at + dt.timedelta(seconds=5)
    assert claim(deployment, soon) == []
    assert jobs(deployment.catalog.merge_queue.status(soon, TIMEOUT, local_host())) == {"running": 1}
    late = claimed_at + dt.timedelta(seconds=TIMEOUT + 1)
    assert jobs(deployment.catalog.merge_queue.status(late, TIMEOUT, local_host())) == {"stale": 1}
    assert [j.id for j in claim(deployment, late)] == [job.id]


def test_process_alive_sees_the_living_the_dead_and_zombies() -> None:
    assert process_alive(os.getpid())
    assert process_alive(1), "pid 1 runs (as another user, or this container's init)"
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        time.sleep(0.01)  # until it has exited but is not yet waited for: a zombie
    assert not process_alive(child.pid)
    child.wait()
    assert not process_alive(child.pid)


def waiting(deployment: Deployment, table_id: int) -> list[dict]:
    return [
        job
        for partition in deployment.catalog.partitions.list(table_id)
        for job in deployment.catalog.merge_queue.jobs(partition.id)
    ]


def test_advance_and_count_scheduled_jobs_per_table(deployment: Deployment) -> None:
    """What `silt merge --once --now` and its "next due" line ask the catalog."""
    now = dt.datetime(2026, 11, 24, 10, 0)
    later = make_table(deployment, name="later", merge_interval="12h")
    soon = make_table(deployment, name="soon", merge_interval="1h")
    for table in (later, soon):
        for day in range(2):
            date = DAY + dt.timedelta(days=day)
            add_small_objects(deployment, table, date, [rows_for(date, 1, day)], now=now, write_files=False)
    catalog = deployment.catalog
    assert catalog.merge_queue.scheduled(now) == (4, now + dt.timedelta(hours=1))
    assert catalog.merge_queue.scheduled(now, [later.id]) == (2, now + dt.timedelta(hours=12))
    assert catalog.merge_queue.scheduled(now + dt.timedelta(hours=1)) == (2, now + dt.timedelta(hours=12))
    assert catalog.merge_queue.advance(now, [soon.id]) == 2
    assert catalog.merge_queue.scheduled(now) == (2, now + dt.timedelta(hours=12))
    assert {job["schedule_time"] for job in waiting(deployment, soon.id)} == {now}
    assert catalog.merge_queue.advance(now) == 2 and catalog.merge_queue.scheduled(now) == (0, None)


@pytest.mark.parametrize("batched", [False, True], ids=["one-object", "stream-batch"])
def test_a_claim_never_takes_the_job_a_commit_adding_objects_relies_on(deployment: Deployment, batched: bool) -> None:
    """The chaos suite lost delayed objects this way: a stream commit found the partition's waiting job, a worker
    claimed that job and planned before the commit's objects were visible, finished, and the objects were left
    with no job. While the commit is open the claim passes the job by (it never waits for it); after it, the
    claim takes the job and sees the objects."""
    if deployment.catalog.dialect != "postgresql":
        pytest.skip("SQLite's write lock serialises a commit and a claim: no interleaving to test")
    table = due_table(deployment)
    (partition,) = deployment.catalog.partitions.list(table.id)
    later = utcnow() + dt.timedelta(hours=1)
    during: dict[str, object] = {}

    def claim_while_open() -> None:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            during["claimed"] = pool.submit(claim, deployment, later).result(timeout=30)

    (added,) = add_small_objects(
        deployment,
        table,
        DAY,
        [rows_for(DAY, 3, 7)],
        write_files=False,
        batched=batched,
        before_commit=claim_while_open,
    )
    assert during["claimed"] == []
    (job,) = claim(deployment, later)
    _, _, unmerged = deployment.catalog.merge_queue.unmerged_objects(job.partition_id, 100)
    assert job.partition_id == partition.id and added in [o.id for o in unmerged]


def test_a_merge_worker_gives_a_job_to_objects_left_without_one(deployment: Deployment, caplog) -> None:
    """A catalog an older siltlake or a hand edit left with unmerged objects and no job: the worker's check
    schedules one (and says so); partitions that have a job, or whose objects are merged, are left alone."""
    import sqlalchemy as sa

    from siltlake.catalog import schema
    from siltlake.merge.runner import MergeWorker

    table = due_table(deployment, days=2)
    orphan, kept = deployment.catalog.partitions.list(table.id)
    with deployment.catalog.engine.begin() as connection:
        connection.execute(sa.delete(schema.merge_jobs).where(schema.merge_jobs.c.partition_id == orphan.id))
    assert deployment.catalog.merge_queue.jobs(orphan.id) == []
    worker = MergeWorker(deployment, clock=lambda: utcnow() - dt.timedelta(hours=1))  # the kept job is not due
    with caplog.at_level("WARNING", logger="siltlake.merge.runner"):
        claimed = worker.claim(10)
    assert [job.partition_id for job in claimed] == [orphan.id] and worker.report.unqueued == 1
    assert "merge.unqueued" in caplog.text
    assert deployment.catalog.merge_queue.schedule_unqueued(utcnow()) == []  # each has a job now
