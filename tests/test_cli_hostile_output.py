"""Log data cannot drive the operator's terminal: human listings and messages show control
characters as escapes and never read data as Rich markup; JSON and CSV keep the data exact."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from siltlake.catalog.rows import FailingStagingObject
from siltlake.cli import main
from siltlake.clock import utcnow
from siltlake.deployment import Deployment

from .merge_helpers import point_cli_at
from .test_merge import make_table
from .test_stream import stage

pytestmark = pytest.mark.spark

# A window title, a colour, a C1 CSI, a right-to-left override, Rich markup and a hyperlink.
HOSTILE = "\x1b]0;pwned\x07\x1b[31mred\x9b2J\u202e[bold]b[/bold][link=file:///etc/passwd]x[/link]\r\nz"
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture
def catalog_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'catalog.db'}"


@pytest.fixture
def silt(deployment: Deployment, monkeypatch):  # fixtures; a function
    """web.access (bad records kept in error files) with a hostile value, a hostile bad record and an unknown
    object, streamed: `silt(...)` runs a command in this process and returns its click Result."""
    make_table(deployment, error_policy="file")
    records = [{"time": "2026-11-20T01:00:00Z", "user_id": 1, "action": HOSTILE}]
    stage(
        deployment,
        "f.web.access/2026/11/20/a.jsonl",
        ("".join(json.dumps(r) + "\n" for r in records) + "{" + HOSTILE + "\n").encode(),
    )
    stage(deployment, "f.web.nosuch/2026/11/20/b.jsonl", b"{}\n")
    point_cli_at(deployment, monkeypatch)
    runner = CliRunner()

    def run(*args: str):
        result = runner.invoke(main, list(args), catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result

    return run


def assert_inert(output: str, name: str) -> None:
    assert not CONTROL.search(output), (name, output)


def test_human_output_shows_control_characters_and_markup_as_written(silt, deployment: Deployment, monkeypatch) -> None:
    streamed = silt("stream", "--once").output
    assert "bad record" in streamed
    assert_inert(streamed, "stream report")
    query = "SELECT action FROM web.access"
    shown = silt("sql", query).stdout
    assert_inert(shown, "sql")
    assert (
        "\\x1b]0;pwned\\x07\\x1b[31mred\\x9b2J\\u202e[bold]b[/bold][link=file:///etc/passwd]x[/link]\\r\\nz"
        in shown.replace("\n", "").replace(" ", "")
    )
    # JSON and CSV keep the value exact.
    assert json.loads(silt("sql", query, "--format", "json").stdout) == [{"action": HOSTILE}]
    written = silt("sql", query, "--format", "csv").stdout_bytes.decode()  # .stdout would turn \r\n into \n
    assert list(csv.reader(io.StringIO(written, newline=""))) == [["action"], [HOSTILE]]
    for args in (
        ["errors", "list", "web.access"],
        ["unknown", "list"],
        ["table", "show", "web.access"],
        ["history", "web.access"],
    ):
        assert_inert(silt(*args).output, " ".join(args))
    # A failing staging object's reason quotes what it read.
    failing = FailingStagingObject("file:///staging/" + HOSTILE, "web.access", 1, "cannot read " + HOSTILE, utcnow())
    monkeypatch.setattr(type(deployment.catalog.staging), "failing", lambda self: [failing])
    status = silt("status").output
    assert_inert(status, "status")
    assert "cannot read \\x1b]0;pwned" in status and "[link=file:///etc/passwd]x[/link]" in status
