"""Query bounds: user SQL stops at sql.timeout (`silt sql`) or sql.write_timeout (derived builds, upsert --sql,
delete/update --where) on DuckDB (interrupted from a timer) and on Spark (its jobs' tag cancelled), and DuckDB
stops at sql.duckdb_memory_limit; each with one error naming the bound and the setting, nothing written."""

from __future__ import annotations

import dataclasses
import time

import pytest

from siltlake.deployment import Deployment
from siltlake.derived import build_derived, create_derived
from siltlake.derivedef import DerivedDef
from siltlake.errors import SiltError
from siltlake.read.duck import faithful, run_plan
from siltlake.read.plan import plan_query
from siltlake.spark import time_bound

from .merge_helpers import add_small_objects, rows_for, silt_in_process
from .test_merge import DAY, make_table

pytestmark = pytest.mark.spark
ENDLESS = "SELECT count(*) FROM range(1000000000000)"  # a trillion rows: hours on either engine


@pytest.fixture
def access(deployment: Deployment) -> Deployment:
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 20, 1)])
    return deployment


def test_silt_sql_stops_a_spark_query_at_sql_timeout_and_the_session_runs_on(
    access: Deployment, monkeypatch, spark
) -> None:
    monkeypatch.setenv("SILTLAKE_SQL__TIMEOUT", "3")
    silt = silt_in_process(access, monkeypatch)
    started = time.monotonic()
    output = silt("sql", ENDLESS, code=2)
    assert time.monotonic() - started < 60
    message = " ".join(output.split())
    assert "the query was stopped: it ran past sql.timeout (3 s)" in message
    assert "Raise sql.timeout" in message
    assert spark.sql("SELECT count(*) FROM range(10)").collect()[0][0] == 10  # the tag is gone, the session works


def test_a_duckdb_query_is_interrupted_at_its_bound(access: Deployment) -> None:
    plan = plan_query("SELECT count(*) FROM web.access", access)
    endless = dataclasses.replace(faithful(plan, access), sql=ENDLESS)
    started = time.monotonic()
    with (
        pytest.raises(SiltError, match=r"the query was stopped: it ran past sql.timeout \(2 s\)"),
        time_bound(2, "sql.timeout", "the query"),
    ):
        run_plan(plan, access, endless, 10)
    assert time.monotonic() - started < 30
    with time_bound(2, "sql.timeout", "the query"):  # a query within its bound answers
        assert run_plan(plan, access, faithful(plan, access), 10) == [(20,)]


def test_a_duckdb_query_stops_at_sql_duckdb_memory_limit(access: Deployment) -> None:
    plan = plan_query("SELECT count(*) FROM web.access", access)
    greedy = dataclasses.replace(
        faithful(plan, access), sql="SELECT count(*) FROM (SELECT DISTINCT range FROM range(100000000))"
    )
    access.config.sql.duckdb_memory_limit = "40MB"
    with pytest.raises(SiltError, match=r"more memory than sql.duckdb_memory_limit \(40MB\)"):
        run_plan(plan, access, greedy, 10)


def test_a_derived_build_past_sql_write_timeout_fails_and_publishes_nothing(access: Deployment) -> None:
    create_derived(
        access,
        DerivedDef.from_mapping(
            {
                "name": "web.endless",
                "query": "SELECT dt, count(*) AS n FROM web.access CROSS JOIN range(1000000000000) GROUP BY dt",
            }
        ),
    )
    access.config.sql.write_timeout = 3
    with pytest.raises(SiltError, match=r"building web.endless was stopped: it ran past sql.write_timeout \(3 s\)"):
        build_derived(access, "web.endless")
    record = access.catalog.derived.get("web.endless")
    assert access.catalog.derived.last_published(record.id) is None
    assert not list(access.lake.list("_derived/"))
