"""The whole pipeline on a Spark standalone cluster (a master and two workers) with a PostgreSQL catalog.

Stream, merge, publish, read and reap run with spark.master=spark://127.0.0.1:<port> in a driver process of
their own (every `silt` command in it opens the deployment's session again: siltlake.zip is shipped once),
while the same steps run on the test session's local SparkSession: the results must be equal and match the
sample. The cluster is started once per module (siltlake.standalone) and stopped after it.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pytest

from siltlake.catalog.provision import create_postgres_database, drop_postgres_database
from siltlake.demo.cluster import CLUSTER_CONF, PipelineProcess, run_pipeline
from siltlake.standalone import ClusterStartError, standalone_cluster

from .conftest import PG_ADMIN_URL, require_postgres

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with standalone_cluster(tmp_path_factory.mktemp("standalone"), workers=2, cores=1, memory="1g") as started:
        yield started


@pytest.fixture
def second_postgres_url():
    """Another fresh PostgreSQL database (postgres_url gives one per test), dropped afterwards."""
    require_postgres()
    name = f"silt_test_{uuid.uuid4().hex[:12]}"
    yield create_postgres_database(PG_ADMIN_URL, name)
    drop_postgres_database(PG_ADMIN_URL, name)


@pytest.mark.postgres
def test_pipeline_on_a_standalone_cluster_equals_local(
    tmp_path, cluster, postgres_url, second_postgres_url, spark, monkeypatch
) -> None:
    for key in [key for key in os.environ if key.startswith("SILTLAKE_")]:
        monkeypatch.delenv(key)
    with PipelineProcess("cluster", tmp_path / "cluster", postgres_url, cluster.master_url, CLUSTER_CONF) as run:
        # Meanwhile the same steps in this process, on the session's local[2] SparkSession (local[*] on 2 cores).
        on_local = run_pipeline(tmp_path / "local", second_postgres_url, "local[*]", say=lambda line: None)
        on_cluster = run.results()

    assert on_cluster == on_local
    sample = on_cluster["sample"]
    header, *rows = on_cluster["rows"]
    assert header[-1] == "dt" and len(rows) == sample["good_records"]
    assert on_cluster["counts"] == on_cluster["counts_after_reap"] == sample["records_by_date"]
    assert sum(round_["bad_records"] for round_ in on_cluster["stream"]) == sample["bad_records"] > 0
    assert on_cluster["unknown_objects"] == sample["malformed_objects"] > 0
    # web03's late object arrived after day 1 was closed: delayed, then merged and published.
    assert [round_["delayed_objects"] for round_ in on_cluster["stream"]] == [0, 1]
    first_day, second_day = sorted(sample["records_by_date"])
    ops = {date: [v["op"] for v in on_cluster["versions"] if v["date"] == date] for date in (first_day, second_day)}
    assert ops == {first_day: ["append", "compaction", "compaction"], second_day: ["append", "compaction"]}
    newest = {v["date"]: v["rows"] for v in on_cluster["versions"]}
    assert newest == sample["records_by_date"]
    reasons = on_cluster["reap"]["reasons"]
    assert reasons["covered"]["objects"] == sum(
        round_["live_objects"] + round_["delayed_objects"] for round_ in on_cluster["stream"]
    )
    assert reasons["superseded"]["objects"] >= 1 and reasons["expired"]["catalog_rows"] >= 1

    # Both workers ran an executor, and each executor ran tasks.
    assert len(cluster.executors_launched()) == 2 and min(cluster.executors_launched()) >= 1
    for work_dir in cluster.work_dirs:
        executor_logs = list(work_dir.glob("app-*/*/stderr"))
        assert executor_logs and any("Finished task" in log.read_text(errors="replace") for log in executor_logs)


def test_a_worker_that_cannot_start_is_reported_with_its_log_and_nothing_is_left_running(tmp_path) -> None:
    with (
        pytest.raises(ClusterStartError, match=r"(?s)worker 1 exited.*Memory") as failure,
        standalone_cluster(tmp_path, workers=1, memory="0m"),
    ):
        pass
    assert "worker-1.log" in str(failure.value)
    master_log = (tmp_path / "master.log").read_text()
    assert "elected leader" in master_log
    master_pid = int(re.search(r"Started daemon with process name: (\d+)@", master_log).group(1))
    assert not Path(f"/proc/{master_pid}").exists()
