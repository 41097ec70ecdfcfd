"""Object storage faults on the local S3 endpoint: 500/503 answers on a fraction of requests (injected by the
loopback proxy), and the S3 server stopped and started again in the middle of a stream round and of a merge.
The daemons' loops retry; every record ends up in the table exactly once."""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.merge import MergeWorker, merge_once
from siltlake.publish import publish_once
from siltlake.stream import stream_once
from siltlake.stream.runner import stream_forever
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE
from .merge_helpers import add_small_objects, rows_for
from .s3_server import CountingProxy, MotoS3, s3_config
from .test_merge import DAY, assert_exact, make_table, only_partition
from .test_publish import tokyo
from .test_s3_pipeline import events, jsonl_gz, stage

pytestmark = pytest.mark.spark
OUTAGE_SECONDS = 2.0


def open_deployment(
    tmp_path: Path,
    spark,
    moto_s3: MotoS3,
    proxy: CountingProxy,  # the session
    **sections: object,
) -> Deployment:
    config = s3_config(moto_s3.create_bucket(), proxy.endpoint, f"sqlite:///{tmp_path / 'catalog.db'}", **sections)
    deployment = Deployment(config)
    deployment.init()
    deployment.use_spark(spark)
    return deployment


def user_ids(deployment: Deployment) -> Counter:
    with Lake(deployment) as lake:
        return Counter(lake.table("web.access").to_arrow(columns=["user_id"]).column("user_id").to_pylist())


def outage_after(proxy: CountingProxy, moto_s3: MotoS3, requests: int) -> threading.Thread:
    """A thread that stops the S3 server once the proxy has passed `requests` more requests, and starts it again
    OUTAGE_SECONDS later (moto keeps its buckets in this process)."""
    start = proxy.counts["total"]

    def run() -> None:
        deadline = time.monotonic() + 60
        while proxy.counts["total"] < start + requests and time.monotonic() < deadline:
            time.sleep(0.005)
        moto_s3.stop()
        time.sleep(OUTAGE_SECONDS)
        moto_s3.start()

    thread = threading.Thread(target=run, name="s3-outage", daemon=True)
    thread.start()
    return thread


def wait_until(condition, seconds: float, what: str) -> None:  # a callable
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_injected_500_and_503_answers_are_retried_and_change_nothing(
    tmp_path: Path, spark, moto_s3: MotoS3, s3_proxy: CountingProxy
) -> None:
    deployment = open_deployment(tmp_path, spark, moto_s3, s3_proxy)
    try:
        deployment.catalog.tables.create(TableDef.from_mapping({**ACCESS_TABLE, "merge_interval": 0}))
        for n in range(4):
            stage(deployment, f"f1.web.access/2026/11/20/obj-{n}.jsonl.gz", jsonl_gz(events(20, 40, n)))
        s3_proxy.fail_every = 6  # one request in six answered 503 SlowDown or 500 InternalError
        report = stream_once(deployment)
        assert (report.processed, report.records_loaded, report.failed) == (4, 160, [])
        merged = merge_once(deployment)
        assert (merged.finished, merged.failed) == (1, 0)
        publish_once(deployment, now=tokyo(DAY, 23))
        counts = s3_proxy.reset()
        assert s3_proxy.injected >= 6 and counts["total"] >= 6 * s3_proxy.injected
        s3_proxy.fail_every = 0
        ids = user_ids(deployment)
        assert len(ids) == 160 and set(ids.values()) == {1}, "every record once"
    finally:
        deployment.close()


def test_the_s3_server_stops_mid_stream_and_the_daemon_resumes(
    tmp_path: Path, spark, moto_s3: MotoS3, s3_proxy: CountingProxy
) -> None:
    # Few attempts per request, so that the outage fails a round or its objects (the retries are what is tested).
    deployment = open_deployment(tmp_path, spark, moto_s3, s3_proxy, max_attempts=2, stream={"objects_per_wave": 3})
    try:
        deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
        for n in range(12):
            stage(deployment, f"f1.web.access/2026/11/20/obj-{n}.jsonl.gz", jsonl_gz(events(20, 20, n)))
        stop = threading.Event()
        reports, errors = [], []
        outage = outage_after(s3_proxy, moto_s3, 30)
        daemon = threading.Thread(
            target=stream_forever,
            name="stream-daemon",
            daemon=True,
            kwargs={
                "deployment": deployment,
                "stop": stop,
                "interval": 0.2,
                "on_report": reports.append,
                "on_error": lambda exc, wait: errors.append(repr(exc)),
            },
        )
        daemon.start()
        try:
            outage.join(90)
            wait_until(lambda: not deployment.catalog.staging.pending(100), 120, "every staging object processed")
        finally:
            stop.set()
            daemon.join(120)
        # Where the outage lands decides how it shows: a listing or commit it breaks fails the round (the loop
        # retries it), a task's reads it breaks fail those objects in a round that goes on (the next retries them).
        failed_objects = [reason for report in reports for _, reason in report.failed]
        assert errors or failed_objects, "the outage failed a round or some objects, which were retried"
        ids = user_ids(deployment)
        assert len(ids) == 12 * 20 and set(ids.values()) == {1}, "nothing lost, nothing doubled"
        print(f"stream rounds: {len(reports)} reported, {len(errors)} failed, {len(failed_objects)} object failures")
    finally:
        deployment.close()


def test_the_s3_server_stops_mid_merge_and_the_worker_finishes_the_job(
    tmp_path: Path, spark, moto_s3: MotoS3, s3_proxy: CountingProxy
) -> None:
    deployment = open_deployment(
        tmp_path,
        spark,
        moto_s3,
        s3_proxy,
        max_attempts=2,
        merge={"retry_backoff": 1, "poll_interval": 1, "in_driver_bytes": 0},
    )
    try:
        table = make_table(deployment)
        add_small_objects(deployment, table, DAY, [rows_for(DAY, 300, seed) for seed in range(8)])
        stop = threading.Event()
        errors: list[str] = []
        worker = MergeWorker(deployment)
        outage = outage_after(s3_proxy, moto_s3, 6)
        thread = threading.Thread(
            target=worker.run,
            name="merge-worker",
            daemon=True,
            kwargs={"stop": stop, "on_error": lambda exc, wait: errors.append(repr(exc))},
        )
        thread.start()
        try:
            outage.join(90)
            wait_until(
                lambda: (
                    only_partition(deployment, table).desired_manifest_version
                    == max(o.id for o in deployment.catalog.partitions.small_objects(table.id))
                ),
                120,
                "the merge to commit",
            )
        finally:
            stop.set()
            thread.join(120)
        partition = only_partition(deployment, table)
        assert_exact(deployment, table, partition.id, DAY)
        outcomes = [entry["outcome"] for entry in deployment.catalog.merge_queue.log(partition.id)]
        assert outcomes[-1] == "finished" and outcomes.count("finished") == 1, outcomes
        print("merge outcomes:", outcomes, errors[:1])
        assert sum(r.row_count for r in deployment.catalog.merge_queue.ranges(partition.id)) == 8 * 300
    finally:
        deployment.close()
