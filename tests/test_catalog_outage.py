"""The PostgreSQL server stopped and started under running `silt stream`, `silt merge` and `silt publish`
daemons: each logs the failure, backs off, reconnects and goes on; every record is loaded exactly once."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from siltlake.catalog import Catalog
from siltlake.clock import utcnow
from siltlake.config import load_config
from siltlake.deployment import Deployment
from siltlake.errors import CatalogError, CatalogUnreachable
from siltlake.polling import poll_forever

from .chaos import TABLES, chaos_env, create_tables, current_record_ids, exactly_once
from .processes import Shipper, SiltProcess, kill_session, successes, wait_until

# What each daemon prints when a round fails (and then retries with backoff).
FAILURE_LINES = {"stream": "stream round failed", "merge": "catalog unreachable", "publish": "publish run failed"}
OUTAGE_SECONDS = 3  # other tests share the server: keep it short


def pg_ctl(action: str) -> None:
    version = sorted(os.listdir("/etc/postgresql"))[0]
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", action], check=True,
                   capture_output=True, timeout=60)


def server_up(url: str) -> bool:
    engine = sa.create_engine(url)
    try:
        with engine.connect():
            return True
    except sa.exc.OperationalError:
        return False
    finally:
        engine.dispose()


@pytest.fixture
def controllable_postgres(postgres_url: str) -> str:
    if os.geteuid() != 0 or shutil.which("pg_ctlcluster") is None or not glob.glob("/etc/postgresql/*/main"):
        pytest.skip("needs root and a local pg_ctlcluster-managed PostgreSQL cluster")
    return postgres_url


@pytest.mark.spark
@pytest.mark.postgres
def test_daemons_ride_out_a_postgres_restart(tmp_path: Path, controllable_postgres: str) -> None:
    url = controllable_postgres
    env = chaos_env(tmp_path, url)
    deployment = Deployment(load_config(environ=env))
    deployment.init()
    create_tables(deployment)
    catalog = deployment.catalog
    # Today only: every record stays live, so the current state shows it without a switch.
    shipper = Shipper(tmp_path / "staging", TABLES, [utcnow().date()], rate=5.0, seed=7)
    daemons: list[SiltProcess] = []
    try:
        daemons = [SiltProcess(tmp_path, "stream", env, "stream"), SiltProcess(tmp_path, "merge", env, "merge"),
                   SiltProcess(tmp_path, "publish", env, "publish", "--interval", "1")]
        shipper.start()
        # Working first (objects streamed; every daemon polls the catalog each second), so the outage hits
        # pooled connections.
        wait_until(lambda: catalog.partitions.max_small_object_id() > 0, daemons, 120, "a stream commit")
        before = {d.name: d.log().count(FAILURE_LINES[d.name]) for d in daemons}
        stopped = time.monotonic()
        try:
            pg_ctl("stop")
            time.sleep(OUTAGE_SECONDS)
        finally:
            pg_ctl("start")
        print(f"PostgreSQL was down {time.monotonic() - stopped:.1f} s")
        wait_until(lambda: server_up(url), [], 60, "PostgreSQL back")
        # Every daemon saw the outage and goes on: it commits again after the restart.
        wait_until(lambda: all(d.log().count(FAILURE_LINES[d.name]) > before[d.name] for d in daemons), daemons,
                   60, "each daemon to log a failed round")
        shipped_before, merged_before = catalog.partitions.max_small_object_id(), successes(deployment)
        wait_until(lambda: (catalog.partitions.max_small_object_id() > shipped_before
                            and successes(deployment) > merged_before),
                   daemons, 90, "stream and merge commits after the restart")
        runs = daemons[2].log().count("publish:")
        wait_until(lambda: daemons[2].log().count("publish:") > runs, daemons, 30, "a publish run after the restart")
        shipper.stop()
        wait_until(lambda: sum(sum(current_record_ids(deployment, name).values()) for name in TABLES)
                   >= shipper.total(), daemons, 90, "every shipped record in the tables")
        for daemon in daemons:
            assert daemon.alive(), daemon.tail()
            print(daemon.name, [line for line in daemon.log().splitlines() if FAILURE_LINES[daemon.name] in line][:2])
    finally:
        shipper.stop()
        for daemon in daemons:
            kill_session(daemon.pid)
            daemon.proc.wait(timeout=30)
    try:
        for name in TABLES:
            problem = exactly_once(shipper.shipped[name], current_record_ids(deployment, name))
            assert problem is None, f"{name}: {problem}"
    finally:
        deployment.close()


def test_a_daemon_loop_retries_an_unreachable_catalog_and_stops_on_other_catalog_errors(tmp_path: Path) -> None:
    """check_ready() on a server that is not there is a transient failure for poll_forever (it used to be a
    CatalogError that ended `silt stream` and `silt publish` at the first round during an outage)."""
    unreachable = Catalog("postgresql+psycopg://postgres@127.0.0.1:9/nowhere")  # port 9: nothing listens
    stop = threading.Event()
    failures: list[tuple[Exception, float]] = []

    def on_error(exc: Exception, wait: float) -> None:
        failures.append((exc, wait))
        if len(failures) == 2:
            stop.set()

    poll_forever(unreachable.check_ready, stop, 0.01, lambda _: None, on_error)
    assert [type(exc) for exc, _ in failures] == [CatalogUnreachable, CatalogUnreachable]
    assert [wait for _, wait in failures] == [1.0, 2.0]  # backed off
    unreachable.close()

    uninitialised = Catalog(f"sqlite:///{tmp_path / 'empty.db'}")
    with pytest.raises(CatalogError, match="not initialised"):
        poll_forever(uninitialised.check_ready, threading.Event(), 0.01, lambda _: None, on_error)
    uninitialised.close()
