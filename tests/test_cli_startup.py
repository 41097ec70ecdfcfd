"""`silt --help` and read-only commands start without the heavy libraries (their CPU time is
bench/cli_startup_bench.py's job): checked on the modules a fresh interpreter has loaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from siltlake.catalog import Catalog
from siltlake.catalog.core import HEAD_REVISION

HEAVY = ("pyspark", "pandas", "pyarrow", "fastparquet", "numpy", "alembic", "sqlglot")


def loaded_after(code: str, cwd: Path) -> set[str]:
    """Top-level packages loaded by a fresh interpreter after running code (which may end in SystemExit)."""
    script = (
        f"import sys\ntry:\n    {code}\nexcept SystemExit:\n    pass\n"
        "import json\nprint(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


def test_importing_the_cli_loads_no_heavy_library(tmp_path: Path) -> None:
    loaded = loaded_after("import siltlake.cli", tmp_path)
    assert "siltlake" in loaded
    assert not loaded & {*HEAVY, "sqlalchemy"}, sorted(loaded & {*HEAVY, "sqlalchemy"})


def test_silt_help_and_status_load_no_heavy_library(tmp_path: Path) -> None:
    init = subprocess.run(
        [sys.executable, "-m", "siltlake.cli", "init"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert init.returncode == 0, init.stderr
    for args in (["--help"], ["status"], ["table", "list"]):
        loaded = loaded_after(f"from siltlake.cli import main; main({args!r}, prog_name='silt')", tmp_path)
        assert not loaded & set(HEAVY), (args, sorted(loaded & set(HEAVY)))


def test_the_head_revision_check_ready_uses_is_alembics(tmp_path: Path) -> None:
    catalog = Catalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    try:
        assert catalog.head_revision() == HEAD_REVISION, "update HEAD_REVISION with each new migration"
        catalog.upgrade()
        assert catalog.revision() == HEAD_REVISION
        catalog.check_ready()
    finally:
        catalog.close()
