"""README's "Quick start by hand", run as written: its shell blocks, in order, in an empty directory."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def quick_start_script() -> str:
    text = README.read_text()
    section = text[text.index("## Quick start by hand\n"):]
    section = section[:section.index("\n## ", 1)]
    blocks = re.findall(r"^```sh\n(.*?)^```$", section, re.S | re.M)
    assert len(blocks) >= 4, "the quick start's shell blocks"
    return "\n".join(blocks)


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
    env.update(PATH=silt_on_path(tmp_path / "bin"), COLUMNS="200", PYTHONPATH=os.pathsep.join(sys.path))
    work = tmp_path / "work"
    work.mkdir()
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env, capture_output=True,
                            text=True, timeout=900)
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    rows = re.findall(r"^\s*(\d{4}-\d\d-\d\d)\s+(buy|view)\s+(\d+)\s*$", result.stdout, re.MULTILINE)
    assert rows == [("2026-11-20", "buy", "1"), ("2026-11-20", "view", "2")], result.stdout
    assert re.search(r"2026-11-20\s+1\s", result.stdout), f"history shows version 1 of the day:\n{result.stdout}"
    assert "Traceback" not in result.stderr and "error:" not in result.stderr, result.stderr
