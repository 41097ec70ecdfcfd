"""Property: whatever the history of stream commits, delayed objects, merges, publish runs (closes and switches),
deletes and upserts, applying the change feed from version 0 reproduces every table version exactly."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from zoneinfo import ZoneInfo

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.merge import merge_once
from siltlake.publish import publish_once
from siltlake.write.update import delete_rows
from siltlake.write.upsert import upsert

from .conftest import make_config
from .merge_helpers import add_small_objects
from .test_merge import make_table

pytestmark = pytest.mark.spark
HOUR = dt.timedelta(hours=1)
KEYED_COLUMNS = [
    {"name": "utc_event_time", "type": "timestamp", "nullable": False, "source": "time"},
    {"name": "user_id", "type": "bigint", "nullable": False},
    {"name": "action", "type": "string"},
]

users = st.lists(st.integers(0, 6), min_size=1, max_size=4, unique=True)
append = st.tuples(st.just("append"), st.integers(0, 2), users, st.sampled_from("abc"))
step = st.one_of(
    append,
    append,
    append,
    st.tuples(st.just("publish"), st.sampled_from([1, 7, 26])),
    st.just(("merge",)),
    st.tuples(st.just("delete"), st.integers(0, 2), st.integers(2, 3)),
    st.tuples(st.just("upsert"), st.integers(0, 2), users, st.sampled_from("xy"), st.booleans()),
)


def rows(date: dt.date, zone: ZoneInfo, user_ids: list[int], action: str) -> list[dict]:
    noon = dt.datetime.combine(date, dt.time(12), tzinfo=zone).astimezone(dt.UTC)
    return [
        {"utc_event_time": noon + dt.timedelta(seconds=i), "user_id": u, "action": action}
        for i, u in enumerate(user_ids)
    ]


def as_tuples(table: pa.Table) -> list[tuple]:
    names = ["utc_event_time", "user_id", "action", "dt"]
    return list(zip(*(table.column(n).to_pylist() for n in names), strict=True))


def apply_plain(state: Counter, feed: pa.Table) -> None:
    for row, change in zip(as_tuples(feed), feed.column("_change_type").to_pylist(), strict=True):
        assert change in ("insert", "delete"), change
        if change == "insert":
            state[row] += 1
        else:
            assert state[row] > 0, f"deleted {row}, which the table did not hold"
            state[row] -= 1
            if not state[row]:
                del state[row]


def apply_keyed(state: dict, feed: pa.Table) -> None:
    for row, change in zip(as_tuples(feed), feed.column("_change_type").to_pylist(), strict=True):
        key = (row[3], row[1])
        if change in ("insert", "update_postimage"):
            assert (key in state) == (change == "update_postimage"), (change, row)
            state[key] = row
        else:
            assert state.get(key) == row, (change, row, state.get(key))
            if change == "delete":
                del state[key]


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(keyed=st.booleans(), steps=st.lists(step, min_size=3, max_size=14))
def test_applying_the_changes_from_version_zero_reproduces_every_version(
    spark, tmp_path_factory, keyed: bool, steps: list[tuple]
) -> None:
    root = tmp_path_factory.mktemp("changes-property")
    deployment = Deployment(make_config(root, f"sqlite:///{root / 'catalog.db'}"))
    deployment.init()
    deployment.use_spark(spark)
    try:
        settings_ = {"primary_key": ["user_id"], "columns": KEYED_COLUMNS} if keyed else {}
        record = make_table(deployment, merged_object_size=6_000, merge_batch_size=3, **settings_)
        zone = ZoneInfo(record.definition.timezone)
        clock = [utcnow()]
        today = clock[0].replace(tzinfo=dt.UTC).astimezone(zone).date()
        dates = [today - dt.timedelta(days=1), today, today + dt.timedelta(days=1)]
        deleted_something = False
        # The tail closes, merges and switches every past day.
        for step_ in [*steps, ("merge",), ("publish", 26), ("merge",), ("publish", 1)]:
            kind = step_[0]
            if kind == "append":
                date = dates[step_[1]]
                add_small_objects(deployment, record, date, [rows(date, zone, step_[2], step_[3])])
            elif kind == "merge":
                assert merge_once(deployment).failed == 0
            elif kind == "publish":
                clock[0] += step_[1] * HOUR
                publish_once(deployment, now=clock[0])
            elif kind == "delete" and not deleted_something:
                date = dates[step_[1]]
                if date in {p.partition_date for p in deployment.catalog.partitions.list(record.id)}:
                    deleted_something = True  # one per history: each is a Spark job
                    clock[0] += HOUR
                    delete_rows(deployment, "web.access", date, f"user_id % {step_[2]} = 0", now=clock[0])
            elif kind == "upsert" and keyed:
                clock[0] += HOUR
                date = dates[step_[1]]
                batch = pa.Table.from_pylist(
                    rows(date, zone, step_[2], step_[3]), schema=record.definition.arrow_schema()
                )
                batch = batch.append_column("gone", pa.array([step_[4] and u % 2 == 0 for u in step_[2]]))
                upsert(deployment, "web.access", batch, "gone", now=clock[0])

        table = Lake(deployment).table("web.access")
        newest = table.version
        feed = table.changes(0)
        assert newest or not feed.num_rows
        assert feed.column_names == [*table.schema.names, "_change_type", "_commit_version", "_commit_timestamp"]
        versions = feed.column("_commit_version").to_pylist()
        assert versions == sorted(versions)
        state: Counter | dict = {} if keyed else Counter()
        for version in range(1, newest + 1):
            at = feed.filter(pa.compute.equal(feed.column("_commit_version"), version))
            assert at.equals(table.changes(version - 1, version)), "a range's feed is its versions' feeds"
            (apply_keyed if keyed else apply_plain)(state, at)
            shown = as_tuples(table.to_arrow(as_of_version=version))
            if keyed:
                assert state == {(r[3], r[1]): r for r in shown}, f"version {version}"
            else:
                assert state == Counter(shown), f"version {version}"
    finally:
        deployment.close()
