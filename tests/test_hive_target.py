"""The Hive target as other engines see it: every partition points at its version's symlink manifest
directory (never at a data directory), and which engines read that correctly, run for real.

Engines are separate processes on a metastore of their own (embedded Derby admits one JVM at a time,
and the test session's Spark holds its own): a publisher process builds the table, then a plain PySpark
process reads it through the metastore, once with default settings and once with
spark.sql.hive.convertMetastoreParquet=false.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from siltlake.deployment import Deployment
from siltlake.publish.hive import PARQUET_SERDE, SYMLINK_INPUT
from siltlake.storage.keys import TableLayout
from siltlake.storage.manifests import write_manifests

from .conftest import make_config
from .test_merge import DAY

WORKTREE = Path(__file__).resolve().parents[1]

# Run in a process of its own: builds web.access with a merged-then-updated day, a merged day and a live
# day holding a crashed writer's uncommitted object; prints the metastore's partitions and the true rows.
PUBLISHER = textwrap.dedent("""
    import datetime as dt, json, sys
    import pyarrow as pa, pyarrow.parquet as pq
    from siltlake.config import Config
    from siltlake.deployment import Deployment
    from siltlake.lake import Lake
    from siltlake.merge import merge_once
    from siltlake.publish import publish_once
    from siltlake.write.update import delete_rows
    from siltlake.storage.keys import symlink_directory
    from tests.merge_helpers import add_small_objects, rows_for
    from tests.test_merge import DAY, make_table
    from tests.test_publish import tokyo

    config = Config.model_validate(json.loads(sys.argv[1]))
    deployment = Deployment(config)
    deployment.init()
    table = make_table(deployment)
    d1, d2, d3 = DAY, DAY + dt.timedelta(days=1), DAY + dt.timedelta(days=2)
    add_small_objects(deployment, table, d1, [rows_for(d1, 30, 1), rows_for(d1, 20, 2)])
    publish_once(deployment, now=tokyo(d1, 12))
    add_small_objects(deployment, table, d1, [rows_for(d1, 10, 3)])
    publish_once(deployment, now=tokyo(d1, 13))
    merge_once(deployment)
    add_small_objects(deployment, table, d2, [rows_for(d2, 25, 4)])
    publish_once(deployment, now=tokyo(d2, 1))  # closes d1
    publish_once(deployment, now=tokyo(d2, 2))  # switches d1 to its merged version
    add_small_objects(deployment, table, d2, [rows_for(d2, 15, 5)])
    merge_once(deployment)
    add_small_objects(deployment, table, d3, [rows_for(d3, 12, 6), rows_for(d3, 8, 7)])
    publish_once(deployment, now=tokyo(d3, 1))  # closes d2
    publish_once(deployment, now=tokyo(d3, 2))  # switches d2; d3 is live
    delete_rows(deployment, "web.access", d1, "action = 'a1'", now=tokyo(d3, 3))
    report = publish_once(deployment, now=tokyo(d3, 4))
    assert report.target_errors == [], report.target_errors
    # A writer that stopped after writing its object and before committing it to the catalog.
    layout = table.layout(deployment.instance_key)
    crashed = layout.live_prefix() + f"/dt={d3}/crashed-writer.parquet"
    stray = pa.Table.from_pylist(rows_for(d3, 7, 99), schema=table.definition.arrow_schema())
    with deployment.lake.open_output(crashed) as out:
        pq.write_table(stray, out)

    rows = Lake(deployment).table("web.access").to_arrow()
    truth = sorted([str(d), t.timestamp(), u, a] for d, t, u, a in zip(
        *(rows.column(c).to_pylist() for c in ("dt", "utc_event_time", "user_id", "action")), strict=True))
    spark = deployment.spark()
    prefix = config.publish.hive.database_prefix
    external = spark._jsparkSession.sessionState().catalog().externalCatalog()
    partitions = {}
    for date in (d1, d2, d3):
        found = external.getPartition(prefix + "web", "access", spark.sparkContext._jvm.org.apache.spark.api.python
                                      .PythonUtils.toScalaMap({"dt": str(date)}))
        partitions[str(date)] = [str(found.location()), found.storage().inputFormat().get(),
                                 found.storage().serde().get()]
    # Each partition's newest version and its file list (a pinned read shows exactly that).
    newest = deployment.catalog.version_reads.reader_snapshot(table.id,
                                                         as_of_version=Lake(deployment).table("web.access").version)
    print("RESULT " + json.dumps({
        "truth": truth, "partitions": partitions, "crashed": deployment.lake.uri(crashed),
        "file_lists": {str(v.partition_date): deployment.lake.engine_uri(symlink_directory(v.manifest_key))
                       for v in newest}}))
""")

# A plain PySpark session on the same metastore, nothing of siltlake's: what a Spark user would run.
READER = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession

    conf, table = json.loads(sys.argv[1]), sys.argv[2]
    builder = SparkSession.builder.master("local[1]").appName("plain-reader").enableHiveSupport()
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    query = (f"SELECT CAST(dt AS STRING) AS d, unix_micros(utc_event_time) / 1e6 AS t, user_id, action "
             f"FROM {table}")
    results = {}
    for mode, settings in (("default", {}), ("convertMetastoreParquet=false",
                                            {"spark.sql.hive.convertMetastoreParquet": "false"})):
        session = spark.newSession()
        for key, value in settings.items():
            session.conf.set(key, value)
        try:
            results[mode] = {"rows": sorted([list(r) for r in session.sql(query).collect()])}
        except Exception as exc:
            cause = getattr(exc, "java_exception", None)  # Py4JJavaError: name the JVM's root cause
            while cause is not None and cause.getCause() is not None:
                cause = cause.getCause()
            if cause is not None:
                results[mode] = {"error": cause.getClass().getName() + ": " + str(cause.getMessage())}
            else:
                results[mode] = {"error": type(exc).__name__ + ": " + str(exc).strip().splitlines()[0]}
    print("RESULT " + json.dumps(results))
""")


def _run(script: str, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(WORKTREE)}
    result = subprocess.run(
        [sys.executable, "-c", script, *args], cwd=WORKTREE, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("RESULT ")]
    return json.loads(line.removeprefix("RESULT "))


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> dict:
    """The table, published by a process of its own into a metastore of its own; then read by a plain PySpark."""
    tmp_path = tmp_path_factory.mktemp("hive_engines")
    config = make_config(tmp_path, f"sqlite:///{tmp_path / 'catalog.db'}").model_dump(mode="json")
    config["spark"] = {"master": "local[1]", "conf": {"spark.sql.shuffle.partitions": "1"}}
    config["publish"] = {
        "targets": ["hive"],
        "hive": {"metastore_dir": str(tmp_path / "metastore"), "database_prefix": "e_"},
    }
    result = _run(PUBLISHER, json.dumps(config))
    from siltlake.config import HiveTargetConfig
    from siltlake.spark import hive_session_conf

    result["read"] = _run(
        READER,
        json.dumps(hive_session_conf(HiveTargetConfig(metastore_dir=str(tmp_path / "metastore")))),
        "e_web.access",
    )
    return result


def _same(found: str, expected: str) -> bool:
    return found.replace("file:///", "file:/").rstrip("/") == expected.replace("file:///", "file:/").rstrip("/")


def _local(uri: str) -> Path:
    return Path(uri.replace("file:///", "file:/").removeprefix("file:"))


@pytest.mark.spark  # `published` runs Spark in a process of its own
def test_every_partition_points_at_its_newest_versions_symlink_manifest(published: dict) -> None:
    """An updated day, a merged day and a live day: each at the directory of its newest version's
    symlink manifest, read as symlinks to Parquet, and that directory holds that one manifest only."""
    partitions, file_lists = published["partitions"], published["file_lists"]
    assert sorted(partitions) == sorted(file_lists) == ["2026-11-20", "2026-11-21", "2026-11-22"]
    assert "/symlink-update-" in file_lists["2026-11-20"] and "/symlink-live-" in file_lists["2026-11-22"]
    for date, (location, input_format, serde) in partitions.items():
        assert _same(location, file_lists[date]), (date, location)
        assert "/live/" not in location and "/merged/" not in location
        assert input_format == SYMLINK_INPUT and serde == PARQUET_SERDE
        assert sorted(p.name for p in _local(location).iterdir()) == ["manifest"]


@pytest.mark.spark  # `published` runs Spark in a process of its own
def test_engines_that_read_symlink_manifests_get_exactly_the_tables_rows(published: dict) -> None:
    """What Trino, Presto, Athena and Redshift Spectrum do with a SymlinkTextInputFormat partition (read
    every file in its location as a list of Parquet files), done here with pyarrow since none of them
    runs here: the table's exact rows, and never the crashed writer's object beside the live ones."""
    rows, named = [], []
    for date, (location, _, _) in published["partitions"].items():
        for symlink in _local(location).iterdir():
            for uri in symlink.read_text().splitlines():
                named.append(uri)
                data = pq.read_table(_local(uri))
                rows += [
                    [date, t.timestamp(), u, a]
                    for t, u, a in zip(
                        *(data.column(c).to_pylist() for c in ("utc_event_time", "user_id", "action")), strict=True
                    )
                ]
    assert published["crashed"] not in named and _local(published["crashed"]).exists()
    assert sorted(rows) == published["truth"] and len(rows) == 108


@pytest.mark.spark  # `published` runs Spark in a process of its own
def test_plain_pyspark_with_default_settings_fails_on_the_symlink_files(published: dict) -> None:
    """Spark reads a table with the Parquet SerDe through its own Parquet reader, which lists the
    partition directory and takes the symlink file for a Parquet file: the query fails (no rows)."""
    error = published["read"]["default"]["error"]
    assert error.startswith("java.lang.RuntimeException: ") and "/manifest is not a Parquet file" in error


@pytest.mark.spark  # `published` runs Spark in a process of its own
def test_plain_pyspark_through_the_hive_input_format_returns_wrong_rows(published: dict) -> None:
    """With convertMetastoreParquet=false Spark uses the partition's SymlinkTextInputFormat and returns
    no rows at all, without an error, for a table of 108: wrong rows, so never read the target that way."""
    assert len(published["truth"]) == 108
    assert published["read"]["convertMetastoreParquet=false"] == {"rows": []}


def test_a_stopped_symlink_write_leaves_nothing_in_the_manifest_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine reads every file of a symlink partition's directory: a writer that stops between writing
    the temporary and moving it into place must not leave the temporary there."""
    deployment = Deployment(make_config(tmp_path, f"sqlite:///{tmp_path / 'catalog.db'}"))
    lake, layout = deployment.lake, TableLayout("k1", "web", "access")

    def stop(source: str, target: str) -> None:
        if target.endswith("/manifest"):
            raise OSError("stopped")
        original(source, target)

    original = lake.move
    monkeypatch.setattr(lake, "move", stop)
    with pytest.raises(OSError, match="stopped"):
        write_manifests(lake, layout, DAY, 3, [("web.access/live/dt=2026-11-20/1.parquet", 10)])
    directory = Path(lake.path(f"{layout.prefix}/manifests/dt={DAY}/symlink-{3:019d}"))
    assert not directory.exists() or list(directory.iterdir()) == []
    monkeypatch.setattr(lake, "move", original)
    _, symlink_key = write_manifests(lake, layout, DAY, 3, [("web.access/live/dt=2026-11-20/1.parquet", 10)])
    assert [p.name for p in directory.iterdir()] == ["manifest"]
    assert lake.read_bytes(symlink_key).decode() == lake.uri("web.access/live/dt=2026-11-20/1.parquet") + "\n"
