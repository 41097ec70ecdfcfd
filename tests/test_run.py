"""Single-host mode: the loop supervisor, and `silt run` as a real process from staging objects to published
merged versions, stopped with SIGINT."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import logging
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from siltlake.config import Config
from siltlake.deployment import Deployment
from siltlake.read import table as read_table
from siltlake.run.single_host import Loop, run_loops
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE, make_config
from .processes import SiltProcess, free_port, kill_session, wait_until

# --- the supervisor, without Spark ------------------------------------------------------------------------


def poll(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {timeout} s"
        time.sleep(0.01)


def test_a_failing_loop_is_retried_with_backoff_while_the_others_go_on(monkeypatch) -> None:
    from siltlake.polling import backoff
    from siltlake.run import single_host as run

    asked: list[float] = []

    def quick_backoff(interval: float, failures: int) -> float:
        """The real backoff, recorded, then scaled down from seconds to centiseconds."""
        asked.append(backoff(interval, failures))
        return asked[-1] / 100

    monkeypatch.setattr(run, "backoff", quick_backoff)
    stop = threading.Event()
    steady_rounds = {"n": 0}
    attempts = {"n": 0}

    def steady(stop: threading.Event) -> None:
        while not stop.wait(0.005):
            steady_rounds["n"] += 1
            loops[0].status.round_done(None, f"{steady_rounds['n']} rounds")

    def flaky(stop: threading.Event) -> None:
        attempts["n"] += 1
        if attempts["n"] <= 3:
            # Fail only once the steady loop has gone on since the last failure: the errors do not stop it.
            seen = steady_rounds["n"]
            poll(lambda: steady_rounds["n"] > seen + 1, 10, "steady rounds while the flaky loop fails")
            raise ConnectionError(f"catalog unreachable ({attempts['n']})")
        loops[1].status.round_done("recovered", "")
        stop.wait()

    loops = [Loop("steady", 0.005, steady), Loop("flaky", 0.5, flaky)]
    errors: list[tuple[str, str, float]] = []
    threads = run_loops(loops, stop, lambda name, exc, wait: errors.append((name, str(exc), wait)))
    try:
        poll(lambda: loops[1].status.last_work == "recovered", 10, "recovery of the flaky loop")
        during = steady_rounds["n"]
        poll(lambda: steady_rounds["n"] > during + 3, 10, "steady rounds after the recovery")
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    assert not any(thread.is_alive() for thread in threads), "a loop did not stop"
    assert [(name, message) for name, message, _ in errors] == [
        ("flaky", f"catalog unreachable ({n})") for n in (1, 2, 3)
    ]
    assert [wait for *_, wait in errors] == [0.01, 0.02, 0.04], "failures in a row double the wait"
    assert asked == [1.0, 2.0, 4.0], "from the loop's interval (at least 1 s), doubling"
    assert loops[1].status.errors == 3 and loops[1].status.detail == ""
    assert steady_rounds["n"] > 3 and loops[0].status.errors == 0
    assert {loop.status.state for loop in loops} == {"stopped"}


def test_backoff_doubles_up_to_ten_intervals() -> None:
    from siltlake.polling import backoff

    assert [backoff(10, n) for n in range(1, 7)] == [10, 20, 40, 80, 100, 100]
    assert backoff(0, 1) == 1.0, "a zero interval still waits"


# --- `silt run` as a process ------------------------------------------------------------------------------

PAST = [dt.date(2026, 11, 10), dt.date(2026, 11, 11)]  # closed by the first publish run, then switched
FUTURE = dt.date(2030, 1, 1)  # stays open: readers see its live objects


def events(date: dt.date, count: int, seed: int) -> list[dict]:
    """`count` events in the Tokyo day `date`, user ids unique per (seed, i)."""
    start = dt.datetime.combine(date, dt.time(0, 1), tzinfo=dt.UTC) - dt.timedelta(hours=9)
    return [
        {
            "time": (start + dt.timedelta(seconds=(seed * 7919 + i * 613) % 86000)).isoformat().replace("+00:00", "Z"),
            "user_id": seed * 1000 + i,
            "action": f"a{i % 3}",
        }
        for i in range(count)
    ]


def stage(staging: Path, date: dt.date, seed: int, count: int) -> list[dict]:
    """One gzip JSON-lines staging object, written under a temporary name and renamed, as shippers do."""
    records = events(date, count, seed)
    final = staging / f"fluentd.web.access/{date:%Y/%m/%d}/obj-{seed}.jsonl.gz"
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = final.with_name(final.name + ".tmp")  # skipped by discovery until renamed
    partial.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode()))
    partial.rename(final)
    return records


def write_run_config(tmp_path: Path, config: Config) -> dict[str, str]:
    import os

    path = tmp_path / "siltlake.toml"
    path.write_text(
        "\n".join(
            [
                f'instance_key = "{config.instance_key}"',
                "[catalog]",
                f'url = "{config.catalog.url}"',
                "[storage]",
                f'root = "{config.storage.root}"',
                f'staging_root = "{config.storage.staging_root}"',
                "[spark]",
                'master = "local[2]"',
                "[stream]",
                'poll_interval = "1s"',
                "[merge]",
                'poll_interval = "1s"',
                "[publish]",
                'interval = "1s"',
            ]
        )
        + "\n"
    )
    return {**os.environ, "SILTLAKE_CONFIG": str(path), "PYTHONUNBUFFERED": "1", "COLUMNS": "300"}


def stopped(daemon: SiltProcess, send: Callable[[], None], what: str) -> int:
    """Send the daemon its stop signal and return its exit status once it ended (within 60 s)."""
    send()
    try:
        return daemon.proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"silt run did not stop within 60 s of {what}\n{daemon.tail()}")


@pytest.mark.spark
def test_silt_run_streams_merges_and_publishes_until_sigint(tmp_path: Path, request) -> None:
    """Staged objects of two past days and a future one go through all three loops of one `silt run`:
    the past days close, merge, switch and publish merged versions, a late object for one of them is
    delayed, merged and published again, the future day shows live objects. SIGINT ends with status 0."""
    deployment = Deployment(make_config(tmp_path, f"sqlite:///{tmp_path / 'catalog.db'}"))
    deployment.init()
    catalog = deployment.catalog
    table = catalog.tables.create(TableDef.from_mapping({**ACCESS_TABLE, "merge_interval": "0s"}))
    staging = Path(deployment.config.storage.staging_root)
    env = write_run_config(tmp_path, deployment.config)
    connect_port = free_port()
    env["SILTLAKE_SPARK__CONNECT"] = f"127.0.0.1:{connect_port}"  # the session also serves Spark Connect
    expected: Counter = Counter()  # (dt, user_id) -> 1

    def add(date: dt.date, seed: int, count: int) -> None:
        expected.update((date, r["user_id"]) for r in stage(staging, date, seed, count))

    for seed, date in enumerate([*PAST, FUTURE, *PAST, FUTURE], 1):
        add(date, seed, 20 + seed)

    def partitions() -> dict[dt.date, object]:
        return {p.partition_date: p for p in catalog.partitions.list(table.id)}

    def newest_versions() -> dict[dt.date, object]:
        by_id = {p.id: p.partition_date for p in catalog.partitions.list(table.id)}
        return {by_id[v.partition_id]: v for v in catalog.versions.of_partitions(list(by_id))}  # in version order

    def published(late_id: int | None = None) -> bool:
        """Every past day switched with a merged version of all its objects; the future day live to its last."""
        if catalog.staging.pending(1):
            return False
        objects = catalog.partitions.small_objects(table.id)
        last = {
            date: max(o.id for o in objects if o.partition_date == date)
            for date in [*PAST, FUTURE]
            if any(o.partition_date == date for o in objects)
        }
        if set(last) != {*PAST, FUTURE}:
            return False
        current, newest = partitions(), newest_versions()
        return (
            all(current[d].switched and current[d].current_manifest_version == last[d] for d in PAST)
            and FUTURE in newest
            and newest[FUTURE].live_watermark == last[FUTURE]
            and (late_id is None or current[PAST[0]].current_manifest_version == late_id)
        )

    daemon = SiltProcess(tmp_path, "run", env, "run", "--metrics-port", "0")
    try:
        wait_until(published, [daemon], 90, "published merged versions of the past days")
        print(f"published {time.monotonic() - daemon.started:.1f} s after the start")
        # The same port serves /metrics (from the catalog) and the dashboard.
        served = re.search(r"the dashboard on (http://127\.0\.0\.1:\d+/)", daemon.log())
        assert served, daemon.tail()
        metrics = urllib.request.urlopen(served.group(1) + "metrics", timeout=30).read().decode()
        assert f'siltlake_records_loaded_total{{table="web.access"}} {float(sum(expected.values()))}' in metrics
        page = urllib.request.urlopen(served.group(1), timeout=30).read().decode()
        assert 'data-chart="freshness" data-table="web.access"' in page
        assert f"Spark Connect: sc://localhost:{connect_port}" in daemon.log(), daemon.tail()
        socket.create_connection(("127.0.0.1", connect_port), timeout=10).close()
        assert not catalog.partitions.small_objects(table.id, delayed=True)
        # A late object for a closed day is delayed, then merged and published with the next merged version.
        add(PAST[0], 50, 7)
        add(FUTURE, 51, 5)
        wait_until(
            lambda: catalog.partitions.small_objects(table.id, delayed=True), [daemon], 60, "a delayed small object"
        )
        (late,) = catalog.partitions.small_objects(table.id, delayed=True)
        wait_until(lambda: published(late.id), [daemon], 60, "the delayed object merged and published")
        print(f"late object published {time.monotonic() - daemon.started:.1f} s after the start")
        returncode = stopped(daemon, lambda: daemon.proc.send_signal(signal.SIGINT), "SIGINT")
    finally:
        kill_session(daemon.pid)
        daemon.proc.wait(timeout=30)
    assert returncode == 0, daemon.tail()
    log = daemon.err.read_text()
    assert "stopped" in log and "Traceback" not in log, daemon.tail()
    for line in ("stream: ", "merge: ", "publish: ", "silt run"):
        assert line in log, f"no {line!r} in the output\n{daemon.tail()}"

    # What readers see: exactly the staged rows, once each, in their partitions.
    spark = request.getfixturevalue("spark")  # started only now, not beside the daemon's JVM
    deployment.use_spark(spark)
    rows = read_table(spark, "web.access", deployment).select("dt", "user_id").collect()
    assert Counter((r.dt, r.user_id) for r in rows) == expected
    assert len(rows) == sum(expected.values()) == 20 * 6 + (1 + 2 + 3 + 4 + 5 + 6) + 12
    versions = newest_versions()
    history = [v.commit_op for v in catalog.versions.of_partitions([partitions()[PAST[0]].id])]
    assert history[0] == "append" and history[-2:] == ["compaction", "compaction"], history
    assert versions[PAST[1]].commit_op == "compaction" and versions[FUTURE].commit_op == "append"
    deployment.close()


@pytest.mark.spark
def test_a_stream_round_that_commits_wakes_publish(deployment: Deployment, access_table, tmp_path: Path) -> None:
    """Under `silt run`, objects are visible to readers one stream round after their put, not a publish.interval
    later: the round that commits them starts a publish run."""
    from siltlake.run.single_host import SingleHost

    deployment.config.stream.poll_interval = 1
    deployment.config.publish.interval = 3600
    deployment.config.reap.interval = 3600
    host = SingleHost(deployment)
    host.start()
    try:
        time.sleep(2)  # the first publish run is over: the next would come an hour later
        put = time.monotonic()
        stage(Path(deployment.config.storage.staging_root), FUTURE, 1, 5)

        def visible() -> bool:
            partitions = deployment.catalog.partitions.list(access_table.id)
            versions = deployment.catalog.versions.of_partitions([p.id for p in partitions])
            return any(v.live_watermark for v in versions)

        deadline = put + 60
        while not visible():
            assert time.monotonic() < deadline, "the object was not published within 60 s"
            time.sleep(0.2)
        print(f"visible {time.monotonic() - put:.1f} s after the put")
    finally:
        host.stop()
        assert host.join(60)


def test_after_a_stop_signal_py4js_own_trace_of_the_gone_jvm_is_not_printed() -> None:
    """py4j logs a failed call with `logging.exception` on the root logger, which prints its trace; once a daemon
    stops, its own error handler already says in one line what the shutdown cut short."""
    import py4j.java_gateway

    from siltlake.cli.observing import not_py4j

    def record(pathname: str) -> logging.LogRecord:
        return logging.LogRecord("root", logging.ERROR, pathname, 1060, "Exception while sending command.", (), None)

    assert not not_py4j(record(py4j.java_gateway.__file__))
    assert not_py4j(record(__file__)) and not_py4j(record("/opt/app/not_py4j/x.py"))


def test_the_daemons_sigterm_sets_their_stop_and_quiets_py4j_from_then_on() -> None:
    """`silt stream`, `silt merge` and `silt publish` stop on SIGTERM as on Ctrl-C; a group's SIGTERM ends the JVM
    too, so py4j's trace is dropped from the signal on, and not before it."""
    from siltlake.cli.observing import not_py4j, stop_on_sigterm

    root = logging.getLogger()
    before = signal.getsignal(signal.SIGTERM)
    stop = threading.Event()
    try:
        stop_on_sigterm(stop)
        assert not stop.is_set() and not_py4j not in root.filters
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5) and not_py4j in root.filters
    finally:
        signal.signal(signal.SIGTERM, before)
        root.removeFilter(not_py4j)


@pytest.mark.spark
def test_silt_run_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    """SIGTERM (a service manager's stop) takes Ctrl-C's path: the loops stop after their round, exit status 0,
    no trace. The signal goes to the whole process group, as systemd's default KillMode sends it, so it reaches
    Spark's JVM under the running round too."""
    deployment = Deployment(make_config(tmp_path, f"sqlite:///{tmp_path / 'catalog.db'}"))
    deployment.init()
    deployment.catalog.tables.create(TableDef.from_mapping({**ACCESS_TABLE, "merge_interval": "0s"}))
    stage(Path(deployment.config.storage.staging_root), PAST[0], 1, 50)
    env = write_run_config(tmp_path, deployment.config)
    deployment.close()
    daemon = SiltProcess(tmp_path, "run", env, "run")
    try:
        wait_until(lambda: "event=reap.run" in daemon.log(), [daemon], 120, "silt run's loops running")
        returncode = stopped(daemon, lambda: os.killpg(daemon.pid, signal.SIGTERM), "SIGTERM")
    finally:
        kill_session(daemon.pid)
        daemon.proc.wait(timeout=30)
    log = daemon.err.read_text()
    assert returncode == 0, daemon.tail()
    assert "SIGTERM: stopping" in log and "stopped" in log, daemon.tail()
    assert "Traceback" not in log and "\tat org.apache" not in log and " at org.apache" not in log, daemon.tail()
