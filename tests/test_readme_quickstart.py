"""README's quick start and its Python section, run as written: their shell and Python blocks, in order, in an
empty directory (a Python block runs with the test's interpreter, in the directory the shell blocks left)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def quick_start_blocks() -> list[tuple[str, str]]:
    """(language, code) of every sh and python block from "## Quick start" to "## Where to go next"."""
    text = README.read_text()
    section = text[text.index("## Quick start\n") : text.index("## Where to go next\n")]
    return re.findall(r"^```(sh|python)\n(.*?)^```$", section, re.S | re.M)


def quick_start_script() -> str:
    blocks = quick_start_blocks()
    assert sum(language == "sh" for language, _ in blocks) >= 6, "the quick start's shell blocks"
    assert sum(language == "python" for language, _ in blocks) >= 4, "the quick start's and the Python section's"
    parts = []
    for language, code in blocks:
        assert "PYTHON_BLOCK" not in code
        parts.append(code if language == "sh" else f"\"$PYTHON\" - <<'PYTHON_BLOCK'\n{code}PYTHON_BLOCK\n")
    return "\n".join(parts)


def silt_on_path(directory: Path) -> str:
    """A `silt` that runs this checkout's code with the test's interpreter, first on the PATH."""
    directory.mkdir()
    silt = directory / "silt"
    silt.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m siltlake.cli "$@"\n')
    silt.chmod(silt.stat().st_mode | stat.S_IXUSR)
    return f"{directory}{os.pathsep}{os.environ['PATH']}"


@pytest.mark.spark
def test_the_readme_quick_start_runs_as_written(tmp_path: Path) -> None:
    script = quick_start_script()
    assert "silt merge --once --now" in script
    env = {name: value for name, value in os.environ.items() if not name.startswith("SILTLAKE_")}
    env.update(
        PATH=silt_on_path(tmp_path / "bin"), COLUMNS="200", PYTHONPATH=os.pathsep.join(sys.path), PYTHON=sys.executable
    )
    work = tmp_path / "work"
    work.mkdir()
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    rows = re.findall(r"^\s*(\d{4}-\d\d-\d\d)\s+(buy|view)\s+(\d+)\s*$", result.stdout, re.MULTILINE)
    assert rows == [("2026-11-20", "buy", "1"), ("2026-11-20", "view", "2")], result.stdout
    assert re.search(r"2026-11-20\s+1\s", result.stdout), f"history shows version 1 of the day:\n{result.stdout}"
    out = result.stdout
    # Three engines: Spark as of version 1, then pyarrow and DuckDB on the switched day.
    assert re.search(r"^\s*buy\s+1\s*$.*^\s*view\s+2\s*$", out, re.M | re.S), out
    assert "{'user_id': 1, 'action': 'view'}" in out and "[('buy', 1), ('view', 2)]" in out, out
    # The Python section: a scan, the alter's version, compact of the late row, the tag read by Python and SQL.
    assert "(1, 2)" in out and "'state': 'switched'" in out, out
    assert "3 ['utc_event_time', 'user_id', 'action', 'referrer', 'status', 'dt']" in out, out
    assert "['utc_event_time', 'user_id', 'action', 'dt']" in out, out
    assert "1 [{'dt': datetime.date(2026, 11, 20), 'state': 'switched', 'rows': 4}]" in out, out
    assert "{'first-day': 2} 3" in out, out
    assert re.search(r"^\s*n\s*$\n[─-]+\n^\s*3\s*$", out, re.M), f"VERSION AS OF 'first-day':\n{out}"
    assert "Traceback" not in result.stderr and "error:" not in result.stderr, result.stderr
