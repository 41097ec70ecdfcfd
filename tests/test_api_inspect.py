"""The table API's inspection and maintenance: partitions() and its states, data_files() with their statistics,
Table.inspect's metadata tables, to_pandas, Table.compact and Lake.reap; each checked against the Parquet files
and the rows the readers return."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from siltlake.catalog import PARTITION_STATES
from siltlake.deployment import Deployment
from siltlake.errors import NoSuchPartition
from siltlake.lake import Lake
from siltlake.publish import publish_once

from .merge_helpers import add_small_objects, point_cli_at, rows_for, silt_in_process
from .test_merge import DAY, make_table
from .test_publish import tokyo
from .test_upsert import KEYED

pytestmark = pytest.mark.spark

EARLIER, NEXT_DAY, LATER = (DAY + dt.timedelta(days=n) for n in (-1, 1, 2))


def four_states(deployment: Deployment) -> Lake:
    """web.access with a partition in each state: EARLIER closed, DAY compacted and switched, NEXT_DAY live,
    LATER new (streamed, never published). Table versions: 1 (EARLIER, DAY), 2 (NEXT_DAY), 3 (DAY's compaction)."""
    table = make_table(deployment)
    add_small_objects(deployment, table, EARLIER, [rows_for(EARLIER, 10, 0)])
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, 1), rows_for(DAY, 10, 2)])
    publish_once(deployment, now=tokyo(DAY, 12))  # closes EARLIER
    add_small_objects(deployment, table, NEXT_DAY, [rows_for(NEXT_DAY, 10, 3)])
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))  # closes DAY
    lake = Lake(deployment)
    report = lake.table("web.access").compact(dates=DAY, now=tokyo(NEXT_DAY, 2))
    assert (report.merge.finished, report.merge.failed) == (1, 0), "DAY's job only: the others wait"
    assert [v.commit_op for v in report.publish.merged_versions] == ["compaction"]
    add_small_objects(deployment, table, LATER, [rows_for(LATER, 10, 4)])
    return lake


def read_file(deployment: Deployment, uri: str) -> pa.Table:
    return pq.read_table(
        deployment.lake.path(uri.removeprefix(deployment.lake.root + "/")), filesystem=deployment.lake.filesystem
    )


def naive(value: dt.datetime) -> dt.datetime:
    return value.astimezone(dt.UTC).replace(tzinfo=None)


def test_partitions_files_and_their_statistics_match_the_files_and_the_rows_read(
    deployment: Deployment, monkeypatch
) -> None:
    lake = four_states(deployment)
    table = lake.table("web.access")
    partitions = table.partitions()
    assert partitions.column("dt").to_pylist() == [EARLIER, DAY, NEXT_DAY, LATER]
    assert partitions.column("state").to_pylist() == ["closed", "switched", "live", "new"]
    assert partitions.column("version").to_pylist() == [1, 2, 1, None]
    assert partitions.column("table_version").to_pylist() == [1, 3, 2, None]
    # One name for each state: `silt status` counts them, `silt table show` lists them, as partitions() does.
    silt = silt_in_process(deployment, monkeypatch)
    (status,) = json.loads(silt("status", "--format", "json"))["tables"]
    assert status["partitions"] == dict.fromkeys(PARTITION_STATES, 1)
    shown = json.loads(silt("table", "show", "web.access", "--format", "json"))["partitions"]
    assert [(row["date"], row["state"]) for row in shown] == [
        (r["dt"].isoformat(), r["state"]) for r in partitions.to_pylist()
    ]

    rows = table.to_arrow()
    files = table.data_files()
    assert [f.uri for f in files] == table.files()
    for entry in partitions.to_pylist():
        day = rows.filter(pc.field("dt") == entry["dt"])
        times = day.column("utc_event_time")
        of_day = [f for f in files if f.partition_date == entry["dt"]]
        assert entry["rows"] == day.num_rows == sum(f.rows for f in of_day) == 10 * (2 if entry["dt"] == DAY else 1)
        assert entry["objects"] == len(of_day) and entry["bytes"] == sum(f.size for f in of_day)
        assert entry["min_event_time"] == pc.min(times).as_py() and entry["max_event_time"] == pc.max(times).as_py()
    assert sum(1 for f in files if f.partition_date == DAY) == 1, "DAY's two small objects merged into one"

    # Each file's statistics (the catalog's for small objects, the footer's for the merged one) are its own.
    for f in files:
        held = read_file(deployment, f.uri)
        assert (
            f.rows == held.num_rows
            and f.size == deployment.lake.info(f.uri.removeprefix(deployment.lake.root + "/")).size
        )
        assert (f.min_event_time, f.max_event_time) == (
            naive(pc.min(held.column("utc_event_time")).as_py()),
            naive(pc.max(held.column("utc_event_time")).as_py()),
        )
    listed = table.inspect.files()
    assert listed.column("file_path").to_pylist() == table.files()
    assert listed.column("kind").to_pylist() == ["live", "merged", "live", "live"]
    assert listed.column("record_count").to_pylist() == [f.rows for f in files]
    assert listed.column("file_size_in_bytes").to_pylist() == [f.size for f in files]

    # A table version: its own partitions and files, stats and all.
    first = table.partitions(as_of_version=1)
    assert [(r["dt"], r["version"], r["objects"], r["rows"]) for r in first.to_pylist()] == [
        (EARLIER, 1, 1, 10),
        (DAY, 1, 2, 20),
    ]
    assert table.inspect.partitions(as_of_version=1, dates="2026-11-20").column("rows").to_pylist() == [20]
    assert [f.rows for f in table.data_files(as_of_version=1, dates=[DAY])] == [10, 10]


def test_metadata_tables_history_versions_and_merge_jobs(deployment: Deployment) -> None:
    lake = four_states(deployment)
    table = lake.table("web.access")
    history = table.inspect.history()
    assert [(r["dt"], r["version"], r["table_version"], r["op"], r["rows"]) for r in history.to_pylist()] == [
        (
            row["date"] and dt.date.fromisoformat(row["date"]),
            row["version"],
            row["table_version"],
            row["op"],
            row["rows"],
        )
        for row in table.history()
    ]
    assert history.num_rows == 4

    table.set_properties(ttl_days=30)  # a definition change: a table version of its own
    versions = table.inspect.versions().to_pylist()
    assert [(v["table_version"], v["operations"], v["dates"], v["rows"], v["readable"]) for v in versions] == [
        (1, ["append"], [EARLIER, DAY], 30, True),
        (2, ["append"], [NEXT_DAY], 40, True),
        (3, ["compaction"], [DAY], 40, True),
        (4, ["set"], [], 40, True),
    ]
    assert versions[-1]["bytes"] == sum(r["bytes"] for r in table.partitions(as_of_version=4).to_pylist())
    assert table.inspect.history().num_rows == 5

    jobs = table.inspect.merge_jobs()
    assert sorted(zip(jobs.column("dt").to_pylist(), jobs.column("state").to_pylist(), strict=True)) == [
        (EARLIER, "due"),
        (NEXT_DAY, "due"),
        (LATER, "due"),
    ], "DAY's job ran; the others wait"
    assert table.inspect.merge_jobs(now=tokyo(DAY, 0)).column("state").unique().to_pylist() == ["scheduled"]


def test_to_pandas_compact_and_reap(deployment: Deployment) -> None:
    lake = four_states(deployment)
    table = lake.table("web.access")
    frame = table.to_pandas()
    assert len(frame) == table.to_arrow().num_rows == 50 and list(frame.columns) == table.schema.names
    day = table.to_pandas(columns=["user_id", "dt"], dates=DAY, filter=pc.field("action") == "a1")
    assert list(day.columns) == ["user_id", "dt"]
    assert sorted(day["user_id"]) == sorted(
        r["user_id"] for s in (1, 2) for r in rows_for(DAY, 10, s) if r["action"] == "a1"
    )
    assert table.to_pandas(as_of_version=1)["dt"].nunique() == 2

    with pytest.raises(NoSuchPartition, match="web.access has no partition 2030-01-01"):
        table.compact(dates=["2030-01-01", DAY])
    # EARLIER (closed) shows its merged object once compacted; NEXT_DAY (open at this clock) merges and stays
    # live; the publish run publishes LATER's live objects too, as any publish run would.
    before = Counter(table.to_arrow().column("user_id").to_pylist())
    report = table.compact(now=tokyo(NEXT_DAY, 3))
    assert report.merge.finished == 3 and report.publish.switched
    assert table.partitions().column("state").to_pylist() == ["switched", "switched", "live", "live"]
    assert Counter(table.to_arrow().column("user_id").to_pylist()) == before
    assert table.compact(publish=False, now=tokyo(NEXT_DAY, 3)).publish is None

    # Reap, a dry run first: it names what it would delete and deletes nothing.
    later = tokyo(NEXT_DAY, 3) + dt.timedelta(days=8)
    dry = lake.reap(dry_run=True, now=later)
    assert dry.dry_run and dry.reasons["covered"].objects == 3, "the small objects of EARLIER and DAY"
    kept = [f.uri for f in table.data_files(as_of_version=1)]
    assert all(deployment.lake.exists(uri.removeprefix(deployment.lake.root + "/")) for uri in kept)
    done = lake.reap(now=later)
    assert not done.dry_run and done.reasons["covered"].objects == 3 and not done.failed
    assert not any(deployment.lake.exists(uri.removeprefix(deployment.lake.root + "/")) for uri in kept)
    assert Counter(table.to_arrow().column("user_id").to_pylist()) == before


def test_the_tables_doc_maintenance_example_runs(deployment: Deployment, monkeypatch, capsys) -> None:
    tables = (Path(__file__).parent.parent / "docs" / "tables.md").read_text(encoding="utf-8")
    section = tables.split("From Python, the same work on one table or the lake", 1)[1]
    example = section.split("```python\n", 1)[1].split("```", 1)[0]
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [rows_for(DAY, 10, 0), rows_for(DAY, 10, 1)])
    publish_once(deployment, now=tokyo(DAY, 12))
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))  # closes DAY: its compaction shows
    point_cli_at(deployment, monkeypatch)  # Lake.open() finds the deployment as `silt` would
    exec(compile(example, "docs/tables.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "\n1 1\n" in printed and "switched" in printed, printed
    assert Lake(deployment).table("web.access").partitions().column("objects").to_pylist() == [1]


def test_a_keyed_tables_merged_object_has_its_own_statistics_from_its_footer(deployment: Deployment) -> None:
    """A keyed merge keeps one row per key: the merged object's event times are not its small objects'."""
    table = make_table(deployment, **KEYED)
    first = rows_for(DAY, 10, 0)
    earliest = min(first, key=lambda r: r["utc_event_time"])
    middle = sorted(r["utc_event_time"] for r in first)[5]
    add_small_objects(deployment, table, DAY, [first, [{**earliest, "utc_event_time": middle, "action": "again"}]])
    publish_once(deployment, now=tokyo(NEXT_DAY, 1))  # closes DAY
    lake = Lake(deployment)
    report = lake.table("web.access").compact(now=tokyo(NEXT_DAY, 2))
    assert report.merge.finished == 1 and report.publish.switched
    (merged,) = lake.table("web.access").data_files()
    held = read_file(deployment, merged.uri)
    assert merged.rows == held.num_rows == 10
    assert (
        merged.min_event_time
        == naive(pc.min(held.column("utc_event_time")).as_py())
        > naive(earliest["utc_event_time"])
    ), "the replaced row's time is not the object's"
