"""A storage outage (a full or read-only lake) is the surroundings' failure, as in the stream: a merge job it
stops goes back to waiting without counting an attempt, so it never parks for it; and a temporary that cannot
be cleaned up never hides the error that stopped the job. Merged in-process, without Spark."""

from __future__ import annotations

import datetime as dt
import errno
import logging

from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.merge import MergeWorker
from siltlake.storage.filesystem import Storage

from .merge_helpers import add_small_objects, rows_for
from .test_merge import DAY, assert_exact, make_table


def no_space(self: Storage, key: str):  # Storage.open_output's signature
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_storage_outage_is_retried_without_counting_an_attempt(plain_deployment: Deployment, monkeypatch) -> None:
    deployment = plain_deployment
    deployment.config.merge.max_attempts = 2
    deployment.config.merge.retry_backoff = 60
    table = make_table(deployment, name="full")
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 40, seed) for seed in range(3)])
    (partition,) = deployment.catalog.partitions.list(table.id)
    start = utcnow() + dt.timedelta(seconds=1)

    monkeypatch.setattr(Storage, "open_output", no_space)
    for attempt in range(4):  # twice merge.max_attempts: an outage never parks the job
        now = start + dt.timedelta(seconds=61 * attempt)
        report = MergeWorker(deployment, clock=lambda now=now: now).run(once=True)
        assert (report.claimed, report.outages, report.failed, report.parked) == (1, 1, 0, 0)
        assert "No space left on device" in report.errors[0][2]
        (job,) = deployment.catalog.merge_queue.jobs(partition.id)
        assert (job["ongoing_mark"], job["attempts"]) == (0, 0)
        assert "storage outage" in job["last_error"] and "No space left" in job["last_error"]
        # Retried after merge.retry_backoff, not at once: a full disk is not hammered in a loop.
        assert job["schedule_time"] == now + dt.timedelta(seconds=60)
    monkeypatch.undo()

    recovered = start + dt.timedelta(seconds=61 * 4)
    report = MergeWorker(deployment, clock=lambda: recovered).run(once=True)
    assert (report.finished, report.failed, report.outages) == (1, 0, 0)
    assert_exact(deployment, table, partition.id, DAY)
    assert deployment.catalog.merge_queue.jobs(partition.id) == []


def test_a_failed_cleanup_does_not_replace_the_error(plain_deployment: Deployment, monkeypatch, caplog) -> None:
    deployment = plain_deployment
    table = make_table(deployment, name="readonly")
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 40, seed) for seed in range(2)])

    def read_only(self: Storage, key: str, missing_ok: bool = True) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(Storage, "open_output", no_space)
    monkeypatch.setattr(Storage, "delete", read_only)
    now = utcnow() + dt.timedelta(seconds=1)
    with caplog.at_level(logging.WARNING, logger="siltlake.merge"):
        report = MergeWorker(deployment, clock=lambda: now).run(once=True)
    ((_, _, error),) = report.errors
    assert "No space left on device" in error and "OSError" in error
    assert any(
        "merge.cleanup_failed" in r.getMessage() and "Read-only file system" in r.getMessage() for r in caplog.records
    )
