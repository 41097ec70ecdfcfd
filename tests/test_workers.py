"""This host's worker processes (siltlake/workers.py) and the stream waves that run on them instead of Spark."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from siltlake.deployment import Deployment
from siltlake.stream import stage as wave_stage
from siltlake.stream import stream_once
from siltlake.tabledef import TableDef
from siltlake.workers import WorkersLost, balanced_groups, close_workers, run_on_workers

from .conftest import ACCESS_TABLE, make_config
from .test_stream import event, jsonl_gz, lake_files, stage

UTC = dt.UTC


def _apart(script: str) -> subprocess.CompletedProcess:
    """The script run in a fresh interpreter of one thread, from the checkout (its tests import), succeeding."""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[1]
    )
    assert result.returncode == 0, result.stderr
    return result


def test_results_come_back_in_item_order_and_a_closure_goes_by_value() -> None:
    offset = 1000
    seen: list[int] = []
    results = run_on_workers(
        lambda n: (n + offset, os.getpid()),
        list(range(57)),
        weights=[n % 5 for n in range(57)],
        on_progress=seen.append,
    )
    assert [value for value, _ in results] == [n + 1000 for n in range(57)]
    assert os.getpid() not in {pid for _, pid in results}  # it ran elsewhere
    assert sum(seen) == 57
    assert run_on_workers(abs, []) == []


def test_a_task_that_prints_leaves_the_answers_intact() -> None:
    def noisy(n: int) -> int:
        print("a task's own output", n)  # goes to the worker's stderr, not into the answers' pipe
        return n * 2

    assert run_on_workers(noisy, [1, 2, 3]) == [2, 4, 6]


def test_a_task_raising_raises_in_the_caller_and_the_next_call_works() -> None:
    def fails_on_three(n: int) -> int:
        if n == 3:
            raise ValueError(f"item {n} is bad")
        return n

    with pytest.raises(ValueError, match="item 3 is bad"):
        run_on_workers(fails_on_three, list(range(6)))
    assert run_on_workers(fails_on_three, [0, 1, 2]) == [0, 1, 2]


def test_a_worker_that_dies_fails_the_call_with_workers_lost_and_new_ones_start() -> None:
    def dies_on_two(n: int) -> int:
        if n == 2:
            os._exit(9)  # as the kernel's OOM killer would end it: no answer, no exception
        return n

    with pytest.raises(WorkersLost, match="ended"):
        run_on_workers(dies_on_two, list(range(5)))
    assert run_on_workers(dies_on_two, [0, 1]) == [0, 1]
    close_workers()
    assert run_on_workers(abs, [-4]) == [4]  # started afresh after close


def test_balanced_groups_keep_every_item_once() -> None:
    items = list(range(23))
    groups = balanced_groups(items, [1 + n % 4 for n in items], 5)
    assert sorted(item for group in groups for item in group) == items and len(groups) == 5


def _staged(tmp_path: Path, catalog_url: str, spark, **stream: object) -> Deployment:
    deployment = Deployment(make_config(tmp_path, catalog_url, **stream))
    deployment.init()
    deployment.use_spark(spark)
    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    when = dt.datetime(2026, 11, 20, 14, 58, tzinfo=UTC)  # the Tokyo day turns at 15:00 UTC: two dates
    for n in range(12):
        stage(
            deployment,
            f"f.web.access/2026/11/20/{n:02d}.jsonl.gz",
            jsonl_gz([event(when + dt.timedelta(minutes=2 * i - n), n * 100 + i) for i in range(1 + n % 5)]),
        )
    return deployment


def _rows(deployment: Deployment) -> list[dict]:
    rows = []
    for key in lake_files(deployment, "live"):
        table = pq.read_table(deployment.lake.path(key))
        rows.extend(table.drop_columns([c for c in table.column_names if c == "dt"]).to_pylist())
    return sorted(rows, key=lambda row: row["user_id"])


@pytest.mark.spark
def test_a_small_wave_on_the_workers_loads_what_a_spark_stage_loads(tmp_path: Path, spark) -> None:
    on_workers = _staged(tmp_path / "workers", f"sqlite:///{tmp_path / 'workers.db'}", spark)
    on_spark = _staged(
        tmp_path / "spark", f"sqlite:///{tmp_path / 'spark.db'}", spark, in_driver_bytes=0, wave_engine="spark"
    )
    try:
        local, remote = stream_once(on_workers), stream_once(on_spark)
        assert (local.waves, local.local_waves, local.processed, local.failed) == (1, 1, 12, [])
        assert (remote.waves, remote.local_waves, remote.processed, remote.failed) == (1, 0, 12, [])
        assert local.records_loaded == remote.records_loaded == sum(1 + n % 5 for n in range(12))
        assert local.live_objects == remote.live_objects  # grouped alike: the same cores on both
        assert _rows(on_workers) == _rows(on_spark)
        assert [key.rsplit("/", 1)[0] for key in lake_files(on_workers, "live")] == [
            key.rsplit("/", 1)[0] for key in lake_files(on_spark, "live")
        ]
    finally:
        on_workers.close()
        on_spark.close()


@pytest.mark.spark
def test_a_wave_whose_worker_dies_runs_again_on_spark(
    tmp_path: Path, catalog_url: str, spark, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    deployment = _staged(tmp_path, catalog_url, spark, group_bytes=0)  # each object its own task
    real = wave_stage.process_wave_item

    def dies_outside_spark(task):  # the worker process ends; Spark's worker decodes it
        from pyspark import TaskContext

        if TaskContext.get() is None and task.uri.endswith("/05.jsonl.gz"):
            os._exit(9)
        return real(task)

    monkeypatch.setattr(wave_stage, "process_wave_item", dies_outside_spark)
    try:
        with caplog.at_level("WARNING", logger="siltlake.stream.stage"):
            report = stream_once(deployment)
        assert (report.waves, report.local_waves, report.processed, report.failed) == (1, 0, 12, [])
        assert report.records_loaded == sum(1 + n % 5 for n in range(12))
        assert any("stream.workers_lost" in record.getMessage() for record in caplog.records)
        assert len({row["user_id"] for row in _rows(deployment)}) == report.records_loaded
    finally:
        deployment.close()


def test_an_interrupted_call_kills_its_workers_and_the_next_call_starts_new_ones() -> None:
    import time

    def slow(n: int) -> int:
        time.sleep(0.05)
        return n

    def interrupt(_count: int) -> None:  # as Ctrl-C reaching the calling thread between two groups
        raise KeyboardInterrupt

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_on_workers(slow, list(range(80)), on_progress=interrupt)
    assert time.monotonic() - started < 2.5  # the rest of the 80 x 50 ms was not waited for
    assert run_on_workers(slow, [5, 6]) == [5, 6]


def test_a_module_function_goes_by_reference_without_pyspark_in_the_caller() -> None:
    # A cold `silt stream --once` would otherwise import PySpark (about 0.4 s) only to pickle a module's function.
    script = (
        "import sys, os.path\nfrom siltlake.workers import run_on_workers, close_workers\n"
        "print(run_on_workers(os.path.basename, ['/a/b', '/c/d'], [1, 1]))\nclose_workers()\n"
        "print('pyspark' in sys.modules)"
    )
    result = _apart(script)
    assert result.stdout.split() == ["['b',", "'d']", "False"], result.stdout


def _imported(name: str) -> bool:
    return name in sys.modules


def test_workers_start_with_what_they_preload_and_without_pandas() -> None:
    # Run apart: the suite's own workers may be up already, started without a preload.
    script = (
        "import sys\nfrom siltlake.workers import start_workers, run_on_workers, close_workers\n"
        "start_workers('tabnanny')\n"
        "from tests.test_workers import _imported\n"
        "print(run_on_workers(_imported, ['tabnanny', 'pandas'], [1, 1]))\n"
        "import pyarrow as pa\n"
        "print(run_on_workers(pa.array, [[1, 2]], [1])[0].to_pylist())\n"
        "close_workers()\n"
    )
    result = _apart(script)
    # pyarrow converts Python values without the pandas it would import (0.2 s a process) where it is installed.
    assert result.stdout.split("\n")[:2] == ["[True, False]", "[1, 2]"], result.stdout


def test_workers_that_never_had_a_call_are_not_waited_for() -> None:
    import time

    from siltlake import workers

    close_workers()
    workers.start_workers("siltlake.stream.group_task")  # importing for a second or so
    started = time.monotonic()
    close_workers()
    assert time.monotonic() - started < 0.5


def _parent_and_noise(n: int) -> tuple[int, int]:
    import time

    print(f"a forked task's own output {n}")  # stderr (one write: workers share it): stdout is the command's report
    time.sleep(0.1)  # long enough for every worker to be given a group
    return n, os.getppid()


FORKED = """
import json, os, sys, time
import tabnanny  # imported here only: a forked worker has it without importing it
from siltlake import workers
from tests.test_workers import _imported, _parent_and_noise
forked = workers.fork_workers()
processes = [worker.process for worker in workers._current.workers]
items = list(range(8))
answers = workers.run_on_workers(_parent_and_noise, items, [1] * len(items))
imported = workers.run_on_workers(_imported, ["tabnanny", "pandas"], [1, 1])
called = list(workers._current.workers)
started = time.monotonic()
workers.close_workers()
print(json.dumps({
    "forked": forked, "answers": answers, "imported": imported, "parent": os.getpid(),
    "codes": [process.poll() for process in processes], "close_seconds": time.monotonic() - started,
    "called": [worker.called for worker in called],
}))
"""


def test_forked_workers_have_this_process_modules_and_end_when_their_pipes_close() -> None:
    import json

    result = _apart(FORKED)  # a process of one thread, as `silt stream` is when it forks its workers
    report = json.loads(result.stdout)  # nothing but the report: the tasks' prints went to stderr
    assert report["forked"] is True
    assert [n for n, _ in report["answers"]] == list(range(8))
    assert {parent for _, parent in report["answers"]} == {report["parent"]}  # children of this process
    assert "a forked task's own output 7" in result.stderr
    assert report["imported"] == [True, False]  # the parent's modules, and still no pandas
    # Each worker closed its siblings' pipes: closing a worker's input ends it (code 0), none waited for and killed.
    assert all(report["called"]) and report["codes"] == [0] * len(report["codes"])
    assert report["close_seconds"] < 2


def test_workers_are_not_forked_from_a_process_running_threads() -> None:
    script = (
        "import threading\nfrom siltlake import workers\n"
        "stop = threading.Event()\nthreading.Thread(target=stop.wait).start()\n"
        "print(workers.fork_workers(), workers._current is None)\nstop.set()\n"
    )
    assert _apart(script).stdout.split() == ["False", "True"]
