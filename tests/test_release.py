"""What a release is: one version in pyproject, the package, `silt --version`, the changelog and the wheel, and the
catalog schema revision the changelog names is the one this code migrates to."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from click.testing import CliRunner

import siltlake
from siltlake.catalog.core import HEAD_REVISION
from siltlake.cli import main

ROOT = Path(__file__).parent.parent


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def newest_changelog_entry() -> re.Match:
    match = re.search(r"^## (\S+) .*catalog schema revision (\d{4})$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert match, "CHANGELOG.md's newest entry is a '## <version> ... catalog schema revision NNNN' heading"
    return match


def test_one_version_in_pyproject_the_package_the_cli_and_the_changelog() -> None:
    version = project()["version"]
    assert siltlake.__version__ == version
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0 and result.output.split()[-1] == version
    assert newest_changelog_entry().group(1) == version


def test_the_changelog_names_the_schema_revision_the_migrations_end_at() -> None:
    versions = ROOT / "siltlake" / "catalog" / "migrations" / "versions"
    revisions = sorted(
        re.search(r'^revision = "(\d+)"', path.read_text(), re.M).group(1) for path in versions.glob("*.py")
    )
    assert revisions[-1] == HEAD_REVISION == newest_changelog_entry().group(2)


def test_the_package_metadata_names_its_license_authors_and_extras() -> None:
    meta = project()
    assert meta["license"] == "Apache-2.0" and (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")
    assert meta["authors"] == [{"name": "siltlake engineers"}] and set(meta["urls"]) >= {"Homepage", "Source"}
    assert not any(dep.startswith("pyspark") for dep in meta["dependencies"])
    assert [dep for dep in meta["optional-dependencies"]["spark"] if dep.startswith("pyspark")]
    pandas = [dep for dep in meta["dependencies"] if dep.startswith("pandas")]
    assert pandas and "<3" in pandas[0]


def test_the_wheel_carries_the_version_the_license_and_the_migrations(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q", "-w", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = tmp_path.glob("siltlake-*.whl")
    version = project()["version"]
    assert wheel.name.startswith(f"siltlake-{version}-")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(f"siltlake-{version}.dist-info/METADATA").decode()
    assert f"\nVersion: {version}\n" in metadata and "License-Expression: Apache-2.0" in metadata
    assert f"siltlake-{version}.dist-info/licenses/LICENSE" in names
    assert "siltlake/py.typed" in names, "type checkers read the package's annotations (PEP 561)"
    assert any(re.search(rf"migrations/versions/{HEAD_REVISION}_\w+\.py$", name) for name in names)
    assert "Requires-Dist: pyspark" in metadata and 'extra == "spark"' in metadata.split("Requires-Dist: pyspark")[1]
