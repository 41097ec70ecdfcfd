"""docs/api.md compares siltlake's table API with delta-rs and PyIceberg: every siltlake entry there runs here,
as a user would write it, and the table and this test name the same operations."""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.publish import publish_once

from .merge_helpers import add_small_objects, rows_for
from .test_merge import DAY, make_table
from .test_publish import tokyo
from .test_upsert import KEYED, upsert_rows

pytestmark = pytest.mark.spark

NEXT_DAY = DAY + dt.timedelta(days=1)
API_DOC = Path(__file__).parent.parent / "docs" / "api.md"

# Rows whose siltlake entry runs in a test file of its own: operation -> (the call the entry starts with, a pattern
# of the call there, that file).
RUN_ELSEWHERE = {
    "append": ("append(", r"table\.append\(", "test_table_writes.py"),
    "update": ("update(", r"\.update\(\{", "test_table_writes.py"),
    "restore": ("restore(", r"table\.restore\(", "test_restore.py"),
    "Arrow input": ("append(", r"table\.append\(frame\)", "test_append_arrow.py"),
    "overwrite": ("overwrite(", r"table\.overwrite\(frame, dates=", "test_table_overwrite.py"),
    "schema and properties": ("with alter() as change:", r"with table\.alter\(.*\) as change:", "test_table_alter.py"),
    "tags": ("tag(", r"table\.tag\(\"audit-2026\.11\", version=1", "test_table_tags.py"),
}


def comparison() -> dict[str, str]:
    """docs/api.md's comparison: operation -> the siltlake cell (escaped pipes read as pipes)."""
    rows = {}
    for line in API_DOC.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) == 4 and cells[0] not in ("operation", "---"):
            rows[cells[0]] = cells[3]
    return rows


def test_the_entries_run_elsewhere_are_run_there() -> None:
    rows = comparison()
    assert len(rows) == 23
    for operation, (entry, call, test_file) in RUN_ELSEWHERE.items():
        assert rows[operation].startswith(f"`{entry}"), (operation, rows[operation])
        assert re.search(call, (Path(__file__).parent / test_file).read_text(encoding="utf-8")), (operation, test_file)


def user_ids(table: pa.Table) -> Counter:
    return Counter(table.column("user_id").to_pylist())


def test_every_siltlake_entry_of_the_comparison_runs(deployment: Deployment) -> None:
    ran: set[str] = set()
    record = make_table(deployment)
    day = [r for s in (0, 1) for r in rows_for(DAY, 10, s)]
    add_small_objects(deployment, record, DAY, [rows_for(DAY, 10, 0), rows_for(DAY, 10, 1)])
    publish_once(deployment, now=tokyo(DAY, 12))  # table version 1
    add_small_objects(deployment, record, NEXT_DAY, [rows_for(NEXT_DAY, 10, 2)])
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))  # 2: closes DAY
    everything = Counter(r["user_id"] for r in day + rows_for(NEXT_DAY, 10, 2))

    with Lake.open(deployment.config) as opened:
        assert opened.table("web.access").version == 2
    ran.add("open a table")
    lake = Lake(deployment)
    table = lake.table("web.access")

    assert user_ids(table.to_arrow()) == everything
    assert user_ids(
        table.to_arrow(filter=pc.field("dt") == DAY, columns=["user_id"], dates=[DAY, NEXT_DAY])
    ) == Counter(r["user_id"] for r in day)
    ran.add("to_arrow")
    frame = table.to_pandas(filter=pc.field("action") == "a1", columns=["user_id"], dates=DAY)
    assert Counter(frame["user_id"]) == Counter(r["user_id"] for r in day if r["action"] == "a1")
    ran.add("to_pandas")
    scan = table.scan(filter="action = 'a1'", columns=["user_id"], dates=DAY)
    assert Counter(scan.to_arrow().column("user_id").to_pylist()) == Counter(frame["user_id"].tolist())
    assert scan.count() == sum(batch.num_rows for batch in scan.to_batches()) == len(frame)
    narrowed = scan.with_filter(pc.field("user_id") >= 0).select("user_id", "dt").with_limit(2)
    assert narrowed.to_arrow().column_names == ["user_id", "dt"] and narrowed.count() == min(2, len(frame))
    ran.add("scan")
    with duckdb.connect() as connection:
        assert table.to_duckdb(connection).aggregate("count(*)").fetchall() == [(30,)]
        assert connection.sql(f"SELECT count(*) FROM read_parquet({table.files()!r})").fetchall() == [(30,)]
    ran.add("to_duckdb")
    ran.add("data files")

    first = table.inspect.versions().to_pylist()[0]
    assert (
        user_ids(table.to_arrow(as_of_version=1))
        == user_ids(table.to_arrow(as_of=first["created_at"]))
        == Counter(r["user_id"] for r in day)
    )
    ran.add("time travel")
    assert [(r["date"], r["table_version"], r["op"]) for r in table.history()] == [
        ("2026-11-20", 1, "append"),
        ("2026-11-21", 2, "append"),
    ]
    ran.add("history")
    assert [
        table.inspect.history().num_rows,
        table.inspect.versions().num_rows,
        table.inspect.files().num_rows,
        table.inspect.partitions().num_rows,
        table.inspect.merge_jobs().num_rows,
    ] == [2, 2, 3, 2, 2]
    ran.add("metadata tables")
    files = table.data_files()
    assert sum(f.rows for f in files) == 30 and all(f.size and f.min_event_time <= f.max_event_time for f in files)
    ran.add("file statistics")
    assert [(p["dt"], p["state"], p["rows"]) for p in table.partitions().to_pylist()] == [
        (DAY, "closed", 20),
        (NEXT_DAY, "live", 10),
    ]
    ran.add("partition statistics")

    report = table.maintenance.compact(dates=DAY, now=tokyo(NEXT_DAY, 2))
    assert report.merge.finished == 1 and [v.commit_op for v in report.publish.merged_versions] == ["compaction"]
    assert [p["objects"] for p in table.partitions().to_pylist()] == [1, 1] and user_ids(table.to_arrow()) == everything
    ran.add("compact")

    table.delete("action = 'a1'", dates=DAY, now=tokyo(NEXT_DAY, 3))
    deleted = Counter(r["user_id"] for r in day if r["action"] == "a1")
    assert user_ids(table.to_arrow()) == everything - deleted
    ran.add("delete")
    changes = table.changes(table.version - 1)
    assert user_ids(changes) == deleted and set(changes.column("_change_type").to_pylist()) == {"delete"}
    ran.add("change feed")

    expired = table.maintenance.expire(dry_run=True, now=tokyo(NEXT_DAY, 3) + dt.timedelta(days=8))
    report = lake.reap(dry_run=True, now=tokyo(NEXT_DAY, 3) + dt.timedelta(days=8))
    assert report.dry_run and expired.dry_run and report.objects >= expired.objects > 0
    assert user_ids(table.to_arrow(as_of_version=1)) == Counter(r["user_id"] for r in day), "nothing deleted"
    ran.add("vacuum / reap")

    users = make_table(deployment, "users", **KEYED)
    add_small_objects(deployment, users, DAY, [rows_for(DAY, 10, 0)])
    publish_once(deployment, now=tokyo(NEXT_DAY, 4))
    lake.table("web.users").upsert(upsert_rows([0, 1], "renamed"), now=tokyo(NEXT_DAY, 5))
    shown = lake.table("web.users").to_arrow().to_pylist()
    assert len(shown) == 10 and {r["user_id"] for r in shown if r["action"] == "renamed"} == {0, 1}
    lake.table("web.users").upsert(
        query="SELECT utc_event_time, user_id, 'queried' AS action FROM web.users WHERE user_id = 2",
        now=tokyo(NEXT_DAY, 6),
    )
    shown = lake.table("web.users").to_arrow().to_pylist()
    assert len(shown) == 10 and {r["user_id"] for r in shown if r["action"] == "queried"} == {2}
    ran.add("upsert")

    assert ran == set(comparison()) - set(RUN_ELSEWHERE), "docs/api.md and this test name the same operations"
