"""siltlake as a Spark data source: the change feed as a Structured Streaming source whose offsets are table
versions (a checkpointed query stopped and restarted reads every version's rows exactly once), and batch reads
of a version (versionAsOf, timestampAsOf) or of the change feed."""

from __future__ import annotations

import datetime as dt
import os
from collections import Counter
from pathlib import Path

import pytest

from siltlake.deployment import Deployment
from siltlake.errors import SiltError
from siltlake.lake import Lake
from siltlake.publish import publish_once
from siltlake.read import sql
from siltlake.read.spark_source import register

from .conftest import make_config
from .merge_helpers import add_small_objects, rows_for
from .test_merge import DAY, make_table
from .test_publish import tokyo

pytestmark = pytest.mark.spark


@pytest.fixture
def lake_config(tmp_path: Path, spark):
    """A deployment on SQLite with the access table, and its configuration file for the source's options."""
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    config = make_config(tmp_path, url)
    deployment = Deployment(config)
    deployment.init()
    deployment.use_spark(spark)
    path = tmp_path / "siltlake.toml"
    path.write_text(
        f'instance_key = "{config.instance_key}"\n[catalog]\nurl = "{url}"\n[storage]\n'
        f'root = "{config.storage.root}"\nstaging_root = "{config.storage.staging_root}"\n'
    )
    register(spark)
    yield deployment, str(path)
    deployment.close()


def as_rows(frame) -> Counter:  # a Spark DataFrame
    return Counter((r.user_id, r.action, r._change_type, r._commit_version) for r in frame.collect())


def test_a_stopped_and_restarted_stream_reads_every_version_once(lake_config, spark, tmp_path: Path) -> None:
    deployment, config = lake_config
    record = make_table(deployment)
    expected: Counter = Counter()

    def commit_version(seed: int, hour: int) -> None:
        batch = rows_for(DAY, 3, seed)
        add_small_objects(deployment, record, DAY, [batch])
        publish_once(deployment, now=tokyo(DAY, hour))
        version = Lake(deployment).table("web.access").version
        expected.update((r["user_id"], r["action"], "insert", version) for r in batch)

    def run_stream() -> None:
        query = (
            spark.readStream.format("siltlake")
            .option("table", "web.access")
            .option("config", config)
            .load()
            .writeStream.format("parquet")
            .option("path", str(tmp_path / "out"))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(180)
        assert query.exception() is None

    commit_version(1, 10)
    commit_version(2, 11)
    run_stream()
    commit_version(3, 12)
    run_stream()  # restarts from the checkpoint: only version 3
    run_stream()  # nothing new
    assert as_rows(spark.read.parquet(str(tmp_path / "out"))) == expected

    # Batch reads: a version, a time, and the change feed from a version.
    def read(**options: object):
        reader = spark.read.format("siltlake").option("table", "web.access").option("config", config)
        for key, value in options.items():
            reader = reader.option(key, str(value))
        return reader.load()

    at_two = read(versionAsOf=2)
    assert "_change_type" not in at_two.columns and at_two.count() == 6
    assert read(timestampAsOf=(tokyo(DAY, 11) + dt.timedelta(minutes=1)).isoformat()).count() == 6
    assert as_rows(read(startingVersion=3)) == Counter({k: n for k, n in expected.items() if k[3] == 3})
    stream_from_two = (
        spark.readStream.format("siltlake")
        .option("table", "web.access")
        .option("config", config)
        .option("startingVersion", 2)
        .load()
        .writeStream.format("memory")
        .queryName("from_two")
        .trigger(availableNow=True)
        .start()
    )
    stream_from_two.awaitTermination(180)
    assert {r._commit_version for r in spark.sql("SELECT * FROM from_two").collect()} == {2, 3}


CONSUMER = """
import sys
from pyspark.sql import SparkSession
from siltlake.read.spark_source import register

config, out, checkpoint = sys.argv[1:4]
spark = (SparkSession.builder.master("local[1]").config("spark.sql.shuffle.partitions", "1")
         .config("spark.ui.enabled", "false").getOrCreate())
register(spark)
query = (spark.readStream.format("siltlake").option("table", "web.access").option("config", config)
         .option("maxVersionsPerTrigger", 1).load()
         .writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
query.awaitTermination()
"""


@pytest.mark.skipif(
    not os.environ.get("CHAOS_KILLS"), reason="kills a Spark consumer several times (minutes): runs under `make chaos`"
)
def test_a_stream_killed_at_random_points_writes_every_version_once(lake_config, spark, tmp_path: Path) -> None:
    """SIGKILL (the consumer's whole process group: Python driver and JVM) at random points, then restart from
    the checkpoint: each version's rows are in the Parquet output exactly once."""
    import os
    import random
    import signal
    import subprocess
    import sys
    import time

    deployment, config = lake_config
    record = make_table(deployment)
    expected: Counter = Counter()
    for hour in range(1, 9):  # versions 1 to 8, one micro-batch each
        batch = rows_for(DAY, 2, hour)
        add_small_objects(deployment, record, DAY, [batch])
        publish_once(deployment, now=tokyo(DAY, hour))
        expected.update((r["user_id"], r["action"], "insert", hour) for r in batch)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-c", CONSUMER, config, out, checkpoint]
    chance = random.Random(34)
    commits = Path(checkpoint, "commits")

    def committed() -> int:
        return len([p for p in commits.iterdir() if p.name.isdigit()]) if commits.exists() else 0

    at_kills = []  # micro-batches committed when each kill came
    for _ in range(2):
        consumer = subprocess.Popen(
            command, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        # Kill at a random point once a random number of further batches committed: between batches or in one.
        # At most the 6th of 8: a kill that waits for later ones may come after the last, when none is mid-stream.
        target = min(committed() + chance.randint(1, 3), 6)
        deadline = time.monotonic() + 240
        while committed() < target and consumer.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(chance.uniform(0, 1.5))
        if consumer.poll() is None:
            os.killpg(consumer.pid, signal.SIGKILL)
            at_kills.append(committed())
        consumer.wait()
    finished = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert any(0 < n < 8 for n in at_kills), f"kills after {at_kills} of 8 batches: none mid-stream"
    assert as_rows(spark.read.parquet(out)) == expected


@pytest.mark.parametrize("entry", ["elsewhere", "climbing out"])
def test_a_manifest_entry_outside_the_lake_root_is_refused_by_every_reader(
    lake_config, spark, tmp_path: Path, entry: str
) -> None:
    """A manifest naming a data file outside the lake's root (planted, edited by hand, another deployment's), or one
    under it that climbs out, is refused by every reader: to_arrow, DuckDB, siltlake's Spark reader (to_spark and
    silt sql, which followed it) and the Spark data source, batch and change feed. Nothing outside is read."""
    import json
    import shutil

    import duckdb

    deployment, config = lake_config
    record = make_table(deployment)
    add_small_objects(deployment, record, DAY, [rows_for(DAY, 3, 1)])
    publish_once(deployment, now=tokyo(DAY, 10))
    add_small_objects(deployment, record, DAY, [rows_for(DAY, 3, 2)])
    publish_once(deployment, now=tokyo(DAY, 11))
    lake_root = Path(deployment.config.storage.root)
    manifests = sorted(lake_root.rglob("manifests/**/*.json"))
    assert manifests, "the versions' manifests"
    # Laid out as an object of the table is, so that a reader that follows it reads its rows as the table's.
    outside = tmp_path / "outside" / "web.access" / "live" / f"dt={DAY}" / "obj-0000000000000000009.parquet"
    outside.parent.mkdir(parents=True)
    shutil.copyfile(next(lake_root.rglob("live/**/*.parquet")), outside)
    for planted in manifests:
        content = json.loads(planted.read_text())
        url = (
            f"file://{outside}"
            if entry == "elsewhere"
            else f"{deployment.lake.root}/../{outside.relative_to(tmp_path)}"
        )
        content["entries"].append({"url": url, "mandatory": True, "meta": {"content_length": outside.stat().st_size}})
        planted.write_text(json.dumps(content))

    table = Lake(deployment).table("web.access")
    refused = r"not under the lake's root|has a '\.\.' segment"
    with pytest.raises(SiltError, match=refused):
        table.to_arrow(as_of_version=table.version)
    with pytest.raises(SiltError, match=refused):
        table.to_duckdb(duckdb.connect(), as_of_version=table.version)
    # siltlake's own Spark reader (to_spark, silt sql): Spark would read the planted file as one of the table's.
    with pytest.raises(SiltError, match=refused):
        table.to_spark(spark, as_of_version=table.version).collect()
    with pytest.raises(SiltError, match=refused):
        sql(spark, f"SELECT count(*) FROM web.access VERSION AS OF {table.version}", deployment).collect()
    # The Spark data source (its tasks run the check in Spark's Python workers).
    reader = spark.read.format("siltlake").option("table", "web.access").option("config", config)
    for options in ({"versionAsOf": table.version}, {"startingVersion": 1}):
        with pytest.raises(Exception, match=refused):
            reader.options(**{k: str(v) for k, v in options.items()}).load().collect()
