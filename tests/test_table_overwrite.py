"""Table.overwrite(rows, dates=): the rows of some partitions replaced by Arrow rows (pandas, Polars, pyarrow) as one
table version, in this process; refused before anything is written when a row or a date does not fit."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

from siltlake.deployment import Deployment
from siltlake.errors import NotFoundError, SiltError
from siltlake.lake import Lake
from siltlake.publish import publish_once

from .merge_helpers import add_small_objects, rows_for
from .test_merge import DAY
from .test_publish import tokyo

NEXT_DAY = DAY + dt.timedelta(days=1)
NOON = dt.datetime(2026, 11, 20, 3, 0, tzinfo=dt.UTC)  # noon in Tokyo on DAY


def shown(table, **options) -> Counter:
    rows = table.to_arrow(columns=["dt", "user_id", "action"], **options).to_pylist()
    return Counter((r["dt"], r["user_id"], r["action"]) for r in rows)


def two_days(deployment: Deployment):
    record = deployment.catalog.tables.get("web.access")
    add_small_objects(deployment, record, DAY, [rows_for(DAY, 10, 0)])
    add_small_objects(deployment, record, NEXT_DAY, [rows_for(NEXT_DAY, 10, 1)])
    publish_once(deployment, now=tokyo(NEXT_DAY, 12))
    return Lake(deployment).table("web.access")


def test_overwrite_replaces_the_partitions_given_as_one_version(plain_deployment: Deployment) -> None:
    table = two_days(plain_deployment)
    before = shown(table)
    frame = pd.DataFrame(
        {
            "utc_event_time": pd.to_datetime([NOON, NOON + dt.timedelta(minutes=1)]),
            "user_id": [7, 8],
            "action": ["new", "new"],
        }
    )
    report = table.overwrite(frame, dates=[DAY, NEXT_DAY], now=tokyo(NEXT_DAY, 13))
    assert table.version == 2 and report.table_version == 2
    assert sorted((p.partition_date, p.rows_before, p.rows_after) for p in report) == [(DAY, 10, 2), (NEXT_DAY, 10, 0)]
    assert shown(table) == Counter({(DAY, 7, "new"): 1, (DAY, 8, "new"): 1}), "NEXT_DAY, given no row, is emptied"
    assert shown(table, as_of_version=1) == before, "the version before still reads what it had"
    assert [v["operations"] for v in table.inspect.versions().to_pylist()] == [["append"], ["update"]]

    # Without dates: the dates the rows fall on (a Polars frame, no action column: null).
    polars = pl.DataFrame({"utc_event_time": [NOON.replace(tzinfo=None) + dt.timedelta(days=1)], "user_id": [9]})
    table.overwrite(polars, now=tokyo(NEXT_DAY, 14))
    assert shown(table) == Counter({(DAY, 7, "new"): 1, (DAY, 8, "new"): 1, (NEXT_DAY, 9, None): 1})
    # Once per request id.
    batch = pa.table({"utc_event_time": pa.array([NOON], pa.timestamp("us", tz="UTC")), "user_id": [1]})
    first = table.overwrite(batch, dates=DAY, request_id="r-1", now=tokyo(NEXT_DAY, 15))
    again = table.overwrite(batch, dates=DAY, request_id="r-1", now=tokyo(NEXT_DAY, 16))
    assert first.table_version == 4 and again.applied_before is not None and table.version == 4


def test_rows_or_dates_that_do_not_fit_are_refused_before_anything_is_written(plain_deployment: Deployment) -> None:
    table = two_days(plain_deployment)
    before = shown(table)
    prefix = table.record.layout(plain_deployment.instance_key).prefix
    objects = {info.key for info in plain_deployment.lake.list(prefix)}
    on_next_day = pa.table(
        {"utc_event_time": pa.array([NOON + dt.timedelta(days=1)], pa.timestamp("us", tz="UTC")), "user_id": [1]}
    )
    with pytest.raises(SiltError, match=r"1 dates of the rows are not among the dates overwritten: 2026-11-21"):
        table.overwrite(on_next_day, dates=DAY)
    with pytest.raises(NotFoundError, match=r"no partition 2026-11-25.*append adds new ones"):
        table.overwrite(on_next_day, dates=[NEXT_DAY, "2026-11-25"])
    with pytest.raises(SiltError, match=r"columns not in the table: actoin \(did you mean action\?\)"):
        table.overwrite(pd.DataFrame({"utc_event_time": [NOON], "actoin": ["x"]}), dates=DAY)
    with pytest.raises(SiltError, match="no rows and no dates"):
        table.overwrite(pa.table({"utc_event_time": pa.array([], pa.timestamp("us", tz="UTC"))}))
    assert table.version == 1 and shown(table) == before
    assert {info.key for info in plain_deployment.lake.list(prefix)} == objects, "nothing was written"
