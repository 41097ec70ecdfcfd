"""`silt merge --once` says when the jobs it did not run are due, and `--now` runs them."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from siltlake.deployment import Deployment

from .merge_helpers import add_small_objects, rows_for, silt_in_process
from .test_merge import DAY, make_table

pytestmark = pytest.mark.spark


@pytest.fixture
def catalog_url(tmp_path) -> str:
    """The catalog side of --now runs on both catalogs in test_merge_claims.py."""
    return f"sqlite:///{tmp_path / 'catalog.db'}"


def waiting(deployment: Deployment, table_id: int) -> list[dict]:
    return [
        job
        for partition in deployment.catalog.partitions.list(table_id)
        for job in deployment.catalog.merge_queue.jobs(partition.id)
    ]


def test_merge_once_names_the_next_due_job_and_now_merges_it(deployment: Deployment, monkeypatch) -> None:
    table = make_table(deployment, merge_interval="12h")
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 20, seed) for seed in range(3)])
    (job,) = waiting(deployment, table.id)
    silt = silt_in_process(deployment, monkeypatch)

    output = " ".join(silt("merge", "--once").split())
    assert "merge: 0 jobs in 0 Spark stages" in output
    assert (
        f"1 jobs scheduled for later (merge_interval or retry backoff), next due "
        f"{job['schedule_time']:%Y-%m-%d %H:%M:%S} UTC (in 12.0h); `silt merge --once --now` merges them now" in output
    ), output
    printed = silt("merge", "--once", "--json")
    report, _ = json.JSONDecoder().raw_decode(printed[printed.index("{") :])
    assert (report["claimed"], report["scheduled"]) == (0, 1)
    assert report["next_due"] == str(job["schedule_time"])

    output = " ".join(silt("merge", "--once", "--now").split())
    assert "1 scheduled jobs made due now" in output and "merge: 1 jobs in 0 Spark stages: 1 finished" in output
    assert "no merge jobs scheduled for later" in output
    (partition,) = deployment.catalog.partitions.list(table.id)
    assert deployment.catalog.merge_queue.ranges(partition.id)[-1].upper == partition.desired_manifest_version > 0
    assert waiting(deployment, table.id) == []


def test_merge_now_with_a_time_runs_as_of_that_time(deployment: Deployment, monkeypatch) -> None:
    table = make_table(deployment, merge_interval="12h")
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 20, 0)])
    (job,) = waiting(deployment, table.id)
    due = job["schedule_time"].replace(tzinfo=dt.UTC)
    silt = silt_in_process(deployment, monkeypatch)

    early = " ".join(silt("merge", "--once", "--now", (due - dt.timedelta(minutes=5)).isoformat()).split())
    assert "merge: 0 jobs" in early and "(in 5m);" in early
    on_time = " ".join(silt("merge", "--once", "--now", due.isoformat().replace("+00:00", "Z")).split())
    assert "merge: 1 jobs in 0 Spark stages: 1 finished" in on_time
    (entry,) = deployment.catalog.merge_queue.log()
    assert entry["end_time"] == job["schedule_time"], "stamped with the given time, as publish --now"

    assert "--now works with --once" in silt("merge", "--now", code=2)
    assert "is not an ISO-8601 time" in silt("merge", "--once", "--now", "tomorrow", code=2)
