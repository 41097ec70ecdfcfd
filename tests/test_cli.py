"""The silt command line, run in-process against a temporary deployment."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from siltlake.cli import main

TABLE_TOML = """
schema = "web"
name = "access"
time_column = "utc_event_time"
timezone = "Asia/Tokyo"
merge_interval = "30m"
[[columns]]
name = "utc_event_time"
type = "timestamp"
source = "time"
[[columns]]
name = "user_id"
type = "bigint"
[[columns]]
name = "action"
type = "string"
"""


@pytest.fixture
def silt(tmp_path: Path, catalog_url: str, monkeypatch):
    config = tmp_path / "siltlake.toml"
    config.write_text(
        f'[catalog]\nurl = "{catalog_url}"\n[storage]\nroot = "{tmp_path / "lake"}"\n'
        f'staging_root = "{tmp_path / "staging"}"\n[spark]\nmaster = "local[2]"\n'
    )
    monkeypatch.setenv("SILTLAKE_CONFIG", str(config))
    (tmp_path / "access.toml").write_text(TABLE_TOML)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()

    def run(*args: str, code: int = 0):
        result = runner.invoke(main, list(args), catch_exceptions=False)
        assert result.exit_code == code, result.output
        return result

    return run


def test_init_and_table_commands(silt) -> None:
    assert "instance" in silt("init").output
    silt("init")  # upgrading an up-to-date catalog is a no-op
    assert "created table web.access" in silt("table", "create", "access.toml").output
    assert "already exists" in silt("table", "create", "access.toml", code=2).output
    assert "web.access" in silt("table", "list").output
    shown = silt("table", "show", "web.access").output
    assert "Asia/Tokyo" in shown and "user_id" in shown and "no partitions yet" in shown
    silt("table", "add-column", "web.access", "referer", "string", "--source", "ref")
    assert "referer" in silt("table", "show", "web.access").output
    assert "unknown column type" in silt("table", "add-column", "web.access", "x", "varchar", code=2).output
    silt("table", "rename", "web.access", "web.hits")
    assert "no table web.access" in silt("table", "show", "web.access", code=2).output
    silt("table", "drop", "web.hits", "--yes")
    assert "no tables yet" in silt("table", "list").output


def test_commands_before_init_say_to_run_init(silt) -> None:
    assert "silt init" in silt("table", "list", code=2).output


def test_bad_table_file_is_reported_with_the_key(silt, tmp_path: Path) -> None:
    silt("init")
    (tmp_path / "bad.toml").write_text(TABLE_TOML.replace('"Asia/Tokyo"', '"Asia/Nowhere"'))
    assert "timezone" in silt("table", "create", "bad.toml", code=2).output


@pytest.mark.spark
def test_stream_unknown_and_sql_output_formats(silt, tmp_path: Path, spark) -> None:
    silt("init")
    silt("table", "create", "access.toml")
    good = tmp_path / "staging" / "f.web.access" / "2026" / "11" / "20"
    good.mkdir(parents=True)
    (good / "a.jsonl.gz").write_bytes(
        gzip.compress(
            b"".join(
                json.dumps({"time": f"2026-11-20T0{h}:00:00Z", "user_id": h, "action": "v"}).encode() + b"\n"
                for h in range(4)
            )
        )
    )
    other = tmp_path / "staging" / "f.web.nosuch" / "2026" / "11" / "20"
    other.mkdir(parents=True)
    (other / "b.jsonl").write_text("{}\n")

    streamed = silt("stream", "--once").output
    assert "4 records loaded" in streamed
    assert "no table web.nosuch" in silt("unknown", "list").output
    csv_out = silt("sql", "SELECT dt, count(*) AS n FROM web.access GROUP BY dt", "--format", "csv").stdout
    assert csv_out.splitlines() == ["dt,n", "2026-11-20,4"]
    json_out = silt("sql", "SELECT user_id FROM web.access ORDER BY user_id", "--format", "json").stdout
    assert [row["user_id"] for row in json.loads(json_out)] == [0, 1, 2, 3]
    assert "no table web.missing" in silt("sql", "SELECT * FROM web.missing", code=2).output
    assert "needs its schema" in silt("sql", "SELECT * FROM access", code=2).output
    unknown_uri = (other / "b.jsonl").as_uri()
    rehearsed = json.loads(silt("unknown", "replay", "--all", "--dry-run", "--json").stdout)
    assert rehearsed == {"action": "replay", "dry_run": True, "uris": [unknown_uri], "not_unknown": []}, rehearsed
    assert "no table web.nosuch" in silt("unknown", "list").output  # the dry run left it unknown
    assert "1 objects will be streamed again" in silt("unknown", "replay", "--all").output
