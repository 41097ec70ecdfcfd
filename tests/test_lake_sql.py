"""Lake.sql: the query `silt sql` runs, from Python; the command prints what Lake.sql answers."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from siltlake.deployment import Deployment
from siltlake.errors import SiltError

from .merge_helpers import silt_in_process
from .test_merge import DAY
from .test_publish import tokyo
from .test_table_tags import three_versions

BY_USER = "SELECT user_id, count(*) AS n FROM web.access{pin} GROUP BY user_id ORDER BY user_id"


def test_lake_sql_answers_as_silt_sql_does(plain_deployment: Deployment, monkeypatch) -> None:
    lake = three_versions(plain_deployment)
    silt = silt_in_process(plain_deployment, monkeypatch)
    query = BY_USER.format(pin=" VERSION AS OF 1")
    result = lake.sql(query)
    assert result.engine == "duckdb" and not result.truncated and sum(n for _user, n in result.rows) == 10
    assert json.loads(silt("sql", "--format", "json", query)) == result.to_pylist()
    table = result.to_arrow()
    assert table.column_names == ["user_id", "n"] and table.to_pylist() == result.to_pylist()
    assert [batch.num_rows for batch in result.to_batches()] == [table.num_rows]


def test_as_of_pins_every_reference_without_its_own(plain_deployment: Deployment) -> None:
    lake = three_versions(plain_deployment)
    first = lake.sql(BY_USER.format(pin=" VERSION AS OF 1")).rows
    assert lake.sql(BY_USER.format(pin=""), as_of=tokyo(DAY, 12) + dt.timedelta(minutes=30)).rows == first
    newest = lake.sql(BY_USER.format(pin=" VERSION AS OF 3"), as_of=tokyo(DAY, 12) + dt.timedelta(minutes=30))
    assert sum(n for _user, n in newest.rows) == 30  # the query's own pin wins


def test_limit_says_when_it_cut_rows(plain_deployment: Deployment, monkeypatch) -> None:
    lake = three_versions(plain_deployment)
    query = "SELECT user_id FROM web.access ORDER BY user_id"
    cut = lake.sql(query, limit=2)
    assert cut.num_rows == 2 and cut.truncated
    assert lake.sql(query).num_rows == 30 and not lake.sql(query, limit=30).truncated
    output = silt_in_process(plain_deployment, monkeypatch)("sql", "--format", "csv", "--limit", "2", query)
    assert "showing the first 2 rows: the result has more" in output


def test_errors_are_silt_sqls(plain_deployment: Deployment, monkeypatch) -> None:
    lake = three_versions(plain_deployment)
    silt = silt_in_process(plain_deployment, monkeypatch)
    for query in ("SELECT * FROM web.acess", "SELECT FROM WHERE web.access"):
        with pytest.raises(SiltError) as raised:
            lake.sql(query)
        assert str(raised.value).splitlines()[0] in silt("sql", query, code=2)
    with pytest.raises(SiltError, match="did you mean web.access"):
        lake.sql("SELECT * FROM web.acess")
    with pytest.raises(SiltError, match="engine 'presto'"):
        lake.sql("SELECT 1", engine="presto")
