"""Open tables: every engine reads the same, exact table at every version (Spark, silt sql, pyarrow, DuckDB).

One table is walked through the stream, a late (delayed) object, merges, the switch to merged objects,
delete-where on a closed and on a live day, an added column and reap; at every table version each engine
must return exactly the rows the test put there.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import siltlake
from siltlake.catalog import VersionOutOfRange
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.errors import SiltError
from siltlake.lake import Lake
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.publish.iceberg.catalog import RUN_PROPERTY, open_catalog
from siltlake.publish.iceberg.snapshots import snapshot_of_version
from siltlake.publish.runner import _write_live_manifests
from siltlake.read import sql as read_sql
from siltlake.read import table as read_table
from siltlake.reap import reap_once
from siltlake.storage.keys import symlink_key
from siltlake.storage.manifests import read_manifest
from siltlake.stream import stream_once
from siltlake.write.update import delete_rows

from .merge_helpers import rows_for, silt_in_process
from .test_merge import DAY, make_table
from .test_publish import tokyo

pytestmark = pytest.mark.spark

NEXT_DAY = DAY + dt.timedelta(days=1)
COLUMNS = ("utc_event_time", "user_id", "action")
_staged = iter(range(1_000_000))


def stream(deployment: Deployment, date: dt.date, seed: int, count: int = 20, referrer: bool = False) -> Counter:
    """Stage one JSON-lines object of `count` events on a Tokyo date and run the stream; returns its rows
    as (event time in µs since the epoch, user id, action)."""
    rows = rows_for(date, count, seed)
    lines = [
        {
            "time": r["utc_event_time"].isoformat().replace("+00:00", "Z"),
            "user_id": r["user_id"],
            "action": r["action"],
            **({"referrer": f"r{r['user_id'] % 3}"} if referrer else {}),
        }
        for r in rows
    ]
    path = Path(deployment.staging.path(f"f1.web.access/{date:%Y/%m/%d}/{next(_staged)}.jsonl.gz"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress("".join(json.dumps(line) + "\n" for line in lines).encode()))
    report = stream_once(deployment)
    assert report.records_loaded == count and report.bad_records == 0
    return Counter((int(r["utc_event_time"].timestamp() * 1_000_000), r["user_id"], r["action"]) for r in rows)


def without(rows: Counter, action: str) -> Counter:
    return Counter({row: n for row, n in rows.items() if row[2] != action})


def spark_rows(frame) -> Counter:
    return Counter(tuple(r) for r in frame.selectExpr("unix_micros(utc_event_time)", "user_id", "action").collect())


def arrow_rows(table: pa.Table) -> Counter:
    times = pc.cast(table.column("utc_event_time"), pa.int64()).to_pylist()
    return Counter(zip(times, table.column("user_id").to_pylist(), table.column("action").to_pylist(), strict=True))


def duckdb_rows(paths: list[str]) -> Counter:
    """DuckDB reading exactly these files itself (no siltlake code in between)."""
    if not paths:
        return Counter()
    with duckdb.connect() as connection:
        return Counter(
            connection.sql(
                f"SELECT epoch_us(utc_event_time), user_id, action FROM read_parquet({paths!r}, union_by_name = true)"
            ).fetchall()
        )


def local_paths(uris: list[str]) -> list[str]:
    assert all(uri.startswith("file:///") for uri in uris), uris
    return [uri.removeprefix("file://") for uri in uris]


def every_engine(deployment: Deployment, spark, silt, lake: Lake, **at: object) -> dict[str, Counter]:
    """The rows each engine returns for the table at `at` (as_of_version=, as_of= or nothing: current)."""
    table = lake.table("web.access")
    clause = ""
    if "as_of_version" in at:
        clause = f" VERSION AS OF {at['as_of_version']}"
    elif "as_of" in at:
        clause = f" TIMESTAMP AS OF '{at['as_of']:%Y-%m-%d %H:%M:%S}'"
    query = f"SELECT unix_micros(utc_event_time) AS t, user_id, action FROM web.access{clause}"
    by_cli = Counter(
        (row["t"], row["user_id"], row["action"])
        for row in json.loads(silt("sql", query, "--format", "json", "--limit", "100000"))
    )
    with duckdb.connect() as connection:
        relation = table.to_duckdb(connection, **at)
        by_relation = Counter(relation.select("epoch_us(utc_event_time), user_id, action").fetchall())
    found = {
        "spark reader": spark_rows(read_table(spark, "web.access", deployment, **at)),
        "siltlake.read.sql": Counter(tuple(r) for r in read_sql(spark, query, deployment).collect()),
        "silt sql": by_cli,
        "to_arrow": arrow_rows(table.to_arrow(columns=list(COLUMNS), **at)),
        "duckdb over files()": duckdb_rows(local_paths(table.files(**at))),
        "to_duckdb": by_relation,
    }
    if "iceberg" in deployment.config.publish.targets and "as_of" not in at:
        found |= iceberg_rows(deployment, table, at.get("as_of_version", table.version))
    return found


def iceberg_rows(deployment: Deployment, table, version: int) -> dict[str, Counter]:
    """PyIceberg's scans of the snapshot that holds table version `version`: by its id and by its time.
    The partition column dt, absent from the files, must read as each file's partition."""
    iceberg = open_catalog(deployment).load_table(("web", "access"))
    snapshot = snapshot_of_version(iceberg, version)
    assert snapshot is not None, f"no Iceberg snapshot holds table version {version}"
    assert snapshot.summary[RUN_PROPERTY], "the snapshot names the publish run that committed it"
    by_time = iceberg.snapshot_as_of_timestamp(snapshot.timestamp_ms)
    assert by_time is not None and by_time.snapshot_id == snapshot.snapshot_id
    scanned = iceberg.scan(snapshot_id=snapshot.snapshot_id).to_arrow()
    expected_dt = Counter(table.to_arrow(columns=["dt"], as_of_version=version).column("dt").to_pylist())
    assert Counter(scanned.column("dt").to_pylist()) == expected_dt, "dt reads as the file's partition"
    return {
        "iceberg snapshot": arrow_rows(scanned),
        "iceberg by snapshot time": arrow_rows(iceberg.scan(snapshot_id=by_time.snapshot_id).to_arrow()),
    }


def assert_every_engine(deployment: Deployment, spark, silt, lake: Lake, expected: Counter, **at: object) -> None:
    found = every_engine(deployment, spark, silt, lake, **at)
    wrong = {engine: (sum(rows.values()), sum(expected.values())) for engine, rows in found.items() if rows != expected}
    assert not wrong, f"at {at or 'current'}: engines disagree with the expected rows (rows, expected): {wrong}"


def assert_file_lists_exact(deployment: Deployment, lake: Lake) -> None:
    """Every version row has a file list; each entry exists with its size; a live version's list is its
    base manifest's entries and then exactly its live objects."""
    catalog = deployment.catalog
    table = lake.table("web.access")
    layout = table.record.layout(deployment.instance_key)
    partitions = {p.id: (p.partition_date, p.partition_values) for p in catalog.partitions.list(table.record.id)}
    objects = {o.id: o for o in catalog.partitions.small_objects(table.record.id)}
    for version in catalog.versions.of_partitions(list(partitions)):
        assert version.file_list_key is not None, version
        entries = read_manifest(deployment.lake, version.file_list_key)
        uris = [uri for uri, _ in entries]
        assert len(set(uris)) == len(uris), f"a file listed twice in {version.file_list_key}"
        for uri, size in entries:
            assert Path(uri.removeprefix("file://")).stat().st_size == size
        symlinks = deployment.lake.read_bytes(symlink_key(version.file_list_key)).decode().splitlines()
        assert symlinks == [unquote(uri) for uri in uris], "the symlink form lists the same files, unescaped"
        if version.commit_op == "append":
            base = read_manifest(deployment.lake, version.manifest_key) if version.manifest_key else []
            lower = (version.covered_upper or 0) if version.manifest_key else 0
            live = [
                deployment.lake.uri(layout.small_object(date, i, False, values))
                for date, values in [partitions[version.partition_id]]
                for i in sorted(objects)
                if lower < i <= version.live_watermark
                and (objects[i].partition_date, objects[i].partition_values) == (date, values)
                and not objects[i].delayed
            ]
            assert uris == [uri for uri, _ in base] + live, f"version {version} lists other files"
        else:
            assert version.file_list_key == version.manifest_key


# SQLite only: what it checks is the engines against each other; the reader snapshot's SQL on PostgreSQL (one
# REPEATABLE READ transaction) runs in tests/test_publish_readers.py and tests/test_read_planning.py.
@pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)
def test_every_engine_reads_the_same_exact_table_at_every_version(deployment: Deployment, spark, monkeypatch) -> None:
    deployment.config.publish.targets = ["iceberg"]  # PyIceberg reads every version's snapshot too
    make_table(deployment)
    silt = silt_in_process(deployment, monkeypatch)
    lake = Lake(deployment)
    expected: dict[int, Counter] = {}
    times: dict[int, dt.datetime] = {}

    def published(now: dt.datetime, version: int, rows: Counter) -> None:
        assert lake.table("web.access").version == version
        expected[version], times[version] = rows, now

    day = stream(deployment, DAY, 0) + stream(deployment, DAY, 1)
    publish_once(deployment, now=tokyo(DAY, 12))
    published(tokyo(DAY, 12), 1, +day)

    day += stream(deployment, DAY, 2)
    publish_once(deployment, now=tokyo(DAY, 13))
    published(tokyo(DAY, 13), 2, +day)
    merge_once(deployment)

    next_day = stream(deployment, NEXT_DAY, 3)
    report = publish_once(deployment, now=tokyo(NEXT_DAY, 1))  # closes DAY: later objects of it are delayed
    assert report.closed and not report.switched
    published(tokyo(NEXT_DAY, 1), 3, day + next_day)

    late = stream(deployment, DAY, 4)  # delayed: shown once merged
    report = publish_once(deployment, now=tokyo(NEXT_DAY, 2))
    assert report.switched and [v.commit_op for v in report.merged_versions] == ["compaction"]
    published(tokyo(NEXT_DAY, 2), 4, day + next_day)

    merge_once(deployment)
    next_day += stream(deployment, NEXT_DAY, 5)
    report = publish_once(deployment, now=tokyo(NEXT_DAY, 3))
    assert len(report.merged_versions) == 1 and len(report.live_versions) == 1
    day += late
    published(tokyo(NEXT_DAY, 3), 5, day + next_day)
    history = lake.table("web.access").history()
    assert [(r["date"], r["version"], r["table_version"], r["op"]) for r in history] == [
        ("2026-11-20", 1, 1, "append"),
        ("2026-11-20", 2, 2, "append"),
        ("2026-11-20", 3, 4, "compaction"),
        ("2026-11-20", 4, 5, "compaction"),
        ("2026-11-21", 1, 3, "append"),
        ("2026-11-21", 2, 5, "append"),
    ], "one table version per publish run, whatever the partitions it changes"

    # Old and new objects of the day sit side by side until reap: a directory scan counts rows twice.
    table_prefix = deployment.lake.path(lake.table("web.access").record.layout(deployment.instance_key).prefix)
    with duckdb.connect() as connection:
        scanned = connection.sql(
            f"SELECT count(*) FROM read_parquet('{table_prefix}/**/*.parquet', union_by_name = true)"
        ).fetchall()[0][0]
    assert scanned > sum((day + next_day).values()), "directories hold more than the table"

    (deleted,) = lake.table("web.access").delete("action = 'a1'", dates=DAY, now=tokyo(NEXT_DAY, 4))
    assert deleted.version.commit_op == "update" and deleted.rows_after < deleted.rows_before
    day = without(day, "a1")
    published(tokyo(NEXT_DAY, 4), 6, day + next_day)

    lake.table("web.access").add_column("referrer", "string", now=tokyo(NEXT_DAY, 4))  # version 7
    with_referrer = stream(deployment, NEXT_DAY, 6, referrer=True)
    next_day += with_referrer
    publish_once(deployment, now=tokyo(NEXT_DAY, 5))
    published(tokyo(NEXT_DAY, 5), 8, day + next_day)

    delete_rows(deployment, "web.access", NEXT_DAY, "action = 'a2'", now=tokyo(NEXT_DAY, 6))
    next_day = without(next_day, "a2")
    published(tokyo(NEXT_DAY, 6), 9, day + next_day)

    appended = stream(deployment, NEXT_DAY, 7, referrer=True)  # after the update of a live day
    next_day += appended
    publish_once(deployment, now=tokyo(NEXT_DAY, 7))
    published(tokyo(NEXT_DAY, 7), 10, day + next_day)

    assert_file_lists_exact(deployment, lake)
    for version, rows in expected.items():
        assert_every_engine(deployment, spark, silt, lake, rows, as_of_version=version)
    assert_every_engine(deployment, spark, silt, lake, expected[10])
    for version in (3, 6, 10):
        assert_every_engine(deployment, spark, silt, lake, expected[version], as_of=times[version])

    # The added column: null in the objects written before it, read from the ones after.
    table = lake.table("web.access")
    assert table.schema.names == [*COLUMNS, "referrer", "dt"]
    referrers = table.to_arrow(columns=["user_id", "referrer"], filter=pc.field("dt") == NEXT_DAY)
    by_user = dict(zip(referrers.column("user_id").to_pylist(), referrers.column("referrer").to_pylist(), strict=True))
    assert {u for u, r in by_user.items() if r is not None} == {
        u for _, u, _ in with_referrer + appended if u in by_user
    }
    # A version before the column was added is read as it was, without it.
    assert table.to_arrow(as_of_version=5).schema == pa.schema([f for f in table.schema if f.name != "referrer"])
    assert table.files(dates=[DAY]) == table.files(dates="2026-11-20")
    assert set(table.files()) == set(table.files(dates=[DAY])) | set(table.files(dates=[NEXT_DAY]))

    # Reap right away keeps every version (all inside the retention) with its file list.
    reap_once(deployment, now=tokyo(NEXT_DAY, 8))
    assert_file_lists_exact(deployment, lake)
    for version in (1, 5, 10):
        assert_every_engine(deployment, spark, silt, lake, expected[version], as_of_version=version)
    # A week later only each partition's newest version stays: older table versions are gone with their lists.
    lists_before = {
        v.file_list_key
        for v in deployment.catalog.versions.of_partitions(
            [p.id for p in deployment.catalog.partitions.list(table.record.id)]
        )
    }
    reap_once(deployment, now=tokyo(NEXT_DAY, 8) + dt.timedelta(days=8))
    kept = deployment.catalog.versions.of_partitions(
        [p.id for p in deployment.catalog.partitions.list(table.record.id)]
    )
    assert [(v.version, v.table_version) for v in kept] == [(5, 6), (5, 10)]
    # (v5 of the live day still shows the update v4 wrote: that manifest stays.)
    still_named = {k for v in kept for k in (v.file_list_key, v.manifest_key)}
    assert lists_before - still_named
    for key in lists_before - still_named:
        assert not deployment.lake.exists(key) and not deployment.lake.exists(symlink_key(key))
    assert_file_lists_exact(deployment, lake)
    assert table.versions() == (10, 10)
    deployment.catalog.downgrade("0020")  # reaped before the table row kept the range: 0021 computes it
    deployment.catalog.upgrade()
    assert table.versions() == (10, 10)
    iceberg = open_catalog(deployment).load_table(("web", "access"))
    assert [s.summary["siltlake.table-version"] for s in iceberg.snapshots()] == ["10"], (
        "the snapshots of reaped versions are expired with them"
    )
    assert_every_engine(deployment, spark, silt, lake, expected[10], as_of_version=10)
    assert_every_engine(deployment, spark, silt, lake, expected[10])
    with pytest.raises(VersionOutOfRange, match="readable versions are 10 to 10 \\(versions before 10 were reaped\\)"):
        table.files(as_of_version=9)
    with pytest.raises(VersionOutOfRange, match="versions before 10 .* were reaped"):
        table.files(as_of=times[9])


def test_time_travel_outside_the_versions_is_an_error_naming_them(deployment: Deployment, spark, monkeypatch) -> None:
    make_table(deployment)
    silt = silt_in_process(deployment, monkeypatch)
    lake = Lake(deployment)
    table = lake.table("web.access")
    with pytest.raises(VersionOutOfRange, match="web.access has no published versions yet"):
        table.files(as_of_version=1)
    assert table.files() == [] and table.to_arrow().num_rows == 0 and table.version == 0
    stream(deployment, DAY, 0)
    assert len(table.files()) == 1 and table.to_arrow().num_rows == 20, "the current state shows live objects"
    publish_once(deployment, now=tokyo(DAY, 12))
    stream(deployment, DAY, 1)
    publish_once(deployment, now=tokyo(DAY, 13))
    for bad in (0, 3, 100):
        with pytest.raises(VersionOutOfRange, match=f"web.access has no version {bad}: its readable versions are 1 "):
            table.files(as_of_version=bad)
        with pytest.raises(VersionOutOfRange, match="readable versions are 1 to 2"):
            read_table(spark, "web.access", deployment, as_of_version=bad)
        error = silt("sql", f"SELECT count(*) FROM web.access VERSION AS OF {bad}", code=2)
        assert "readable versions are 1 to 2" in error
    assert table.to_arrow(as_of_version=1).num_rows == 20 and table.to_arrow(as_of_version=2).num_rows == 40
    # Before the first publish run the table had no version: a time then is refused as as_of_version=0 is (it
    # read 0 rows before, which looked like a table without rows), on every read entry point.
    before = (
        "web.access cannot be read as of 2026-11-20 02:00:00 UTC: its first version .1. was published 2026-11-20 03:00"
    )
    with pytest.raises(VersionOutOfRange, match=before):
        table.to_arrow(as_of=tokyo(DAY, 11))
    with pytest.raises(VersionOutOfRange, match=before):
        table.scan().with_version(as_of=tokyo(DAY, 11)).count()
    with pytest.raises(VersionOutOfRange, match=before):
        read_table(spark, "web.access", deployment, as_of=tokyo(DAY, 11))
    assert "its first version (1) was published" in silt(
        "sql", "SELECT count(*) FROM web.access TIMESTAMP AS OF '2026-11-20 02:00:00'", code=2
    )
    assert table.to_arrow(as_of="2026-11-20T12:30:00+09:00").num_rows == 20

    with pytest.raises(SiltError, match="give the partitions"):
        table.delete("user_id = 1", dates=[])

    # Clauses the rewrite cannot honour are refused, never dropped.
    for query, message in [
        ("SELECT count(*) FROM web.access FOR VERSION BETWEEN 1 AND 2", "is not supported"),
        ("SELECT count(*) FROM web.access VERSION AS OF 'x'", "takes a table version number"),
        ("SELECT count(*) FROM web.access TIMESTAMP AS OF now()", "takes a quoted time"),
        ("SELECT count(*) FROM web.access TIMESTAMP AS OF 'yesterday'", "is not a time"),
        ("SELECT count(*) FROM spark_catalog.web.access", "without a catalog part"),
        ("WITH c AS (SELECT 1 AS x) SELECT * FROM c VERSION AS OF 1", "not to a query's own names"),
    ]:
        with pytest.raises(SiltError, match=message):
            read_sql(spark, query, deployment)
    counts = read_sql(
        spark,
        "SELECT (SELECT count(*) FROM web.access VERSION AS OF 1) AS one, "
        "(SELECT count(*) FROM web.access) AS now, count(*) AS sampled "
        "FROM web.access TABLESAMPLE (100 PERCENT) AS t",
        deployment,
    ).first()
    assert tuple(counts) == (20, 40, 40), "each (table, version) pair reads its own view; the sample is kept"


@pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)
def test_table_reference_syntax_the_rewrite_cannot_carry_is_refused(deployment: Deployment, spark, monkeypatch) -> None:
    """`web.access@v1` parsed as an alias and read the current state: refused, naming it."""
    make_table(deployment)
    silt = silt_in_process(deployment, monkeypatch)
    stream(deployment, DAY, 0)
    publish_once(deployment, now=tokyo(DAY, 12))
    stream(deployment, DAY, 1)
    publish_once(deployment, now=tokyo(DAY, 13))
    for written, named in [
        ("web.access@v1", "@v1"),
        ("web.access @ 1", "@1"),
        ("web.access@@v1", "@@v1"),
        ("web.access :v1", ":v1"),
        ("web.access ?", "?"),
        ("web.access $v1", "@v1"),
    ]:
        query = f"SELECT count(*) AS n FROM {written}"
        with pytest.raises(SiltError) as refused:
            read_sql(spark, query, deployment)
        assert str(refused.value).startswith(f"web.access: {named!r} after the table is not an alias"), (
            written,
            str(refused.value),
        )
    output = " ".join(silt("sql", "SELECT count(*) FROM web.access@v1", code=2).split())
    assert output.startswith("error: web.access: '@v1' after the table is not an alias") and "VERSION AS OF" in output
    # The forms time travel has read the version asked for.
    between = tokyo(DAY, 12) + dt.timedelta(minutes=30)  # naive UTC, as TIMESTAMP AS OF reads it
    for clause in (
        "VERSION AS OF 1",
        "FOR VERSION AS OF 1",
        f"TIMESTAMP AS OF '{between:%Y-%m-%d %H:%M:%S}'",
        "VERSION AS OF 1 AS a",
        "VERSION AS OF 1 a",
    ):
        assert read_sql(spark, f"SELECT count(*) AS n FROM web.access {clause}", deployment).first().n == 20, clause
    # Aliases, with or without column names, are carried to the view.
    assert read_sql(spark, "SELECT count(*) AS n FROM web.access AS a", deployment).first().n == 40
    assert (
        read_sql(spark, "SELECT count(a.`@u`) AS n FROM web.access VERSION AS OF 1 a(t, `@u`, w, d)", deployment)
        .first()
        .n
        == 20
    )


def test_a_lake_opens_from_a_configuration_and_import_siltlake_stays_cheap(
    deployment: Deployment, tmp_path: Path
) -> None:
    import subprocess
    import sys

    probe = (
        "import sys, siltlake; heavy = [m for m in ('pyarrow', 'pyspark', 'sqlalchemy') if m in sys.modules]; "
        "print(heavy); print(siltlake.Lake.__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent
    ).stdout.split()
    assert out == ["[]", "siltlake.lake"]

    config = deployment.config
    (tmp_path / "siltlake.toml").write_text(
        f'instance_key = "{config.instance_key}"\n[catalog]\nurl = "{config.catalog.url}"\n'
        f'[storage]\nroot = "{config.storage.root}"\nstaging_root = "{config.storage.staging_root}"\n'
    )
    make_table(deployment)
    with siltlake.Lake.open(tmp_path / "siltlake.toml") as lake:
        assert lake.tables() == ["web.access"]
        assert lake.table("web.access").schema.field("dt").type == pa.date32()
    try:
        import polars  # noqa: F401
    except ImportError:
        with pytest.raises(SiltError, match="needs the polars package"):
            Lake(deployment).table("web.access").to_polars()
    with pytest.raises(SiltError, match="not initialised"):
        Lake.open(config, catalog_url=f"sqlite:///{tmp_path / 'empty.db'}")


def test_an_append_version_read_before_an_update_commits_is_not_published_over_it(
    deployment: Deployment, spark
) -> None:
    """Publish reads its append candidates, writes their file lists, then commits: an update committed in
    between wins, and the stale append version (which would resurrect the deleted rows) is left out."""
    make_table(deployment)
    lake = Lake(deployment)
    day = stream(deployment, DAY, 0)
    publish_once(deployment, now=tokyo(DAY, 12))
    day += stream(deployment, DAY, 1)
    (stale,) = deployment.catalog.versions.live_to_publish()
    lake.table("web.access").delete("action = 'a1'", dates=DAY, now=tokyo(DAY, 13))
    day = without(day, "a1")
    appended, merged = deployment.catalog.versions.commit([(stale, "never-written.json")], [], tokyo(DAY, 14))
    assert (appended, merged) == ([], [])
    table = lake.table("web.access")
    assert table.version == 2 and arrow_rows(table.to_arrow(as_of_version=2)) == day
    assert [(r["version"], r["op"]) for r in table.history()] == [(1, "append"), (2, "update")]
    # The update read every object of the day, so nothing is left for an append version.
    assert publish_once(deployment, now=tokyo(DAY, 15)).live_versions == []
    assert arrow_rows(table.to_arrow()) == day


def test_a_file_list_whose_run_died_before_its_commit_is_an_orphan_for_reap(deployment: Deployment, spark) -> None:
    make_table(deployment)
    stream(deployment, DAY, 0)
    (candidate,) = deployment.catalog.versions.live_to_publish()
    tables = {t.id: t for t in deployment.catalog.tables.list()}
    key = _write_live_manifests(deployment, tables, candidate)  # and the run dies here
    assert deployment.lake.exists(key)
    report = publish_once(deployment, now=tokyo(DAY, 12))
    (version,) = report.live_versions
    assert version.file_list_key == key, "the next run writes the same list under the same name and commits it"
    assert Lake(deployment).table("web.access").files(as_of_version=1) == [
        uri for uri, _ in read_manifest(deployment.lake, key)
    ]

    stream(deployment, DAY, 1)
    (dead,) = deployment.catalog.versions.live_to_publish()
    dead_key = _write_live_manifests(deployment, tables, dead)
    reap_once(deployment, now=utcnow())
    assert deployment.lake.exists(dead_key), "young: a run may be about to commit it"
    reap_once(deployment, now=utcnow() + dt.timedelta(days=4))
    assert not deployment.lake.exists(dead_key) and not deployment.lake.exists(symlink_key(dead_key))
    assert deployment.lake.exists(key), "the committed version's list stays"


def test_migration_0006_numbers_existing_versions_by_commit_and_their_reads_stay_the_same(
    deployment: Deployment,
) -> None:
    from .merge_helpers import add_small_objects

    table = make_table(deployment)
    lake = Lake(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, 0)])
    publish_once(deployment, now=tokyo(DAY, 12))
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, 1)])
    add_small_objects(deployment, table, NEXT_DAY, [rows_for(NEXT_DAY, 10, 2)])
    publish_once(deployment, now=tokyo(DAY, 13))
    merge_once(deployment)
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))
    publish_once(deployment, now=tokyo(NEXT_DAY, 2))  # DAY switches: a compaction version
    handle = lake.table("web.access")
    before = {v: arrow_rows(handle.to_arrow(as_of_version=v)) for v in range(1, handle.version + 1)}
    history = [(r["date"], r["version"], r["table_version"], r["op"]) for r in handle.history()]
    assert handle.version == 3 and history == [
        ("2026-11-20", 1, 1, "append"),
        ("2026-11-20", 2, 2, "append"),
        ("2026-11-20", 3, 3, "compaction"),
        ("2026-11-21", 1, 2, "append"),
    ]

    deployment.catalog.downgrade("0005")  # versions as an older siltlake published them: no numbers, no lists
    deployment.catalog.upgrade()
    assert [(r["date"], r["version"], r["table_version"], r["op"]) for r in handle.history()] == history
    assert handle.versions() == (1, 3)
    versions = deployment.catalog.versions.of_partitions([p.id for p in deployment.catalog.partitions.list(table.id)])
    assert [(v.commit_op, v.file_list_key == v.manifest_key, v.file_list_key is None) for v in versions] == [
        ("append", True, True),
        ("append", True, True),
        ("compaction", True, False),
        ("append", True, True),
    ]
    assert {v: arrow_rows(handle.to_arrow(as_of_version=v)) for v in range(1, 4)} == before, (
        "live versions without lists are read from the catalog, as before"
    )
    add_small_objects(deployment, table, NEXT_DAY, [rows_for(NEXT_DAY, 10, 3)])
    (appended,) = publish_once(deployment, now=tokyo(NEXT_DAY, 3)).live_versions
    assert (appended.table_version, appended.file_list_key is not None) == (4, True), "numbering goes on"
    layout = table.layout(deployment.instance_key)
    assert [uri for uri, _ in read_manifest(deployment.lake, appended.file_list_key)] == [
        deployment.lake.uri(layout.small_object(NEXT_DAY, o.id, False))
        for o in deployment.catalog.partitions.small_objects(table.id)
        if o.partition_date == NEXT_DAY
    ], "its base has no list: the new one names every live object of the day"
    assert arrow_rows(handle.to_arrow(as_of_version=4)) == before[3] + arrow_rows(
        pa.Table.from_pylist(rows_for(NEXT_DAY, 10, 3), schema=table.definition.arrow_schema())
    )


def test_the_reading_python_example_runs(deployment: Deployment, monkeypatch, capsys) -> None:
    from .merge_helpers import add_small_objects, point_cli_at

    reading = (Path(__file__).parent.parent / "docs" / "reading.md").read_text(encoding="utf-8")
    section = reading.split("## From Python", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, 0)])
    publish_once(deployment, now=tokyo(DAY, 12))
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, 1)])
    publish_once(deployment, now=tokyo(DAY, 13))
    point_cli_at(deployment, monkeypatch)  # Lake.open() finds the deployment as `silt` would
    exec(compile(example, "docs/reading.md", "exec"), {})
    printed = capsys.readouterr().out.splitlines()
    assert "(1, 2)" in printed and "10" in printed, printed
