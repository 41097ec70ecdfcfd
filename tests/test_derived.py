"""Derived tables: a rollup of web.access kept equal to its query, incremental builds, triggers."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pytest

from siltlake.catalog import BuildInProgress
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.derived import build_derived, create_derived
from siltlake.derivedef import DerivedDef
from siltlake.errors import CatalogError, DefinitionError
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.read import sql
from siltlake.reap import reap_once
from siltlake.storage.keys import build_of
from siltlake.stream import stream_once
from siltlake.tabledef import TableDef
from siltlake.write.update import delete_rows

from .conftest import ACCESS_TABLE
from .merge_helpers import add_small_objects, rows_for
from .test_stream import event, jsonl_gz, stage

pytestmark = pytest.mark.spark
# The derived catalog's SQL runs on PostgreSQL in the build-conflict and killed-build tests (both catalogs)
# and in test_derived_cli.py's killed subprocess; the long scenarios run once, on SQLite.
sqlite_only = pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)

ROLLUP = "SELECT dt, action, count(*) AS hits, count(DISTINCT user_id) AS users FROM web.access GROUP BY dt, action"
FIRST = dt.date(2026, 11, 1)


def make_source(deployment: Deployment, days: int = 3, objects: int = 2):  # a TableRecord
    table = deployment.catalog.tables.create(TableDef.from_mapping({**ACCESS_TABLE, "merge_interval": 0}))
    for day in range(days):
        date = FIRST + dt.timedelta(days=day)
        add_small_objects(deployment, table, date, [rows_for(date, 40, day * 10 + n) for n in range(objects)])
    publish_once(deployment)
    return table


def merge_and_publish(deployment: Deployment) -> None:
    later = utcnow() + dt.timedelta(days=1)
    merge_once(deployment, clock=lambda: later)
    publish_once(deployment, now=later)
    publish_once(deployment, now=later)  # switched in the first run, its merged version in the second


def rollup(deployment: Deployment, spark, **settings: object):  # a DerivedRecord
    return create_derived(
        deployment, DerivedDef.from_mapping({"name": "web.daily_actions", "query": ROLLUP, **settings})
    )


def rows_of(spark, deployment: Deployment, query: str) -> Counter:
    return Counter(tuple(row) for row in sql(spark, query, deployment).collect())


def assert_fresh(spark, deployment: Deployment) -> None:
    """The derived table holds exactly what its query returns over the sources' published state now."""
    built = rows_of(spark, deployment, "SELECT dt, action, hits, users FROM web.daily_actions")
    fresh = rows_of(spark, deployment, ROLLUP)
    assert built == fresh and built


def written_dates(deployment: Deployment, build: str) -> set[dt.date]:
    root = f"_derived/{build}/"
    return {
        dt.date.fromisoformat(info.key[len(root) :].split("/")[0][3:])
        for info in deployment.lake.list(root)
        if build_of(info.key) == build
    }


@sqlite_only
def test_a_rollup_stays_equal_to_its_query_and_incremental_builds_touch_only_changed_dates(
    deployment: Deployment, spark
) -> None:
    source = make_source(deployment)
    record = rollup(deployment, spark, incremental=True)
    assert [c.name for c in record.table.definition.columns] == ["action", "hits", "users"]

    first = build_derived(deployment, "web.daily_actions")
    assert first.kind == "full" and first.dates == [FIRST + dt.timedelta(days=d) for d in range(3)]
    assert written_dates(deployment, first.build) == set(first.dates)
    assert_fresh(spark, deployment)

    # Streamed: a staging object with a fourth day (and one put under the derived table: refused).
    streamed_day = FIRST + dt.timedelta(days=3)
    start = dt.datetime.combine(streamed_day, dt.time(3), tzinfo=dt.UTC)
    stage(
        deployment,
        "f1.web.access/2026/11/04/a.jsonl.gz",
        jsonl_gz([event(start + dt.timedelta(minutes=i), 7_000 + i, f"a{i % 3}") for i in range(30)]),
    )
    stage(deployment, "f1.web.daily_actions/2026/11/04/x.jsonl.gz", jsonl_gz([event(start, 1)]))
    streamed = stream_once(deployment)
    assert streamed.records_loaded == 30 and [o.reason for o in deployment.catalog.staging.unknown()] == [
        "web.daily_actions is a derived table, built from its query: it takes no staging objects"
    ]
    publish_once(deployment)
    incremental = build_derived(deployment, "web.daily_actions")
    assert incremental.dates == [streamed_day] and written_dates(deployment, incremental.build) == {streamed_day}
    assert_fresh(spark, deployment)

    # The closed days merged: every date has a new (compaction) version with the same rows.
    merge_and_publish(deployment)
    second = build_derived(deployment, "web.daily_actions")
    assert second.kind == "incremental" and len(second.dates) >= 3
    assert_fresh(spark, deployment)

    # A late object for day 2, merged and published: the next build rewrites that date and nothing else.
    late = FIRST + dt.timedelta(days=1)
    add_small_objects(deployment, source, late, [rows_for(late, 25, 99)])
    merge_and_publish(deployment)
    third = build_derived(deployment, "web.daily_actions")
    assert third.kind == "incremental" and third.dates == [late]
    assert written_dates(deployment, third.build) == {late}
    assert_fresh(spark, deployment)

    # delete-where on the first day.
    delete_rows(deployment, "web.access", FIRST, "action = 'a1'")
    fourth = build_derived(deployment, "web.daily_actions")
    assert fourth.dates == [FIRST] and written_dates(deployment, fourth.build) == {FIRST}
    assert_fresh(spark, deployment)

    # Time travel on the derived table: the version before the late object shows the old day 2.
    history = rows_of(
        spark,
        deployment,
        f"SELECT dt, hits FROM web.daily_actions VERSION AS OF {first.table_version} WHERE dt = DATE'{late}'",
    )
    assert sum(hits * n for (_, hits), n in history.items()) == 80
    now = rows_of(spark, deployment, f"SELECT dt, hits FROM web.daily_actions WHERE dt = DATE'{late}'")
    assert sum(hits * n for (_, hits), n in now.items()) == 105

    # The source's old versions reaped past retention: the derived table keeps its rows, and the builds no
    # retained version needs any more are gone, the current ones kept.
    week_later = utcnow() + dt.timedelta(days=8)
    dry = reap_once(deployment, week_later, dry_run=True)
    reaped = reap_once(deployment, week_later)
    assert dry.derived.deleted == reaped.derived.deleted, "the dry run names what the run deletes"
    assert reaped.reasons["expired"].rows > 0 and first.build in [name for name, _ in reaped.derived.deleted]
    assert {second.build, third.build, fourth.build} - {name for name, _ in reaped.derived.deleted} != set()
    assert_fresh(spark, deployment)
    build_derived(deployment, "web.daily_actions")
    assert_fresh(spark, deployment)


@sqlite_only
def test_definitions_are_checked_at_create_time(deployment: Deployment, spark) -> None:
    make_source(deployment, days=1)
    with pytest.raises(DefinitionError, match="must return a dt column"):
        create_derived(
            deployment,
            DerivedDef.from_mapping(
                {"name": "web.totals", "query": "SELECT action, count(*) AS n FROM web.access GROUP BY action"}
            ),
        )
    with pytest.raises(DefinitionError, match="is not a table"):
        create_derived(
            deployment,
            DerivedDef.from_mapping(
                {"name": "web.x", "query": "SELECT dt, count(*) AS n FROM web.nothing GROUP BY dt"}
            ),
        )
    with pytest.raises(DefinitionError, match="leave out VERSION"):
        create_derived(
            deployment,
            DerivedDef.from_mapping(
                {"name": "web.x", "query": "SELECT dt, count(*) AS n FROM web.access VERSION AS OF 1 GROUP BY dt"}
            ),
        )
    create_derived(
        deployment,
        DerivedDef.from_mapping(
            {"name": "web.level1", "query": "SELECT dt, action, count(*) AS n FROM web.access GROUP BY dt, action"}
        ),
    )
    create_derived(
        deployment,
        DerivedDef.from_mapping({"name": "web.level2", "query": "SELECT dt, sum(n) AS n FROM web.level1 GROUP BY dt"}),
    )
    with pytest.raises(Exception, match="is read by derived table web.level2"):
        deployment.catalog.derived.drop("web.level1", utcnow())


# Derived queries whose DuckDB translation types their columns (no JVM at create time), each checked against
# Spark's own analysis: names and stored types must be the same.
TRANSLATED = [
    ROLLUP,
    "SELECT dt, hour(utc_event_time) AS hour, min(action) AS first, max(user_id) AS top, avg(user_id) AS mean, "
    "sum(user_id) AS total FROM web.access GROUP BY dt, hour(utc_event_time)",
    "SELECT dt, to_date(utc_event_time) AS day, date_trunc('HOUR', utc_event_time) AS hour, user_id IS NULL AS "
    "anonymous, row_number() OVER (PARTITION BY action ORDER BY utc_event_time) AS n FROM web.access",
    "SELECT dt, count(*) FROM web.access WHERE action = 'login' GROUP BY dt",
]


def test_columns_of_a_translated_query_are_spark_s(deployment: Deployment, spark) -> None:
    from siltlake.derived.define import spark_columns, translated_columns

    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    nothing = {"web.access": {"dates": []}}
    for query in TRANSLATED:
        translated = translated_columns(deployment, query, nothing)
        assert translated is not None, query
        on_spark = spark_columns(sql(spark, query, deployment, reads=nothing).schema)
        assert [column[:2] for column in translated] == [column[:2] for column in on_spark], query
    # What does not translate (a function outside the allow-list) is typed by Spark.
    assert translated_columns(deployment, "SELECT dt, upper(action) AS a FROM web.access", nothing) is None


def test_a_derived_table_of_a_translated_query_is_created_without_spark(plain_deployment: Deployment) -> None:
    create_derived(
        plain_deployment,
        DerivedDef.from_mapping(
            {"name": "web.daily_actions", "query": ROLLUP, "trigger_sql": "SELECT max(dt) FROM web.access"}
        ),
    )
    assert plain_deployment._spark is None  # no JVM started
    columns = plain_deployment.catalog.tables.get("web.daily_actions").definition.columns
    assert [(c.name, c.type) for c in columns] == [("action", "string"), ("hits", "bigint"), ("users", "bigint")]
    with pytest.raises(DefinitionError, match="must return a dt column"):
        create_derived(
            plain_deployment,
            DerivedDef.from_mapping(
                {"name": "web.x", "query": "SELECT action, count(*) AS n FROM web.access GROUP BY action"}
            ),
        )
    assert plain_deployment._spark is None


def test_a_table_a_derived_table_reads_cannot_be_renamed(deployment: Deployment, spark) -> None:
    """Its query names the table: renamed, the next build failed "no table web.access"."""
    make_source(deployment, days=1)
    rollup(deployment, spark)
    with pytest.raises(
        CatalogError,
        match=r"^web.access is read by derived table web.daily_actions, whose query "
        r"names it; .*silt derived drop.*create it again",
    ):
        deployment.catalog.tables.rename("web.access", "web.hits")
    assert deployment.catalog.tables.get("web.access").definition.qualified_name == "web.access"
    assert build_derived(deployment, "web.daily_actions").dates == [FIRST]
    deployment.catalog.derived.drop("web.daily_actions", utcnow())
    assert deployment.catalog.tables.rename("web.access", "web.hits").definition.qualified_name == "web.hits"


def test_a_second_build_waits_for_the_running_one(deployment: Deployment, spark) -> None:
    make_source(deployment, days=1)
    record = rollup(deployment, spark)
    build = deployment.catalog.derived.start_build(
        record,
        reg_key="test0001",
        catalog_id="x",
        kind="full",
        host="elsewhere",
        pid=1,
        now=utcnow(),
        dead=lambda _: False,
    )
    with pytest.raises(BuildInProgress, match="is being built"):
        build_derived(deployment, "web.daily_actions")
    deployment.catalog.derived.fail_build(build.id, "test", utcnow())
    assert build_derived(deployment, "web.daily_actions").dates == [FIRST]


@sqlite_only
def test_a_derived_table_reaches_every_reader_and_external_catalog(
    tmp_path, catalog_url, spark, hive_metastore_dir
) -> None:
    """The table API (pyarrow, DuckDB), Spark SQL, the Iceberg target and the Hive metastore read the build."""
    import uuid

    import duckdb

    from siltlake.config import Config
    from siltlake.lake import Lake
    from siltlake.publish.iceberg.catalog import open_catalog

    from .conftest import make_config
    from .test_external_catalogs import manifest_lines, partition_storage

    config = make_config(tmp_path, catalog_url).model_dump()
    config["publish"] = {
        "targets": ["hive", "iceberg"],
        "hive": {"metastore_dir": str(hive_metastore_dir), "database_prefix": f"t{uuid.uuid4().hex[:8]}_"},
    }
    deployment = Deployment(Config.model_validate(config))
    deployment.init()
    deployment.use_spark(spark)
    try:
        make_source(deployment, days=2)
        rollup(deployment, spark, incremental=True)
        build = build_derived(deployment, "web.daily_actions")
        report = publish_once(deployment)
        assert not report.target_errors, report.target_errors
        expected = rows_of(spark, deployment, "SELECT dt, action, hits, users FROM web.daily_actions")

        table = Lake(deployment).table("web.daily_actions")
        arrow = table.to_arrow()
        assert (
            Counter(zip(*(arrow.column(c).to_pylist() for c in ("dt", "action", "hits", "users")), strict=True))
            == expected
        )
        with duckdb.connect() as connection:
            assert Counter(table.to_duckdb(connection).fetchall()) == Counter((a, h, u, d) for d, a, h, u in expected)
        assert all(f"_derived/{build.build}/" in uri for uri in table.files())

        iceberg = open_catalog(deployment).load_table(("web", "daily_actions"))
        scanned = iceberg.scan().to_arrow()
        assert sorted(scanned.column("hits").to_pylist()) == sorted(
            h for (_, _, h, _), n in expected.items() for _ in range(n)
        )
        prefix = deployment.config.publish.hive.database_prefix
        location = partition_storage(spark, f"{prefix}web.daily_actions", FIRST)["Location"]
        assert all(f"_derived/{build.build}/dt={FIRST}/" in line for line in manifest_lines(location))
    finally:
        deployment.close()
