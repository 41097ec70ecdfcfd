"""`${...}` in user SQL: Spark would replace `${env:VAR}`, `${system:prop}`, `${sparkconf:key}` and
`${spark:key}` with the host's values before parsing. Every session siltlake builds or is given has substitution
off, and every entry of user SQL refuses `${` in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from siltlake.derived import create_derived
from siltlake.derivedef import DerivedDef
from siltlake.errors import ConfigError
from siltlake.load import parse_load_config
from siltlake.read import sql
from siltlake.read.sandbox import RefusedSQL, check_expression, check_query

from .merge_helpers import add_small_objects, rows_for, silt_in_process
from .test_merge import DAY, make_table

pytestmark = pytest.mark.spark

SECRET = "hunter2-not-for-readers"
REFUSAL = "refuses ${...}: Spark would replace it with a value of the host"


@pytest.fixture
def catalog_url(tmp_path: Path) -> str:
    """Nothing here depends on the catalog's engine: SQLite is enough."""
    return f"sqlite:///{tmp_path / 'catalog.db'}"


@pytest.fixture
def access(deployment, monkeypatch):  # fixtures
    """web.access with 10 rows on DAY, and a secret in the environment."""
    monkeypatch.setenv("SILT_TEST_SECRET", SECRET)
    add_small_objects(deployment, make_table(deployment), DAY, [rows_for(DAY, 10, 0)])
    return deployment


def test_sessions_have_substitution_off(spark, deployment) -> None:
    assert spark.conf.get("spark.sql.variable.substitute") == "false"
    assert spark.sql("SELECT '${env:HOME}' AS v").first().v == "${env:HOME}"
    # A session the caller owns is switched off when a deployment is given it.
    spark.conf.set("spark.sql.variable.substitute", "true")
    try:
        deployment.use_spark(spark)
        assert spark.conf.get("spark.sql.variable.substitute") == "false"
    finally:
        spark.conf.set("spark.sql.variable.substitute", "false")


@pytest.mark.parametrize(
    "text",
    [
        "SELECT '${env:SILT_TEST_SECRET}' AS v FROM web.access",
        "SELECT ${system:user.home} AS v",
        "SELECT 1 AS v -- ${spark:spark.app.id}",
    ],
)
def test_silt_sql_refuses_substitution(spark, access, text: str) -> None:
    with pytest.raises(RefusedSQL, match=r"^silt sql refuses \$\{\.\.\.\}: Spark would replace"):
        sql(spark, text, access)
    with pytest.raises(RefusedSQL, match=r"^silt sql refuses \$\{"):
        check_query(spark, text)
    # The characters written apart are only text.
    joined = "SELECT concat('$', '{env:SILT_TEST_SECRET}') AS v FROM web.access"
    assert sql(spark, joined, access).first().v == "${env:SILT_TEST_SECRET}"


def test_each_entry_of_user_sql_refuses_substitution(spark, access, monkeypatch) -> None:
    silt = silt_in_process(access, monkeypatch)
    outputs = [
        silt("sql", "SELECT '${env:SILT_TEST_SECRET}' AS v FROM web.access", code=2),
        silt(
            "delete", "web.access", "--date", DAY.isoformat(), "--where", "'${env:SILT_TEST_SECRET}' = 'guess'", code=2
        ),
        silt(
            "upsert",
            "web.access",
            "--sql",
            "SELECT utc_event_time, user_id, '${env:SILT_TEST_SECRET}' AS action FROM web.access",
            code=2,
        ),
    ]
    for output in outputs:
        assert SECRET not in output
        assert REFUSAL in " ".join(output.split()), output
        assert len(output.strip().splitlines()) <= 2, output  # one message (Rich may wrap it)
    with pytest.raises(RefusedSQL, match=r"refuses \$\{"):
        check_expression(spark, "'${env:SILT_TEST_SECRET}' = 'guess'")
    assert (
        access.catalog.versions.of_partitions(
            [p.id for p in access.catalog.partitions.list(access.catalog.tables.get("web.access").id)]
        )
        == []
    )
    query = "SELECT dt, count(*) AS n, '${env:SILT_TEST_SECRET}' AS s FROM web.access GROUP BY dt"
    for definition in (
        {"query": query},
        {
            "query": "SELECT dt, count(*) AS n FROM web.access GROUP BY dt",
            "trigger_sql": "SELECT '${env:SILT_TEST_SECRET}' FROM web.access",
        },
    ):
        with pytest.raises(RefusedSQL, match=r"refuses \$\{"):
            create_derived(access, DerivedDef.from_mapping({"name": "web.daily", **definition}))
    with pytest.raises(ConfigError, match=r"filters.s.sql.query: .*refuses \$\{\.\.\.\}"):
        parse_load_config(
            {
                "in": {"path": "/tmp/x.csv"},
                "parser": {"type": "csv", "columns": [{"name": "a", "type": "string"}]},
                "filters": {"s": {"type": "sql", "query": "select '${env:X}' as a from in"}},
                "out": {"table": "web.x", "create": True, "time_column": "a"},
            }
        )
