"""A reader that stops early (`silt status | head -3`) ends a command quietly, as it ends a Unix tool: status 141
(or 0 if everything was written before), no error line, no trace."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from siltlake.config import load_config
from siltlake.deployment import Deployment
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE
from .processes import silt_env

WIDE_COLUMNS = 3000  # `silt table show` writes about 200 KB: more than a pipe holds, so head's exit is met


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp_path = tmp_path_factory.mktemp("closed_output")
    env = silt_env(tmp_path, f"sqlite:///{tmp_path / 'catalog.db'}")
    for name in ("SILTLAKE_DEBUG", "PYTHONUNBUFFERED"):  # a user's shell: one error line, a buffered stdout
        env.pop(name, None)
    deployment = Deployment(load_config(environ=env))
    try:
        deployment.init()
        columns = [
            *ACCESS_TABLE["columns"],
            *({"name": f"column_{number:04d}_of_a_wide_table", "type": "string"} for number in range(WIDE_COLUMNS)),
        ]
        deployment.catalog.tables.create(TableDef.from_mapping({**ACCESS_TABLE, "name": "wide", "columns": columns}))
        for number in range(8):
            deployment.catalog.tables.create(TableDef.from_mapping({**ACCESS_TABLE, "name": f"t{number}"}))
    finally:
        deployment.close()
    return env


@pytest.mark.parametrize(
    "args",
    [("status",), ("table", "show", "web.wide"), ("table", "show", "web.wide", "--format", "json"), ("table", "list")],
)
def test_a_reader_that_stops_early_ends_the_command_quietly(environment: dict[str, str], args: tuple[str, ...]) -> None:
    piped = subprocess.run(
        ["bash", "-c", '"$@" | head -3; exit "${PIPESTATUS[0]}"', "bash", sys.executable, "-m", "siltlake.cli", *args],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert len(piped.stdout.splitlines()) == 3, piped.stdout
    assert piped.returncode in (0, 141), (piped.returncode, piped.stderr)
    assert piped.stderr == "", piped.stderr  # no "error: ... Broken pipe", no "Exception ignored", no trace


def test_the_wide_listing_is_cut_by_the_pipe_not_finished_before_it(environment: dict[str, str]) -> None:
    """The case that matters is met: the command is still writing when head exits."""
    piped = subprocess.run(
        [
            "bash",
            "-c",
            '"$@" | head -3 >/dev/null; exit "${PIPESTATUS[0]}"',
            "bash",
            sys.executable,
            "-m",
            "siltlake.cli",
            "table",
            "show",
            "web.wide",
            "--format",
            "json",
        ],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert piped.returncode == 141, piped.stderr


def test_a_full_reader_sees_everything_and_status_0(environment: dict[str, str], tmp_path: Path) -> None:
    whole = subprocess.run(
        [sys.executable, "-m", "siltlake.cli", "table", "show", "web.wide"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert whole.returncode == 0 and whole.stderr == "", whole.stderr
    assert f"column_{WIDE_COLUMNS - 1:04d}_of_a_wide_table" in whole.stdout
