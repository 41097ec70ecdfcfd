"""The conventions every `silt` command keeps (docs/operations.md, "Command reference"): --json reports and
--dry-run on what changes something, exit status 2 for a declined confirmation and --yes without a terminal,
did-you-mean for table and column names, JSON error lines with --log-format json, one name per partition state."""

from __future__ import annotations

import datetime as dt
import json
import os
import pty
import select
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import siltlake
from siltlake.config import load_config
from siltlake.deployment import Deployment

from .merge_helpers import add_small_objects, rows_for
from .test_cli import silt  # noqa: F401 - the fixture: `silt` in this process on a temporary deployment


def table_json(run, name: str = "web.access") -> dict:  # the silt fixture
    return json.loads(run("table", "show", name, "--json").stdout)


def column_types(run) -> dict[str, str]:  # the silt fixture
    return {c["name"]: c["type"] for c in table_json(run)["definition"]["columns"]}


def test_table_changes_report_in_json_and_rehearse_with_dry_run(silt) -> None:  # noqa: F811
    init = json.loads(silt("init", "--json").stdout)
    assert init["action"] == "init" and init["revision"] and init["instance"]
    created = json.loads(silt("table", "create", "access.toml", "--json").stdout)
    assert created["action"] == "create" and created["table"] == "web.access" and created["physical"] == "web.access"
    silt("table", "add-column", "web.access", "hits", "int")  # a table version of its own
    versions_before = json.loads(silt("history", "web.access", "--json").stdout)

    # Each dry run makes the real change's checks, says what it would do, and changes nothing.
    rehearsed = json.loads(silt("table", "alter-column", "web.access", "hits", "bigint", "--dry-run", "--json").stdout)
    assert rehearsed["dry_run"] is True and rehearsed["type"] == "bigint"
    assert column_types(silt)["hits"] == "int"
    assert (
        "would make column hits of web.access bigint"
        in silt("table", "alter-column", "web.access", "hits", "bigint", "--dry-run").output
    )
    assert (
        "run it with --rewrite"
        in silt("table", "alter-column", "web.access", "hits", "string", "--dry-run", code=2).output
    )
    silt("table", "rename-column", "web.access", "hits", "visits", "--dry-run")
    silt("table", "drop-column", "web.access", "hits", "--dry-run")  # no question in a dry run
    silt("table", "set", "web.access", "ttl_days=9", "--dry-run")
    silt("table", "rename", "web.access", "web.hits", "--dry-run")
    silt("table", "drop", "web.access", "--dry-run")
    after = table_json(silt)
    assert "hits" in column_types(silt) and after["definition"]["ttl_days"] is None
    assert json.loads(silt("history", "web.access", "--json").stdout) == versions_before  # no version was made

    # The real changes, each reported as JSON.
    altered = json.loads(silt("table", "alter-column", "web.access", "hits", "bigint", "--json").stdout)
    assert altered["dry_run"] is False and column_types(silt)["hits"] == "bigint"
    changed = json.loads(silt("table", "set", "web.access", "ttl_days=9", "--json").stdout)
    assert changed["changed"] and changed["table_version"] == 3 and changed["definition"]["ttl_days"] == 9
    renamed = json.loads(silt("table", "rename-column", "web.access", "hits", "visits", "--json").stdout)
    assert renamed["new_name"] == "visits" and "visits" in column_types(silt)
    dropped = json.loads(silt("table", "drop-column", "web.access", "visits", "--yes", "--json").stdout)
    assert dropped["action"] == "drop-column" and "visits" not in column_types(silt)
    moved = json.loads(silt("table", "rename", "web.access", "web.hits", "--json").stdout)
    assert (moved["old_name"], moved["table"]) == ("web.access", "web.hits")
    gone = json.loads(silt("table", "drop", "web.hits", "--yes", "--json").stdout)
    assert gone["action"] == "drop" and "no tables yet" in silt("table", "list").output


def test_a_confirmation_without_a_terminal_asks_for_yes_and_changes_nothing(silt) -> None:  # noqa: F811
    silt("init")
    silt("table", "create", "access.toml")
    for command in (("table", "drop", "web.access"), ("table", "drop-column", "web.access", "action")):
        said = silt(*command, code=2).output
        assert "no terminal to ask on: pass --yes" in said and "Aborted" not in said, said
    assert "action" in column_types(silt)
    # A command the catalog would refuse says so first, before any question.
    assert "cannot be dropped" in silt("table", "drop-column", "web.access", "utc_event_time", code=2).output


def env_for_this_siltlake() -> dict[str, str]:
    """The environment of a subprocess that imports the siltlake under test, whatever directory it runs in."""
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(siltlake.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]),
    }


def _answer_on_a_terminal(args: list[str], answer: bytes, cwd: Path) -> tuple[int, str]:
    """Run `silt ARGS` with a terminal as stdin, answer its question, and return its status and output."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "siltlake.cli", *args],
        stdin=follower,
        stdout=subprocess.PIPE,
        stderr=follower,
        cwd=cwd,
        env=env_for_this_siltlake(),
    )
    os.close(follower)
    said = b""
    try:
        while b"?" not in said:  # the question, on the terminal
            ready, _, _ = select.select([leader], [], [], 60)
            assert ready, f"no question within 60 s: {said!r}"
            said += os.read(leader, 1024)
        os.write(leader, answer)
        proc.wait(timeout=60)
        while select.select([leader], [], [], 0.2)[0]:
            try:
                said += os.read(leader, 1024)
            except OSError:  # the terminal closed with the process
                break
    finally:
        os.close(leader)
        proc.kill()
        proc.wait()
    return proc.returncode, said.decode(errors="replace")


def test_a_declined_question_exits_2_and_changes_nothing(silt, tmp_path: Path) -> None:  # noqa: F811
    silt("init")
    silt("table", "create", "access.toml")
    status, said = _answer_on_a_terminal(["table", "drop", "web.access"], b"n\n", tmp_path)
    assert status == 2 and "drop table web.access?" in said and "declined: nothing changed" in said, said
    assert "Aborted" not in said
    assert "web.access" in silt("table", "list").output


def test_wrong_table_and_column_names_get_a_did_you_mean(silt) -> None:  # noqa: F811
    silt("init")
    silt("table", "create", "access.toml")
    assert "no table web.acess (did you mean web.access?)" in silt("table", "show", "web.acess", code=2).output
    assert "did you mean web.access?" in silt("table", "drop", "web.accesss", "--yes", code=2).output
    assert "did you mean web.access?" in silt("sql", "SELECT count(*) FROM web.acces", code=2).output
    far = silt("table", "show", "zzz.qqq", code=2).output
    assert "no table zzz.qqq" in far and "did you mean" not in far
    said = silt("table", "rename-column", "web.access", "usr_id", "uid", code=2).output
    assert "has no column usr_id (did you mean user_id?)" in said, said
    assert "did you mean user_id?" in silt("table", "alter-column", "web.access", "user_ids", "bigint", code=2).output


def test_error_lines_are_json_with_log_format_json(silt) -> None:  # noqa: F811
    silt("init")
    failed = silt("--log-format", "json", "table", "show", "web.nothing", code=2)
    (line,) = failed.stderr.strip().splitlines()
    document = json.loads(line)
    assert document["level"] == "ERROR" and document["event"] == "command.error" and document["status"] == 2
    assert document["message"].startswith("no table web.nothing")
    usage = silt("--log-format", "json", "table", "show", code=2)
    assert json.loads(usage.stderr.strip().splitlines()[-1])["message"] == "Missing argument 'NAME'."
    assert "error: no table" in silt("table", "show", "web.nothing", code=2).stderr  # text, by default


def test_status_and_table_show_name_partition_states_alike(silt, tmp_path: Path) -> None:  # noqa: F811
    silt("init")
    silt("table", "create", "access.toml")
    deployment = Deployment.open(load_config(None))
    try:
        table = deployment.catalog.tables.get("web.access")
        day = dt.date(2026, 11, 20)
        for offset in range(3):
            add_small_objects(deployment, table, day + dt.timedelta(days=offset), [rows_for(day, 3, offset)])
    finally:
        deployment.close()
    published = json.loads(silt("publish", "--once", "--now", "2026-11-22T12:00:00Z", "--json").stdout)
    assert len(published["closed"]) == 2 and len(published["live_versions"]) == 3, published
    shown = Counter(p["state"] for p in table_json(silt)["partitions"])
    (status,) = json.loads(silt("status", "--json").stdout)["tables"]
    assert shown == {"closed": 2, "live": 1}
    assert {state: count for state, count in status["partitions"].items() if count} == shown
    assert "closed" in silt("table", "show", "web.access").stdout


def test_the_demo_prints_its_help_without_running(tmp_path: Path) -> None:
    helped = subprocess.run(
        [sys.executable, "-m", "siltlake.demo", "--help"],
        cwd=tmp_path,
        env=env_for_this_siltlake(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert helped.returncode == 0 and "usage: python -m siltlake.demo" in helped.stdout, helped.stderr
    assert "build/demo" in helped.stdout and not (tmp_path / "build").exists()


def test_the_stream_daemon_stops_after_its_round_on_sigterm(tmp_path: Path) -> None:
    """As `silt merge` and `silt publish` do (and Ctrl-C does): a service manager's stop is a clean exit."""
    from .processes import SiltProcess, kill_session, run_silt, silt_env, wait_until

    env = silt_env(tmp_path, f"sqlite:///{tmp_path / 'catalog.db'}")
    assert run_silt(env, "init").returncode == 0
    daemon = SiltProcess(tmp_path, "stream", env, "stream", "--interval", "1")
    try:
        wait_until(lambda: "streaming; Ctrl-C stops" in daemon.log(), [daemon], 60, "the stream daemon")
        daemon.proc.send_signal(signal.SIGTERM)
        returncode = daemon.proc.wait(timeout=60)
    finally:
        kill_session(daemon.pid)
        daemon.proc.wait(timeout=30)
    assert returncode == 0 and "stopped" in daemon.log() and "Traceback" not in daemon.log(), daemon.tail()
