"""The PostgreSQL server stopped and started under running `silt stream`, `silt merge` and `silt publish`
daemons: each logs the failure, backs off, reconnects and goes on; every record is loaded exactly once."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
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

from .chaos import TABLES, chaos_env, create_tables
from .chaos_checks import current_record_ids, exactly_once
from .processes import Shipper, SiltProcess, free_port, kill_session, successes, wait_until

# What each daemon prints when a round fails (and then retries with backoff).
FAILURE_LINES = {"stream": "stream round failed", "merge": "catalog unreachable", "publish": "publish run failed"}
OUTAGE_SECONDS = 3
# What each daemon prints once it has opened the catalog and begun its rounds (the stream: its commit, above)
STARTED = {"stream": "", "merge": "merging as", "publish": "publishing every"}


class PrivateServer:
    """A PostgreSQL server of this test's own (initdb in a temporary directory, a free port on 127.0.0.1): stopping
    it takes no connection of any other test, nor of a test running beside this one."""

    def __init__(self, bindir: Path, port: int) -> None:
        self.bindir, self.port = bindir, port
        self.directory = Path(tempfile.mkdtemp(prefix="silt_pg_"))
        self.data, self.log = self.directory / "data", self.directory / "server.log"
        # The server refuses to run as root: as root, it runs as the postgres user, which owns its directory.
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            shutil.chown(self.directory, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.directory}'\n"
                "fsync = off\nmax_connections = 60\n"
            )

    def _run(self, program: str, *args: str) -> None:
        subprocess.run([*self._as, str(self.bindir / program), *args], check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


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
def private_postgres():
    """A server this test may stop and start: the PostgreSQL 15+ binaries of this machine, run from a directory of
    the test's own."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found or (os.geteuid() == 0 and shutil.which("runuser") is None):
        if os.environ.get("CI") == "true":
            pytest.fail("no PostgreSQL server binaries (initdb) under /usr/lib/postgresql (CI=true: this test runs)")
        pytest.skip("needs PostgreSQL's server binaries (initdb, pg_ctl) under /usr/lib/postgresql")
    server = PrivateServer(Path(found[-1]).parent, free_port())
    try:
        server.start()
        yield server
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):  # already stopped
            server.stop()
        server.remove()


@pytest.mark.spark
@pytest.mark.postgres
def test_daemons_ride_out_a_postgres_restart(tmp_path: Path, private_postgres: PrivateServer) -> None:
    url = private_postgres.url
    env = chaos_env(tmp_path, url)
    deployment = Deployment(load_config(environ=env))
    deployment.init()
    create_tables(deployment)
    catalog = deployment.catalog
    # Today only: every record stays live, so the current state shows it without a switch.
    shipper = Shipper(tmp_path / "staging", TABLES, [utcnow().date()], rate=5.0, seed=7)
    daemons: list[SiltProcess] = []
    try:
        daemons = [
            SiltProcess(tmp_path, "stream", env, "stream"),
            SiltProcess(tmp_path, "merge", env, "merge"),
            SiltProcess(tmp_path, "publish", env, "publish", "--interval", "1"),
        ]
        shipper.start()
        # Working first (objects streamed; every daemon polls the catalog each second), so the outage hits
        # pooled connections.
        wait_until(lambda: catalog.partitions.max_small_object_id() > 0, daemons, 120, "a stream commit")
        # The merge and publish daemons up too (their catalog opened): one still starting on a loaded machine when
        # the server stops cannot open the catalog and exits, which is no outage ridden out.
        wait_until(lambda: all(STARTED[d.name] in d.log() for d in daemons), daemons, 120, "every daemon up")
        before = {d.name: d.log().count(FAILURE_LINES[d.name]) for d in daemons}
        stopped = time.monotonic()
        try:
            private_postgres.stop()
            time.sleep(OUTAGE_SECONDS)
        finally:
            private_postgres.start()
        print(f"PostgreSQL was down {time.monotonic() - stopped:.1f} s")
        wait_until(lambda: server_up(url), [], 60, "PostgreSQL back")
        # Every daemon saw the outage and goes on: it commits again after the restart.
        wait_until(
            lambda: all(d.log().count(FAILURE_LINES[d.name]) > before[d.name] for d in daemons),
            daemons,
            60,
            "each daemon to log a failed round",
        )
        shipped_before, merged_before = catalog.partitions.max_small_object_id(), successes(deployment)
        wait_until(
            lambda: catalog.partitions.max_small_object_id() > shipped_before and successes(deployment) > merged_before,
            daemons,
            90,
            "stream and merge commits after the restart",
        )
        runs = daemons[2].log().count("publish:")
        wait_until(lambda: daemons[2].log().count("publish:") > runs, daemons, 30, "a publish run after the restart")
        shipper.stop()
        wait_until(
            lambda: sum(sum(current_record_ids(deployment, name).values()) for name in TABLES) >= shipper.total(),
            daemons,
            90,
            "every shipped record in the tables",
        )
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
