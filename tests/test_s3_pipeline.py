"""The pipeline on a local S3 endpoint (moto on 127.0.0.1, behind a counting proxy): stream, merge, publish
with manifests, readers without Spark, update/delete, reap with orphans, through pyarrow's S3 file system
exactly as on AWS (an endpoint override, credentials from the AWS environment variables)."""

from __future__ import annotations

import datetime as dt
import gzip
import json
from collections import Counter

import pyarrow.parquet as pq
import pytest

from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.read import table as read_table
from siltlake.reap import reap_once
from siltlake.storage.manifests import read_manifest
from siltlake.stream import stream_once
from siltlake.stream.replay import replay_errors
from siltlake.tabledef import TableDef
from siltlake.write.update import delete_rows

from .conftest import ACCESS_TABLE
from .merge_helpers import add_small_objects, rows_for, silt_in_process
from .s3_server import CountingProxy
from .test_merge import DAY, assert_exact, make_table, only_partition
from .test_publish import tokyo

pytestmark = pytest.mark.spark
UTC = dt.UTC


def stage(deployment: Deployment, key: str, data: bytes) -> str:
    with deployment.staging.open_output(key) as out:
        out.write(data)
    return deployment.staging.uri(key)


def jsonl_gz(records: list[dict]) -> bytes:
    return gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode())


def events(day: int, count: int, seed: int) -> list[dict]:
    base = dt.datetime(2026, 11, day, 1, 0, tzinfo=UTC)
    return [
        {
            "time": (base + dt.timedelta(seconds=seed * 1000 + i)).isoformat().replace("+00:00", "Z"),
            "user_id": seed * 1000 + i,
            "action": f"a{i % 3}",
        }
        for i in range(count)
    ]


def test_stream_writes_small_objects_on_s3_and_counts_requests(
    s3_deployment: Deployment, s3_proxy: CountingProxy
) -> None:
    """Requests per staging object, the figure an operator's bill grows with: two rounds of 4 and 12 objects;
    the difference over 8 is what one more object costs (a round's own requests cancel out)."""
    deployment = s3_deployment
    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    rounds = []
    for first, count in ((0, 4), (4, 12)):
        for n in range(first, first + count):
            stage(deployment, f"f1.web.access/2026/11/20/obj-{n}.jsonl.gz", jsonl_gz(events(20, 50, n)))
        s3_proxy.reset()
        report = stream_once(deployment)
        rounds.append(s3_proxy.reset())
        assert (report.processed, report.records_loaded, report.failed) == (count, count * 50, [])
    per_object = {kind: (rounds[1][kind] - rounds[0][kind]) / 8 for kind in sorted(set(rounds[0]) | set(rounds[1]))}
    per_round = rounds[0]["total"] - 4 * per_object["total"]
    print(f"S3 requests per staging object: {per_object}; per round besides: {per_round:.0f}")
    # Read it (HEAD + GET); its rows go to its group's Parquet object (stream.group_bytes: one PUT and one copy to
    # its id key a group, not an object); the temporaries go in one batch per round, not one by one.
    assert per_object["total"] <= 4.5 and per_object.get("DELETE", 0) == 0, per_object

    live = sorted(info.key for info in deployment.lake.list() if "/live/" in info.key)
    assert all(key.startswith("s3test01/web.access/live/dt=2026-11-20/obj-") for key in live)
    assert len(live) <= 4, "a round's small objects share a file a core"
    lineage = deployment.catalog.partitions.lineage(deployment.catalog.tables.get("web.access").id)
    assert sorted(r.row_count for r in lineage) == [50] * 16 and len({r.staging_object_id for r in lineage}) == 16
    assert not [info.key for info in deployment.lake.list("s3test01/_tmp/")], "each round deletes its temporaries"
    rows = Counter()
    for key in live:
        with deployment.lake.open_input_file(key) as handle:
            rows.update(pq.read_table(handle).column("user_id").to_pylist())
    assert len(rows) == 16 * 50 and set(rows.values()) == {1}


def test_merge_publish_read_update_and_reap_on_s3(s3_deployment: Deployment, s3_proxy: CountingProxy, spark) -> None:
    deployment = s3_deployment
    table = make_table(deployment, merge_mode="auto", row_group_bytes=16 * 1024)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 300, seed) for seed in range(3)])
    first = merge_once(deployment)  # small: on the worker's own threads
    assert (first.finished, first.in_driver, first.stages) == (1, 1, 0)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 200, seed) for seed in range(3, 6)])
    deployment.config.merge.in_driver_bytes = 0  # this one as a Spark stage: the tasks open S3 themselves
    second = merge_once(deployment)
    assert (second.finished, second.in_driver, second.stages, second.failed) == (1, 0, 1, 0)
    partition = only_partition(deployment, table)
    assert_exact(deployment, table, partition.id, DAY)
    log = deployment.catalog.merge_queue.log(partition.id)
    assert [entry["mode"] for entry in log] == ["deep", "auto"]

    # Publish: a live version, then the day closes and switches to its merged objects; manifests on S3.
    publish_once(deployment, now=tokyo(DAY, 23))
    publish_once(deployment, now=tokyo(DAY + dt.timedelta(days=1), 1))
    switched = publish_once(deployment, now=tokyo(DAY + dt.timedelta(days=1), 2))
    partition = only_partition(deployment, table)
    assert partition.current_manifest_version == 6, switched
    (merged,) = [v for v in deployment.catalog.versions.of_partitions([partition.id]) if v.commit_op == "compaction"]
    manifest = read_manifest(deployment.lake, merged.manifest_key)
    assert manifest and all(uri.startswith(deployment.lake.root + "/") for uri, _ in manifest)

    # Readers without Spark (pyarrow over S3) and with Spark (pyarrow inside its tasks: no S3A jars here).
    total = 3 * 300 + 3 * 200
    with Lake(deployment) as lake:
        web = lake.table("web.access")
        assert all(uri.startswith("s3://") for uri in web.files())
        assert web.to_arrow().num_rows == total
        assert web.to_arrow(filter=pq.filters_to_expression([("user_id", "<", 1_000_000)])).num_rows == 300
    frame = read_table(spark, "web.access", deployment)
    assert frame.count() == total and {r.dt for r in frame.select("dt").distinct().collect()} == {DAY}

    # Delete (an update version): Spark reads the partition through pyarrow tasks, writes one object on S3.
    report = delete_rows(deployment, "web.access", DAY, "user_id < 100")
    assert (report.rows_before, report.rows_after) == (total, total - 100)
    assert deployment.lake.exists(report.object_key)
    with Lake(deployment) as lake:
        assert lake.table("web.access").to_arrow().num_rows == total - 100
        assert lake.table("web.access").to_arrow(as_of_version=1).num_rows == total

    # Reap: an orphan at a small object's key (a writer killed after its copy) and a dead run's temporary.
    layout = table.layout(deployment.instance_key)
    orphan = layout.small_object(DAY, 8_888_888, False)
    temporary = layout.task_temporary("stream-dead", 1, "2026-11-20.parquet")
    for key in (orphan, temporary):
        with deployment.lake.open_output(key) as out:
            out.write(b"PAR1 not really")
    s3_proxy.reset()
    reaped = reap_once(deployment, now=utcnow() + dt.timedelta(days=3), retention=86_400, grace=3600)
    requests = s3_proxy.reset()
    assert not deployment.lake.exists(orphan) and not deployment.lake.exists(temporary)
    assert reaped.reasons["orphan"].objects >= 2
    assert requests["LIST"] >= 1
    with Lake(deployment) as lake:
        assert lake.table("web.access").to_arrow().num_rows == total - 100, "reap keeps what readers see"
    # The next run is incremental: nothing changed, so it lists the temporaries' prefix only.
    again = reap_once(deployment, now=utcnow() + dt.timedelta(days=3, hours=2), retention=86_400, grace=3600)
    requests = s3_proxy.reset()
    assert not again.full_sweep and again.prefixes_listed == 1 and not again.failed and again.objects == 0
    assert requests["LIST"] >= 1


def test_shallow_merges_in_process_and_on_spark_on_s3(s3_deployment: Deployment) -> None:
    deployment = s3_deployment
    table = make_table(deployment, merge_mode="shallow", row_group_bytes=16 * 1024)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 300, seed) for seed in range(3)])
    assert (merge_once(deployment).in_driver, only_partition(deployment, table).desired_manifest_version) == (1, 3)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 200, seed) for seed in range(3, 5)])
    deployment.config.merge.in_driver_bytes = 0
    assert merge_once(deployment).stages == 1
    partition = only_partition(deployment, table)
    assert_exact(deployment, table, partition.id, DAY)
    assert [entry["mode"] for entry in deployment.catalog.merge_queue.log(partition.id)] == ["shallow", "shallow"]
    assert [(r.lower, r.upper) for r in deployment.catalog.merge_queue.ranges(partition.id)] == [(None, 0), (0, 5)]
    merged = [info.key for info in deployment.lake.list() if "/merged/" in info.key]
    assert table.layout(deployment.instance_key).merged_object(DAY, 0, 5) in merged
    assert not [key for key in merged if key.endswith(".tmp")], "written in place: no temporaries"


def test_bad_records_land_on_s3_and_replay(s3_deployment: Deployment) -> None:
    deployment = s3_deployment
    deployment.catalog.tables.create(TableDef.from_mapping({**ACCESS_TABLE, "error_policy": "file"}))
    good = events(20, 5, 1)
    bad = [{"time": "not a time", "user_id": 7, "action": "x"}]
    stage(deployment, "f1.web.access/2026/11/20/mixed.jsonl.gz", jsonl_gz(good + bad))
    report = stream_once(deployment)
    assert (report.records_loaded, report.bad_records) == (5, 1)
    errors = [info.key for info in deployment.lake.list() if "/errors/" in info.key]
    assert len(errors) == 1 and b"not a time" in deployment.lake.read_bytes(errors[0])
    replayed = replay_errors(deployment, "web.access")
    assert (replayed.records, replayed.kept) == (1, 0)
    staged = [info.key for info in deployment.staging.list() if info.key.startswith("replay.")]
    assert len(staged) == 1 and deployment.staging.read_bytes(staged[0]).count(b"\n") == 1
    assert not deployment.lake.exists(errors[0]), "a replayed error file is removed"
    again = stream_once(deployment)  # the replayed record is still bad: it lands in an error file again
    assert (again.processed, again.bad_records) == (1, 1)


def test_the_iceberg_target_writes_its_metadata_on_s3_and_pyiceberg_reads_it(s3_deployment: Deployment) -> None:
    from siltlake.publish.iceberg.catalog import identifier, open_catalog

    deployment = s3_deployment
    deployment.config.publish.targets = ["iceberg"]
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 100, seed) for seed in range(3)])
    report = publish_once(deployment, now=tokyo(DAY, 23))
    assert not report.target_errors, report.target_errors
    merge_once(deployment)
    publish_once(deployment, now=tokyo(DAY + dt.timedelta(days=1), 1))
    report = publish_once(deployment, now=tokyo(DAY + dt.timedelta(days=1), 2))
    assert not report.target_errors, report.target_errors
    iceberg = open_catalog(deployment).load_table(identifier(deployment, table))
    assert iceberg.metadata_location.startswith(deployment.lake.root + "/s3test01/_iceberg/")
    assert iceberg.scan().to_arrow().num_rows == 300
    with Lake(deployment) as lake:
        assert sorted(f.file_path for f in iceberg.scan().plan_files() for f in [f.file]) == sorted(
            lake.table("web.access").files()
        )


def test_spark_reads_s3_itself_only_with_the_s3a_jars(s3_deployment: Deployment, spark, tmp_path) -> None:
    """This machine has no hadoop-aws jars (PySpark ships none, and nothing can be downloaded here): Spark's
    own reader fails on s3a://, so siltlake's readers go through pyarrow tasks, as tested above."""
    from siltlake.read.objects import spark_reads
    from siltlake.storage.filesystem import Storage

    assert spark_reads(spark, Storage(str(tmp_path)))
    if spark_reads(spark, s3_deployment.lake):
        pytest.skip("the S3A connector is on this Spark's classpath")
    with pytest.raises(Exception, match="S3AFileSystem|s3a"):
        spark.read.parquet(s3_deployment.lake.engine_uri("nothing.parquet")).count()


def test_the_commands_on_s3(s3_deployment: Deployment, monkeypatch) -> None:  # pytest's monkeypatch
    deployment = s3_deployment
    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    stage(deployment, "f1.web.access/2026/11/20/a.jsonl.gz", jsonl_gz(events(20, 30, 1)))
    silt = silt_in_process(deployment, monkeypatch)
    silt("stream", "--once")
    assert not deployment.catalog.staging.pending(10)
    output = silt("sql", "SELECT count(*) AS n, count(DISTINCT user_id) AS users FROM web.access", "--format", "csv")
    assert output.strip().splitlines()[-1] == "30,30", output
    assert "1 small objects" in silt("status")
    silt("delete", "web.access", "--date", "2026-11-20", "--where", "user_id < 1010")
    output = silt("sql", "SELECT count(*) AS n FROM web.access", "--format", "csv")
    assert output.strip().splitlines()[-1] == "20", output
