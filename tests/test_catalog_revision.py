"""A catalog at another schema revision than this siltlake's: older ones are upgraded by `silt init`; a newer one
(a newer siltlake migrated it) is refused by every command, `silt init` included, with nothing changed."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from siltlake.catalog import Catalog
from siltlake.catalog.core import HEAD_REVISION
from siltlake.deployment import Deployment
from siltlake.errors import CatalogError
from siltlake.lake import Lake

from .processes import run_silt, silt_env


def stamp(catalog: Catalog, revision: str) -> None:
    """What a newer siltlake's `silt init` leaves as far as this one can see: a revision it has no script for."""
    with catalog.engine.begin() as connection:
        connection.execute(sa.text("UPDATE alembic_version SET version_num = :revision"), {"revision": revision})


def test_the_revisions_are_numbered_without_gaps_up_to_the_head(tmp_path: Path) -> None:
    """check_not_newer tells a newer revision from the numbers alone (no Alembic import at start-up)."""
    catalog = Catalog(f"sqlite:///{tmp_path / 'catalog.db'}")
    scripts = ScriptDirectory.from_config(catalog._alembic_config(None))
    assert {script.revision for script in scripts.walk_revisions()} == {
        f"{number:04d}" for number in range(1, int(HEAD_REVISION) + 1)
    }
    assert scripts.get_current_head() == HEAD_REVISION
    catalog.close()


@pytest.mark.parametrize("revision", ["0099", "1a2b3c4d5e6f"])
def test_a_newer_catalog_is_refused_by_check_ready_and_upgrade_changing_nothing(
    plain_deployment: Deployment, revision: str
) -> None:
    catalog = plain_deployment.catalog
    stamp(catalog, revision)
    said = "newer than siltlake" if revision.isdigit() else "not one siltlake"
    for step in (catalog.check_ready, catalog.upgrade, plain_deployment.init):
        with pytest.raises(CatalogError, match=said) as refused:
            step()
        assert catalog.masked_url in str(refused.value) and HEAD_REVISION in str(refused.value)
        assert "silt init" not in str(refused.value)
    assert catalog.revision() == revision
    with pytest.raises(CatalogError, match=said):
        Lake.open(plain_deployment.config)


def test_an_older_catalog_is_upgraded_by_init(plain_deployment: Deployment) -> None:
    catalog = plain_deployment.catalog
    previous = f"{int(HEAD_REVISION) - 1:04d}"
    catalog.downgrade(previous)
    with pytest.raises(
        CatalogError,
        match=rf"revision {previous}, older than this siltlake's {HEAD_REVISION}: run "
        "`silt init`",
    ):
        catalog.check_ready()
    plain_deployment.init()
    catalog.check_ready()
    assert catalog.revision() == HEAD_REVISION


def test_every_command_refuses_a_newer_catalog_in_one_line(plain_deployment: Deployment, tmp_path: Path) -> None:
    """`silt sql` (even on DuckDB, even a query naming no table), a listing, `silt status` and `silt init`."""
    env = silt_env(tmp_path, plain_deployment.config.catalog.url)
    env.pop("SILTLAKE_DEBUG", None)
    stamp(plain_deployment.catalog, "0099")
    plain_deployment.close()
    for args in (
        ("sql", "SELECT count(*) FROM web.access"),
        ("sql", "SELECT 1"),
        ("table", "list"),
        ("status",),
        ("init",),
    ):
        result = run_silt(env, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stdout == "" and "Traceback" not in result.stderr, (args, result.stderr)
        (line,) = result.stderr.strip().splitlines()
        assert "is at revision 0099, newer than siltlake" in line and "upgrade siltlake" in line, line
    reopened = Catalog(plain_deployment.config.catalog.url)
    assert reopened.revision() == "0099"  # init changed nothing
    reopened.close()
