"""Every staging object delivered three times, some concurrently: every record is stored exactly once.

What a delivery is and what siltlake deduplicates: docs/design.md, "Deliveries and duplicates".
"""

from __future__ import annotations

import contextlib
import datetime as dt
import gzip
import json
import os
import random
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from siltlake.catalog import PendingStagingObject
from siltlake.deployment import Deployment
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.read import table as read_table
from siltlake.reap import reap_once
from siltlake.stream import stream_once
from siltlake.stream.commit import commit_results
from siltlake.stream.discover import discover
from siltlake.stream.report import StreamReport
from siltlake.stream.runner import Progress
from siltlake.stream.stage import stream_task
from siltlake.stream.task import process_staging_object
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE, make_config
from .processes import SiltProcess, run_silt, silt_env, wait_until

pytestmark = pytest.mark.spark
DAY = dt.date(2026, 11, 20)
TOKYO = dt.timedelta(hours=9)


def records_of(number: int, count: int) -> list[dict]:
    """An object's records: user ids number * 1000 + i, times on two Tokyo dates (DAY and the day after)."""
    start = dt.datetime.combine(DAY, dt.time(20)) - TOKYO
    return [
        {
            "time": (start + dt.timedelta(hours=6 * (i % 2), minutes=i + number)).isoformat() + "Z",
            "user_id": number * 1000 + i,
            "action": "view",
        }
        for i in range(count)
    ]


def body_of(number: int, count: int) -> bytes:
    return gzip.compress("".join(json.dumps(r) + "\n" for r in records_of(number, count)).encode(), mtime=0)


def key_of(number: int) -> str:
    return f"fluentd01.web.access/2026/11/20/{number:03d}.jsonl.gz"


def deliver(staging_root: Path, key: str, data: bytes, mtime: float | None = None) -> None:
    """Put an object as a shipper does: upload under an in-flight name, then rename into place (atomic)."""
    target = staging_root / key
    target.parent.mkdir(parents=True, exist_ok=True)
    uploading = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    uploading.write_bytes(data)
    if mtime is not None:
        os.utime(uploading, (mtime, mtime))
    os.replace(uploading, target)


def user_counts(deployment: Deployment, spark) -> Counter:  # a SparkSession
    return Counter(row.user_id for row in read_table(spark, "web.access", deployment).select("user_id").collect())


def expected_users(numbers: range | list[int], count: int) -> Counter:
    return Counter(r["user_id"] for n in numbers for r in records_of(n, count))


def tokyo(date: dt.date, hour: int) -> dt.datetime:
    return dt.datetime.combine(date, dt.time(hour)) - TOKYO


def test_a_reput_with_new_bytes_is_reported_and_not_loaded(deployment: Deployment, spark, capsys) -> None:
    """New bytes under a loaded key that are not an append (here a gzip object put again) are not loaded,
    but the report names the key and both sizes, once, so the operator can put the data under a new key."""
    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    staging_root = Path(deployment.staging.path(""))
    t1 = time.time() - 3600
    deliver(staging_root, key_of(0), body_of(0, 5), t1)
    assert stream_once(deployment).records_loaded == 5
    bigger = body_of(0, 9)
    deliver(staging_root, key_of(0), bigger, t1 + 60)
    report = stream_once(deployment)
    uri = deployment.staging.uri(key_of(0))
    assert report.records_loaded == 0
    assert [uri for uri, _ in report.rewritten] == [uri]
    assert stream_once(deployment).rewritten == [], "reported once"
    assert user_counts(deployment, spark) == expected_users([0], 5)

    from siltlake.cli.reports import print_stream_report

    print_stream_report(report, deployment.staging.root, verbose=False)
    printed = " ".join(capsys.readouterr().err.split())
    assert (
        f"rewritten in place {key_of(0)} is now {len(bigger):,} bytes but was loaded at {len(body_of(0, 5)):,}"
    ) in printed
    assert "NOT loaded" in printed


class PutsWhileInFlight(Progress):
    """Delivers objects again after the run registered and planned its objects, before it commits them."""

    def __init__(
        self, puts: list[tuple[int, float]], staging_root: Path, per_object: int, deployment: Deployment | None = None
    ) -> None:
        self.puts, self.staging_root, self.per_object = puts, staging_root, per_object
        self.deployment = deployment

    def start(self, total: int) -> None:
        for number, mtime in self.puts:
            deliver(self.staging_root, key_of(number), body_of(number, self.per_object), mtime)


def test_sequential_redeliveries_are_counted_and_stored_once(deployment: Deployment, spark) -> None:
    """Each of 6 objects is put three times with the same bytes and newer mtimes: before a run, while a run
    is in flight, and after its day was closed and switched to merged objects. Every record id is in the
    table exactly once after each stream run, after merge and after the switch; the reports count each
    re-put once."""
    deployment.catalog.tables.create(TableDef.from_mapping({**ACCESS_TABLE, "merge_interval": 0}))
    staging_root = Path(deployment.staging.path(""))
    per_object, objects = 12, range(6)
    expected = expected_users(objects, per_object)
    t1 = time.time() - 3600
    t2, t3 = t1 + 60, t1 + 120

    for number in objects:
        deliver(staging_root, key_of(number), body_of(number, per_object), t1)
    first = stream_once(deployment, PutsWhileInFlight([(0, t2), (1, t2)], staging_root, per_object))
    assert (first.registered, first.processed, first.redelivered) == (6, 6, 0)
    assert first.records_loaded == sum(expected.values())
    assert user_counts(deployment, spark) == expected

    for number in objects[2:]:
        deliver(staging_root, key_of(number), body_of(number, per_object), t2)
    second = stream_once(deployment, PutsWhileInFlight([(n, t3) for n in (0, 1, 2)], staging_root, per_object))
    assert (second.registered, second.processed, second.records_loaded) == (0, 0, 0)
    assert second.redelivered == 6, "objects 0, 1 (put during the first run) and 2-5 (put before this one)"
    assert user_counts(deployment, spark) == expected

    merge_once(deployment)
    assert user_counts(deployment, spark) == expected
    publish_once(deployment, now=tokyo(DAY + dt.timedelta(days=2), 1))  # closes both days
    switched = publish_once(deployment, now=tokyo(DAY + dt.timedelta(days=2), 2))
    assert len(switched.switched) == 2
    assert user_counts(deployment, spark) == expected

    # Re-puts after the days closed: a second processing would add delayed objects; none is made.
    for number in objects[3:]:
        deliver(staging_root, key_of(number), body_of(number, per_object), t3)
    third = stream_once(deployment)
    assert (third.processed, third.delayed_objects, third.redelivered) == (0, 0, 6)
    assert third.changed_reputs == [], "the same bytes again are not a change"
    assert stream_once(deployment).redelivered == 0, "a put is counted once, not at every listing"
    deliver(staging_root, key_of(0), body_of(0, per_object), t3 + 60)
    with ThreadPoolExecutor(3) as pool:  # three processes listing the same re-put at once: one counts it
        assert sum(found.redelivered for found in pool.map(lambda _: discover(deployment), range(3))) == 1
    table = deployment.catalog.tables.get("web.access")
    assert deployment.catalog.partitions.small_objects(table.id, delayed=True) == []
    lineage = deployment.catalog.partitions.lineage(table.id)
    assert Counter(r.partition_date for r in lineage) == {DAY: 6, DAY + dt.timedelta(days=1): 6}
    assert len({(r.staging_object_id, r.partition_date) for r in lineage}) == 12, "each staging object once a date"
    assert user_counts(deployment, spark) == expected


# --- three stream daemons on PostgreSQL, a shipper putting every object three times ---------------------------


def _interrupt(daemons: list[SiltProcess], timeout: float) -> None:
    """Ctrl-C each daemon (it stops after its current round); kill_session whatever is left of them."""
    for daemon in daemons:
        if daemon.alive():
            os.kill(daemon.pid, signal.SIGINT)
    deadline = time.monotonic() + timeout
    for daemon in daemons:
        with contextlib.suppress(subprocess.TimeoutExpired):
            daemon.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        daemon.kill()


def _reported(outputs: list[str], phrase: str) -> int:
    """The sum of the numbers the daemons printed before `phrase` ("3 objects were already committed...")."""
    total = 0
    for output in outputs:
        for line in output.splitlines():
            if phrase in line:
                total += int(line.split()[0])
    return total


@pytest.mark.postgres
def test_three_stream_daemons_and_a_shipper_putting_everything_three_times(
    tmp_path: Path, postgres_url: str, spark
) -> None:
    """Three `silt stream` daemons poll one staging root on one PostgreSQL catalog while a shipper puts
    each of 18 objects three times in random order (the later puts land while the daemons decode and
    commit); one daemon is killed midway. Each record is stored once, each (staging object, date) has
    one small object, and once `silt reap` has run the lake holds no data file no catalog row names."""
    deployment = Deployment(make_config(tmp_path, postgres_url))
    deployment.init()
    deployment.use_spark(spark)
    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    staging_root = Path(deployment.staging.path(""))
    per_object, objects = 20, range(18)
    puts = [n for n in objects for _ in range(3)]
    random.Random(7).shuffle(puts)
    env = silt_env(
        tmp_path,
        postgres_url,
        stream={"objects_per_wave": 6, "tasks_per_core": 1},
        spark={"conf": {"spark.ui.enabled": "false"}},
    )
    daemons = [SiltProcess(tmp_path, f"stream-{n}", env, "stream", "--interval", "0.2") for n in range(3)]
    catalog = deployment.catalog
    uris = [deployment.staging.uri(key_of(n)) for n in objects]
    try:
        # A third of the puts before the daemons' first round, the rest while they decode and commit.
        for number in puts[:18]:
            deliver(staging_root, key_of(number), body_of(number, per_object))
        wait_until(lambda: catalog.partitions.small_objects(1), daemons, 120, "a first commit")
        for index, number in enumerate(puts[18:]):
            deliver(staging_root, key_of(number), body_of(number, per_object))
            time.sleep(0.05)
            if index == 9:  # a host dies mid-round: what it decoded stays behind as orphans, its objects pending
                daemons[2].kill()
        killed, daemons = daemons[2], daemons[:2]
        rounds_after_last_put = [daemon.log().count("stream: ") + 2 for daemon in daemons]
        wait_until(
            lambda: len(catalog.staging.known_uris(uris)) == len(objects) and not catalog.staging.pending(1),
            daemons,
            120,
            "every object processed",
        )
        wait_until(
            lambda: all(d.log().count("stream: ") >= n for d, n in zip(daemons, rounds_after_last_put, strict=True)),
            daemons,
            60,
            "a round of each daemon that listed the last puts",
        )
    finally:
        _interrupt(daemons, timeout=60)
    outputs = [daemon.log() for daemon in [*daemons, killed]]
    assert not catalog.staging.pending(1), outputs

    record = catalog.tables.get("web.access")
    small = catalog.partitions.small_objects(record.id)
    assert sum(o.row_count for o in small) == len(objects) * per_object
    lineage = catalog.partitions.lineage(record.id)
    assert len({(r.staging_object_id, r.partition_date) for r in lineage}) == len(lineage) == 2 * len(objects), (
        "one range per (staging object, date)"
    )
    assert user_counts(deployment, spark) == expected_users(objects, per_object)
    redelivered = _reported(outputs, "staging objects put again")
    skipped = _reported(outputs, "already committed by another process")
    # 36 re-puts; two puts of an object between two listings are seen as one.
    assert 1 <= redelivered <= 2 * len(objects), outputs
    after = discover(deployment)
    assert (after.registered, after.redelivered) == (0, 0), "the daemons saw and counted every put"

    layout = record.layout(deployment.instance_key)
    referenced = {layout.small_object(o.partition_date, o.id, o.delayed) for o in small}
    data_files = {
        info.key for info in deployment.lake.list(f"{deployment.instance_key}/") if info.key.endswith(".parquet")
    }
    orphans = data_files - referenced
    assert referenced <= data_files
    reaped = run_silt(
        env, "reap", "--json", "--now", (dt.datetime.now(dt.UTC) + dt.timedelta(days=4)).isoformat(), timeout=120
    )
    assert reaped.returncode == 0, reaped.stderr[-2000:]
    remaining = {
        info.key for info in deployment.lake.list(f"{deployment.instance_key}/") if info.key.endswith(".parquet")
    }
    assert remaining == referenced, "reap removes the killed daemon's files, nothing else"
    assert user_counts(deployment, spark) == expected_users(objects, per_object)
    print(
        f"3 daemons (one killed), {len(puts)} puts of {len(objects)} objects: {skipped} decoded copies dropped at "
        f"commit, {redelivered} re-puts counted, {len(orphans)} orphan files reaped"
    )
    deployment.close()


@pytest.mark.postgres
def test_three_stream_daemons_and_a_writer_appending_in_place(tmp_path: Path, postgres_url: str, spark) -> None:
    """Three `silt stream` daemons poll one staging root while a writer appends JSON lines in place to two
    files, each flush split mid-line (as Fluentd's out_file appends); one daemon is killed midway. Every
    line is loaded once: the tails are delivered one at a time from where the last delivery stopped."""
    deployment = Deployment(make_config(tmp_path, postgres_url))
    deployment.init()
    deployment.use_spark(spark)
    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    staging_root = Path(deployment.staging.path(""))
    paths = [staging_root / f"fluentd01.web.access/2026/11/20/out_file_{n}.log" for n in range(2)]
    paths[0].parent.mkdir(parents=True)
    env = silt_env(
        tmp_path,
        postgres_url,
        stream={"settle_time": 1, "settle_limit": 2, "objects_per_wave": 4},
        spark={"conf": {"spark.ui.enabled": "false"}},
    )
    daemons = [SiltProcess(tmp_path, f"stream-{n}", env, "stream", "--interval", "0.2") for n in range(3)]
    rng = random.Random(11)
    flushes, per_flush = 40, 10
    try:
        wait_until(lambda: all("streaming" in d.log() for d in daemons), daemons, 120, "the daemons' start")
        for flush in range(flushes):
            data = b"".join(json.dumps(r).encode() + b"\n" for r in records_of(flush, per_flush))
            cut = rng.randint(1, len(data) - 1)
            with paths[flush % 2].open("ab") as file:
                file.write(data[:cut])
                file.flush()
                time.sleep(rng.uniform(0.0, 0.05))
                file.write(data[cut:])
            time.sleep(rng.uniform(0.05, 0.4))
            if flush == flushes // 2:
                daemons[2].kill()
        killed, daemons = daemons[2], daemons[:2]
        total = flushes * per_flush

        table_id = deployment.catalog.tables.get("web.access").id

        def loaded() -> int:
            return sum(o.row_count for o in deployment.catalog.partitions.small_objects(table_id))

        wait_until(
            lambda: loaded() >= total and not deployment.catalog.staging.pending(1), daemons, 180, "every line loaded"
        )
    finally:
        _interrupt(daemons, timeout=60)
    outputs = [daemon.log() for daemon in [*daemons, killed]]
    assert user_counts(deployment, spark) == expected_users(range(flushes), per_flush), outputs
    assert "rewritten in place" not in "".join(outputs)
    print(f"3 daemons (one killed), {flushes} flushes split mid-line into 2 files: every line once")
    deployment.close()


# --- silt load: the same file three times, two of them at once ---------------------------------------------------


def test_the_same_load_three_times_two_at_once_commits_once(deployment: Deployment, tmp_path: Path) -> None:
    """Three `load` runs of one config and one resume state, the first two at the same moment: one
    commits, the others find the state committed, and every row is in the table once."""
    from siltlake.load import load, parse_load_config

    from .test_load import config, csv_file, ids

    inputs = tmp_path / "in"
    inputs.mkdir()
    rows = csv_file(inputs / "a.csv", 0, 30) + csv_file(inputs / "b.csv.gz", 100, 20, gz=True)
    load_config = parse_load_config(config(inputs))
    state = tmp_path / "resume.yml"
    start = threading.Barrier(2)

    def run(_: int):  # a LoadReport
        start.wait()
        return load(deployment, load_config, state_path=str(state))

    with ThreadPoolExecutor(2) as pool:
        together = list(pool.map(run, range(2)))
    third = load(deployment, load_config, state_path=str(state))
    assert ids(deployment) == sorted(row[0] for row in rows)
    assert sorted(r.already_committed for r in together) == [False, True] and third.already_committed
    assert not [info for info in deployment.lake.list(f"{deployment.instance_key}/_tmp")]


# --- silt errors replay: retried after a crash, and run twice at once ---------------------------------------------


def test_errors_replay_retried_after_a_crash_and_run_twice_at_once_stages_each_record_once(
    deployment: Deployment, spark, monkeypatch
) -> None:  # pytest's monkeypatch
    """Kept bad records, fixed by the user, are replayed by a run that dies before it clears the error
    file, then by two runs at once, then once more: each fixed record is loaded exactly once."""
    from siltlake.catalog.staging import Staging
    from siltlake.stream.replay import replay_errors

    deployment.catalog.tables.create(TableDef.from_mapping({**ACCESS_TABLE, "error_policy": "file"}))
    staging_root = Path(deployment.staging.path(""))
    good = records_of(1, 4)
    bad = [{**r, "user_id": f"u{r['user_id']}"} for r in records_of(2, 3)]  # wrong type: kept in the error file
    deliver(staging_root, key_of(1), "".join(json.dumps(r) + "\n" for r in good + bad).encode())
    (error_key,) = stream_once(deployment).error_files
    kept = [json.loads(line) for line in deployment.lake.read_bytes(error_key).decode().splitlines()]
    fixed = [
        {**line, "raw": json.dumps({**json.loads(line["raw"]), "user_id": 2000 + n})} for n, line in enumerate(kept)
    ]
    deployment.lake.write_bytes(error_key, "".join(json.dumps(line) + "\n" for line in fixed).encode())

    def crash(self, error_uri: str) -> None:
        raise ConnectionError("catalog connection lost after the records were staged")

    with monkeypatch.context() as patch:
        patch.setattr(Staging, "clear_error_uri", crash)
        with pytest.raises(ConnectionError):
            replay_errors(deployment, "web.access")
    start = threading.Barrier(2)

    def replay(_: int) -> int:
        start.wait()
        return replay_errors(deployment, "web.access").records

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(replay, range(2)))
    assert replay_errors(deployment, "web.access").records == 0, "the error file is done"
    stream_once(deployment)
    expected = Counter(r["user_id"] for r in good) + Counter(2000 + n for n in range(len(bad)))
    assert user_counts(deployment, spark) == expected


def test_unknown_replay_run_three_times_streams_the_fixed_object_once(
    deployment: Deployment, spark, monkeypatch
) -> None:
    """A corrupt object goes to unknown; the shipper puts it again fixed (same key); `silt unknown replay
    --all` runs three times, with stream runs between: the object is loaded once."""
    from .merge_helpers import silt_in_process

    silt = silt_in_process(deployment, monkeypatch)
    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    staging_root = Path(deployment.staging.path(""))
    fixed = body_of(3, 8)
    deliver(staging_root, key_of(3), fixed[: len(fixed) // 2], time.time() - 120)  # truncated gzip
    assert len(stream_once(deployment).unknown) == 1
    deliver(staging_root, key_of(3), fixed, time.time() - 60)
    assert stream_once(deployment).processed == 0, "an unknown object waits for a replay"
    assert "1 objects will be streamed again" in silt("unknown", "replay", "--all")
    assert "0 objects will be streamed again" in silt("unknown", "replay", "--all")
    assert stream_once(deployment).records_loaded == 8
    assert "0 objects will be streamed again" in silt("unknown", "replay", "--all")
    assert stream_once(deployment).processed == 0
    assert user_counts(deployment, spark) == expected_users([3], 8)


# --- the property: any interleaving of deliveries, runs and a second process racing them --------------------------


def _other_process_decodes(deployment: Deployment, run: str = "other") -> list[tuple[dict, PendingStagingObject]]:
    """What a second stream process holds after listing the staging root and decoding every pending
    object (not yet committed)."""
    discover(deployment)
    return [
        (process_staging_object(stream_task(deployment, pending, f"{run}-{uuid.uuid4().hex[:8]}")), pending)
        for pending in deployment.catalog.staging.pending(100)
    ]


def _other_process_commits(deployment: Deployment, copies: list[tuple[dict, PendingStagingObject]]) -> StreamReport:
    report = StreamReport()
    commit_results(
        deployment,
        [copy for copy, _ in copies],
        {p.id: p for _, p in copies},
        report,
        deployment.catalog.versions.mark(),
    )
    return report


def _temporary(deployment: Deployment) -> list[str]:
    return [info.key for info in deployment.lake.list(f"{deployment.instance_key}/_tmp")]


class BeatenWhileInFlight(PutsWhileInFlight):
    """Also lets a second process decode and commit this run's objects before this run commits them."""

    def start(self, total: int) -> None:
        super().start(total)
        self.other = _other_process_commits(self.deployment, _other_process_decodes(self.deployment))


ACTIONS = ["put", "put_in_flight", "stream", "stream_beaten", "stream_then_late", "other_dies_after_decoding"]
STEPS = st.lists(st.tuples(st.sampled_from(ACTIONS), st.integers(0, 3)), min_size=2, max_size=8)


@settings(max_examples=4, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
@example(steps=[("put_in_flight", 0), ("put_in_flight", 1), ("stream", 0), ("stream_beaten", 0)])
@example(
    steps=[
        ("put", 0),
        ("other_dies_after_decoding", 0),
        ("put", 1),
        ("stream_then_late", 0),
        ("put", 1),
        ("put_in_flight", 2),
        ("stream_beaten", 0),
        ("put", 3),
        ("other_dies_after_decoding", 0),
    ]
)
def test_any_interleaving_of_deliveries_runs_and_a_racing_process_stores_each_record_once(spark, steps) -> None:
    """Puts (between runs, or while a run is in flight), stream runs, and runs raced by a second process
    (it commits first while the run is in flight, it decoded before the run and commits after it, or it
    dies after decoding), in any order: whoever commits second adds nothing and says so, after every
    step each delivered object's records are stored exactly once (or not yet, if no run has seen it),
    and only the dead process's files are left over, which reap removes."""
    per_object = 5
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        deployment = Deployment(make_config(root, f"sqlite:///{root / 'catalog.db'}"))
        deployment.init()
        deployment.use_spark(spark)
        record = deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
        staging_root = Path(deployment.staging.path(""))
        delivered: set[int] = set()
        in_flight: list[tuple[int, float]] = []
        clock = time.time() - 3600

        def processed() -> int:
            uris = [deployment.staging.uri(key_of(n)) for n in range(4)]
            return len(deployment.catalog.staging.known_uris(uris)) - len(deployment.catalog.staging.pending(100))

        try:
            for action, number in [*steps, ("stream", 0), ("stream", 0)]:
                clock += 10
                if action == "put":
                    deliver(staging_root, key_of(number), body_of(number, per_object), clock)
                    delivered.add(number)
                    continue
                if action == "put_in_flight":
                    in_flight.append((number, clock))
                    continue
                if action == "other_dies_after_decoding":
                    _other_process_decodes(deployment, "dead")
                    continue
                pending = len(deployment.catalog.staging.pending(100))
                copies = _other_process_decodes(deployment) if action == "stream_then_late" else []
                progress_type = BeatenWhileInFlight if action == "stream_beaten" else PutsWhileInFlight
                progress = progress_type(in_flight, staging_root, per_object, deployment)
                report = stream_once(deployment, progress)
                delivered.update(n for n, _ in in_flight)
                in_flight = []
                if action == "stream_beaten":
                    assert report.skipped_duplicates == pending + report.registered
                    assert report.processed == 0 and progress.other.skipped_duplicates == 0
                if copies:
                    late = _other_process_commits(deployment, copies)
                    assert (late.skipped_duplicates, late.records_loaded) == (len(copies), 0)
                # Each object's records fall on two dates: two ranges per processed object, never more.
                lineage = deployment.catalog.partitions.lineage(record.id)
                assert len({(r.staging_object_id, r.partition_date) for r in lineage}) == len(lineage)
                assert (len(lineage), sum(r.row_count for r in lineage)) == (2 * processed(), per_object * processed())
                assert not [key for key in _temporary(deployment) if "/_tmp/dead-" not in key]
            assert processed() == len(delivered)
            reap_once(deployment, dt.datetime.now(dt.UTC).replace(tzinfo=None) + dt.timedelta(days=4))
            assert _temporary(deployment) == []
            assert user_counts(deployment, spark) == expected_users(sorted(delivered), per_object)
        finally:
            deployment.close()


def test_a_local_object_set_aside_as_unknown_then_put_again_fixed_loads_after_a_replay(
    deployment: Deployment, spark, monkeypatch
) -> None:
    """An object no line of which is JSON goes to unknown (its file's identity and first bytes were noted when it
    was registered); the shipper puts a fixed one under the same key (another file, other bytes) and the operator
    replays it: the name's first delivery reads the fixed file, noted anew when the replay registers it."""
    from .merge_helpers import silt_in_process

    silt = silt_in_process(deployment, monkeypatch)
    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    staging_root = Path(deployment.staging.path(""))
    deliver(staging_root, key_of(4), b"not json at all\nnor this\n", time.time() - 120)
    assert len(stream_once(deployment).unknown) == 1
    deliver(staging_root, key_of(4), body_of(4, 6), time.time() - 60)
    assert "1 objects will be streamed again" in silt("unknown", "replay", "--all")
    assert stream_once(deployment).records_loaded == 6
    assert stream_once(deployment).processed == 0
    assert user_counts(deployment, spark) == expected_users([4], 6)
