"""Table.append takes anything Arrow: a pyarrow Table or batches, and whatever exports an Arrow stream
(`__arrow_c_stream__`): a pandas 2.2+ DataFrame, a Polars DataFrame, a DuckDB relation. Columns are matched to the
table's by name, a misnamed one refused with a did-you-mean and nothing appended."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import duckdb
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

from siltlake.deployment import Deployment
from siltlake.errors import SiltError
from siltlake.lake import Lake

from .test_merge import DAY

NOON = dt.datetime(2026, 11, 20, 3, 0, tzinfo=dt.UTC)  # noon in Tokyo on DAY


def times(count: int, start: int) -> list[dt.datetime]:
    return [NOON + dt.timedelta(seconds=start + n) for n in range(count)]


def test_pandas_polars_and_a_duckdb_relation_are_appended(plain_deployment: Deployment) -> None:
    table = Lake(plain_deployment).table("web.access")
    connection = duckdb.connect()  # its own: the module-level one is shared with other tests, which may leave a result
    frames = {
        # pandas: nanosecond times with a zone, int64 ids, object strings (columns in another order than the table's)
        "pandas": pd.DataFrame(
            {"action": ["p0", None, "p2"], "user_id": [1, 2, None], "utc_event_time": pd.to_datetime(times(3, 0))}
        ).astype({"user_id": "Int64"}),
        # Polars: naive microsecond times (read as UTC), Utf8 (a string view in its Arrow export), no action column
        "polars": pl.DataFrame(
            {"utc_event_time": [t.replace(tzinfo=None) for t in times(4, 10)], "user_id": [10, 11, 12, 13]}
        ),
        # DuckDB: a query's rows, int32 ids and TIMESTAMPTZ, streamed batch by batch
        "duckdb": connection.sql(
            "SELECT TIMESTAMPTZ '2026-11-20 03:01:00+00' + to_seconds(i) AS utc_event_time, "
            "i::INTEGER AS user_id, 'd' || i AS action FROM range(5) AS r(i)"
        ),
    }
    for name, frame in frames.items():
        assert table.append(frame).rows == {"pandas": 3, "polars": 4, "duckdb": 5}[name], name
    connection.close()
    shown = table.scan(dates=DAY).to_arrow().to_pylist()
    assert Counter((r["user_id"], r["action"]) for r in shown) == Counter(
        [(1, "p0"), (2, None), (None, "p2"), *((i, None) for i in range(10, 14)), *((i, f"d{i}") for i in range(5))]
    )
    assert sorted(r["utc_event_time"] for r in shown) == sorted(
        [*times(3, 0), *times(4, 10), *(NOON + dt.timedelta(seconds=60 + i) for i in range(5))]
    )
    assert {r["dt"] for r in shown} == {DAY}
    reader = pa.RecordBatchReader.from_batches(
        table.schema.remove(3), [pa.record_batch([times(2, 100), [7, 8], ["r", "r"]], schema=table.schema.remove(3))]
    )
    assert table.append(reader).rows == 2 and table.scan(filter="action = 'r'").count() == 2


def test_a_misnamed_or_mistyped_column_is_refused_before_anything_is_appended(plain_deployment: Deployment) -> None:
    table = Lake(plain_deployment).table("web.access")
    with pytest.raises(
        SiltError,
        match=r"^cannot append into web.access: columns not in the table: actoin \(did you "
        r"mean action\?\) \(its columns are utc_event_time, user_id, action\)",
    ):
        table.append(pl.DataFrame({"utc_event_time": times(1, 0), "actoin": ["x"]}))
    with pytest.raises(SiltError, match="column 'user_id' \\(string\\) cannot be read as int64"):
        table.append(pd.DataFrame({"utc_event_time": times(1, 0), "user_id": ["seven"]}))
    with pytest.raises(SiltError, match="give the rows as Arrow data .* not str"):
        table.append("utc_event_time,user_id\n")
    assert plain_deployment.catalog.partitions.small_objects(table.record.id) == []
