"""A failing `silt` command ends in one line naming what failed and where: exit 2 when the user can fix it,
1 for a bug; `--debug` (or SILTLAKE_DEBUG=1) adds the full trace. Real `silt` processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from siltlake.catalog import schema as s
from siltlake.config import load_config
from siltlake.deployment import Deployment
from siltlake.publish import publish_once
from siltlake.read import sql
from siltlake.storage.filesystem import Storage
from siltlake.stream import stream_once
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE
from .processes import SiltProcess, run_silt, silt_env, wait_until

DAY_DIR = "2026/11/20"


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


def assert_one_line(result: subprocess.CompletedProcess[str], status: int) -> str:
    """The command exited with `status`, its stderr has one `error:` line and no Python or Java trace."""
    assert result.returncode == status, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert "at org.apache" not in result.stderr and "at java." not in result.stderr, result.stderr
    (line,) = error_lines(result.stderr)
    return line


def deployment_with_table(tmp_path: Path, **settings: dict) -> dict[str, str]:
    """The environment of a deployment with the tables web.access (and any other ACCESS_TABLE copies named in
    `tables`), set up in this process: what the tests run as `silt` processes is the failing command."""
    tables = settings.pop("tables", ["access"])
    env = silt_env(tmp_path, f"sqlite:///{tmp_path / 'catalog.db'}", **settings)
    env.pop("SILTLAKE_DEBUG", None)  # the one-line output is what is tested
    deployment = Deployment(load_config(environ=env))
    try:
        deployment.init()
        for name in tables:
            deployment.catalog.tables.create(TableDef.from_mapping({**ACCESS_TABLE, "name": name}))
    finally:
        deployment.close()
    return env


def in_process(env: dict[str, str], spark) -> Deployment:  # the session's SparkSession
    """The deployment of `env`, on the test session's Spark, for steps that set a test up."""
    deployment = Deployment(load_config(environ=env))
    deployment.use_spark(spark)
    return deployment


def stage(tmp_path: Path, name: str, times: list[str]) -> Path:
    path = tmp_path / "staging" / "fluentd01.web.access" / DAY_DIR / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"time": time, "user_id": 1, "action": "view"}) + "\n" for time in times))
    return path


@pytest.mark.spark
def test_sql_over_a_small_object_deleted_behind_the_catalogs_back_fails_in_one_line(tmp_path: Path, spark) -> None:
    env = deployment_with_table(tmp_path)
    stage(tmp_path, "batch-0001.json", ["2026-11-20T01:00:00Z", "2026-11-20T02:00:00Z"])
    deployment = in_process(env, spark)
    try:
        assert stream_once(deployment).processed == 1
        publish_once(deployment)
    finally:
        deployment.close()
    (small_object,) = (tmp_path / "lake").rglob("obj-*.parquet")
    small_object.unlink()

    for engine in ("duckdb", "spark"):
        result = run_silt(env, "sql", "--engine", engine, "select count(*) from web.access")
        line = assert_one_line(result, 2)
        assert len(result.stderr.strip().splitlines()) <= 3, result.stderr
        assert small_object.name in line and "missing" in line and "restore it" in line, line

    debug = run_silt(env, "--debug", "sql", "--engine", "spark", "select count(*) from web.access")
    assert debug.returncode == 2, debug.stderr
    assert "Traceback (most recent call last)" in debug.stderr, debug.stderr
    assert "at org.apache.spark" in debug.stderr, "the JVM's trace too"
    assert error_lines(debug.stderr)[-1] == line


@pytest.mark.spark
def test_stream_once_into_an_unwritable_lake_fails_in_one_line(tmp_path: Path) -> None:
    env = deployment_with_table(tmp_path)
    stage(tmp_path, "batch-0001.json", ["2026-11-20T01:00:00Z"])
    # Tests run as root, whom file permissions do not stop: a regular file stands where a directory must be.
    table_dir = tmp_path / "lake" / "test0001" / "web.access"
    table_dir.write_text("not a directory\n")
    result = run_silt(env, "stream", "--once")
    line = assert_one_line(result, 2)
    assert str(table_dir) in line and "not a directory" in line, line
    assert "staging objects" in result.stderr, "the progress so far is shown"

    # The whole lake root: the instance-key check, before any write, names it.
    lake = tmp_path / "lake"
    shutil.rmtree(lake)
    lake.write_text("not a directory\n")
    line = assert_one_line(run_silt(env, "stream", "--once"), 2)
    assert str(lake) in line and "not a directory" in line, line


@pytest.mark.spark
def test_stream_once_failing_in_a_later_wave_says_what_the_earlier_waves_committed(tmp_path: Path, spark) -> None:
    env = deployment_with_table(tmp_path, stream={"objects_per_wave": 1}, tables=["access", "other"])
    for table in ("access", "other"):
        path = tmp_path / "staging" / f"fluentd01.web.{table}" / DAY_DIR / "batch.json"
        path.parent.mkdir(parents=True)
        path.write_text(
            json.dumps({"time": "2026-11-20T01:00:00Z"}) + "\n" + json.dumps({"time": "2026-11-20T02:00:00Z"}) + "\n"
        )
    # Objects are registered, so processed, in listing order: the second one's table is where the run fails.
    first, second = (info.key.split("/")[0].split(".", 1)[1] for info in Storage(str(tmp_path / "staging")).list())
    blocked = tmp_path / "lake" / "test0001" / second  # where wave 2's object would be moved to
    blocked.write_text("not a directory\n")

    line = assert_one_line(run_silt(env, "stream", "--once"), 2)
    assert str(blocked) in line, line
    assert line.endswith("this run had committed 1 staging objects (2 records) before it failed"), line
    deployment = in_process(env, spark)
    try:
        assert sql(spark, f"select count(*) AS n from {first}", deployment).first()["n"] == 2, "wave 1 stays"
    finally:
        deployment.close()


@pytest.mark.spark
def test_the_stream_daemon_reports_each_failed_round_in_one_line_and_retries(tmp_path: Path) -> None:
    env = deployment_with_table(tmp_path)
    stage(tmp_path, "batch-0001.json", ["2026-11-20T01:00:00Z"])
    lake = tmp_path / "lake"
    shutil.rmtree(lake)
    lake.write_text("not a directory\n")

    daemon = SiltProcess(tmp_path, "stream", env, "stream", "--interval", "1")
    try:
        wait_until(lambda: daemon.err.read_text().count("stream round failed") >= 2, [daemon], 300, "two failed rounds")
    finally:
        daemon.kill()
    stderr = daemon.err.read_text()
    assert "Traceback" not in stderr and "at org.apache" not in stderr, stderr
    failures = [line for line in stderr.splitlines() if "stream round failed" in line]
    assert all(str(lake) in line and "retrying in" in line for line in failures), stderr


def test_an_unexpected_error_exits_1_in_one_line_and_debug_shows_its_trace(tmp_path: Path) -> None:
    """A table definition in the catalog that siltlake cannot parse (an edit by hand, a corrupted row)."""
    env = deployment_with_table(tmp_path)
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'catalog.db'}")
    with engine.begin() as connection:
        connection.execute(s.tables.update().values(definition='{"schema": "web", "name": 42}'))
    engine.dispose()

    line = assert_one_line(run_silt(env, "table", "list"), 1)
    assert line.startswith("error: unexpected ValidationError") and "rerun with --debug" in line, line

    debug = run_silt({**env, "SILTLAKE_DEBUG": "1"}, "table", "list")
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr and "TableDef" in debug.stderr, debug.stderr


def test_an_unreachable_catalog_fails_in_one_line(tmp_path: Path) -> None:
    env = silt_env(tmp_path, "postgresql+psycopg://postgres@127.0.0.1:9/nowhere")  # port 9: nothing listens
    env.pop("SILTLAKE_DEBUG", None)
    for args in (("status",), ("table", "list")):  # a SiltError from check_ready, SQLAlchemy's own error
        result = run_silt(env, *args)
        line = assert_one_line(result, 2)
        assert "127.0.0.1" in line and "catalog" in line, line
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def silt_in(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`silt` run in a directory, with no configuration but the defaults (a catalog under ./.siltlake)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("SILTLAKE_")}
    return subprocess.run(
        [sys.executable, "-m", "siltlake.cli", *args],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("args", [("status",), ("table", "list"), ("history", "web.access"), ("unknown", "list")])
def test_read_only_commands_in_an_empty_directory_create_nothing(tmp_path: Path, args: tuple[str, ...]) -> None:
    result = silt_in(tmp_path, *args)
    assert list(tmp_path.iterdir()) == [], "nothing is created"
    line = assert_one_line(result, 2)
    assert f"no catalog at {tmp_path / '.siltlake' / 'catalog.db'}" in line and "run `silt init`" in line, line

    init = silt_in(tmp_path, "init")
    assert init.returncode == 0, init.stderr
    assert (tmp_path / ".siltlake" / "catalog.db").is_file()
    assert silt_in(tmp_path, "status").returncode == 0


def test_file_system_errors_from_python_and_pyarrow_name_the_path_and_what_to_do(tmp_path: Path) -> None:
    import pyarrow.fs as pafs

    from siltlake.cli.failures import describe

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    target = blocker / "below"
    with pytest.raises(OSError) as python_error:
        target.open("w")
    with pytest.raises(OSError) as arrow_error:
        pafs.LocalFileSystem().create_dir(str(target), recursive=True)
    for exc in (python_error.value, arrow_error.value):
        failure = describe(exc)
        assert failure.status == 2, failure
        assert f"({target})" in failure.message and "not a directory" in failure.message, failure
        assert failure.message.endswith("move it away or point the configuration elsewhere"), failure
