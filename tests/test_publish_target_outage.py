"""A catalog database down during a publish target's phase is an outage, said as in every other step: never a
target's bug with the SQL statement that failed."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from siltlake.deployment import Deployment
from siltlake.publish.iceberg.target import IcebergTarget
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE, PG_ADMIN_URL
from .merge_helpers import silt_in_process


def refuse_connections(url: str) -> None:
    """An outage of one PostgreSQL database: its connections ended, new ones refused (the test's own database
    on the shared server; the fixture drops it with FORCE afterwards)."""
    name = make_url(url).database
    engine = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        connection.exec_driver_sql(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
        connection.execute(
            sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :name "
                "AND pid <> pg_backend_pid()"
            ),
            {"name": name},
        )
    engine.dispose()


def test_the_catalog_down_in_the_iceberg_phase_fails_the_run_as_an_outage(
    plain_deployment: Deployment, monkeypatch, request
) -> None:  # pytest's
    url = plain_deployment.config.catalog.url
    if not url.startswith("postgresql"):
        pytest.skip("an outage of a PostgreSQL catalog (SQLite's file has no server to stop)")
    silt = silt_in_process(plain_deployment, monkeypatch)
    monkeypatch.setenv("SILTLAKE_PUBLISH__TARGETS", "iceberg")  # its SQL catalog in siltlake's database
    sync_partitions = IcebergTarget.sync_partitions

    def down_then_sync(self: IcebergTarget, tables):  # the target's own signature
        refuse_connections(url)  # the steps before committed; the Iceberg phase meets the outage
        return sync_partitions(self, tables)

    monkeypatch.setattr(IcebergTarget, "sync_partitions", down_then_sync)
    output = silt("publish", "--once", code=2)
    (line,) = [line for line in output.splitlines() if line.startswith("error:")]
    assert "the catalog failed" in line and "not currently accepting connections" in line, output
    assert "check that its server is up" in line and "iceberg follows in the next run" in line, output
    assert "[SQL:" not in output and "this is a bug" not in output and "Traceback" not in output, output


def test_the_iceberg_catalogs_own_database_down_is_one_line_without_sql(
    plain_deployment: Deployment, monkeypatch
) -> None:  # pytest's
    plain_deployment.catalog.tables.create(TableDef.from_mapping({**ACCESS_TABLE, "name": "other"}))
    silt = silt_in_process(plain_deployment, monkeypatch)
    monkeypatch.setenv("SILTLAKE_PUBLISH__TARGETS", "iceberg")
    monkeypatch.setenv("SILTLAKE_PUBLISH__ICEBERG__CATALOG_URL", "postgresql+psycopg://postgres@127.0.0.1:9/nowhere")
    output = " ".join(silt("publish", "--once", code=1).split())  # a target failed: retried by the next run
    (error,) = [part for part in output.split("error: ")[1:]]
    assert error.startswith("iceberg: its catalog database could not be used (connection failed:"), output
    assert "port 9 failed: Connection refused" in error and "publish.iceberg.catalog_url" in error, output
    assert "web.access" not in error and "web.other" not in error, "one outage, not one failure per table"
    assert "OperationalError" not in output and "sqlalche.me" not in output and "[SQL:" not in output, output
