"""Restore: a new table version that shows what an older one showed, read the same by every reader (Spark's
table read, silt sql, siltlake.read.sql, to_arrow, DuckDB over files() and to_duckdb, PyIceberg)."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from siltlake.catalog import VersionOutOfRange
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.publish import publish_once
from siltlake.reap import reap_once
from siltlake.write.restore import VersionReaped

from .merge_helpers import rows_for, silt_in_process
from .test_merge import DAY, make_table
from .test_publish import tokyo
from .test_table_api import COLUMNS, arrow_rows, assert_every_engine, stream
from .test_table_writes import arrow_rows as rows_table

pytestmark = pytest.mark.spark
NEXT_DAY = DAY + dt.timedelta(days=1)


@pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)
def test_restore_then_every_reader_reads_what_the_old_version_showed(
    deployment: Deployment, spark, monkeypatch
) -> None:
    deployment.config.publish.targets = ["iceberg"]
    make_table(deployment)
    silt = silt_in_process(deployment, monkeypatch)
    lake = Lake(deployment)
    table = lake.table("web.access")
    day = stream(deployment, DAY, 0)
    publish_once(deployment, now=tokyo(DAY, 12))
    day += stream(deployment, DAY, 1)
    next_day = stream(deployment, NEXT_DAY, 2)
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))
    at_two = day + next_day
    assert table.version == 2
    table.delete("action = 'a1'", dates=DAY, now=tokyo(NEXT_DAY, 2))
    table.append(rows_table(rows_for(NEXT_DAY, 5, 9)), now=tokyo(NEXT_DAY, 3))
    publish_once(deployment, now=tokyo(NEXT_DAY, 3))
    assert table.version == 4 and arrow_rows(table.to_arrow(columns=list(COLUMNS))) != at_two

    assert table.restore_target(version=2) == 2 and table.restore_target(as_of=tokyo(NEXT_DAY, 2)) == 3
    plan = table.restore(version=2, dry_run=True)
    assert [(p.partition_date, p.rows_after) for p in plan] == [(DAY, 40), (NEXT_DAY, 20)] and table.version == 4
    report = table.restore(version=2, request_id="undo-delete", now=tokyo(NEXT_DAY, 4))
    assert report.table_version == 5 and [p.version.commit_op for p in report] == ["update", "update"]
    assert arrow_rows(table.to_arrow(columns=list(COLUMNS), as_of_version=5)) == at_two
    assert arrow_rows(table.to_arrow(columns=list(COLUMNS), as_of_version=4)) != at_two, "older versions stay"
    publish_once(deployment, now=tokyo(NEXT_DAY, 5))  # the Iceberg target gets the restored state
    assert_every_engine(deployment, spark, silt, lake, at_two)

    retried = table.restore(version=2, request_id="undo-delete")
    assert retried.applied_before is not None and retried.applied_before.table_version == 5
    newest = table.version
    assert len(table.restore(version=newest)) == 0 and table.version == newest, "nothing differs: no version"

    # The CLI: by time, dry run first; without a terminal a restore needs --yes.
    as_of = "2026-11-20T17:30:00Z"  # Tokyo 02:30 on NEXT_DAY: after the delete (version 3), before the append
    planned = json.loads(silt("restore", "web.access", "--as-of", as_of, "--dry-run", "--json"))
    assert planned["restored_version"] == 3 and planned["dry_run"] and table.version == newest
    # Both days differ from what they showed then: the delete's day by its rows, the next by its version.
    assert [p["dt"] for p in planned["partitions"]] == ["2026-11-20", "2026-11-21"]
    assert "--yes" in silt("restore", "web.access", "--as-of", as_of, code=2)
    done = json.loads(silt("restore", "web.access", "--as-of", as_of, "--yes", "--json", "--request-id", "r3"))
    assert done["table_version"] == newest + 1
    assert arrow_rows(table.to_arrow(columns=list(COLUMNS))) == arrow_rows(
        table.to_arrow(columns=list(COLUMNS), as_of_version=3)
    )
    assert "was applied already (restore" in silt("restore", "web.access", "--version", "3", "--request-id", "r3")

    with pytest.raises(VersionOutOfRange, match="has no version 99: its versions are 1 to"):
        table.restore(version=99)
    # A week later reap has removed the superseded versions: restoring one is refused, naming the retention.
    reap_once(deployment, now=utcnow() + dt.timedelta(days=8))  # the CLI's restores were stamped now
    with pytest.raises(VersionReaped, match=r"to version 1: reap has removed it .*reap\.retention = 7d"):
        table.restore(version=1)
    assert "reap.retention = 7d" in silt("restore", "web.access", "--version", "1", "--yes", code=2)
