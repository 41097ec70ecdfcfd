"""Bulk loads on real Spark and real catalogs: resume after a failed task, one commit, cleanup, sql filter,
error routing."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
import yaml

from siltlake.deployment import Deployment
from siltlake.errors import ConfigError
from siltlake.load import LoadFailed, cleanup, load, parse_load_config
from siltlake.load.runner import LoadProgress
from siltlake.read import sql

pytestmark = pytest.mark.spark
sqlite_only = pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)

PARSER = {
    "type": "csv",
    "columns": [
        {"name": "id", "type": "long"},
        {"name": "time", "type": "timestamp", "format": "%Y-%m-%d %H:%M:%S", "zone": "Asia/Tokyo"},
        {"name": "name", "type": "string"},
    ],
}


def csv_file(path: Path, first_id: int, rows: int, bad: int = 0, gz: bool = False) -> list[tuple]:
    """Write rows (plus `bad` rows with an unparsable time); return the good rows as (id, local time, name)."""
    lines, good = ["id,time,name"], []
    for offset in range(rows):
        ident = first_id + offset
        # 23:30 and 00:30 Tokyo: each file's rows fall on two partition dates.
        local = f"2026-11-{20 + offset % 2} {'23:30:00' if offset % 2 == 0 else '00:30:00'}"
        lines.append(f'{ident},{local},"n {ident}"')
        good.append((ident, local, f"n {ident}"))
    lines += [f"{first_id + rows + k},not a time,x" for k in range(bad)]
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return good


def config(inputs: Path, table: str = "web.people", **extra: object) -> dict:
    return {
        "in": {"path": str(inputs / "*.csv*")},
        "parser": PARSER,
        "filters": {"time": {"type": "rename", "columns": {"time": "event_time"}}},
        "out": {"table": table, "create": True, "time_column": "event_time", "timezone": "Asia/Tokyo"},
        **extra,
    }


def ids(deployment: Deployment, table: str = "web.people") -> list[int]:
    return [row[0] for row in sql(deployment.spark(), f"SELECT id FROM {table} ORDER BY id", deployment).collect()]


def tmp_keys(deployment: Deployment) -> list[str]:
    return [info.key for info in deployment.lake.list(f"{deployment.instance_key}/_tmp")]


def inputs_with_a_broken_file(tmp_path: Path) -> tuple[Path, list[tuple], bytes]:
    """Three CSV inputs (90 rows), the third a truncated gzip whose task fails: (directory, every row the
    inputs hold once fixed, the third file's good bytes)."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    expected = csv_file(inputs / "a.csv", 0, 40) + csv_file(inputs / "b.csv.gz", 100, 30, gz=True)
    expected += csv_file(inputs / "c.csv.gz", 200, 20, gz=True)
    good_bytes = (inputs / "c.csv.gz").read_bytes()
    (inputs / "c.csv.gz").write_bytes(good_bytes[: len(good_bytes) // 2])  # truncated gzip: the task fails
    return inputs, expected, good_bytes


def test_resume_runs_only_the_failed_task_then_commits_everything_once(deployment: Deployment, tmp_path: Path) -> None:
    inputs, expected, good_bytes = inputs_with_a_broken_file(tmp_path)
    load_config = parse_load_config(config(inputs))
    state = tmp_path / "resume.yml"

    with pytest.raises(LoadFailed, match=r"1 task\(s\) failed, e.g. file://.*c.csv.gz.*only the failed tasks run"):
        load(deployment, load_config, state_path=str(state))
    saved = yaml.safe_load(state.read_text())
    reports = saved["jobs"]["main"]["reports"]
    assert [r is None for r in reports] == [False, False, True]
    assert [r["records_in"] for r in reports[:2]] == [40, 30]
    assert ids(deployment) == []  # nothing is visible before every task succeeded
    assert tmp_keys(deployment)  # the succeeded tasks' output waits under the run's temporary prefix

    (inputs / "c.csv.gz").write_bytes(good_bytes)  # fixed

    class Recorded(LoadProgress):
        def __init__(self) -> None:
            self.seen: list[tuple[int, int]] = []

        def advance(self, tasks: int, input_bytes: int, records: int) -> None:
            self.seen.append((tasks, records))

    recorded = Recorded()
    report = load(deployment, load_config, state_path=str(state), progress=recorded)
    assert sum(tasks for tasks, _ in recorded.seen) == 1 and recorded.seen[-1][1] == 20, "progress counts records"
    (stats,) = report.jobs
    assert report.committed and stats.ran == 1 and stats.tasks == 3
    assert (stats.records_in, stats.loaded, stats.bad) == (90, 90, 0)
    assert ids(deployment) == sorted(row[0] for row in expected)
    rows = sql(deployment.spark(), "SELECT id, event_time, name, dt FROM web.people WHERE id = 1", deployment).collect()
    assert str(rows[0].event_time) == "2026-11-20 15:30:00" and str(rows[0].dt) == "2026-11-21"
    assert tmp_keys(deployment) == []
    table = deployment.catalog.tables.get("web.people")
    objects = deployment.catalog.partitions.small_objects(table.id)
    assert len(objects) == 6 and sum(o.row_count for o in objects) == 90  # one per (task, date)

    again = load(deployment, load_config, state_path=str(state))  # a finished state: nothing to do
    assert again.already_committed and len(ids(deployment)) == 90

    changed = parse_load_config(config(inputs, error={"type": "abort"}))
    with pytest.raises(ConfigError, match="written for a different config"):
        load(deployment, changed, state_path=str(state))


def two_file_load(tmp_path: Path):  # (LoadConfig, resume state path)
    """A load of two CSV files (ids 0-19) and where its resume state goes."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    csv_file(inputs / "a.csv", 0, 10)
    csv_file(inputs / "b.csv", 10, 10)
    return parse_load_config(config(inputs)), tmp_path / "resume.yml"


def test_no_commit_then_commit_and_committing_the_same_state_twice_adds_nothing(
    deployment: Deployment, tmp_path: Path
) -> None:
    load_config, state = two_file_load(tmp_path)
    kept = load(deployment, load_config, state_path=str(state), commit=False)
    assert not kept.committed and kept.jobs[0].ran == 2 and ids(deployment) == []
    uncommitted = tmp_path / "uncommitted.yml"
    shutil.copy(state, uncommitted)

    done = load(deployment, load_config, state_path=str(state))
    assert done.committed and done.jobs[0].ran == 0 and len(ids(deployment)) == 20
    # As if the process died between the catalog commit and rewriting the state file.
    replay = load(deployment, load_config, state_path=str(uncommitted))
    assert replay.committed and replay.jobs[0].ran == 0
    assert len(ids(deployment)) == 20


@sqlite_only
def test_cleanup_removes_an_abandoned_runs_objects_error_files_and_state(
    deployment: Deployment, tmp_path: Path
) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    csv_file(inputs / "a.csv", 0, 10, bad=2)
    (inputs / "b.csv.gz").write_bytes(b"\x1f\x8bnot gzip at all")
    errors = tmp_path / "errors"
    load_config = parse_load_config(config(inputs, error={"type": "file", "path": str(errors)}))
    state = tmp_path / "resume.yml"
    with pytest.raises(LoadFailed):
        load(deployment, load_config, state_path=str(state))
    written = tmp_keys(deployment)
    (error_file,) = [p for p in errors.rglob("*.jsonl")]
    assert written

    rehearsed = cleanup(deployment, load_config, str(state), dry_run=True)
    assert tmp_keys(deployment) == written and error_file.exists() and state.exists()
    removed = cleanup(deployment, load_config, str(state))
    assert sorted(removed) == sorted(rehearsed)
    assert set(removed) >= {deployment.lake.uri(key) for key in written} | {error_file.as_uri(), str(state)}
    assert tmp_keys(deployment) == [] and not error_file.exists() and not state.exists()
    with pytest.raises(ConfigError, match="nothing to clean up"):
        cleanup(deployment, load_config, str(state))


@sqlite_only
def test_error_routing_counts_and_files(deployment: Deployment, tmp_path: Path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    csv_file(inputs / "a.csv", 0, 25, bad=3)
    csv_file(inputs / "b.csv", 100, 15, bad=1)
    with (inputs / "b.csv").open("a") as handle:
        handle.write("150,2026-11-20 10:00:00\n")  # too few fields
    errors = tmp_path / "errors"
    report = load(deployment, parse_load_config(config(inputs, error={"type": "file", "path": str(errors)})))
    (stats,) = report.jobs
    assert (stats.records_in, stats.loaded, stats.bad) == (45, 40, 5)
    assert stats.loaded + stats.bad == stats.records_in and len(ids(deployment)) == 40
    kept = [json.loads(line) for path in sorted(errors.rglob("*.jsonl")) for line in path.read_text().splitlines()]
    assert len(kept) == 5 and {Path(k["source"]).name for k in kept} == {"a.csv", "b.csv"}
    assert "does not match the timestamp format" in kept[0]["reason"] and kept[0]["raw"].endswith(",not a time,x")
    assert kept[0]["line"] == 27
    assert any("row has 2 fields" in k["reason"] for k in kept)

    aborting = parse_load_config(
        config(
            inputs, out={"table": "web.strict", "create": True, "time_column": "event_time"}, error={"type": "abort"}
        )
    )
    with pytest.raises(LoadFailed, match=r"aborted.*a.csv line 27"):
        load(deployment, aborting)
    assert tmp_keys(deployment) == []


@sqlite_only
def test_sql_filter_and_line_filter_over_json_lines(deployment: Deployment, tmp_path: Path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    lines = []
    for index in range(30):
        record = {
            "ip": f"10.0.0.{index}",
            "address": "127.0.0.1" if index % 3 == 0 else "192.0.2.1",
            "time": f"2026-11-20T0{index % 10}:00:00Z",
            "elapsed": index,
        }
        lines.append(f"2026-11-20 23:15:00 {json.dumps(record)}")
    lines.append("# a comment line")
    (inputs / "a.log").write_text("\n".join(lines) + "\n")
    load_config = parse_load_config(
        {
            "in": {"path": str(inputs / "a.log")},
            "decoder": {
                "line_filter": [
                    {"regex": r"^#", "skip": True},
                    {"regex": r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", "replace": ""},
                ]
            },
            "parser": {
                "type": "jsonl",
                "columns": [
                    {"name": "ip", "type": "string"},
                    {"name": "address", "type": "string"},
                    {"name": "time", "type": "timestamp"},
                    {"name": "elapsed", "type": "long"},
                ],
            },
            "filters": {
                "sql": {
                    "type": "sql",
                    "query": (
                        "select ip, time + make_interval(0, 0, 0, 0, 0, 0, elapsed) as end_time, elapsed "
                        "from in where address != '127.0.0.1'"
                    ),
                }
            },
            "out": {"table": "web.requests", "create": True, "time_column": "end_time"},
        }
    )
    report = load(deployment, load_config)
    (stats,) = report.jobs
    assert (stats.records_in, stats.loaded, stats.bad) == (30, 20, 0)
    table = deployment.catalog.tables.get("web.requests").definition
    assert [(c.name, c.type) for c in table.columns] == [
        ("end_time", "timestamp"),
        ("ip", "string"),
        ("elapsed", "bigint"),
    ] or [(c.name, c.type) for c in table.columns] == [
        ("ip", "string"),
        ("end_time", "timestamp"),
        ("elapsed", "bigint"),
    ]
    rows = sql(
        deployment.spark(), "SELECT ip, end_time, elapsed FROM web.requests ORDER BY elapsed", deployment
    ).collect()
    assert [r.elapsed for r in rows] == [i for i in range(30) if i % 3]
    assert str(rows[0].end_time) == "2026-11-20 01:00:01" and rows[0].ip == "10.0.0.1"


@sqlite_only
def test_the_commands(deployment: Deployment, tmp_path: Path, monkeypatch) -> None:  # pytest's
    from .merge_helpers import silt_in_process

    silt = silt_in_process(deployment, monkeypatch)
    inputs = tmp_path / "in"
    inputs.mkdir()
    csv_file(inputs / "a.csv", 0, 12, bad=1)
    (inputs / "b.csv").write_bytes(b"id,time,name\n1,\xff\xfe,x\n")  # invalid UTF-8: the task fails
    path = tmp_path / "load.yml"
    path.write_text(yaml.safe_dump(config(inputs)))
    state = tmp_path / "resume.yml"

    shown = silt("load", str(path), "--dry-run", "--rows", "3")
    assert "main (first 3 rows" in shown and "n 2" in shown and not tmp_keys(deployment)
    failed = silt("load", str(path), "--resume-state", str(state), code=1)
    assert "1 task(s) failed" in " ".join(failed.split()) and state.exists()
    csv_file(inputs / "b.csv", 100, 5)
    done = silt("load", str(path), "--resume-state", str(state))
    assert "main -> web.people: 18 records in, 17 loaded, 1 bad" in " ".join(done.split())
    assert "2 tasks (1 run)" in done and len(ids(deployment)) == 17
    assert "already committed" in silt("load", str(path), "--resume-state", str(state))
    refused = silt("cleanup", str(path), "--resume-state", str(state), code=2)
    assert "committed load" in refused


@sqlite_only
def test_a_large_file_is_split_into_tasks(deployment: Deployment, tmp_path: Path) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    padding = "p" * 60
    text = "".join(
        json.dumps({"id": i, "time": f"2026-11-20T{i % 24:02d}:00:00Z", "pad": padding}) + "\n" for i in range(25_000)
    )
    (inputs / "big.jsonl").write_text(text)
    assert len(text) > 2 << 20
    load_config = parse_load_config(
        {
            "in": {"path": str(inputs / "big.jsonl"), "split_bytes": 1 << 20},
            "parser": {
                "type": "jsonl",
                "columns": [{"name": "id", "type": "long"}, {"name": "time", "type": "timestamp"}],
            },
            "out": {"table": "web.big", "create": True, "time_column": "time"},
        }
    )
    (stats,) = load(deployment, load_config).jobs
    assert stats.tasks == 3 and stats.records_in == stats.loaded == 25_000
    assert ids(deployment, "web.big") == list(range(25_000))


@sqlite_only
def test_a_commit_whose_output_is_gone_is_refused_whole(deployment: Deployment, tmp_path: Path) -> None:
    from siltlake.errors import CatalogError

    load_config, state = two_file_load(tmp_path)
    load(deployment, load_config, state_path=str(state), commit=False)
    deployment.lake.delete(tmp_keys(deployment)[-1])  # as reap does to old _tmp/ leftovers
    with pytest.raises(CatalogError, match="is gone .*nothing was committed"):
        load(deployment, load_config, state_path=str(state))
    assert ids(deployment) == [] and len(tmp_keys(deployment)) == 3  # nothing moved either
    cleanup(deployment, load_config, str(state))
    assert tmp_keys(deployment) == []


@sqlite_only
def test_several_jobs_commit_together_and_resume_together(deployment: Deployment, tmp_path: Path) -> None:
    users, histories = tmp_path / "users", tmp_path / "histories"
    users.mkdir()
    histories.mkdir()
    csv_file(users / "u.csv", 0, 8)
    csv_file(histories / "h1.csv", 100, 6)
    (histories / "h2.csv").write_bytes(b"\x1f\x8bbroken")
    base = config(users)
    load_config = parse_load_config(
        {
            "default": {**base, "filters": {**base["filters"], "secret": {"type": "drop", "columns": ["name"]}}},
            "jobs": {
                "users": {"out": {"table": "app.users"}, "filters": {"secret": None}},
                "histories": {"in": {"path": str(histories / "*.csv")}, "out": {"table": "app.histories"}},
            },
        }
    )
    state = tmp_path / "resume.yml"
    with pytest.raises(LoadFailed):
        load(deployment, load_config, state_path=str(state))
    assert ids(deployment, "app.users") == [] and ids(deployment, "app.histories") == []  # neither job commits

    csv_file(histories / "h2.csv", 200, 4)
    report = load(deployment, load_config, state_path=str(state))
    assert [(j.name, j.ran, j.tasks, j.loaded) for j in report.jobs] == [("users", 0, 1, 8), ("histories", 1, 2, 10)]
    assert ids(deployment, "app.users") == list(range(8))
    assert ids(deployment, "app.histories") == [*range(100, 106), *range(200, 204)]
    columns = [c.name for c in deployment.catalog.tables.get("app.histories").definition.columns]
    assert columns == ["id", "event_time"]  # the default's drop filter applies to histories only
    assert "name" in [c.name for c in deployment.catalog.tables.get("app.users").definition.columns]


@sqlite_only
def test_when_every_task_fails_no_state_is_kept_and_the_same_command_starts_over(
    deployment: Deployment, tmp_path: Path
) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a.csv.gz").write_bytes(b"\x1f\x8bbroken")
    load_config = parse_load_config(config(inputs))
    state = tmp_path / "resume.yml"
    with pytest.raises(LoadFailed, match="nothing was kept: run the same command again"):
        load(deployment, load_config, state_path=str(state))
    assert not state.exists() and tmp_keys(deployment) == []
    csv_file(inputs / "a.csv.gz", 0, 5, gz=True)
    (stats,) = load(deployment, load_config, state_path=str(state)).jobs
    assert stats.ran == 1 and ids(deployment) == list(range(5))


@sqlite_only
def test_a_csv_time_with_no_partition_date_is_a_bad_record_on_the_fast_path(
    deployment: Deployment, tmp_path: Path
) -> None:
    inputs = tmp_path / "in"
    inputs.mkdir()
    # 03:00Z on 0001-01-01 is 0000-12-31 in New York: no partition can hold it (nor can Python's date).
    (inputs / "edge.csv").write_text(
        "id,time,name\n1,2026-11-20T10:00:00Z,a\n2,0001-01-01T03:00:00Z,b\n3,2026-11-21T10:00:00Z,c\n"
    )
    parser = {
        "type": "csv",
        "columns": [
            {"name": "id", "type": "long"},
            {"name": "time", "type": "timestamp"},
            {"name": "name", "type": "string"},
        ],
    }
    errors = tmp_path / "errors"
    job = config(
        inputs,
        parser=parser,
        error={"type": "file", "path": str(errors)},
        out={"table": "web.edge", "create": True, "time_column": "event_time", "timezone": "America/New_York"},
    )
    report = load(deployment, parse_load_config(job))
    (stats,) = report.jobs
    assert (stats.records_in, stats.loaded, stats.bad) == (3, 2, 1)
    assert ids(deployment, "web.edge") == [1, 3]
    (kept,) = [json.loads(line) for path in errors.rglob("*.jsonl") for line in path.read_text().splitlines()]
    assert "America/New_York" in kept["reason"] and kept["raw"].startswith("2,")
