"""What user SQL can name: a delete predicate sees the table's own columns and nothing siltlake adds to work it
out (its row numbers, its helper tables), on the in-process path and on Spark alike; names siltlake gives its own
columns are refused as table columns; and every table reference of a query reads its own table, whatever the
names (`a.b__c` and `a__b.c`; `x.y VERSION AS OF 1` and `x.y__v1`).
"""

from __future__ import annotations

from collections import Counter

import pytest

from siltlake.deployment import Deployment
from siltlake.derived import build_derived, create_derived
from siltlake.derivedef import DerivedDef
from siltlake.errors import SiltError
from siltlake.publish import publish_once
from siltlake.read import sql as spark_sql
from siltlake.read.duck import faithful, run_plan
from siltlake.read.plan import plan_query
from siltlake.tabledef import Column, TableDef
from siltlake.write.row_updates import delete_rows_where

from .conftest import ACCESS_TABLE
from .merge_helpers import add_small_objects, rows_for
from .test_merge import DAY, make_table
from .test_publish import tokyo

pytestmark = pytest.mark.spark


def partition_rows(deployment: Deployment) -> int:
    return spark_sql(deployment.spark(), "SELECT count(*) FROM web.access", deployment).first()[0]


@pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "spark"])
def test_a_delete_predicate_sees_only_the_table_s_columns(deployment: Deployment, in_process: bool) -> None:
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 60, 0)])
    publish_once(deployment, now=tokyo(DAY, 12))
    if not in_process:
        deployment.config.publish.in_process_rewrite_bytes = 0
    # The in-process path numbers the rows as __silt_row of a relation __silt_rows: neither is the table's.
    for where, named in [
        ("__silt_row < 50", "__silt_row"),
        ("`__silt_row` >= 0", "__silt_row"),
        ("__silt_rows.action = 'a1'", "__silt_rows.action"),
        ("actoin = 'a1'", "actoin"),
    ]:
        with pytest.raises(SiltError) as raised:
            delete_rows_where(deployment, "web.access", [DAY], where)
        message = str(raised.value)
        assert f"no column {named}" in message and "nothing was deleted" in message, message
        assert "its columns are utc_event_time, user_id, action" in message, message
        if named == "actoin":
            assert "did you mean action?" in message, message
    assert partition_rows(deployment) == 60
    report = delete_rows_where(deployment, "web.access", [DAY], "user_id < 50")
    assert sum(report.changed()) == 50
    assert partition_rows(deployment) == 10


def test_the_unknown_column_error_is_the_same_on_both_paths(deployment: Deployment) -> None:
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, 0)])
    publish_once(deployment, now=tokyo(DAY, 12))
    for where in ("__silt_row < 5", "user_id > 3 AND actoin = 'x'"):
        said = []
        for bound in (32 * 1024 * 1024, 0):
            deployment.config.publish.in_process_rewrite_bytes = bound
            with pytest.raises(SiltError) as raised:
                delete_rows_where(deployment, "web.access", [DAY], where)
            said.append(str(raised.value))
        assert said[0] == said[1], said


RESERVED = [
    "__silt_row",
    "__silt_rows",
    "__silt_date",
    "_silt_delete",
    "_change_type",
    "_commit_version",
    "_commit_timestamp",
    "_retype_reason",
    "_retype_record",
    "__silt_anything",
]


def test_every_name_siltlake_gives_a_column_of_its_own_is_reserved() -> None:
    from siltlake.coltypes import refuse_reserved_column
    from siltlake.errors import DefinitionError
    from siltlake.read import changes
    from siltlake.records import keyed, retype
    from siltlake.write import in_process, upsert

    used = [
        changes.CHANGE_TYPE,
        changes.COMMIT_VERSION,
        changes.COMMIT_TIMESTAMP,
        changes._COUNT,
        in_process._ROW,
        in_process._ROWS,
        upsert._DATE,
        upsert._POSITION,
        keyed.DELETE_MARKER,
        retype.REASON,
        retype.RECORD,
        "__silt_old",
        "__silt_new",
    ]
    for name in used:
        with pytest.raises(DefinitionError, match="reserved"):
            refuse_reserved_column(name)
    refuse_reserved_column("silt")  # names merely like them are the table's to use
    refuse_reserved_column("change_type")


def test_names_siltlake_gives_its_own_columns_are_refused(plain_deployment: Deployment) -> None:
    tables = plain_deployment.catalog.tables
    for name in RESERVED:
        definition = {
            **ACCESS_TABLE,
            "name": "reserved",
            "columns": [*ACCESS_TABLE["columns"], {"name": name, "type": "bigint"}],
        }
        with pytest.raises(SiltError, match=f"column name {name!r} is reserved"):
            tables.create(TableDef.from_mapping(definition))
        with pytest.raises(SiltError, match=f"column name {name!r} is reserved"):
            tables.add_column("web.access", Column(name=name, type="bigint"))
        with pytest.raises(SiltError, match=f"column name {name!r} is reserved"):
            tables.rename_column("web.access", "action", name)
    assert [c.name for c in tables.get("web.access").definition.columns] == ["utc_event_time", "user_id", "action"]
    assert [t.qualified_name for t in tables.list()] == ["web.access"]


def test_a_derived_table_with_a_reserved_column_is_refused(plain_deployment: Deployment) -> None:
    with pytest.raises(SiltError, match="column name '_change_type' is reserved"):
        create_derived(
            plain_deployment,
            DerivedDef.from_mapping({"name": "web.feed", "query": "SELECT dt, action AS _change_type FROM web.access"}),
        )


# --- view names ------------------------------------------------------------------------------------------------


def two_tables(deployment: Deployment, first: str, second: str) -> None:
    """Tables `first` and `second` (schema.table), with 7 and 3 rows of one day, published alike."""
    for qualified, count in ((first, 7), (second, 3)):
        schema, name = qualified.split(".")
        record = deployment.catalog.tables.create(
            TableDef.from_mapping({**ACCESS_TABLE, "schema": schema, "name": name, "merge_interval": 0})
        )
        add_small_objects(deployment, record, DAY, [rows_for(DAY, count, 0)])
    publish_once(deployment, now=tokyo(DAY, 12))


def on_duckdb(deployment: Deployment, query: str) -> list[tuple]:
    plan = plan_query(query, deployment)
    return run_plan(plan, deployment, faithful(plan, deployment), 100)


def on_spark(deployment: Deployment, query: str) -> Counter:
    return Counter(tuple(row) for row in spark_sql(deployment.spark(), query, deployment).collect())


@pytest.mark.parametrize("first, second", [("a.b__c", "a__b.c"), ("a__b.c", "a.b__c"), ("s.t__r", "s__t.r")])
def test_tables_whose_names_join_alike_are_read_each_as_itself(deployment: Deployment, first: str, second: str) -> None:
    two_tables(deployment, first, second)
    # DuckDB: both tables in one query (a CTE reads one, the SELECT the other).
    for side, count in ((first, 7), (second, 3)):
        query = (
            f"WITH l AS (SELECT count(*) AS n FROM {first}), r AS (SELECT count(*) AS n FROM {second}) "
            f"SELECT n FROM {'l' if side == first else 'r'}"
        )
        assert on_duckdb(deployment, query) == [(count,)], query
    union = f"SELECT 'first' AS side, count(*) AS n FROM {first} UNION ALL SELECT 'second', count(*) FROM {second}"
    assert on_spark(deployment, union) == Counter({("first", 7): 1, ("second", 3): 1})


def test_a_pinned_version_and_a_table_named_like_its_view_are_read_each_as_itself(deployment: Deployment) -> None:
    two_tables(deployment, "x.y", "x.y__v1")
    record = deployment.catalog.tables.get("x.y")
    add_small_objects(deployment, record, DAY, [rows_for(DAY, 5, 1)])
    publish_once(deployment, now=tokyo(DAY, 13))  # x.y: 12 rows now, 7 at version 1
    query = (
        "WITH p AS (SELECT count(*) AS n FROM x.y VERSION AS OF 1), o AS (SELECT count(*) AS n FROM x.y__v1) "
        "SELECT n FROM {}"
    )
    assert on_duckdb(deployment, query.format("p")) == [(7,)]
    assert on_duckdb(deployment, query.format("o")) == [(3,)]
    union = (
        "SELECT 'pinned' AS side, count(*) AS n FROM x.y VERSION AS OF 1 UNION ALL "
        "SELECT 'other', count(*) FROM x.y__v1 UNION ALL SELECT 'now', count(*) FROM x.y"
    )
    assert on_spark(deployment, union) == Counter({("pinned", 7): 1, ("other", 3): 1, ("now", 12): 1})


def test_a_derived_table_reads_each_of_two_tables_whose_names_join_alike(deployment: Deployment) -> None:
    two_tables(deployment, "a.b__c", "a__b.c")
    create_derived(
        deployment,
        DerivedDef.from_mapping(
            {
                "name": "a.both",
                "query": "SELECT dt, 'first' AS side, count(*) AS n FROM a.b__c GROUP BY dt "
                "UNION ALL SELECT dt, 'second' AS side, count(*) AS n FROM a__b.c GROUP BY dt",
            }
        ),
    )
    build_derived(deployment, "a.both")
    assert on_spark(deployment, "SELECT side, n FROM a.both") == Counter({("first", 7): 1, ("second", 3): 1})


def test_a_query_s_own_name_may_not_be_one_of_siltlake_s_views(plain_deployment: Deployment) -> None:
    # A CTE named as the view of web.access would stand in for the table in the rewritten query.
    with pytest.raises(SiltError, match="names beginning __silt_ are siltlake's own"):
        plan_query("WITH __silt_3_web_6_access AS (SELECT 1 AS x) SELECT * FROM web.access", plain_deployment)
