"""Stream daemons share the pending staging objects: a wave claims its objects in the catalog, so
several daemons on one catalog decode each object once, and the claims of a daemon that dies are taken over
(at once on its own host, after stream.claim_timeout from another)."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from siltlake.catalog import LocalHost
from siltlake.catalog import schema as s
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.stream import stream_once
from siltlake.stream.discover import discover
from siltlake.stream.runner import process_owner
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE, make_config
from .processes import SiltProcess, kill_session, silt_env, wait_until
from .test_stream import assert_rows_once, event, jsonl_gz, stage

UTC = dt.UTC
T0 = dt.datetime(2026, 11, 26, 12, 0)


def _register(deployment: Deployment, count: int) -> list[int]:
    table_id = deployment.catalog.tables.get("web.access").id
    deployment.catalog.staging.register(
        [(f"file:///staging/o-{n:03d}.jsonl", table_id, 10, None) for n in range(count)]
    )
    return [item.id for item in deployment.catalog.staging.pending(count + 1)]


def _host(name: str, pid: int, dead: tuple[int, ...] = ()) -> LocalHost:
    return LocalHost(name, pid, lambda p: p not in dead)


def _ids(objects) -> list[int]:  # PendingStagingObjects
    return [item.id for item in objects]


def test_claims_are_disjoint_fresh_ones_are_left_alone_and_silent_or_dead_owners_lose_theirs(
    plain_deployment: Deployment,
) -> None:
    staging = plain_deployment.catalog.staging
    ids = _register(plain_deployment, 5)
    a = staging.claim("a", limit=3, now=T0, timeout=60, local=_host("host-a", 111))
    b = staging.claim("b", limit=10, now=T0 + dt.timedelta(seconds=10), timeout=60, local=_host("host-b", 5))
    assert (_ids(a), _ids(b)) == (ids[:3], ids[3:])
    assert _ids(staging.pending(10)) == ids, "without a timeout: every unprocessed object"
    assert staging.pending(10, now=T0 + dt.timedelta(seconds=20), timeout=60) == []
    assert staging.claim("c", limit=10, now=T0 + dt.timedelta(seconds=30), timeout=60) == []
    assert staging.heartbeat("a", ids, T0 + dt.timedelta(seconds=50)) == 3, "only its own claims"
    # b went silent at T0+10: stale at T0+70; a beat at T0+50, so it is not.
    c = staging.claim("c", limit=10, now=T0 + dt.timedelta(seconds=75), timeout=60, local=_host("host-c", 1))
    assert _ids(c) == ids[3:]
    # a's process is gone, seen from its own host: its claims go at once, whatever its heartbeat.
    d = staging.claim(
        "d", limit=10, now=T0 + dt.timedelta(seconds=76), timeout=60, local=_host("host-a", 222, dead=(111,))
    )
    assert _ids(d) == ids[:3]
    assert staging.heartbeat("a", ids, T0 + dt.timedelta(seconds=77)) == 0, "a lost them"
    assert staging.release("d") == 3
    assert _ids(staging.pending(10, now=T0 + dt.timedelta(seconds=78), timeout=60)) == ids[:3]


def test_claims_at_once_take_disjoint_sets(plain_deployment: Deployment) -> None:
    ids = _register(plain_deployment, 60)
    start = threading.Barrier(6)
    taken: dict[int, list[int]] = {}

    def claim(n: int) -> None:
        start.wait()
        got = []
        while wave := plain_deployment.catalog.staging.claim(f"owner-{n}", limit=3, now=utcnow(), timeout=60):
            got += _ids(wave)
        taken[n] = got

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(i for got in taken.values() for i in got) == ids, "every object claimed exactly once"


@pytest.mark.spark
def test_a_round_leaves_what_another_daemon_holds_and_takes_it_once_that_daemon_is_silent(
    deployment: Deployment, access_table
) -> None:
    when = dt.datetime(2026, 11, 20, 3, tzinfo=UTC)
    for n in range(4):
        stage(
            deployment, f"f.web.access/2026/11/20/{n}.jsonl.gz", jsonl_gz([event(when, n * 10 + i) for i in range(3)])
        )
    discover(deployment)
    staging, timeout = deployment.catalog.staging, deployment.config.stream.claim_timeout
    other = staging.claim("other-daemon", limit=2, now=utcnow(), timeout=timeout, local=_host("elsewhere", 7))
    report = stream_once(deployment)
    assert (report.processed, report.records_loaded) == (2, 6)
    assert _ids(staging.pending(10)) == _ids(other), "the other daemon's share is left to it"
    with deployment.catalog.engine.connect() as c:
        owners = set(
            c.execute(
                sa.select(s.staging_objects.c.claim_owner).where(s.staging_objects.c.processed_time.is_(None))
            ).scalars()
        )
    assert owners == {"other-daemon"}
    assert stream_once(deployment).processed == 0, "its heartbeat is fresh"
    # It stops beating: past stream.claim_timeout its objects are anyone's.
    staging.heartbeat("other-daemon", _ids(other), utcnow() - dt.timedelta(seconds=timeout + 1))
    report = stream_once(deployment)
    assert (report.processed, report.records_loaded, report.skipped_duplicates) == (2, 6, 0)
    rows = deployment.catalog.partitions.small_objects(access_table.id)
    assert sum(row.row_count for row in rows) == 12
    assert process_owner() not in owners


@pytest.mark.spark
def test_claims_a_failed_round_could_not_give_back_are_given_back_by_the_next(
    deployment: Deployment, access_table, monkeypatch: pytest.MonkeyPatch
) -> None:
    from siltlake.catalog.staging import Staging
    from siltlake.errors import CatalogUnreachable
    from siltlake.stream import runner

    when = dt.datetime(2026, 11, 20, 3, tzinfo=UTC)
    for n in range(2):
        stage(deployment, f"f.web.access/2026/11/20/{n}.jsonl.gz", jsonl_gz([event(when, n)]))

    def outage(*_args, **_kwargs) -> None:
        raise CatalogUnreachable("the catalog server restarts")

    with monkeypatch.context() as patch:
        patch.setattr(runner, "commit_results", outage)
        patch.setattr(Staging, "release", outage)
        with pytest.raises(CatalogUnreachable):
            stream_once(deployment)
    staging = deployment.catalog.staging
    assert staging.pending(10, timeout=deployment.config.stream.claim_timeout) == [], "still claimed, fresh"
    report = stream_once(deployment)
    assert (report.processed, report.records_loaded) == (2, 2)


# Runs `silt` with its driver writing the id of every staging object it hands to a stage (a decode) to
# $DECODE_LOG; with $DECODE_SLEEP, it waits that long after writing a wave's ids (a daemon busy decoding).
_COUNTING_SILT = """
import os, sys, time
from siltlake.stream.stage import WaveStage
real = WaveStage.run
def counting(self, wave, run_id):
    with open(os.environ["DECODE_LOG"], "a") as log:
        log.write("".join(f"{item.id}\\n" for item in wave))
    time.sleep(float(os.environ.get("DECODE_SLEEP", "0")))
    return real(self, wave, run_id)
WaveStage.run = counting
from siltlake.cli import main
main(prog_name="silt", args=sys.argv[1:])
"""


class CountingSilt(SiltProcess):
    """A `silt` process whose stream decodes are counted in log_dir/<name>.decoded."""

    def __init__(self, log_dir: Path, name: str, env: dict[str, str], *args: str, sleep: float = 0) -> None:
        self.decoded_log = log_dir / f"{name}.decoded"
        self.decoded_log.touch()
        env = {
            **env,
            "DECODE_LOG": str(self.decoded_log),
            "DECODE_SLEEP": str(sleep),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[1]), os.environ.get("PYTHONPATH")])),
        }
        self.name, self.args = name, args
        self.out, self.err = log_dir / f"{name}.out", log_dir / f"{name}.err"
        with self.out.open("ab") as out, self.err.open("ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _COUNTING_SILT, *args], env=env, stdout=out, stderr=err, start_new_session=True
            )
        self.started = time.monotonic()

    def decoded(self) -> list[int]:
        return [int(line) for line in self.decoded_log.read_text().split()]


def _stage_many(deployment: Deployment, count: int) -> int:
    when = dt.datetime(2026, 11, 20, 3, tzinfo=UTC)
    expected = 0
    for n in range(count):
        rows = 1 + n % 7
        expected += rows
        stage(
            deployment,
            f"f.web.access/2026/11/20/{n:03d}.jsonl.gz",
            jsonl_gz([event(when + dt.timedelta(minutes=n), n * 1000 + i) for i in range(rows)]),
        )
    return expected


def _staged_deployment(tmp_path: Path, url: str, count: int) -> tuple[Deployment, int]:
    """A deployment with web.access and `count` staged objects, and how many rows they hold."""
    deployment = Deployment(make_config(tmp_path, url))
    deployment.init()
    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    return deployment, _stage_many(deployment, count)


def _processed(deployment: Deployment) -> int:
    so = s.staging_objects
    with deployment.catalog.engine.connect() as c:
        return c.execute(sa.select(sa.func.count()).where(so.c.processed_time.is_not(None))).scalar_one()


@pytest.mark.spark
@pytest.mark.postgres
def test_two_stream_daemons_on_one_postgres_catalog_decode_each_object_once(tmp_path: Path, postgres_url: str) -> None:
    deployment, expected = _staged_deployment(tmp_path, postgres_url, 40)
    env = silt_env(tmp_path, postgres_url, stream={"objects_per_wave": 4})
    daemons = [CountingSilt(tmp_path, f"stream-{n}", env, "stream", "--once", "--json") for n in range(2)]
    try:
        for daemon in daemons:
            daemon.proc.wait(timeout=300)
            assert daemon.proc.returncode == 0, daemon.tail()
        decoded = Counter(i for daemon in daemons for i in daemon.decoded())
        assert len(decoded) == 40 and set(decoded.values()) == {1}, decoded
        assert_rows_once(deployment, expected)
    finally:
        for daemon in daemons:
            kill_session(daemon.pid)
        deployment.close()


@pytest.mark.spark
@pytest.mark.postgres
def test_a_sigkilled_stream_daemons_share_is_taken_over_losing_and_doubling_nothing(
    tmp_path: Path, postgres_url: str
) -> None:
    deployment, expected = _staged_deployment(tmp_path, postgres_url, 24)
    env = silt_env(tmp_path, postgres_url, stream={"objects_per_wave": 4, "claim_timeout": 4, "heartbeat_interval": 1})
    doomed = CountingSilt(tmp_path, "doomed", env, "stream", "--interval", "0.2", sleep=600)
    survivor = None
    try:
        wait_until(lambda: doomed.decoded(), [doomed], 180, "the first daemon's first wave")
        held = doomed.decoded()
        survivor = CountingSilt(tmp_path, "survivor", env, "stream", "--interval", "0.2")
        # The survivor loads everything but the doomed daemon's wave, which it leaves alone while it lives.
        wait_until(lambda: _processed(deployment) == 24 - len(held), [doomed, survivor], 240, "the other objects")
        time.sleep(2)
        assert _processed(deployment) == 24 - len(held)
        assert not set(held) & set(survivor.decoded())
        doomed.kill()  # mid-round: its wave claimed, decoding
        wait_until(lambda: _processed(deployment) == 24, [survivor], 120, "the killed daemon's objects")
        decoded = Counter(survivor.decoded())
        with deployment.catalog.engine.connect() as c:
            every = set(c.execute(sa.select(s.staging_objects.c.id)).scalars())
        assert set(decoded.values()) == {1} and set(decoded) | set(held) == every and len(every) == 24
        assert_rows_once(deployment, expected)
    finally:
        for daemon in (doomed, survivor):
            if daemon is not None:
                kill_session(daemon.pid)
        deployment.close()
