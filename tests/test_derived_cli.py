"""`silt derived ...` end to end on a real deployment, `silt reap`'s derived lines, and a build process
SIGKILLed mid-way: readers keep the previous build, reap deletes the dead build, the table builds again."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from siltlake.deployment import Deployment
from siltlake.read import sql
from siltlake.write.update import delete_rows

from .merge_helpers import add_small_objects, rows_for, silt_in_process
from .processes import SiltProcess, silt_env, wait_until
from .test_derived import FIRST, ROLLUP, make_source, merge_and_publish

pytestmark = pytest.mark.spark

DEFINITION = f'''name = "web.daily_actions"
query = """{ROLLUP}"""
incremental = true
'''


@pytest.fixture
def catalog_url(request, tmp_path: Path) -> str:  # pytest's request
    """SQLite (the derived core runs on both catalogs in test_derived.py; here the commands are tested), or
    PostgreSQL for a test marked postgres."""
    if request.node.get_closest_marker("postgres"):
        return request.getfixturevalue("postgres_url")
    return f"sqlite:///{tmp_path / 'catalog.db'}"


def document(printed: str):  # the JSON value a command printed (stderr lines may precede it)
    start = min(i for i in (printed.find("["), printed.find("{")) if i >= 0)
    value, _ = json.JSONDecoder().raw_decode(printed[start:])
    return value


def rollup_rows(spark, deployment: Deployment) -> Counter:
    return Counter(
        tuple(r) for r in sql(spark, "SELECT dt, action, hits, users FROM web.daily_actions", deployment).collect()
    )


def run_derived_loop(deployment: Deployment):  # ((name, report), Loop)
    """Run `silt run`'s derived loop alone, every 0.2 s, until it reports a round that built something."""
    from siltlake.run.single_host import SingleHost, run_loops

    reports: list[tuple[str, object]] = []
    host = SingleHost(deployment, on_report=lambda name, report: reports.append((name, report)))
    (loop,) = [loop for loop in host.loops if loop.name == "derived"]
    assert loop.interval == deployment.config.derived.interval
    loop.interval = loop.status.interval = 0.2
    stop = threading.Event()
    threads = run_loops([loop], stop, lambda name, exc, wait: reports.append((name, exc)))
    try:
        deadline = time.monotonic() + 120
        while not reports and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1)  # a few more rounds: the table is fresh now, nothing more is built
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    (reported,) = reports
    return reported, loop


def waiting_on_a_lock(connection) -> bool:  # a SQLAlchemy Connection
    """Whether another session of the database waits for a lock (the one `connection` holds)."""
    return bool(
        connection.exec_driver_sql(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' "
            "AND pid <> pg_backend_pid()"
        ).scalar()
    )


def test_derived_commands_create_list_build_show_drop(
    deployment: Deployment, spark, monkeypatch, tmp_path: Path
) -> None:
    source = make_source(deployment)
    silt = silt_in_process(deployment, monkeypatch)
    path = tmp_path / "daily_actions.toml"
    path.write_text(DEFINITION)

    created = " ".join(silt("derived", "create", str(path)).split())
    assert "created derived table web.daily_actions (trigger sources, incremental)" in created
    assert "columns: dt date, action string, hits bigint, users bigint; sources: web.access." in created

    (row,) = document(silt("derived", "list", "--json"))
    assert row == {
        "table": "web.daily_actions",
        "rule": "trigger sources",
        "incremental": True,
        "sources": "web.access",
        "last_build": None,
        "rows": None,
        "state": "never built",
    }
    stale = " ".join(silt("derived", "build", "--dry-run").split())
    assert "stale web.daily_actions: never built" in stale and "1 would build" in stale
    assert deployment.catalog.derived.builds(deployment.catalog.derived.get("web.daily_actions").id) == []

    built = " ".join(silt("derived", "build", "web.daily_actions").split())
    assert "built web.daily_actions (full, build test0001-" in built and "3 dates" in built, built
    fresh = Counter(tuple(r) for r in sql(spark, ROLLUP, deployment).collect())
    assert rollup_rows(spark, deployment) == fresh
    (row,) = document(silt("derived", "list", "--json"))
    assert row["state"] == "fresh" and row["rows"] == sum(fresh.values()) and row["last_build"]
    assert (
        silt("derived", "list", "--format", "csv").splitlines()[0]
        == "table,rule,incremental,sources,last_build,rows,state"
    )

    # A late object on the second day: stale by its source; --due rebuilds that date only.
    late = FIRST + dt.timedelta(days=1)
    add_small_objects(deployment, source, late, [rows_for(late, 25, 99)])
    merge_and_publish(deployment)
    (row,) = document(silt("derived", "list", "--json"))
    assert row["state"].startswith("web.access is at version"), row
    report = document(silt("derived", "build", "--due", "--json"))
    (again,) = report["built"]
    assert again["kind"] == "incremental" and report["checked"] == 1, report
    assert rollup_rows(spark, deployment) == Counter(tuple(r) for r in sql(spark, ROLLUP, deployment).collect())
    assert "0 built, 1 fresh" in " ".join(silt("derived", "build", "--due").split())

    shown = document(silt("derived", "show", "web.daily_actions", "--json"))
    assert [b["kind"] for b in shown["builds"]] == ["incremental", "full"]
    assert shown["builds"][0]["status"] == "published" and shown["sources"] == ["web.access"]
    assert shown["definition"]["incremental"] is True and shown["state"] == "fresh"
    text = " ".join(silt("derived", "show", "web.daily_actions").split())
    assert "rule: trigger sources incremental: yes sources: web.access state: fresh" in text
    assert "builds, newest first" in text and "published" in text
    # `silt run`'s derived loop builds what is stale (a delete on the first day) and reports like the others.
    delete_rows(deployment, "web.access", FIRST, "action = 'a1'")
    (name, report), loop = run_derived_loop(deployment)
    assert name == "derived" and [(b.table, b.kind, b.dates) for b in report.built] == [
        ("web.daily_actions", "incremental", [FIRST])
    ], report
    assert loop.status.rounds > 1 and loop.status.last_work == "web.daily_actions incremental 1 dates"
    assert loop.status.totals == "1 builds, 1 dates" and loop.status.state == "stopped"
    assert rollup_rows(spark, deployment) == Counter(tuple(r) for r in sql(spark, ROLLUP, deployment).collect())

    full = document(silt("derived", "build", "web.daily_actions", "--full", "--json"))
    assert full["built"][0]["kind"] == "full" and len(full["built"][0]["dates"]) == 3

    # A YAML definition kept by persist_for.
    kept = tmp_path / "kept.yaml"
    kept.write_text('name: web.kept\nquery: "SELECT dt, count(*) AS n FROM web.access GROUP BY dt"\npersist_for: 2h\n')
    assert "columns: dt date, n bigint" in " ".join(silt("derived", "create", str(kept)).split())
    listed = {row["table"]: row for row in document(silt("derived", "list", "--json"))}
    assert (listed["web.kept"]["rule"], listed["web.kept"]["state"]) == ("persist_for 2h", "never built")
    assert listed["web.daily_actions"]["state"] == "fresh"
    # `silt table list` says which tables are derived, without the time column and merge interval they lack.
    tables = {row["table"]: row for row in document(silt("table", "list", "--json"))}
    assert tables["web.kept"]["kind"] == "derived" and tables["web.access"]["kind"] == "log"
    assert tables["web.kept"]["time_column"] is None and tables["web.kept"]["merge_interval_seconds"] is None
    assert tables["web.access"]["time_column"] == "utc_event_time"
    shown_derived = " ".join(silt("table", "show", "web.kept").split())
    assert "kind: derived" in shown_derived and "merge interval" not in shown_derived, shown_derived
    assert document(silt("derived", "drop", "web.kept", "--dry-run", "--json")) == {
        "action": "drop",
        "dry_run": True,
        "table": "web.kept",
    }
    assert "web.kept" in {row["table"] for row in document(silt("derived", "list", "--json"))}
    assert "did you mean web.kept?" in silt("derived", "drop", "web.kep", "--yes", code=2)
    assert document(silt("derived", "drop", "web.kept", "--yes", "--json"))["dry_run"] is False

    # Errors: one line, exit 2 for what the user can fix.
    assert "no derived table web.nothing" in silt("derived", "build", "web.nothing", code=2)
    assert "give --due" in silt("derived", "build", code=2)
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "web.totals"\nquery = "SELECT action, count(*) AS n FROM web.access GROUP BY action"\n')
    error = silt("derived", "create", str(bad), code=2)
    assert "must return a dt column" in error and len(error.strip().splitlines()) == 1, error
    assert "no derived table web.nothing" in silt("derived", "drop", "web.nothing", "--yes", code=2)

    builds = [b.name for b in deployment.catalog.derived.builds(deployment.catalog.derived.get("web.daily_actions").id)]
    silt("derived", "drop", "web.daily_actions", "--yes")
    assert document(silt("derived", "list", "--json")) == []
    reaped = " ".join(silt("reap", "--grace", "0", "--force").split())
    for build in builds:  # dropping the table took its builds off the active list at once
        assert f"derived build {build} deleted: no longer active and no retained version references it" in reaped
    assert f"derived builds: {len(builds)} deleted" in reaped and len(builds) == 4, reaped
    assert not list((tmp_path / "lake" / "_derived").iterdir())
    as_json = document(silt("reap", "--dry-run", "--grace", "0", "--force", "--json"))
    assert set(as_json["derived"]) >= {"deactivated", "deleted", "kept", "lost"}


@pytest.mark.postgres
def test_a_killed_build_leaves_readers_on_the_previous_build_and_reap_cleans_it(
    deployment: Deployment, spark, monkeypatch, tmp_path: Path, catalog_url: str
) -> None:
    make_source(deployment, days=4)
    silt = silt_in_process(deployment, monkeypatch)
    path = tmp_path / "daily_actions.toml"
    path.write_text(DEFINITION)
    silt("derived", "create", str(path))
    silt("derived", "build", "web.daily_actions")
    before = rollup_rows(spark, deployment)
    record = deployment.catalog.derived.get("web.daily_actions")
    lake = tmp_path / "lake" / "_derived"
    existing = {p.name for p in lake.iterdir()}

    env = silt_env(tmp_path, catalog_url, derived={"heartbeat_interval": 3600, "build_timeout": 7200})
    # Hold a lock on the build rows that lets readers by: the builder reads its sources, writes its objects
    # and then waits in its publishing transaction, where it is killed: mid-build, deterministically.
    engine = sa.create_engine(catalog_url)
    builder = SiltProcess(tmp_path, "builder", env, "derived", "build", "web.daily_actions", "--full")
    try:
        wait_until(lambda: len(deployment.catalog.derived.builds(record.id)) == 2, [builder], 120, "build started")
        with engine.connect() as lock, lock.begin():
            lock.exec_driver_sql("LOCK TABLE derived_builds IN EXCLUSIVE MODE")
            wait_until(lambda: waiting_on_a_lock(lock), [builder], 120, "the builder waiting to publish")
            assert any(p.name not in existing and any(p.rglob("*.parquet")) for p in lake.iterdir())
            builder.kill()
    finally:
        engine.dispose()
        if builder.alive():
            builder.kill()
    (dead,) = [b for b in deployment.catalog.derived.builds(record.id) if b.name not in existing]
    assert dead.status == "building" and dead.owner_pid == builder.pid
    assert any((lake / dead.name).rglob("*.parquet"))
    assert rollup_rows(spark, deployment) == before, "readers still see the previous build"

    reaped = " ".join(silt("reap", "--grace", "0", "--force").split())
    assert f"derived build {dead.name}: its builder is gone; marked failed" in reaped, reaped
    assert f"derived build {dead.name} deleted: its builder was lost" in reaped, reaped
    assert not (lake / dead.name).exists()
    assert rollup_rows(spark, deployment) == before

    rebuilt = " ".join(silt("derived", "build", "web.daily_actions", "--full").split())
    assert "built web.daily_actions (full" in rebuilt and "4 dates" in rebuilt, rebuilt
    assert rollup_rows(spark, deployment) == before
    statuses = [b.status for b in deployment.catalog.derived.builds(record.id)]
    assert statuses == ["published", "failed", "published"]
