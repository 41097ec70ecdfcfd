"""Small rewrites without Spark (siltlake.write.in_process): a delete of a small partition, and an overwrite with
pyarrow rows, give exactly the object Spark's path writes from the same base, under the same conflict rules.

The differential tests prepare the same delete twice from one base, once in-process and once on Spark
(publish.in_process_rewrite_bytes = 0), and compare the two objects' rows and schemas before discarding both.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from siltlake.catalog import UpdateConflict
from siltlake.deployment import Deployment
from siltlake.errors import SiltError
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.write.in_process import delete_in_process
from siltlake.write.update import PreparedUpdate, overwrite_partition, prepare_delete

from .merge_helpers import add_small_objects, rows_for
from .test_merge import DAY, make_table
from .test_publish import tokyo
from .test_upsert import KEYED, upsert_rows

pytestmark = pytest.mark.spark
NEXT_DAY = DAY + dt.timedelta(days=1)
# Spark SQL predicates DuckDB answers the same: each must take the in-process path.
FAITHFUL = [
    "action = 'a1'",
    "user_id > 1000010",
    "action IN ('a0', 'a3') AND user_id > 1000005",
    "hour(utc_event_time) BETWEEN 3 AND 9",
    "action IS NULL OR user_id IS NULL",
    "action LIKE 'a%' AND NOT (user_id < 2000003)",
    "to_date(utc_event_time) = DATE '2026-11-20'",
    "user_id = 999",  # matches nothing
]
# Predicates the translation does not vouch for, or that are wrong: Spark's, which answers or says what is wrong.
TO_SPARK = ["user_id % 2 = 0", "reverse(action) = '1a'", "user_id IN (SELECT 1)", "nope(", "user_id"]


def object_rows(deployment: Deployment, prepared: PreparedUpdate) -> tuple[pa.Schema, Counter]:
    table = pq.read_table(deployment.lake.path(prepared.object_key), filesystem=deployment.lake.filesystem)
    return table.schema, Counter(zip(*(table.column(n).to_pylist() for n in table.column_names), strict=True))


def in_spark(deployment: Deployment, where: str, date: dt.date = DAY) -> PreparedUpdate:
    deployment.config.publish.in_process_rewrite_bytes = 0
    try:
        return prepare_delete(deployment, "web.access", date, where)
    finally:
        deployment.config.publish.in_process_rewrite_bytes = 32 * 1024 * 1024


def assert_same_as_spark(deployment: Deployment, where: str, date: dt.date = DAY) -> None:
    record = deployment.catalog.tables.get("web.access")
    base = deployment.catalog.versions.update_base(record.id, date)
    assert delete_in_process(deployment, record, base, where) is not None, f"{where}: in-process"
    ours, theirs = prepare_delete(deployment, "web.access", date, where), in_spark(deployment, where, date)
    try:
        assert (ours.rows_before, ours.rows_after) == (theirs.rows_before, theirs.rows_after), where
        assert (ours.object_key is None) == (theirs.object_key is None), where
        if ours.object_key is not None:
            assert object_rows(deployment, ours) == object_rows(deployment, theirs), where
    finally:
        ours.discard()
        theirs.discard()


def test_deletes_match_spark_on_a_day_of_merged_live_and_delayed_objects(deployment: Deployment) -> None:
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 40, s) for s in range(3)])
    merge_once(deployment)
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))
    publish_once(deployment, now=tokyo(NEXT_DAY, 2))  # switched: a manifest of the merged object
    add_small_objects(
        deployment,
        table,
        DAY,
        [
            rows_for(DAY, 10, 7)
            + [{"utc_event_time": tokyo(DAY, 5).replace(tzinfo=dt.UTC), "user_id": None, "action": None}]
        ],
    )  # delayed
    for where in FAITHFUL:
        assert_same_as_spark(deployment, where)
    record = deployment.catalog.tables.get("web.access")
    base = deployment.catalog.versions.update_base(record.id, DAY)
    for where in TO_SPARK:
        assert delete_in_process(deployment, record, base, where) is None, where
    # A name the table has no column for is said at once, as Spark says it (tests/test_sql_scope.py).
    with pytest.raises(SiltError, match="no column dt"):
        delete_in_process(deployment, record, base, "dt = DATE '2026-11-20'")


def test_deletes_match_spark_on_a_keyed_day_that_needs_a_merge_on_read(deployment: Deployment) -> None:
    from siltlake.write.upsert import upsert

    table = make_table(deployment, **KEYED)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, s) for s in range(2)])
    upsert(deployment, "web.access", upsert_rows([1, 2, 1000003], "changed"))
    for where in ("action = 'changed'", "user_id < 1000005", "action <> 'a1'"):
        assert_same_as_spark(deployment, where)


def test_a_small_delete_commits_one_version_and_keeps_the_conflict_rules(deployment: Deployment) -> None:
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 40, 0)])
    publish_once(deployment, now=tokyo(DAY, 12))

    # An append committed after the delete read the partition: the delete fails and leaves nothing behind.
    prepared = prepare_delete(deployment, "web.access", DAY, "action = 'a1'")
    assert prepared.object_key is not None
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 5, 1)])
    with pytest.raises(UpdateConflict):
        prepared.commit()
    assert not deployment.lake.exists(prepared.object_key)

    # A compaction committed meanwhile loses to it; the delete is one `update` version.
    prepared = prepare_delete(deployment, "web.access", DAY, "action = 'a1'", now=tokyo(DAY, 13))
    merge_once(deployment)
    report = prepared.commit()
    assert (report.rows_before, report.version.commit_op) == (45, "update")
    assert report.rows_after == sum(r["action"] != "a1" for r in rows_for(DAY, 40, 0) + rows_for(DAY, 5, 1))

    # Another update committed first: the later one fails.
    first = prepare_delete(deployment, "web.access", DAY, "user_id > 30", now=tokyo(DAY, 14))
    second = prepare_delete(deployment, "web.access", DAY, "action = 'a2'", now=tokyo(DAY, 14))
    first.commit()
    with pytest.raises(UpdateConflict):
        second.commit()


def test_overwrite_with_pyarrow_rows_runs_in_process_and_refuses_what_spark_refuses(deployment: Deployment) -> None:
    from siltlake.errors import SiltError
    from siltlake.lake import Lake

    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 20, 0)])
    replacement = rows_for(DAY, 5, 9)
    rows = pa.table(
        {
            "utc_event_time": pa.array([r["utc_event_time"] for r in replacement], pa.timestamp("us", "UTC")),
            "user_id": pa.array([r["user_id"] for r in replacement], pa.int32()),
        }
    )
    report = overwrite_partition(deployment, "web.access", DAY, rows, now=tokyo(DAY, 12))
    assert (report.rows_before, report.rows_after, report.version.commit_op) == (20, 5, "update")
    shown = Lake(deployment).table("web.access").to_arrow()
    assert Counter(
        zip(shown.column("user_id").to_pylist(), shown.column("action").to_pylist(), strict=True)
    ) == Counter((r["user_id"], None) for r in replacement), "action reads as null"

    with pytest.raises(SiltError, match="do not belong to dt=2026-11-20"):
        overwrite_partition(
            deployment,
            "web.access",
            DAY,
            pa.table({"utc_event_time": pa.array([tokyo(NEXT_DAY, 5)], pa.timestamp("us", "UTC"))}),
        )
    with pytest.raises(SiltError, match="not nullable"):
        overwrite_partition(
            deployment, "web.access", DAY, pa.table({"utc_event_time": pa.array([None], pa.timestamp("us", "UTC"))})
        )
    with pytest.raises(SiltError, match="cannot be read as its type"):
        overwrite_partition(
            deployment,
            "web.access",
            DAY,
            pa.table(
                {"utc_event_time": pa.array([tokyo(DAY, 5)], pa.timestamp("us", "UTC")), "user_id": pa.array(["x"])}
            ),
        )
    with pytest.raises(SiltError, match="columns not in the table: nope"):
        overwrite_partition(deployment, "web.access", DAY, rows.append_column("nope", pa.array([1] * 5)))
    assert Lake(deployment).table("web.access").version == 1, "nothing else was committed"
