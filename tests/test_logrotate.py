"""Logs a program keeps appending to while Debian's logrotate turns them over, in the staging root itself: every line
lands exactly once, through `create`, `copytruncate` and `compress` + `delaycompress` rotations, with a stream daemon
and `silt stream --once` rounds running (docs/design.md, "Files written in place and appended to"). Also a writer
that flushes 4 KiB at a time mid-line and then pauses longer than stream.settle_time, and a bad line and a fragment
in the middle of an appended file.

The writer is a process of its own (tests/logwriter.py), reopening its file after a rotation as a web server does.
logrotate runs for real (`logrotate -f -s <state> <config>`, both in tmp_path); without it the test is skipped,
and under CI=true it fails (`make test` installs it: Makefile, target logrotate)."""

from __future__ import annotations

import collections
import gzip
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from siltlake.catalog import schema as s
from siltlake.catalog import schema_discovery
from siltlake.config import load_config
from siltlake.deployment import Deployment
from siltlake.stream import stream_once
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE
from .draining import rounds_until_quiet
from .processes import SiltProcess, run_silt, silt_env
from .test_appends import append, deployment_with, lines

pytestmark = pytest.mark.spark
WRITER = Path(__file__).with_name("logwriter.py")
# One file per table appended to forever, no date in its path (docs/shippers.md): web.access/access.log.
UNDATED = r"^(?P<schema>[^/.]+)\.(?P<table>[^/.]+)/(?P<name>[^/]+)$"
LOG_KEY = "web.access/access.log"
# The rotation configs: (directives, how the writer learns of a rotation, the exclude patterns beside them).
ROTATIONS = {
    # logrotate's default: rename to access.log.1, create a new access.log, and tell the server (nginx's USR1).
    "create": ("create", "signal", []),
    # copy to access.log.1 and truncate in place; the writer keeps its descriptor (O_APPEND).
    "copytruncate": ("copytruncate", "never", []),
    # Debian's web server configs: access.log.1 stays plain for a rotation, then becomes access.log.2.gz; the
    # writer notices the rename itself (WatchedFileHandler).
    "delaycompress": ("create\n    compress\n    delaycompress", "watch", []),
    # The same with the rotated names excluded, as docs/shippers.md allows with `create`: a renamed file is
    # followed whatever its name, so access.log.1's last lines are still read, once.
    "delaycompress-exclude": ("create\n    compress\n    delaycompress", "watch", ["*.gz", "*.[0-9]"]),
}
RATE = 80.0  # lines per second
ROTATIONS_WHILE_WRITING = 3  # and two after the writer stops
# Seconds between rotations. Longer than stream.settle_limit, so that the rounds read the live file between
# rotations (else each rotated file would be taken whole once, and the test would prove little). With "*.gz"
# excluded, access.log.1 must be read before the next rotation compresses it (a day later in a real deployment):
# a round that waits for it to settle runs before each rotation.
ROTATE_EVERY = 2.0


def logrotate_binary() -> str:
    """logrotate's path; skipped without it, except under CI, where `make test` installed it."""
    found = shutil.which("logrotate") or next(
        (p for p in ("/usr/sbin/logrotate", "/sbin/logrotate") if os.access(p, os.X_OK)), None
    )
    if found:
        return found
    if os.environ.get("CI") == "true":
        pytest.fail("logrotate is not installed (CI=true: `make logrotate` installs it with apt-get install logrotate)")
    pytest.skip("logrotate is not installed (apt-get install logrotate; `make logrotate` does it as root)")


def logrotate_config(path: Path, log: Path, directives: str, pidfile: Path | None) -> Path:
    # As Debian's nginx config does (invoke-rc.d nginx rotate): the server reopens its log on USR1; gone, nothing.
    postrotate = (
        f"    postrotate\n        kill -USR1 $(cat {pidfile}) 2>/dev/null || true\n    endscript\n" if pidfile else ""
    )
    path.write_text(f"{log} {{\n    rotate 20\n    missingok\n    {directives}\n{postrotate}}}\n")
    return path


def user_ids(deployment: Deployment) -> collections.Counter:
    """user_id of every row in web.access's small objects (each line of the log is one user id)."""
    record = deployment.catalog.tables.get("web.access")
    layout = record.layout(deployment.instance_key)
    ids: collections.Counter = collections.Counter()
    for small in deployment.catalog.partitions.small_objects(record.id):
        key = layout.small_object(small.partition_date, small.id, small.delayed)
        ids.update(pq.read_table(deployment.lake.path(key), columns=["user_id"]).column("user_id").to_pylist())
    return ids


def deliveries(deployment: Deployment) -> list[tuple[str, int | None, int | None]]:
    """(key and range, records read, bad records) of every staging row, in the order registered."""
    so = s.staging_objects
    with deployment.catalog.engine.connect() as c:
        rows = c.execute(sa.select(so.c.uri, so.c.records_in, so.c.bad_records).order_by(so.c.id)).all()
    return [(uri.rpartition("/")[2], records, bad) for uri, records, bad in rows]


def positions(deployment: Deployment) -> list[tuple]:
    """(name, state, device:inode, head length, consumed end, read end, pending delivery, generation, rotated) of
    every position: with the deliveries, what a failure needs to be followed."""
    p = schema_discovery.staging_positions
    with deployment.catalog.engine.connect() as c:
        rows = c.execute(
            sa.select(
                p.c.uri,
                p.c.state,
                p.c.file_identity,
                p.c.head_length,
                p.c.consumed_end,
                p.c.read_end,
                p.c.pending_uri,
                p.c.generation,
                p.c.rotated,
            ).order_by(p.c.id)
        ).all()
    return [
        (uri.rpartition("/")[2], *rest[:5], (pending or "").rpartition("/")[2] or None, *rest[6:])
        for uri, *rest in rows
        for pending in [rest[5]]
    ]


def on_disk(directory: Path) -> collections.Counter:
    """user_id of every whole line in the files of the directory (gzip ones decompressed): what logrotate kept."""
    ids: collections.Counter = collections.Counter()
    for path in directory.iterdir():
        data = path.read_bytes()
        data = gzip.decompress(data) if data.startswith(b"\x1f\x8b") else data
        ids.update(
            int(field.removeprefix(b"user_id:"))
            for line in data.splitlines(keepends=True)
            if line.endswith(b"\n")
            for field in line.split(b"\t")
            if field.startswith(b"user_id:")
        )
    return ids


def exactly_once(deployment: Deployment, written: range, expected: set[int] | None = None) -> str | None:
    """What is wrong with the table's rows as the lines `written` (of which `expected` must land: by default all),
    with what was delivered; None if nothing."""
    seen = user_ids(deployment)
    doubled = {user: count for user, count in seen.items() if count > 1}
    lost = sorted(set(written if expected is None else expected) - set(seen))
    strange = sorted(set(seen) - set(written))
    bad = sum(bad or 0 for _, _, bad in deliveries(deployment))
    if not (doubled or lost or strange or bad):
        return None
    return (
        f"{len(doubled)} lines more than once (e.g. {list(doubled.items())[:5]}), {len(lost)} lost "
        f"(e.g. {lost[:5]}), {len(strange)} never written, {bad} bad records; deliveries "
        f"(name, records, bad): {deliveries(deployment)}; positions: {positions(deployment)}; unknown: "
        f"{[(u.uri.rpartition('/')[2], u.reason) for u in deployment.catalog.staging.unknown()]}"
    )


def drain(deployment: Deployment, rounds: int = 10) -> None:
    """Rounds in this process (the whole root listed each) until two in a row find nothing new and nothing is
    pending: a file judged while a delivery it depends on was in flight is judged again by the round after the
    one that committed that delivery."""
    deployment.config.stream.full_listing_interval = 0
    for _ in rounds_until_quiet(deployment, rounds, settle_wait=True):
        pass


@pytest.fixture
def logrotate() -> str:
    return logrotate_binary()


@pytest.mark.parametrize(
    ("rotation", "catalog_url"),
    [
        ("create", "sqlite"),
        ("copytruncate", "postgresql"),
        ("delaycompress", "sqlite"),
        ("delaycompress-exclude", "postgresql"),
    ],
    indirect=["catalog_url"],
)
def test_a_log_rotated_by_logrotate_while_written_lands_every_line_once(
    tmp_path: Path, catalog_url: str, spark, logrotate: str, rotation: str
) -> None:
    directives, reopen, exclude = ROTATIONS[rotation]
    env = silt_env(
        tmp_path,
        catalog_url,
        stream={"key_pattern": UNDATED, "poll_interval": 1, "settle_time": 1, "settle_limit": 1, "exclude": exclude},
    )
    deployment = Deployment(load_config(environ=env))
    deployment.init()
    deployment.use_spark(spark)
    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    log = tmp_path / "staging" / LOG_KEY
    log.parent.mkdir(parents=True)
    pidfile = tmp_path / "writer.pid"
    config = logrotate_config(tmp_path / "logrotate.conf", log, directives, pidfile if reopen == "signal" else None)
    (tmp_path / "logs").mkdir()
    daemon = SiltProcess(tmp_path / "logs", "stream", env, "stream")
    writer = subprocess.Popen(
        [
            sys.executable,
            str(WRITER),
            str(log),
            "--count",
            "0",
            "--rate",
            str(RATE),
            "--reopen",
            reopen,
            "--pidfile",
            str(pidfile),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    once_rounds: list[subprocess.CompletedProcess[str]] = []

    def once_rounds_while_writing() -> None:
        while writer.poll() is None:
            once_rounds.append(run_silt(env, "stream", "--once", timeout=120))

    thread = threading.Thread(target=once_rounds_while_writing, daemon=True)
    thread.start()
    rotations = 0

    def rotate() -> None:
        nonlocal rotations
        done = subprocess.run(
            [logrotate, "-f", "-s", str(tmp_path / "logrotate.state"), str(config)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        rotations += 1

    def rounds_for(seconds: float) -> None:
        """Rounds in this process too: the live file is read between rotations, not only once rotated."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            stream_once(deployment)
            time.sleep(0.2)
        if exclude:  # the settled access.log.1 is read before the next rotation compresses it, into an excluded name
            stream_once(deployment, settle_wait=True)

    try:
        while rotations < ROTATIONS_WHILE_WRITING:
            rounds_for(ROTATE_EVERY)
            rotate()
        rounds_for(ROTATE_EVERY / 2)
        writer.terminate()
        written = int(writer.communicate(timeout=30)[0])
        assert writer.returncode == 0 and written > 100, written
        assert daemon.alive(), daemon.tail()
        daemon.proc.send_signal(signal.SIGTERM)  # stops after its round, while the last rotations run
        rotate()  # what the writer wrote last is in a rotated file now
        rounds_for(1.5)
        rotate()  # delaycompress: the last plain copy is compressed now
        thread.join(timeout=180)
        daemon.proc.wait(timeout=60)
        drain(deployment)
        listing = sorted(p.name for p in log.parent.iterdir())
        # Each line the files hold is in the table once. logrotate's copytruncate loses what the writer appends
        # between its copy and its truncation (its manual says so): those lines are in no file, and only in the
        # table if a round read them before the truncation.
        kept = on_disk(log.parent)
        assert max(kept.values()) == 1, "a line in two files"
        logrotate_lost = set(range(written)) - set(kept)
        assert not logrotate_lost or (directives == "copytruncate" and len(logrotate_lost) < 20), logrotate_lost
        problem = exactly_once(deployment, range(written), set(kept))
        assert problem is None, f"{rotation}, {rotations} rotations, files {listing}: {problem}"
        assert once_rounds
        # A rotation is no rewrite: no `--once` round reports one, nothing is unknown, no file stopped.
        failed = [(r.returncode, r.stderr[-600:]) for r in once_rounds if r.returncode != 0]
        assert failed == [], failed
        assert deployment.catalog.staging.unknown() == []
        assert deployment.catalog.positions.rewritten() == []
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
        if daemon.alive():
            daemon.kill()
        thread.join(timeout=180)
        deployment.close()


# The writer's pause between flushes: the 30 s with SILTLAKE_TEST_FLUSH_PAUSE=30; the settle settings scale
# with it, so that the pause is always longer than stream.settle_time and stream.settle_limit.
FLUSH_PAUSE = float(os.environ.get("SILTLAKE_TEST_FLUSH_PAUSE", "2.5"))


def test_a_writer_flushing_4_kib_mid_line_and_pausing_longer_than_settle_time_lands_every_line_once(
    tmp_path: Path, catalog_url: str, spark
) -> None:
    """A block-buffered program (stdout redirected to a file) writes 4 KiB at a time, mid-line, then is quiet for
    longer than settle_time (and settle_limit): the half line at the end waits for its newline."""
    settle = max(1, int(FLUSH_PAUSE / 3))
    deployment = deployment_with(
        tmp_path,
        catalog_url,
        spark,
        key_pattern=UNDATED,
        full_listing_interval=0,
        settle_time=settle,
        settle_limit=2 * settle,
    )
    log = Path(deployment.staging.path(LOG_KEY))
    log.parent.mkdir(parents=True)
    count = 150  # about 12 KiB: three flushes that end mid-line and a last one at exit
    writer = subprocess.Popen(
        [sys.executable, str(WRITER), str(log), "--count", str(count), "--chunk", "4096", "--pause", str(FLUSH_PAUSE)]
    )
    try:
        while writer.poll() is None:
            stream_once(deployment)
            time.sleep(0.3)
        assert writer.returncode == 0
        drain(deployment)
        problem = exactly_once(deployment, range(count))
        assert problem is None, problem
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
        deployment.close()


def test_a_bad_line_and_a_fragment_in_an_appended_file_are_bad_records_and_the_lines_after_land(
    tmp_path: Path, catalog_url: str, spark
) -> None:
    """A line that is no record and a line cut short (a writer that died mid-line and was started again), in the
    middle of a file appended to: they are bad records, and following goes on: the 100 lines after land."""
    deployment = deployment_with(tmp_path, catalog_url, spark, key_pattern=UNDATED, full_listing_interval=0)
    path = Path(deployment.staging.path(LOG_KEY))
    try:
        append(path, lines(0, 10))
        assert stream_once(deployment).records_loaded == 10
        append(path, b"this is not a record\n" + lines(10, 1)[:30] + b"\n")
        stream_once(deployment)
        for first in range(10, 110, 20):
            append(path, lines(first, 20))
            stream_once(deployment)
        drain(deployment)
        seen = user_ids(deployment)
        assert sorted(seen) == list(range(110)) and max(seen.values()) == 1, deliveries(deployment)
        bad = sum(bad or 0 for _, _, bad in deliveries(deployment))
        assert bad == 2, deliveries(deployment)
        assert deployment.catalog.staging.unknown() == []
    finally:
        deployment.close()
