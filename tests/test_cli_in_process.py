"""`silt` commands run in-process (as the demos run them) leave no catalog connection behind."""

from __future__ import annotations

import gc

import pytest
import sqlalchemy as sa

from siltlake.cli import main as silt_main

from .conftest import PG_ADMIN_URL

pytestmark = pytest.mark.postgres


def test_each_in_process_command_closes_its_catalog_connections(tmp_path, postgres_url) -> None:
    config = tmp_path / "siltlake.toml"
    config.write_text(
        f'[catalog]\nurl = "{postgres_url}"\n[storage]\nroot = "{tmp_path / "lake"}"\n'
        f'staging_root = "{tmp_path / "staging"}"\n'
    )
    database = postgres_url.rsplit("/", 1)[1]
    admin = sa.create_engine(PG_ADMIN_URL)

    def connections() -> int:
        with admin.connect() as connection:
            return connection.execute(
                sa.text("SELECT count(*) FROM pg_stat_activity WHERE datname = :name"), {"name": database}
            ).scalar_one()

    gc.disable()  # what a gc cycle would collect is not what this test is about
    try:
        for args in (["init"], ["publish", "--once"], ["status"], ["publish", "--once"]):
            silt_main.main(["--config", str(config), *args], prog_name="silt", standalone_mode=False)
        assert connections() == 0
    finally:
        gc.enable()
        admin.dispose()
