"""A SQLite catalog file deleted or replaced under a running process: the next transaction says so, instead of
writing to the unlinked file no other process reads, and the daemons' loops stop on it rather than retry."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from siltlake.catalog import Catalog, CatalogReplaced
from siltlake.polling import poll_forever
from siltlake.run.single_host import Loop, supervise
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE


def remove_catalog(path: Path) -> None:
    for name in (path.name, f"{path.name}-wal", f"{path.name}-shm"):
        (path.parent / name).unlink(missing_ok=True)


@pytest.fixture
def catalog_file(tmp_path: Path) -> Path:
    return tmp_path / "catalog.db"


@pytest.fixture
def catalog(catalog_file: Path) -> Catalog:
    catalog = Catalog(f"sqlite:///{catalog_file}")
    catalog.upgrade()
    catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    yield catalog
    catalog.close()


def test_a_deleted_catalog_file_is_reported_not_written_to(catalog: Catalog, catalog_file: Path) -> None:
    remove_catalog(catalog_file)
    with pytest.raises(CatalogReplaced, match=f"the catalog file {catalog_file} was deleted or replaced"):
        catalog.tables.create(TableDef.from_mapping({**ACCESS_TABLE, "name": "late"}))
    with pytest.raises(CatalogReplaced, match="restart"):
        catalog.tables.list()


def test_a_replaced_catalog_file_is_reported(catalog: Catalog, catalog_file: Path) -> None:
    other = catalog_file.with_name("other.db")
    second = Catalog(f"sqlite:///{other}")
    second.upgrade()
    second.close()
    os.replace(other, catalog_file)  # e.g. a restore from a backup under the running process
    with pytest.raises(CatalogReplaced):
        catalog.tables.list()


def test_the_daemons_loops_stop_on_a_deleted_catalog(catalog: Catalog, catalog_file: Path) -> None:
    stop = threading.Event()
    rounds: list[int] = []
    errors: list[Exception] = []

    def round_() -> int:
        if len(rounds) == 2:
            remove_catalog(catalog_file)
        if len(rounds) > 20:
            stop.set()  # bounds the test should the deletion go unnoticed
        return len(catalog.tables.list())

    with pytest.raises(CatalogReplaced):
        poll_forever(round_, stop, 0.01, rounds.append, on_error=lambda exc, wait: errors.append(exc))
    assert rounds == [1, 1] and errors == [], "stopped at once, not retried"

    # `silt run`: the loop that meets it stops every loop and keeps the error to report.
    loop = Loop("publish", 0.01, lambda stop: poll_forever(round_, stop, 0.01, rounds.append))
    fatal: list[BaseException] = []
    done = threading.Thread(target=supervise, args=(loop, stop, lambda *args: None, fatal.append))
    done.start()
    done.join(10)
    assert not done.is_alive() and stop.is_set()
    assert isinstance(fatal[0], CatalogReplaced) and loop.status.state == "stopped"


def test_a_daemon_stops_with_one_line_when_its_catalog_file_is_deleted(tmp_path: Path) -> None:
    """A real `silt publish` daemon (no Spark) on a SQLite file catalog."""
    from .processes import SiltProcess, run_silt, silt_env, wait_until

    path = tmp_path / "catalog.db"
    env = silt_env(tmp_path, f"sqlite:///{path}")
    assert run_silt(env, "init").returncode == 0
    daemon = SiltProcess(tmp_path, "publish", env, "publish", "--interval", "1")
    try:
        wait_until(lambda: "publish: 0 partitions switched" in daemon.log(), [daemon], 60, "a publish round")
        remove_catalog(path)
        daemon.proc.wait(timeout=30)
    finally:
        if daemon.alive():
            daemon.kill()
    assert daemon.proc.returncode == 2, daemon.tail()
    assert f"the catalog file {path} was deleted or replaced" in " ".join(daemon.log().split())
    assert "Traceback" not in daemon.log()
