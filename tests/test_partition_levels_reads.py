"""Reads of a table partitioned below dt (action, bucket(4, user_id)): a filter or a WHERE on a partition_by column
plans only the partitions that can hold matching rows (Table.scan, to_duckdb, silt sql's plan on DuckDB and Spark),
never one row fewer (nulls, coerced literals, ORs); the change feed compares each (date, values) partition on its
own; a table past its ttl_days loses every partition of an expired date. On SQLite and PostgreSQL catalogs."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from siltlake.catalog import schema as s
from siltlake.deployment import Deployment
from siltlake.derived import build_derived, create_derived
from siltlake.derivedef import DerivedDef
from siltlake.lake import Lake, Table
from siltlake.merge import merge_once
from siltlake.partspec import NULL_TEXT, bucket_of
from siltlake.publish import publish_once
from siltlake.read import sql as read_sql
from siltlake.read.plan import plan_query
from siltlake.read.query import Translations, run_sql
from siltlake.reap import reap_once
from siltlake.write.upsert import upsert

from .test_derived import assert_fresh
from .test_merge import DAY, make_table
from .test_publish import tokyo
from .test_reap import counts, files
from .test_table_api import NEXT_DAY, arrow_rows, local_paths, stream
from .test_upsert import KEYED, upsert_rows

TWO_LEVELS = ["action", "bucket(4, user_id)"]
Row = tuple[int, Any, Any]  # (event time in µs, user id, action)
Partition = tuple[dt.date, str]


def values_of(partition: Partition) -> dict[str, str]:
    """A partition's values below dt as text by field name (the null's text for a null)."""
    return dict(segment.split("=", 1) for segment in partition[1].split("/"))


def micros(at: dt.datetime) -> int:
    return int(at.replace(tzinfo=dt.UTC).timestamp() * 1_000_000)


def append_nulls(table: Table) -> Counter:
    """Rows of DAY with a null action, a null user id, and both: each in a null partition of its field."""
    times = [tokyo(DAY, 10) + dt.timedelta(minutes=minute) for minute in range(3)]
    rows = pa.table(
        {
            "utc_event_time": pa.array([t.replace(tzinfo=dt.UTC) for t in times], pa.timestamp("us", tz="UTC")),
            "user_id": pa.array([17, None, None], pa.int64()),
            "action": pa.array([None, "a1", None], pa.string()),
        }
    )
    table.append(rows)
    return Counter(zip([micros(t) for t in times], [17, None, None], [None, "a1", None], strict=True))


def planned(table: Table, filter: Any = None, **at: Any) -> set[Partition]:
    """The partitions whose files a scan with `filter` plans."""
    return {(f.partition_date, f.partition_values) for f in table.scan(filter, **at).plain_files()}


def sql_planned(deployment: Deployment, query: str) -> set[Partition]:
    """The partitions silt sql's plan (DuckDB's and Spark's) reads the query's one table from."""
    (read,) = plan_query(query, deployment).reads.values()
    return {(p.partition_date, p.partition_values) for p in read.partitions}


def bucket_text(user_id: int | None) -> str:
    return NULL_TEXT if user_id is None else str(bucket_of(user_id, 4))


# Each case: (filter as given to the Python API, the same as a WHERE (None: a pyarrow expression alone), which rows
# match, which partitions may hold them).
Case = tuple[Any, str | None, Callable[[Row], bool], Callable[[Partition], bool]]


def cases(rows: Counter) -> list[Case]:
    later = micros(tokyo(NEXT_DAY, 0))  # NEXT_DAY's rows are from its first Tokyo hour on
    one = min(user for time, user, action in rows if action == "a1" and time >= later)
    other = max(user for _, user, _ in rows if user is not None)
    return [
        ("action = 'a1'", "action = 'a1'", lambda r: r[2] == "a1", lambda p: values_of(p)["action"] == "a1"),
        (
            "action IN ('a1', 'a3')",
            "action IN ('a1', 'a3')",
            lambda r: r[2] in ("a1", "a3"),
            lambda p: values_of(p)["action"] in ("a1", "a3"),
        ),
        ("action IS NULL", "action IS NULL", lambda r: r[2] is None, lambda p: values_of(p)["action"] == NULL_TEXT),
        # pyarrow's simplification: a null action is not <> 'a1', so the null partition goes too
        (
            "action <> 'a1'",
            None,
            lambda r: r[2] is not None and r[2] != "a1",
            lambda p: values_of(p)["action"] not in ("a1", NULL_TEXT),
        ),
        (pc.field("action") == "a2", None, lambda r: r[2] == "a2", lambda p: values_of(p)["action"] == "a2"),
        (
            f"user_id = {one}",
            f"user_id = {one}",
            lambda r: r[1] == one,
            lambda p: values_of(p)["user_id_bucket"] == bucket_text(one),
        ),
        (  # text taken as the column's integer (silt sql sends such a query to Spark: not asked here)
            f"user_id = '{one}'",
            None,
            lambda r: r[1] == one,
            lambda p: values_of(p)["user_id_bucket"] == bucket_text(one),
        ),
        (
            f"user_id IN ({one}, {other}) AND dt = '{NEXT_DAY}'",
            f"user_id IN ({one}, {other}) AND dt = '{NEXT_DAY}'",
            lambda r: r[1] in (one, other) and r[0] >= later,
            lambda p: p[0] == NEXT_DAY and values_of(p)["user_id_bucket"] in (bucket_text(one), bucket_text(other)),
        ),
        (
            f"(user_id = {one} OR user_id = {other}) AND action = 'a1'",
            f"(user_id = {one} OR user_id = {other}) AND action = 'a1'",
            lambda r: r[1] in (one, other) and r[2] == "a1",
            lambda p: (
                values_of(p)["action"] == "a1"
                and values_of(p)["user_id_bucket"] in (bucket_text(one), bucket_text(other))
            ),
        ),
        (
            "user_id IS NULL",
            "user_id IS NULL",
            lambda r: r[1] is None,
            lambda p: values_of(p)["user_id_bucket"] == NULL_TEXT,
        ),
        # Not sure of the values: every partition is read (and the rows are still exact).
        (
            f"user_id = {other} OR action = 'a1'",
            f"user_id = {other} OR action = 'a1'",
            lambda r: r[1] == other or r[2] == "a1",
            lambda p: True,
        ),
        # (Spark compares these as decimals: silt sql may not answer them on DuckDB; the Python API is asked.)
        (f"user_id = {one}.0", None, lambda r: r[1] == one, lambda p: True),
        (f"user_id + 0 = {one}", None, lambda r: r[1] == one, lambda p: True),
    ]


def partition_of(row: Row) -> Partition:
    """The partition a row of DAY or NEXT_DAY lies in."""
    date = NEXT_DAY if row[0] >= micros(tokyo(NEXT_DAY, 0)) else DAY
    return date, f"action={NULL_TEXT if row[2] is None else row[2]}/user_id_bucket={bucket_text(row[1])}"


def assert_partitions_counted(table: Table, rows: Counter, **at: Any) -> None:
    """Table.partitions: a row per (date, values) partition, each with its own row count (a partition a delete
    emptied shows none)."""
    counted: Counter = Counter()
    for row, n in rows.items():
        counted[partition_of(row)] += n
    shown = table.partitions(**at).to_pylist()
    assert Counter({(p["dt"], p["partition_values"]): p["rows"] for p in shown}) == counted
    assert len(shown) == len({(p["dt"], p["partition_values"]) for p in shown})
    assert all(p["objects"] for p in shown if p["rows"])


def duckdb_where(paths: list[str], where: str) -> Counter:
    """DuckDB reading these files itself, with the condition."""
    with duckdb.connect() as connection:
        return Counter(
            connection.sql(
                "SELECT epoch_us(utc_event_time), user_id, action FROM "
                f"read_parquet({paths!r}, union_by_name = true, hive_partitioning = false) WHERE {where}"
            ).fetchall()
        )


def duckdb_filtered(table: Table, filter: Any, **at: Any) -> Counter:
    with duckdb.connect() as connection:
        relation = table.to_duckdb(connection, filter=filter, **at)
        return Counter(relation.select("epoch_us(utc_event_time), user_id, action").fetchall())


def assert_pruned_exactly(deployment: Deployment, lake: Lake, rows: Counter, **at: Any) -> None:
    """Every case plans exactly the partitions that may hold its rows (fewer than all where it pins a field), and
    the Python API, DuckDB over the scan and silt sql (DuckDB) return exactly its rows."""
    table = lake.table("web.access")
    every = planned(table, **at)
    assert len(every) > 10 and any(values_of(p)["action"] == NULL_TEXT for p in every)
    for filter, where, matches, may_hold in cases(rows):
        wanted = Counter({row: n for row, n in rows.items() if matches(row)})
        assert wanted, filter
        expected = {p for p in every if may_hold(p)}
        assert planned(table, filter, **at) == expected, filter
        assert arrow_rows(table.to_arrow(filter=filter, **at)) == wanted, filter
        assert duckdb_filtered(table, filter, **at) == wanted, filter
        paths = local_paths(table.files(filter=filter, **at))  # DuckDB over the files a filter leaves
        assert len(paths) == len(table.scan(filter, **at).plain_files())
        if where is not None and "dt" not in where:
            assert duckdb_where(paths, where) == wanted, where
        if where is None or at:
            continue
        query = f"SELECT user_id, action FROM web.access WHERE {where}"
        assert sql_planned(deployment, query) == expected, where
        result = lake.sql(query, engine="duckdb")
        assert result.engine == "duckdb"
        assert Counter(result.rows) == Counter({(u, a): n for (_, u, a), n in wanted.items()}), where


def by_version(feed: pa.Table) -> dict[int, Counter]:
    """The change feed's rows as (change type, row, dt) by commit version."""
    versions: dict[int, Counter] = {}
    times = pc.cast(feed.column("utc_event_time"), pa.int64()).to_pylist()
    for version, kind, time, user, action, date in zip(
        feed.column("_commit_version").to_pylist(),
        feed.column("_change_type").to_pylist(),
        times,
        feed.column("user_id").to_pylist(),
        feed.column("action").to_pylist(),
        feed.column("dt").to_pylist(),
        strict=True,
    ):
        versions.setdefault(version, Counter())[(kind, (time, user, action), date)] += 1
    return versions


def changes(kind: str, rows: Counter, date: dt.date) -> Counter:
    return Counter({(kind, row, date): n for row, n in rows.items()})


def test_filters_plan_only_their_partitions_and_the_change_feed_is_exact_per_partition(
    deployment: Deployment, tmp_path: Path
) -> None:
    make_table(deployment, partition_by=TWO_LEVELS)
    lake = Lake(deployment)
    table = lake.table("web.access")
    day = stream(deployment, DAY, 0) + stream(deployment, DAY, 1) + append_nulls(table)
    next_day = stream(deployment, NEXT_DAY, 3)
    # Current state, not yet published: the live objects of each partition.
    assert_pruned_exactly(deployment, lake, day + next_day)

    publish_once(deployment, now=tokyo(NEXT_DAY, 1))  # version 1; closes DAY
    merge_once(deployment)
    publish_once(deployment, now=tokyo(NEXT_DAY, 2))  # DAY switched: its merged objects (a compaction)
    publish_once(deployment, now=tokyo(NEXT_DAY, 3))
    merged = table.version
    assert merged >= 2
    table.delete("action = 'a1'", dates=DAY, now=tokyo(NEXT_DAY, 4))
    gone = Counter({row: n for row, n in day.items() if row[2] == "a1"})
    day -= gone
    user = min(u for _, u, a in next_day if a == "a3")
    table.delete(f"user_id = {user}", dates=NEXT_DAY, now=tokyo(NEXT_DAY, 5))
    removed = Counter({row: n for row, n in next_day.items() if row[1] == user})
    next_day -= removed
    assert table.version == merged + 2

    assert_pruned_exactly(deployment, lake, day + next_day)
    assert_pruned_exactly(deployment, lake, day + next_day, as_of_version=merged + 2)
    assert_partitions_counted(table, day + next_day)
    assert_partitions_counted(table, day + gone + next_day + removed, as_of_version=merged)
    assert_pruned_exactly(deployment, lake, day + gone + next_day + removed, as_of_version=merged)

    # The change feed: the appends, nothing for the merge's compactions, then each delete's rows alone.
    feed = by_version(table.changes(0))
    assert feed.pop(1) == changes("insert", day + gone, DAY) + changes("insert", next_day + removed, NEXT_DAY)
    assert feed.pop(merged + 1) == changes("delete", gone, DAY)
    assert feed.pop(merged + 2) == changes("delete", removed, NEXT_DAY)
    assert not feed, "a compaction changes no row"

    # silt sql keeps the translation of a query reading whole tables only: a pruned read is planned at each run.
    kept = Translations(tmp_path / "sql")
    pruned, whole = "SELECT count(*) FROM web.access WHERE action = 'a2'", "SELECT count(*) FROM web.access"
    for query in (pruned, whole):
        assert run_sql(deployment, query, engine="duckdb", translations=kept).engine == "duckdb"
    assert kept.get(pruned) is None and kept.get(whole) is not None
    count = sum(n for row, n in (day + next_day).items() if row[2] == "a2")
    assert run_sql(deployment, pruned, translations=kept).rows == ((count,),)


def test_an_expired_date_goes_with_every_partition_below_it(deployment: Deployment) -> None:
    record = make_table(deployment, partition_by=TWO_LEVELS, ttl_days=2)
    lake = Lake(deployment)
    table = lake.table("web.access")
    later_day = DAY + dt.timedelta(days=3)
    stream(deployment, DAY, 0)
    stream(deployment, DAY, 1)
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))
    merge_once(deployment)
    publish_once(deployment, now=tokyo(NEXT_DAY, 2))  # DAY switched: merged objects and manifests
    kept = stream(deployment, later_day, 7)
    publish_once(deployment, now=tokyo(later_day, 10))
    expired = [p for p in deployment.catalog.partitions.list(record.id) if p.partition_date == DAY]
    assert len(expired) > 10
    old = {k for k in files(deployment) if f"/dt={DAY}/" in k}
    assert {k.split("/")[2] for k in old} == {"live", "merged", "manifests"}

    report = reap_once(deployment, now=tokyo(later_day, 12))
    assert counts(report)["ttl"][0] == len(old) and counts(report)["ttl"][2] == len(expired)
    assert not any(f"/dt={DAY}/" in k for k in files(deployment))
    left = deployment.catalog.partitions.list(record.id)
    assert left and {p.partition_date for p in left} == {later_day}
    with deployment.catalog.engine.connect() as c:
        for t in (s.small_objects, s.merge_ranges, s.partition_versions, s.merge_jobs, s.merge_job_log):
            partition_ids = set(c.execute(t.select().with_only_columns(t.c.partition_id)).scalars())
            assert partition_ids <= {p.id for p in left}, t.name
    assert arrow_rows(table.to_arrow()) == kept
    assert {date for date, _ in planned(table)} == {later_day}


ROLLUP = "SELECT dt, action, count(*) AS hits, count(DISTINCT user_id) AS users FROM web.access GROUP BY dt, action"


@pytest.mark.spark
@pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)
def test_spark_reads_plan_only_their_partitions_and_derived_tables_follow_each_one(
    deployment: Deployment, spark
) -> None:
    make_table(deployment, partition_by=TWO_LEVELS)
    lake = Lake(deployment)
    table = lake.table("web.access")
    every = stream(deployment, DAY, 0) + stream(deployment, DAY, 1) + append_nulls(table)
    every += stream(deployment, NEXT_DAY, 3)
    publish_once(deployment, now=tokyo(DAY, 12))

    # Spark reads what silt sql's plan pinned: the pruned partitions, every matching row.
    for _, where, matches, may_hold in cases(every):
        if where is None:
            continue
        query = f"SELECT unix_micros(utc_event_time), user_id, action FROM web.access WHERE {where}"
        wanted = Counter({row: n for row, n in every.items() if matches(row)})
        assert Counter(tuple(r) for r in read_sql(spark, query, deployment).collect()) == wanted, where
        result = lake.sql(f"SELECT user_id, action FROM web.access WHERE {where}", engine="spark")
        assert Counter(result.rows) == Counter((u, a) for _, u, a in wanted.elements()), where
        assert sql_planned(deployment, query) == {p for p in planned(table) if may_hold(p)}, where

    # A derived table over it: a change to one partition of a date (not the last of its partitions) rebuilds the date.
    create_derived(
        deployment, DerivedDef.from_mapping({"name": "web.daily_actions", "query": ROLLUP, "incremental": True})
    )
    first = build_derived(deployment, "web.daily_actions")
    assert first.dates and table.version == 1
    assert_fresh(spark, deployment)
    at = tokyo(DAY, 11)
    table.append(
        pa.table(
            {
                "utc_event_time": pa.array([at.replace(tzinfo=dt.UTC)], pa.timestamp("us", tz="UTC")),
                "user_id": pa.array([5], pa.int64()),
                "action": pa.array(["a0"], pa.string()),
            }
        )
    )
    publish_once(deployment, now=tokyo(DAY, 13))
    assert table.version == 2
    views = deployment.catalog.version_reads.reader_snapshot(table.record.id)
    changed = {(v.partition_date, v.partition_values) for v in views if v.table_version == 2}
    assert changed == {(DAY, f"action=a0/user_id_bucket={bucket_of(5, 4)}")}
    again = build_derived(deployment, "web.daily_actions")
    assert again.kind == "incremental" and again.dates == [DAY]
    assert_fresh(spark, deployment)


def test_a_keyed_tables_change_feed_pairs_each_keys_images_in_its_own_partition(deployment: Deployment) -> None:
    make_table(deployment, **KEYED, partition_by=["bucket(4, user_id)"])
    table = Lake(deployment).table("web.access")
    table.append(upsert_rows(list(range(8)), "a"))
    publish_once(deployment, now=tokyo(DAY, 12))
    rows = upsert_rows([0, 1, 9, 2], "new").append_column("gone", pa.array([False, True, False, False]))
    upsert(deployment, "web.access", rows, "gone", now=tokyo(DAY, 13))
    assert len({bucket_of(user, 4) for user in (0, 1, 9, 2)}) > 1

    feed = table.changes(0)
    names = ("_commit_version", "_change_type", "user_id", "action")
    listed = list(zip(*(feed.column(n).to_pylist() for n in names), strict=True))
    assert sorted(listed) == sorted(
        [(1, "insert", user, "a") for user in range(8)]
        + [(2, "delete", 1, "a"), (2, "insert", 9, "new")]
        + [(2, "update_preimage", user, "a") for user in (0, 2)]
        + [(2, "update_postimage", user, "new") for user in (0, 2)]
    )
    for at, (_, kind, user, _) in enumerate(listed):
        if kind == "update_preimage":  # its postimage next
            assert listed[at + 1][1:3] == ("update_postimage", user)
    assert set(feed.column("dt").to_pylist()) == {DAY}

    merge_once(deployment)
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))
    publish_once(deployment, now=tokyo(NEXT_DAY, 2))  # switched: each partition's compaction
    assert table.history()[-1]["op"] == "compaction" and table.changes(2).num_rows == 0
    assert sorted(table.to_arrow().column("user_id").to_pylist()) == [0, 2, 3, 4, 5, 6, 7, 9]
