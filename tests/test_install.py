"""The built wheel in a fresh venv, installed the way the image installs it (deploy/install.sh) with no extras:
it reads a table with pyarrow, DuckDB and `silt sql`, and the pipeline's commands name the spark extra.

Marked `install` (about two minutes and 600 MB of downloads with a warm pip cache): `make install-check`, not
`make test`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from siltlake.deployment import Deployment
from siltlake.publish import publish_once

from .conftest import make_config
from .merge_helpers import add_small_objects
from .test_fast_sql import WITHOUT_SPARK, batch, write_config_file
from .test_merge import DAY, make_table

ROOT = Path(__file__).parent.parent
pytestmark = pytest.mark.install


def test_the_wheel_without_extras_reads_a_table_in_a_fresh_venv(tmp_path: Path) -> None:
    deployment = Deployment(make_config(tmp_path / "lake", f"sqlite:///{tmp_path / 'catalog.db'}"))
    deployment.init()
    table = make_table(deployment)
    add_small_objects(deployment, table, DAY, [batch(DAY, 30), batch(DAY, 20)])
    publish_once(deployment)
    deployment.close()
    work = tmp_path / "work"
    work.mkdir()
    write_config_file(deployment.config, work)

    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(dist)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = dist.glob("siltlake-*.whl")
    venv = tmp_path / "venv"
    # Outside the checkout: a PYTHONPATH naming it (how the tests run from a worktree) would let pip take the
    # checkout's build metadata for an installed siltlake.
    clean = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "VIRTUAL_ENV")}
    install = subprocess.run(
        ["sh", str(ROOT / "deploy" / "install.sh"), str(venv), str(wheel), ""],
        capture_output=True,
        text=True,
        timeout=1200,
        env=clean,
        cwd=tmp_path,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    python = venv / "bin" / "python"
    where = subprocess.run(
        [python, "-c", "import importlib.util as u, siltlake; print(u.find_spec('pyspark')); print(siltlake.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        env=clean,
        cwd=tmp_path,
    ).stdout.split()
    assert where[0] == "None" and where[1].startswith(str(venv))

    # WITHOUT_SPARK also blocks PySpark itself; here it is truly not installed, outside the checkout.
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [python, "-c", WITHOUT_SPARK, *args], cwd=work, capture_output=True, text=True, timeout=300, env=clean
        )

    result = run("read")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"arrow": 50, "duckdb": 50}
    result = run("cli", "sql", "SELECT count(*) AS n FROM web.access", "--format", "csv")
    assert result.returncode == 0 and result.stdout.splitlines() == ["n", "50"], result.stderr
    result = subprocess.run(
        [venv / "bin" / "silt", "stream", "--once"], cwd=work, capture_output=True, text=True, timeout=300, env=clean
    )
    assert result.returncode == 2
    assert "pip install 'siltlake[spark]'" in " ".join(result.stderr.split()), result.stderr
    import siltlake

    version = subprocess.run(
        [venv / "bin" / "silt", "--version"], capture_output=True, text=True, check=True, env=clean
    )
    assert version.stdout.split()[-1] == siltlake.__version__
