"""What `silt` writes: the same --format table|json|csv on every listing, clean pipes, words in the help,
progress on a terminal's stderr only."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from siltlake.cli import main
from siltlake.defbase import format_duration, parse_duration

LONG_COLUMN = "utc_event_time_as_the_shipper_wrote_it_in_its_own_zone"
TABLE = "web.access_log_of_the_front_proxies"
TABLE_TOML = f"""
schema = "web"
name = "access_log_of_the_front_proxies"
time_column = "{LONG_COLUMN}"
timezone = "Asia/Tokyo"
merge_interval = "12h"
error_policy = "file"
[[columns]]
name = "{LONG_COLUMN}"
type = "timestamp"
source = "time"
[[columns]]
name = "user_id"
type = "bigint"
[[columns]]
name = "action"
type = "string"
"""
RECORDS = 6
# Every listing command, with what --format json prints: a list of rows, or one object.
LISTINGS = {
    "table list": (["table", "list"], list),
    "table show": (["table", "show", TABLE], dict),
    "unknown list": (["unknown", "list"], list),
    "errors list": (["errors", "list", TABLE], list),
    "history": (["history", TABLE], list),
    "status": (["status"], dict),
    "sql": (["sql", f"SELECT user_id, action FROM {TABLE} ORDER BY user_id"], list),
}


def write_config(root: Path, catalog_url: str) -> Path:
    config = root / "siltlake.toml"
    config.write_text(
        f'[catalog]\nurl = "{catalog_url}"\n[storage]\nroot = "{root / "lake"}"\n'
        f'staging_root = "{root / "staging"}"\n[spark]\nmaster = "local[2]"\n'
    )
    return config


@pytest.fixture(scope="module")
def silt(tmp_path_factory, spark):
    """A deployment with a table, streamed records (one bad, kept in an error file), an unknown staging
    object and a published version: every listing has rows."""
    root = tmp_path_factory.mktemp("output")
    config = write_config(root, f"sqlite:///{root / 'catalog.db'}")
    (root / "access.toml").write_text(TABLE_TOML)
    runner = CliRunner()

    def run(*args: str, code: int = 0):
        result = runner.invoke(main, ["--config", str(config), *args], catch_exceptions=False)
        assert result.exit_code == code, result.output
        return result

    run("init")
    run("table", "create", str(root / "access.toml"))
    day = root / "staging" / "f.web.access_log_of_the_front_proxies" / "2026" / "11" / "20"
    day.mkdir(parents=True)
    (day / "a.jsonl").write_text(
        "".join(
            json.dumps({"time": f"2026-11-20T0{n}:00:00Z", "user_id": n, "action": "view"}) + "\n"
            for n in range(RECORDS)
        )
        + "{not json\n"
    )
    nowhere = root / "staging" / "f.web.nosuch" / "2026" / "11" / "20"
    nowhere.mkdir(parents=True)
    (nowhere / "b.jsonl").write_text("{}\n")
    assert f"{RECORDS} records loaded" in run("stream", "--once").output
    run("publish", "--once")
    return run


@pytest.mark.spark
@pytest.mark.parametrize("name", LISTINGS)
def test_every_listing_command_writes_a_table_json_and_csv(silt, name: str) -> None:
    args, shape = LISTINGS[name]
    document = json.loads(silt(*args, "--format", "json").stdout)
    assert isinstance(document, shape)
    rows = list(csv.reader(io.StringIO(silt(*args, "--format", "csv").stdout)))
    header, body = rows[0], rows[1:]
    assert body, f"{name}: the scenario gives every listing rows"
    if shape is list:
        # The same rows and fields in both: JSON keys are the CSV header.
        assert [list(row) for row in document] == [header] * len(document)
        assert [[("" if value is None else str(value)) for value in row.values()] for row in document] == body
    table = silt(*args).stdout
    assert table.strip() and "{" not in table.splitlines()[0]
    assert silt(*args, "--format", "yaml", code=2).exit_code == 2


@pytest.mark.spark
def test_listings_show_what_the_scenario_holds(silt) -> None:
    history = json.loads(silt("history", TABLE, "--format", "json").stdout)
    assert [(v["date"], v["op"], v["rows"]) for v in history] == [("2026-11-20", "append", RECORDS)]
    (unknown,) = json.loads(silt("unknown", "list", "--format", "json").stdout)
    assert "no table web.nosuch" in unknown["reason"] and unknown["uri"].endswith("b.jsonl")
    (error_file,) = json.loads(silt("errors", "list", TABLE, "--format", "json").stdout)
    assert error_file["bad_records"] == 1
    shown = json.loads(silt("table", "show", TABLE, "--format", "json").stdout)
    assert shown["definition"]["merge_interval"] == 43200 and shown["definition"]["error_policy"] == "file"
    (partition,) = shown["partitions"]
    assert partition["date"] == "2026-11-20" and partition["live_rows"] == RECORDS
    (table,) = json.loads(silt("status", "--format", "json").stdout)["tables"]
    assert table["table"] == TABLE
    # --json, kept for scripts, is --format json.
    alias = json.loads(silt("status", "--json").stdout)
    assert (
        list(alias) == ["tables", "failing_staging_objects", "settling", "rewritten_staging_files"]
        and alias["tables"][0].keys() == table.keys()
    )
    assert "give one of --json and --format csv" in silt("status", "--json", "--format", "csv", code=2).output


@pytest.mark.spark
def test_csv_lines_end_in_a_newline_alone(silt) -> None:
    for name, (args, _) in LISTINGS.items():
        written = silt(*args, "--format", "csv").stdout_bytes
        assert b"\r" not in written and written.endswith(b"\n"), name
    lines = silt("sql", f"SELECT user_id FROM {TABLE} ORDER BY user_id", "--format", "csv").stdout.split("\n")
    assert lines == ["user_id", *map(str, range(RECORDS)), ""]


@pytest.mark.spark
def test_piped_tables_are_not_cut_at_80_columns(silt) -> None:
    listing = silt("table", "list").stdout
    (row,) = [line for line in listing.splitlines() if TABLE in line]
    assert LONG_COLUMN in row and "12h" in row and "Asia/Tokyo" in row and len(row) > 80
    shown = silt("table", "show", TABLE).stdout
    assert any(LONG_COLUMN in line and "timestamp" in line for line in shown.splitlines())
    # Counts are never cut to fit: the partition row holds the date, its state and every count.
    (partition,) = [line for line in shown.splitlines() if "2026-11-20" in line]
    assert partition.split()[0] == "2026-11-20" and str(RECORDS) in partition.split()
    unknown = silt("unknown", "list").stdout
    assert any("b.jsonl" in line and "no table web.nosuch" in line for line in unknown.splitlines())


@pytest.mark.spark
def test_table_show_writes_durations_as_users_do(silt) -> None:
    shown = silt("table", "show", TABLE).stdout
    assert "merge interval: 12h" in shown and "ttl: none" in shown
    assert "43200" not in shown and "- days" not in shown
    assert "12h" in silt("table", "list").stdout


@pytest.mark.parametrize(
    ("seconds", "written"),
    [(43200, "12h"), (1800, "30m"), (0, "0s"), (90, "90s"), (86400, "1d"), (172800, "2d"), (3660, "61m")],
)
def test_format_duration(seconds: int, written: str) -> None:
    assert format_duration(seconds) == written


@given(st.integers(min_value=0, max_value=10**9))
def test_a_formatted_duration_parses_back(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.spark
def test_sql_says_on_stderr_when_the_limit_cut_the_result(silt) -> None:
    query = f"SELECT user_id FROM {TABLE} ORDER BY user_id"
    cut = silt("sql", query, "--limit", "2", "--format", "csv")
    assert cut.stdout.split("\n") == ["user_id", "0", "1", ""]
    assert "showing the first 2 rows" in cut.stderr and "--limit" in cut.stderr
    whole = silt("sql", query, "--limit", str(RECORDS), "--format", "json")
    assert len(json.loads(whole.stdout)) == RECORDS and whole.stderr == ""
    assert "showing the first" not in silt("sql", query, "--limit", str(RECORDS)).stderr


def all_commands(group: click.Group, prefix: tuple[str, ...] = ()):
    context = click.Context(group, info_name="silt")
    for name in group.list_commands(context):  # the `silt` group imports its commands when asked for them
        command = group.get_command(context, name)
        assert command is not None, name
        yield (*prefix, name), command
        if isinstance(command, click.Group):
            yield from all_commands(command, (*prefix, name))


def test_help_texts_say_it_in_words() -> None:
    runner = CliRunner()
    for path, command in [((), main), *all_commands(main)]:
        shown = runner.invoke(main, [*path, "--help"], catch_exceptions=False).output
        assert "DESIGN" not in shown and "§" not in shown, path
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, (path, param.name)
    listings = [command for path, command in all_commands(main) if " ".join(path) in LISTINGS]
    assert len(listings) == len(LISTINGS)
    for command in listings:
        (option,) = [param for param in command.params if "--format" in param.opts]
        assert option.type.choices == ("table", "json", "csv") and "JSON" in option.help


@pytest.mark.postgres
def test_init_prints_the_catalog_url_with_its_password_masked(tmp_path: Path, postgres_url: str) -> None:
    # The server trusts local connections: any password logs in, none may be shown.
    with_password = postgres_url.replace("postgres@", "postgres:s3cret-pw@", 1)
    assert with_password != postgres_url
    config = write_config(tmp_path, with_password)
    result = CliRunner().invoke(main, ["--config", str(config), "init"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("catalog")]
    assert line.split()[1] == with_password.replace("s3cret-pw", "***")
    assert "s3cret" not in result.output and "Catalog(" not in result.output


@pytest.mark.spark
def test_progress_shows_on_a_terminal_stderr_only(silt, monkeypatch) -> None:
    from siltlake.cli import output

    terminal = io.StringIO()
    monkeypatch.setattr(output, "console", output._Console(file=terminal, force_terminal=True, width=200))
    query = f"SELECT count(*) AS n FROM {TABLE}"
    assert silt("sql", query, "--format", "json").stderr == ""
    assert terminal.getvalue() == "", "json and csv are for scripts: no spinner"
    result = silt("sql", query)
    assert "running the query on DuckDB…" in terminal.getvalue() and "starting Spark…" not in terminal.getvalue()
    result = silt("sql", query, "--engine", "spark")
    assert "starting Spark…" in terminal.getvalue() and "running the query…" in terminal.getvalue()
    assert "starting" not in result.stdout and "running" not in result.stdout, "stdout holds the result alone"
    silt("publish", "--once")
    silt("reap", "--dry-run")
    silt("delete", TABLE, "--where", "user_id = -1", "--all-dates")
    for step in ("publishing:", "reaping:", f"deleting from {TABLE} dt=2026-11-20 (1 of 1 partitions)"):
        assert step in terminal.getvalue(), step
    monkeypatch.undo()
    assert "starting Spark" not in silt("sql", query).output, "stderr is not a terminal: no spinner"


def test_json_escapes_what_stdout_cannot_encode(capsys) -> None:
    from siltlake.cli.output import write_json

    write_json([{"uri": "café"}])
    assert json.loads(capsys.readouterr().out) == [{"uri": "café"}]
    # An undecodable file name arrives as a lone surrogate: UTF-8 cannot write it, JSON can escape it.
    write_json([{"uri": "x\udcff.jsonl"}])
    written = capsys.readouterr().out
    assert "\\udcff" in written and json.loads(written) == [{"uri": "x\udcff.jsonl"}]


def test_a_rule_is_100_columns_where_lines_have_no_width() -> None:
    """Piped output has no width (lines are as long as they are), so a rule would be 100,000 columns."""
    from siltlake.cli.output import _Console

    target = io.StringIO()
    _Console(file=target).rule("step 1")
    (line,) = target.getvalue().splitlines()
    assert len(line) == 100 and " step 1 " in line


def test_warming_the_rendering_writes_nowhere_and_leaves_one_thread(capfd) -> None:
    """The fork server warms Rich before it serves: nothing reaches its streams, and no refresh thread is left
    running (a server forks only while it runs one thread)."""
    import sys
    import threading

    from siltlake.cli.output import warm_rendering

    streams = (sys.stdout, sys.stderr)
    before = threading.active_count()
    warm_rendering()
    assert threading.active_count() == before
    assert (sys.stdout, sys.stderr) == streams
    assert capfd.readouterr() == ("", "")
