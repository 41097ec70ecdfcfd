"""`silt sql` keeps the DuckDB translation of a query it ran (siltlake.read.query.Translations), so that the same
query run again in a fresh process (as cron runs it) answers without parsing it: no sqlglot imported, the same
answer; anything it cannot vouch for (time travel, days picked by dt, other columns, the cache turned off) is
planned as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

TABLE = """schema = "web"
name = "access"
time_column = "utc_event_time"
timezone = "UTC"
merge_interval = "1h"
[[columns]]
name = "utc_event_time"
type = "timestamp"
source = "time"
nullable = false
[[columns]]
name = "user_id"
type = "bigint"
"""
COUNT = "select count(*) as n, sum(user_id) as s from web.access"
ENGINES = ("sqlglot", "pyspark", "pyarrow")


def silt(directory: Path, *args: str, cache: str | Path) -> tuple[subprocess.CompletedProcess, set[str]]:
    """One fresh `silt` process; its result and the top-level packages it had loaded at the end."""
    script = (
        "import sys, json\nfrom siltlake.cli import main\ntry:\n    main(sys.argv[1:], prog_name='silt')\n"
        "except SystemExit as exc:\n    code = exc.code\nprint(json.dumps(sorted({m.split('.')[0] for m in "
        "sys.modules})), file=sys.stderr)\nsys.exit(code)"
    )
    environment = {name: value for name, value in os.environ.items() if not name.startswith("SILTLAKE_")}
    environment["SILT_SQL_CACHE"] = str(cache)
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=directory,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return result, set(json.loads(result.stderr.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Path:
    """A deployment whose web.access has one published day of 60 rows (user_id 0 to 59)."""
    directory = tmp_path_factory.mktemp("kept")
    (directory / "access.toml").write_text(TABLE)
    folder = directory / ".siltlake" / "staging" / "bench01.web.access" / "2026" / "11" / "20"
    for args in (["init"], ["table", "create", "access.toml"]):
        result, _ = silt(directory, *args, cache="off")
        assert result.returncode == 0, result.stderr
    folder.mkdir(parents=True)
    path = folder / "batch.json"
    path.write_text("".join(json.dumps({"time": f"2026-11-20T01:{m:02d}:00Z", "user_id": m}) + "\n" for m in range(60)))
    past = time.time() - 60  # settled: `stream --once` takes it at once
    os.utime(path, (past, past))
    for args in (["stream", "--once"], ["publish", "--once"]):
        result, _ = silt(directory, *args, cache="off")
        assert result.returncode == 0, result.stderr
    return directory


def test_a_query_run_again_is_answered_without_sqlglot(deployment: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first, loaded = silt(deployment, "sql", COUNT, "--format", "csv", cache=cache)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == ["n,s", f"60,{sum(range(60))}"]
    assert "sqlglot" in loaded
    (entry,) = cache.glob("*.json")
    assert json.loads(entry.read_text())["query"] == COUNT
    assert oct(cache.stat().st_mode & 0o777) == oct(0o700)
    for _ in range(2):
        again, loaded = silt(deployment, "sql", COUNT, "--format", "csv", cache=cache)
        assert again.returncode == 0, again.stderr
        assert again.stdout == first.stdout
        assert not loaded & set(ENGINES), sorted(loaded & set(ENGINES))
    # Another format, the same kept translation; --limit still says when it cut rows.
    table, loaded = silt(deployment, "sql", COUNT, cache=cache)
    assert table.returncode == 0 and "60" in table.stdout and "sqlglot" not in loaded
    rows = "select user_id from web.access order by user_id"
    for _ in range(2):
        limited, loaded = silt(deployment, "sql", rows, "--limit", "3", "--format", "csv", cache=cache)
        assert limited.returncode == 0, limited.stderr
        assert limited.stdout.splitlines() == ["user_id", "0", "1", "2"]
        assert "showing the first 3 rows" in limited.stderr
    assert "sqlglot" not in loaded


def test_what_is_not_kept_is_planned_as_before(deployment: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for query in (
        "select count(*) as n from web.access version as of 1",
        "select count(*) as n from web.access where dt = '2026-11-20'",
    ):
        for _ in range(2):
            result, loaded = silt(deployment, "sql", query, "--format", "csv", cache=cache)
            assert result.returncode == 0, result.stderr
            assert result.stdout.splitlines() == ["n", "60"]
            assert "sqlglot" in loaded
    assert not list(cache.glob("*.json")) if cache.exists() else True
    result, loaded = silt(deployment, "sql", COUNT, cache="off")
    assert result.returncode == 0 and "sqlglot" in loaded
    assert not (deployment / "off").exists()
    # A query that fails is said as before, and kept nowhere.
    for _ in range(2):
        result, _ = silt(deployment, "sql", "select count(*) from web.nope", cache=cache)
        assert result.returncode == 2 and "no table web.nope" in result.stderr
    assert not list(cache.glob("*.json")) if cache.exists() else True


def test_a_kept_translation_for_other_columns_is_planned_again(deployment: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first, _ = silt(deployment, "sql", COUNT, "--format", "csv", cache=cache)
    assert first.returncode == 0, first.stderr
    (entry,) = cache.glob("*.json")
    kept = json.loads(entry.read_text())
    kept["views"][0][2].append(["added", "string"])  # as if the table had another column when it was kept
    kept["translation"][0] = "SELECT 1 AS n, 2 AS s"  # which must never run
    entry.write_text(json.dumps(kept))
    again, loaded = silt(deployment, "sql", COUNT, "--format", "csv", cache=cache)
    assert again.returncode == 0, again.stderr
    assert again.stdout == first.stdout and "sqlglot" in loaded
    assert json.loads(entry.read_text())["views"][0][2] == [
        ["utc_event_time", "timestamp"],
        ["user_id", "bigint"],
        ["dt", "date"],
    ]
