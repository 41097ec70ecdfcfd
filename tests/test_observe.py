"""Metrics, metric history and logging after a known pipeline run (stream on Spark, merge, publish), on
SQLite and PostgreSQL: every metric checked against the catalog rows it is derived from."""

from __future__ import annotations

import datetime as dt
import io
import json
import logging
import urllib.error
import urllib.request

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from siltlake import logs
from siltlake.clock import utcnow
from siltlake.config import is_loopback
from siltlake.deployment import Deployment
from siltlake.merge import MergeWorker
from siltlake.observe import history
from siltlake.observe.dashboard import ObserveServer
from siltlake.observe.metrics import DURATION_BUCKETS, observe_report, registry_for, summary_line
from siltlake.publish import publish_once
from siltlake.reap import reap_once
from siltlake.stream import stream_once
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE
from .test_stream import event, jsonl_gz, stage


def scrape(deployment: Deployment) -> dict[tuple[str, tuple], float]:
    """Every sample of a scrape, by (name, sorted labels)."""
    text = generate_latest(registry_for(deployment)).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.mark.spark
def test_metrics_and_history_match_the_catalog_after_a_pipeline_run(deployment: Deployment, access_table) -> None:
    now = utcnow().replace(tzinfo=dt.UTC)
    day = f"{now:%Y/%m/%d}"
    stage(
        deployment,
        f"f1.web.access/{day}/a.jsonl.gz",
        jsonl_gz([event(now - dt.timedelta(minutes=i), i) for i in range(6)]),
    )
    stage(deployment, f"f1.web.access/{day}/b.jsonl.gz", jsonl_gz([event(now, 100), {"time": "x", "user_id": 1}]))
    stage(deployment, f"f1.web.nosuchtable/{day}/c.jsonl.gz", jsonl_gz([event(now, 7)]))
    before = scrape(deployment)
    assert value(before, "siltlake_catalog_up") == 1
    assert value(before, "siltlake_records_loaded_total", table="web.access") == 0

    report = stream_once(deployment)
    assert (report.records_loaded, report.bad_records) == (7, 1)
    samples = scrape(deployment)
    assert value(samples, "siltlake_records_loaded_total", table="web.access") == 7
    assert value(samples, "siltlake_bad_records_total", table="web.access") == 1
    assert value(samples, "siltlake_staging_objects_pending", table="web.access") == 0
    assert value(samples, "siltlake_staging_objects_registered", table="web.access") == 2
    assert value(samples, "siltlake_unknown_objects") == len(deployment.catalog.staging.unknown()) == 1
    objects = deployment.catalog.partitions.small_objects(access_table.id)
    by_date: dict[str, int] = {}
    for item in objects:
        by_date[item.partition_date.isoformat()] = by_date.get(item.partition_date.isoformat(), 0) + 1
    for date, count in by_date.items():
        assert value(samples, "siltlake_small_file_debt_objects", table="web.access", date=date) == count
    assert value(samples, "siltlake_unmerged_objects", table="web.access") == len(objects)
    assert value(samples, "siltlake_merge_jobs", table="web.access", state="scheduled") == len(by_date)
    assert value(samples, "siltlake_freshness_seconds_count", table="web.access") == 0  # nothing visible yet
    assert summary_line(deployment).startswith("7 records loaded (1 bad), 0 staging objects pending, 1 unknown, ")

    published = publish_once(deployment)
    assert published.live_versions
    samples = scrape(deployment)
    assert value(samples, "siltlake_freshness_seconds_count", table="web.access") == len(objects)
    assert value(samples, "siltlake_freshness_seconds_bucket", table="web.access", le="+Inf") == len(objects)
    # Run just after midnight in the table's zone, yesterday's partition is closed by then, not live.
    states = [row["state"] for row in deployment.catalog.partitions.summary(access_table.id)]
    assert len(states) == len(by_date) and set(states) <= {"live", "closed"}
    for state in ("live", "closed"):
        assert value(samples, "siltlake_partitions", table="web.access", state=state) == states.count(state)

    # The hour slot ending after now (sampled as its end passes): what was loaded and made visible in it.
    later = utcnow() + dt.timedelta(hours=1)
    stored = history.record(deployment, now=later, interval=3600)
    assert stored == 1 and history.record(deployment, now=later, interval=3600) == 0  # one row per slot
    (row,) = deployment.catalog.observations.history(utcnow() - dt.timedelta(hours=2))["web.access"]
    assert row["unmerged_objects"] == len(objects) and row["pending_objects"] == 0
    assert row["records_loaded"] == 7 and row["bad_records"] == 1
    assert row["freshness_p99_seconds"] is not None and row["freshness_p99_seconds"] >= 0

    deployment.catalog.merge_queue.advance(utcnow())
    batches = scrape(deployment).get(("siltlake_merge_batches_total", (("where", "driver"),)), 0)  # process-wide
    merged = MergeWorker(deployment).run(once=True)
    assert merged.finished == len(by_date) and merged.in_driver >= 1
    observe_report("merge", merged)
    observe_report("merge", merged)  # a worker's report adds up: counted once
    samples = scrape(deployment)
    assert value(samples, "siltlake_merge_batches_total", where="driver") == batches + merged.in_driver
    log = deployment.catalog.merge_queue.log()
    modes = {entry["mode"] for entry in log}
    assert (
        sum(value(samples, "siltlake_merged_objects_total", table="web.access", mode=mode) for mode in modes)
        == sum(entry["objects_in"] for entry in log)
        == len(objects)
    )
    assert sum(
        value(samples, "siltlake_merge_job_duration_seconds_count", mode=mode, outcome="finished") for mode in modes
    ) == len(log)
    took = sum((entry["end_time"] - entry["start_time"]).total_seconds() for entry in log)
    assert sum(
        value(samples, "siltlake_merge_job_duration_seconds_sum", mode=mode, outcome="finished") for mode in modes
    ) == pytest.approx(took, abs=0.01)
    slowest = max((entry["end_time"] - entry["start_time"]).total_seconds() for entry in log)
    for mode in modes:  # every attempt is within the bucket of the slowest
        bound = next(b for b in DURATION_BUCKETS if b >= slowest)
        assert value(
            samples,
            "siltlake_merge_job_duration_seconds_bucket",
            mode=mode,
            outcome="finished",
            le=f"{bound:g}" if bound != int(bound) else f"{float(bound)}",
        ) == value(samples, "siltlake_merge_job_duration_seconds_count", mode=mode, outcome="finished")
    assert value(samples, "siltlake_unmerged_objects", table="web.access") == 0
    assert value(samples, "siltlake_merge_jobs", table="web.access", state="running") == 0
    assert ("siltlake_small_file_debt_objects", (("date", next(iter(by_date))), ("table", "web.access"))) not in samples

    # Reap prunes history past observe.history_retention.
    deployment.config.observe.history_retention = 0
    reap_once(deployment, now=utcnow() + dt.timedelta(hours=2))
    assert deployment.catalog.observations.history(utcnow() - dt.timedelta(days=1)) == {}


def test_the_server_serves_metrics_and_the_page_and_refuses_writes(plain_deployment: Deployment) -> None:
    server = ObserveServer(plain_deployment, "127.0.0.1", 0, dashboard=True).start()
    try:
        metrics = urllib.request.urlopen(server.url + "metrics", timeout=30).read().decode()
        assert 'siltlake_staging_objects_pending{table="web.access"} 0.0' in metrics
        page = urllib.request.urlopen(server.url, timeout=30)
        assert "default-src 'none'" in page.headers["Content-Security-Policy"]
        assert 'data-chart="backlog" data-table="web.access"' in page.read().decode()
        with pytest.raises(urllib.error.HTTPError, match="405"):
            urllib.request.urlopen(urllib.request.Request(server.url, data=b"x", method="POST"), timeout=30)
    finally:
        server.close()
    assert is_loopback("127.0.0.1") and is_loopback("::1") and not is_loopback("0.0.0.0")


def test_log_lines_are_key_value_or_json_with_the_daemons_identity() -> None:
    sink = io.StringIO()
    logs.configure("text", "info", stream=sink)
    logs.identify(role="merge", owner="host:1")
    logger = logging.getLogger("siltlake.test")
    logs.event(logger, "merge.job", job=3, reason="bad row=2")
    logs.event(logger, "merge.detail", logging.DEBUG, job=3)
    line = sink.getvalue().strip()
    assert " INFO event=merge.job role=merge owner=host:1 pid=" in line and line.endswith('job=3 reason="bad row=2"')
    sink = io.StringIO()
    logs.configure("json", "debug", stream=sink)
    logs.event(logger, "merge.detail", logging.DEBUG, job=3)
    document = json.loads(sink.getvalue())
    assert (document["event"], document["role"], document["job"], document["level"]) == (
        "merge.detail",
        "merge",
        3,
        "DEBUG",
    )
    logs.configure()


def test_a_daemon_serves_metrics_logs_key_value_lines_and_samples_history(tmp_path) -> None:
    """`silt publish --metrics-port 0` (no Spark): /metrics answers from the catalog, its log lines carry
    its role and pid, and it stores history samples; off loopback it warns."""
    import re
    import signal

    from siltlake.catalog import Catalog

    from .processes import SiltProcess, run_silt, silt_env, wait_until

    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    env = silt_env(tmp_path, url, observe={"history_interval": 1})
    assert run_silt(env, "init").returncode == 0
    catalog = Catalog(url)
    catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    daemon = SiltProcess(
        tmp_path, "publish", env, "publish", "--interval", "1", "--metrics-port", "0", "--bind", "0.0.0.0"
    )
    try:
        wait_until(lambda: "metrics on http" in daemon.log(), [daemon], 60, "the metrics server")
        port = re.search(r"metrics on http://0\.0\.0\.0:(\d+)/metrics", daemon.log()).group(1)
        # The warning is its own line after the address's: wait for it as for the address, not in the same read.
        wait_until(
            lambda: "warning: listening on 0.0.0.0, not loopback" in daemon.log(),
            [daemon],
            60,
            "the warning that the server is off loopback",
        )
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
        assert "siltlake_catalog_up 1.0" in metrics and "siltlake_unknown_objects 0.0" in metrics
        with pytest.raises(urllib.error.HTTPError, match="404"):  # the daemons serve no dashboard
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30)
        wait_until(
            lambda: "web.access" in catalog.observations.history(utcnow() - dt.timedelta(minutes=1)),
            [daemon],
            60,
            "a history sample",
        )
        line = next(line for line in daemon.log().splitlines() if "event=http.listening" in line)
        assert f" INFO event=http.listening role=publish pid={daemon.pid} " in line
    finally:
        catalog.close()
        daemon.proc.send_signal(signal.SIGTERM)
        daemon.proc.wait(timeout=60)
    assert daemon.proc.returncode == 0, daemon.tail()


def test_silt_dashboard_serves_the_page_on_loopback(tmp_path) -> None:
    import re
    import signal

    from .processes import SiltProcess, run_silt, silt_env, wait_until

    env = silt_env(tmp_path, f"sqlite:///{tmp_path / 'catalog.db'}")
    assert run_silt(env, "init").returncode == 0
    server = SiltProcess(tmp_path, "dashboard", env, "dashboard", "--port", "0")
    try:
        wait_until(lambda: "serving the dashboard" in server.log(), [server], 60, "the dashboard")
        url = re.search(r"the dashboard on (http://127\.0\.0\.1:\d+/)", server.log()).group(1)
        assert "not loopback" not in server.log()
        page = urllib.request.urlopen(url, timeout=30).read().decode()
        assert "no tables; create one with" in page and "<script" not in page
        assert urllib.request.urlopen(url + "healthz", timeout=30).read() == b"ok\n"
    finally:
        server.proc.send_signal(signal.SIGINT)
        server.proc.wait(timeout=60)
    assert server.proc.returncode == 0, server.tail()
