"""Stream end to end: staging objects to live and delayed small objects, on Spark, on both catalogs."""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import msgpack
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from siltlake.deployment import Deployment
from siltlake.read import sql, table
from siltlake.storage.filesystem import Storage
from siltlake.stream import stream_once
from siltlake.stream.task import StreamTask, process_staging_object
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE, make_config

pytestmark = pytest.mark.spark
UTC = dt.UTC


def stage(deployment: Deployment, key: str, data: bytes) -> str:
    path = Path(deployment.staging.path(key))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return deployment.staging.uri(key)


def jsonl_gz(records: list[dict]) -> bytes:
    return gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode())


def event(when: dt.datetime, user_id: int, action: str = "view") -> dict:
    return {"time": when.isoformat().replace("+00:00", "Z"), "user_id": user_id, "action": action}


def lake_files(deployment: Deployment, area: str) -> list[str]:
    return sorted(info.key for info in deployment.lake.list() if f"/{area}/" in info.key)


def assert_rows_once(deployment: Deployment, expected: int) -> None:
    """web.access holds `expected` rows, each user id once, in as many live files as small objects."""
    record = deployment.catalog.tables.get("web.access")
    objects = deployment.catalog.partitions.small_objects(record.id)
    assert sum(o.row_count for o in objects) == expected
    live = lake_files(deployment, "live")
    assert len(live) == len(objects)
    users = [u for key in live for u in pq.read_table(deployment.lake.path(key)).column("user_id").to_pylist()]
    assert len(users) == len(set(users)) == expected


def test_objects_become_sorted_small_objects_per_tokyo_date(deployment: Deployment, access_table) -> None:
    # 14:59:59Z is 23:59:59 in Tokyo on the 20th; 15:00Z is already the 21st there.
    times = [
        dt.datetime(2026, 11, 20, 15, 0, 1, tzinfo=UTC),
        dt.datetime(2026, 11, 20, 14, 59, 59, tzinfo=UTC),
        dt.datetime(2026, 11, 20, 3, 0, tzinfo=UTC),
        dt.datetime(2026, 11, 20, 15, 0, 0, tzinfo=UTC),
    ]
    stage(deployment, "f1.web.access/2026/11/20/a.jsonl.gz", jsonl_gz([event(t, i) for i, t in enumerate(times)]))
    stage(deployment, "f1.web.access/2026/11/20/b.jsonl.gz", jsonl_gz([event(times[2] + dt.timedelta(hours=1), 9)]))

    report = stream_once(deployment)

    assert (report.registered, report.processed, report.records_loaded, report.bad_records) == (2, 2, 5, 0)
    assert report.live_objects == 3 and report.delayed_objects == 0
    files = lake_files(deployment, "live")
    assert [f.split("/")[-2] for f in files] == ["dt=2026-11-20", "dt=2026-11-20", "dt=2026-11-21"]
    assert all(f.startswith("test0001/web.access/live/") for f in files)
    for key in files:
        rows = pq.read_table(deployment.lake.path(key)).column("utc_event_time").to_pylist()
        assert rows == sorted(rows)
    day21 = pq.read_table(deployment.lake.path(files[2]))
    assert day21.column("user_id").to_pylist() == [3, 0]
    assert day21.schema.field("utc_event_time").type == pa.timestamp("us", tz="UTC")

    partitions = deployment.catalog.partitions.list(access_table.id)
    assert [p.partition_date for p in partitions] == [dt.date(2026, 11, 20), dt.date(2026, 11, 21)]
    for partition in partitions:
        (job,) = deployment.catalog.merge_queue.jobs(partition.id)
        assert job["ongoing_mark"] == 0
    objects = deployment.catalog.partitions.small_objects(access_table.id)
    assert [o.id for o in objects] == sorted(o.id for o in objects)
    assert sum(o.row_count for o in objects) == 5

    frame = table(deployment.spark(), "web.access", deployment)
    assert frame.columns == ["utc_event_time", "user_id", "action", "dt"]
    by_date = {str(r["dt"]): r["count"] for r in frame.groupBy("dt").count().collect()}
    assert by_date == {"2026-11-20": 3, "2026-11-21": 2}
    result = sql(
        deployment.spark(), "SELECT dt, count(*) AS n FROM web.access GROUP BY dt ORDER BY dt", deployment
    ).collect()
    assert [(str(r.dt), r.n) for r in result] == [("2026-11-20", 3), ("2026-11-21", 2)]


def test_processing_the_same_object_again_adds_nothing(deployment: Deployment, access_table) -> None:
    when = dt.datetime(2026, 11, 20, 1, tzinfo=UTC)
    stage(deployment, "f1.web.access/2026/11/20/a.jsonl.gz", jsonl_gz([event(when, i) for i in range(10)]))
    first = stream_once(deployment)
    second = stream_once(deployment)
    third = stream_once(deployment)
    assert first.records_loaded == 10
    assert second.registered == third.registered == second.processed == third.processed == 0

    # A second process that computed the same object before the first committed: its copy is dropped.
    from siltlake.stream.commit import commit_results
    from siltlake.stream.stage import stream_task

    pending = deployment.catalog.staging.pending(10)
    assert pending == []
    from siltlake.catalog import PendingStagingObject

    # Its size is the one the object was registered at: a local file's task reads up to it (a gzip file's too,
    # since gzip members are deliveries), so a stale copy with size 0 would read nothing at all.
    key = "f1.web.access/2026/11/20/a.jsonl.gz"
    stale = PendingStagingObject(
        1, deployment.staging.uri(key), os.path.getsize(deployment.staging.path(key)), access_table
    )
    result = process_staging_object(stream_task(deployment, stale, "late-run"))
    assert result["status"] == "ok"
    from siltlake.stream.report import StreamReport

    late = StreamReport()
    commit_results(deployment, [result], {1: stale}, late, deployment.catalog.versions.mark())
    assert late.skipped_duplicates == 1 and late.records_loaded == 0
    assert not deployment.lake.exists(result["parts"][0]["tmp_key"])
    assert sum(o.row_count for o in deployment.catalog.partitions.small_objects(access_table.id)) == 10
    assert table(deployment.spark(), "web.access", deployment).count() == 10


def test_delayed_objects_after_the_partition_is_closed(deployment: Deployment, access_table) -> None:
    day = dt.datetime(2026, 11, 19, 2, tzinfo=UTC)  # 11:00 on the 19th in Tokyo
    stage(deployment, "f1.web.access/2026/11/19/a.jsonl.gz", jsonl_gz([event(day, 1), event(day, 2)]))
    stream_once(deployment)
    closed = deployment.catalog.partitions.close(access_table.id, dt.date(2026, 11, 19))
    assert closed.closed

    stage(
        deployment,
        "f1.web.access/2026/11/20/late.jsonl.gz",
        jsonl_gz([event(day + dt.timedelta(minutes=5), 3), event(day + dt.timedelta(days=1), 4)]),
    )
    report = stream_once(deployment)

    assert (report.live_objects, report.delayed_objects) == (1, 1)
    delayed = lake_files(deployment, "delayed")
    assert len(delayed) == 1 and "/delayed/dt=2026-11-19/obj-" in delayed[0]
    rows = deployment.catalog.partitions.small_objects(access_table.id, delayed=True)
    assert len(rows) == 1 and rows[0].id > closed.last_live_object_id
    # Readers see live objects only until the delayed one is merged and published.
    users = sorted(r.user_id for r in table(deployment.spark(), "web.access", deployment).collect())
    assert users == [1, 2, 4]


@pytest.mark.parametrize(
    "zone, events, expected",
    [
        # New York springs forward on 2026-03-08 at 02:00 local (EST -5 -> EDT -4).
        (
            "America/New_York",
            ["2026-03-08T04:59:59Z", "2026-03-08T05:00:00Z", "2026-03-09T03:59:59Z", "2026-03-09T04:00:00Z"],
            ["2026-03-07", "2026-03-08", "2026-03-08", "2026-03-09"],
        ),
        # Berlin falls back on 2026-10-25 at 03:00 local (CEST +2 -> CET +1).
        (
            "Europe/Berlin",
            ["2026-10-24T21:59:59Z", "2026-10-24T22:00:00Z", "2026-10-25T22:59:59Z", "2026-10-25T23:00:00Z"],
            ["2026-10-24", "2026-10-25", "2026-10-25", "2026-10-26"],
        ),
    ],
)
def test_partition_dates_follow_the_time_zone_across_dst(deployment: Deployment, zone, events, expected) -> None:
    deployment.catalog.tables.create(TableDef.from_mapping({**ACCESS_TABLE, "timezone": zone}))
    stage(
        deployment,
        "f.web.access/2026/03/08/dst.jsonl",
        "".join(json.dumps({"time": t, "user_id": i, "action": "a"}) + "\n" for i, t in enumerate(events)).encode(),
    )
    stream_once(deployment)
    rows = table(deployment.spark(), "web.access", deployment).orderBy("user_id").collect()
    assert [str(r.dt) for r in rows] == expected


class Raw(bytes):
    """Already-encoded MessagePack (ext type -1 cannot be built with msgpack.ExtType)."""


def _ext_timestamp(seconds: int, nanos: int, layout: int) -> Raw:
    if layout == 32:
        return Raw(b"\xd6\xff" + seconds.to_bytes(4, "big"))
    if layout == 64:
        return Raw(b"\xd7\xff" + ((nanos << 34) | seconds).to_bytes(8, "big"))
    return Raw(b"\xc7\x0c\xff" + nanos.to_bytes(4, "big") + seconds.to_bytes(8, "big", signed=True))


def _pack(item: object) -> bytes:
    if isinstance(item, Raw):
        return bytes(item)
    if isinstance(item, list):
        return bytes([0x90 | len(item)]) + b"".join(_pack(part) for part in item)
    return msgpack.packb(item)


def test_msgpack_fluentd_entries_with_every_time_layout(deployment: Deployment, access_table) -> None:
    base = int(dt.datetime(2026, 11, 20, 1, 2, 3, tzinfo=UTC).timestamp())
    entries = [
        {"time": "2026-11-20T01:00:00Z", "user_id": 1, "action": "map"},
        [
            "tag.web",
            msgpack.ExtType(0, base.to_bytes(4, "big") + (123456789).to_bytes(4, "big")),
            {"user_id": 2, "action": "eventtime"},
        ],
        [_ext_timestamp(base, 0, 32), {"user_id": 3, "action": "ts32"}],
        [_ext_timestamp(base, 987654321, 64), {"user_id": 4, "action": "ts64"}],
        ["tag.web", _ext_timestamp(base, 5000, 96), {"user_id": 5, "action": "ts96"}],
        [base, {"user_id": 6, "action": "int-seconds"}],
    ]
    stage(deployment, "f.web.access/2026/11/20/a.msgpack", b"".join(_pack(e) for e in entries))
    report = stream_once(deployment)
    assert (report.records_loaded, report.bad_records, report.unknown) == (6, 0, [])
    rows = {r.user_id: r.utc_event_time for r in table(deployment.spark(), "web.access", deployment).collect()}
    start = dt.datetime(2026, 11, 20, 1, 2, 3)
    assert rows[1] == dt.datetime(2026, 11, 20, 1, 0, 0)
    assert rows[2] == start + dt.timedelta(microseconds=123456)
    assert rows[3] == start
    assert rows[4] == start + dt.timedelta(microseconds=987654)
    assert rows[5] == start + dt.timedelta(microseconds=5)
    assert rows[6] == start


def test_malformed_objects_go_to_unknown_and_the_stream_goes_on(deployment: Deployment, access_table) -> None:
    good = jsonl_gz([event(dt.datetime(2026, 11, 20, 1, tzinfo=UTC), 1)])
    stage(deployment, "f.web.access/2026/11/20/good.jsonl.gz", good)
    stage(
        deployment,
        "f.web.access/2026/11/20/truncated.jsonl.gz",
        jsonl_gz([event(dt.datetime(2026, 11, 20, 1, tzinfo=UTC), i) for i in range(2000)])[:-200],
    )
    stage(deployment, "f.web.access/2026/11/20/random.jsonl.gz", random.Random(1).randbytes(3000))
    stage(deployment, "f.web.access/2026/11/20/notjson.jsonl", b"hello world\nthis is not json\n")
    stage(
        deployment,
        "f.web.access/2026/11/20/latin1.jsonl",
        b'{"time": "2026-11-20T01:00:00Z", "user_id": 1, "action": "caf\xe9"}\n',
    )
    stage(deployment, "f.web.nosuch/2026/11/20/x.jsonl.gz", good)
    stage(deployment, "not-a-table-key.json", good)

    report = stream_once(deployment)

    assert report.records_loaded == 1 and report.failed == []
    reasons = {uri.rsplit("/", 1)[-1]: reason for uri, reason in report.unknown}
    assert set(reasons) == {"truncated.jsonl.gz", "random.jsonl.gz", "notjson.jsonl", "latin1.jsonl"}
    unknown = {u.uri.rsplit("/", 1)[-1]: u for u in deployment.catalog.staging.unknown()}
    assert set(unknown) == set(reasons) | {"x.jsonl.gz", "not-a-table-key.json"}
    assert "no table web.nosuch" in unknown["x.jsonl.gz"].reason
    assert "does not match" in unknown["not-a-table-key.json"].reason
    assert unknown["truncated.jsonl.gz"].table_name == "web.access"
    assert not [key for key in lake_files(deployment, "live") if "truncated" in key]
    assert sum(o.row_count for o in deployment.catalog.partitions.small_objects(access_table.id)) == 1
    assert not any("/_tmp/" in info.key for info in deployment.lake.list())

    # Once the missing table exists, a replay streams its object.
    deployment.catalog.tables.create(TableDef.from_mapping({**ACCESS_TABLE, "name": "nosuch"}))
    deployment.catalog.staging.forget_unknown([unknown["x.jsonl.gz"].uri])
    replayed = stream_once(deployment)
    assert replayed.registered == 1 and replayed.records_loaded == 1


def test_bad_records_are_counted_kept_with_their_source_and_replayable(deployment: Deployment) -> None:
    deployment.catalog.tables.create(TableDef.from_mapping({**ACCESS_TABLE, "error_policy": "file"}))
    lines = [
        json.dumps({"time": "2026-11-20T01:00:00Z", "user_id": 1, "action": "ok"}),
        "{not json",
        json.dumps({"time": "2026-11-20T01:00:01Z", "user_id": "abc", "action": "wrong type"}),
        json.dumps({"user_id": 3, "action": "no time"}),
        json.dumps({"time": "yesterday-ish", "user_id": 4, "action": "bad time"}),
        json.dumps({"time": "2026-11-20T01:00:02Z", "user_id": 5, "action": "ok"}),
    ]
    uri = stage(deployment, "f.web.access/2026/11/20/mixed.jsonl", ("\n".join(lines) + "\n").encode())

    report = stream_once(deployment)

    assert (report.records_in, report.records_loaded, report.bad_records) == (6, 2, 4)
    (error_key,) = report.error_files
    kept = [json.loads(line) for line in deployment.lake.read_bytes(error_key).decode().splitlines()]
    assert [k["line"] for k in kept] == [2, 3, 4, 5]
    assert all(k["source"] == uri and k["reason"] for k in kept)
    assert "user_id" in kept[1]["reason"]

    # The user fixes the records in the error file, then replays them.
    fixed = []
    for k in kept:
        if k["line"] == 2:
            continue  # still broken: stays behind
        record = json.loads(k["raw"])
        record["time"] = "2026-11-20T02:00:00Z"
        record["user_id"] = 7
        fixed.append({**k, "raw": json.dumps(record)})
    fixed.insert(0, kept[0])
    deployment.lake.write_bytes(error_key, "".join(json.dumps(k) + "\n" for k in fixed).encode())
    from siltlake.stream.replay import replay_errors

    result = replay_errors(deployment, "web.access")
    assert (result.records, result.kept) == (3, 1)
    again = stream_once(deployment)
    assert again.records_loaded == 3 and again.bad_records == 0
    assert table(deployment.spark(), "web.access", deployment).count() == 5


@pytest.mark.parametrize("spill_bytes, batch_rows", [(64 * 1024, 4096), (8 * 1024, 512)])
def test_huge_objects_spill_sorted_runs_and_merge_them(tmp_path: Path, spill_bytes: int, batch_rows: int) -> None:
    """The bounded-memory path: a tiny spill threshold forces many runs and a k-way merge
    (at 8 KiB, more runs than the merge fan-in, so intermediate merge passes too)."""
    rng = random.Random(5)
    start = dt.datetime(2026, 11, 20, 0, tzinfo=UTC)
    records = [event(start + dt.timedelta(seconds=rng.randrange(0, 2 * 86400)), i) for i in range(30000)]
    staging = tmp_path / "big.jsonl.gz"
    staging.write_bytes(jsonl_gz(records))
    lake = Storage(str(tmp_path / "lake"))
    definition = TableDef.from_mapping(ACCESS_TABLE)
    from siltlake.storage.keys import TableLayout

    task = StreamTask(
        staging_object_id=1,
        uri=staging.as_uri(),
        staging=Storage(str(tmp_path)),
        lake=lake,
        layout=TableLayout("k1k1", "web", "access"),
        table_json=definition.to_json(),
        run_id="r",
        batch_rows=batch_rows,
        spill_bytes=spill_bytes,
    )
    result = process_staging_object(task)
    assert result["status"] == "ok", result
    assert sum(p["rows"] for p in result["parts"]) == 30000
    seen = []
    for part in result["parts"]:
        written = pq.read_table(lake.path(part["tmp_key"]))
        times = written.column("utc_event_time").to_pylist()
        assert times == sorted(times)
        assert part["rows"] == written.num_rows
        seen += written.column("user_id").to_pylist()
    assert sorted(seen) == list(range(30000))
    assert not [info.key for info in lake.list() if ".run-" in info.key or ".merged-" in info.key]


@pytest.mark.postgres
def test_two_stream_processes_on_one_postgres_catalog(tmp_path: Path, postgres_url: str) -> None:
    config = make_config(tmp_path, postgres_url)
    deployment = Deployment(config)
    deployment.init()
    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    rng = random.Random(3)
    expected = 0
    for n in range(40):
        when = dt.datetime(2026, 11, 20, tzinfo=UTC) + dt.timedelta(minutes=rng.randrange(0, 2880))
        count = rng.randrange(1, 50)
        expected += count
        stage(
            deployment,
            f"f.web.access/2026/11/20/{n:03d}.jsonl.gz",
            jsonl_gz([event(when, n * 1000 + i) for i in range(count)]),
        )
    config_file = tmp_path / "siltlake.toml"
    config_file.write_text(
        f'instance_key = "test0001"\n[catalog]\nurl = "{postgres_url}"\n'
        f'[storage]\nroot = "{tmp_path / "lake"}"\nstaging_root = "{tmp_path / "staging"}"\n'
        '[spark]\nmaster = "local[1]"\n[stream]\nobjects_per_wave = 8\n'
    )
    env = {**os.environ, "SILTLAKE_CONFIG": str(config_file)}
    command = [sys.executable, "-m", "siltlake.cli", "stream", "--once", "--json"]
    workers = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outputs = [worker.communicate(timeout=300) for worker in workers]
    for worker, (_, err) in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, err.decode()[-2000:]
    reports = [json.loads(stdout) for stdout, _ in outputs]
    assert sum(r["processed"] for r in reports) == 40
    assert sum(r["records_loaded"] for r in reports) == expected
    assert_rows_once(deployment, expected)
    deployment.close()


def test_polling_picks_up_new_objects_and_survives_a_failing_round(
    deployment: Deployment, access_table, monkeypatch
) -> None:
    import threading
    import time

    from siltlake.stream import runner

    reports, errors = [], []
    real_once = runner.stream_once
    calls = {"n": 0}

    def flaky_once(d, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("storage briefly unreachable")
        return real_once(d, *args, **kwargs)

    monkeypatch.setattr(runner, "stream_once", flaky_once)
    stop = threading.Event()
    loop = threading.Thread(
        target=runner.stream_forever,
        args=(deployment, stop, reports.append, 0.05),
        kwargs={"on_error": lambda exc, wait: errors.append(str(exc))},
    )
    loop.start()
    try:
        stage(
            deployment,
            "f.web.access/2026/11/20/a.jsonl.gz",
            jsonl_gz([event(dt.datetime(2026, 11, 20, 1, tzinfo=UTC), i) for i in range(3)]),
        )
        deadline = time.monotonic() + 120
        while (sum(r.records_loaded for r in reports) < 3 or not errors) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        stop.set()
        loop.join(timeout=120)
    assert not loop.is_alive()
    assert sum(r.records_loaded for r in reports) == 3
    assert errors == ["storage briefly unreachable"]


def test_a_commit_that_dies_after_moving_objects_moves_them_back(
    deployment: Deployment, access_table, monkeypatch
) -> None:
    """Objects are moved to their id keys inside the commit; if the commit then fails, they are moved back
    (no row points at them, and a process that dies instead leaves only orphans for reap), the staging
    object stays pending, and the next run loads each record exactly once."""
    from siltlake.catalog import StreamCommit

    when = dt.datetime(2026, 11, 20, 1, tzinfo=UTC)
    stage(
        deployment,
        "f.web.access/2026/11/20/a.jsonl.gz",
        jsonl_gz([event(when, i) for i in range(5)] + [event(when + dt.timedelta(days=1), 5)]),
    )
    real_add = StreamCommit.add_small_object
    calls = {"n": 0}

    def dying_add(self, **values):
        calls["n"] += 1
        if calls["n"] == 2:  # the first object is moved and inserted, the second moved, then we die
            raise ConnectionError("catalog connection lost mid-commit")
        return real_add(self, **values)

    monkeypatch.setattr(StreamCommit, "add_small_object", dying_add)
    with pytest.raises(ConnectionError):
        stream_once(deployment)
    assert lake_files(deployment, "live") == []  # both were moved before the failure, and moved back
    assert deployment.catalog.partitions.small_objects(access_table.id) == []
    assert len(deployment.catalog.staging.pending(10)) == 1
    assert not any("/_tmp/" in info.key for info in deployment.lake.list())

    monkeypatch.setattr(StreamCommit, "add_small_object", real_add)
    report = stream_once(deployment)

    assert report.records_loaded == 6
    objects = deployment.catalog.partitions.small_objects(access_table.id)
    assert len(lake_files(deployment, "live")) == len(objects) == 2
    for o in objects:
        assert deployment.lake.exists(
            deployment.catalog.tables.get("web.access")
            .layout("test0001")
            .small_object(o.partition_date, o.id, o.delayed)
        )
    users = sorted(r.user_id for r in table(deployment.spark(), "web.access", deployment).collect())
    assert users == [0, 1, 2, 3, 4, 5]
