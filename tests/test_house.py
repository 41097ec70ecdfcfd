"""The shape of the code: the import layers of docs/design.md hold, and no module grows past 600 lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 600


def test_import_contracts_hold() -> None:
    """The contracts in pyproject.toml ([tool.importlinter]): layers, no cycles, SQL only in the catalog."""
    lint_imports = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_no_module_over_600_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): lines
        for folder in ("siltlake", "tests", "bench")
        for path in (ROOT / folder).rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"split these modules by concern (at most {MAX_MODULE_LINES} lines each): {long}"
