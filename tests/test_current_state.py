"""VersionReads.current_state, the one statement a reader asks on each call, run on the DBAPI connection as it is
(CatalogCore.read_row), on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pytest

from siltlake.catalog import Catalog
from siltlake.deployment import Deployment
from siltlake.errors import CatalogError
from siltlake.tabledef import Column

from .merge_helpers import add_small_objects

DAY = dt.date(2026, 11, 20)
DAYS = [DAY + dt.timedelta(days=n) for n in range(6)]
ROW = {"utc_event_time": dt.datetime(2026, 11, 20, 3, tzinfo=dt.UTC), "user_id": 1, "action": "view"}


def test_the_state_of_the_days_asked_about_follows_their_commits_only(plain_deployment: Deployment) -> None:
    catalog = plain_deployment.catalog
    record = catalog.tables.get("web.access")
    asked = {
        "one day": DAYS[:1],
        "three": DAYS[:3],
        "five": DAYS[:5],
        "all": None,
        "600": [DAY + dt.timedelta(days=n) for n in range(600)],
    }

    def states() -> dict[str, tuple[int, int]]:
        return {name: catalog.version_reads.current_state(record.id, days) for name, days in asked.items()}

    version = states()["all"][0]
    assert states() == dict.fromkeys(asked, (version, 0))
    (third,) = add_small_objects(plain_deployment, record, DAYS[2], [[ROW]], write_files=False)
    assert states() == {"one day": (version, 0), **dict.fromkeys(["three", "five", "all", "600"], (version, third))}
    (sixth,) = add_small_objects(plain_deployment, record, DAYS[5], [[ROW]], write_files=False)
    assert states() == {
        "one day": (version, 0),
        "three": (version, third),
        "five": (version, third),
        "all": (version, sixth),
        "600": (version, sixth),
    }
    catalog.tables.add_column("web.access", Column(name="status", type="int"))
    assert {state[0] for state in states().values()} == {version + 1}


@pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)  # PostgreSQL's reads take a pooled connection
def test_a_failed_reader_connection_is_replaced_and_the_answer_still_comes(plain_deployment: Deployment) -> None:
    catalog = plain_deployment.catalog
    record = catalog.tables.get("web.access")
    (first,) = add_small_objects(plain_deployment, record, DAY, [[ROW]], write_files=False)
    core = catalog.versions._core
    expected = catalog.version_reads.current_state(record.id, [DAY])
    assert expected[1] == first
    core._reader.connection.dbapi_connection.close()  # the connection read_row keeps fails under it
    assert catalog.version_reads.current_state(record.id, [DAY]) == expected  # answered through SQLAlchemy
    assert core._reader.connection is None
    assert catalog.version_reads.current_state(record.id, [DAY]) == expected  # on a new reader connection
    assert core._reader.connection is not None


def test_an_uninitialised_catalog_tells_the_reader_to_run_init(tmp_path) -> None:
    catalog = Catalog(f"sqlite:///{tmp_path / 'none.db'}")
    with pytest.raises(CatalogError, match="run `silt init`"):
        catalog.version_reads.current_state(1, [DAY])
    catalog.close()


@pytest.mark.parametrize("catalog_url", ["sqlite"], indirect=True)  # only SQLite's reader keeps answers
def test_an_answer_is_asked_again_only_once_the_database_has_changed(plain_deployment: Deployment) -> None:
    catalog = plain_deployment.catalog
    record = catalog.tables.get("web.access")
    first = catalog.version_reads.current_state(record.id, [DAY])
    statements: list[str] = []
    catalog.versions._core._reader.connection.dbapi_connection.set_trace_callback(statements.append)
    assert [catalog.version_reads.current_state(record.id, [DAY]) for _ in range(3)] == [first] * 3
    assert statements == ["PRAGMA data_version"] * 3
    (added,) = add_small_objects(plain_deployment, record, DAY, [[ROW]], write_files=False)
    assert catalog.version_reads.current_state(record.id, [DAY]) == (first[0], added)
    assert statements[3] == "PRAGMA data_version" and statements[4].startswith("SELECT")
    assert catalog.version_reads.current_state(record.id, [DAY + dt.timedelta(days=1)]) == (first[0], 0)  # its own
    assert len(statements) == 7


def test_a_commit_by_another_process_is_seen_on_the_next_call(plain_deployment: Deployment) -> None:
    catalog = plain_deployment.catalog
    record = catalog.tables.get("web.access")
    version, _ = catalog.version_reads.current_state(record.id, [DAY])
    code = (
        "import sys\nfrom siltlake.catalog import Catalog\nfrom siltlake.tabledef import Column\n"
        "catalog = Catalog(sys.argv[1])\ncatalog.tables.add_column('web.access', Column(name='status', "
        "type='int'))\ncatalog.close()\n"
    )
    subprocess.run([sys.executable, "-c", code, catalog.url], check=True, timeout=120)
    assert catalog.version_reads.current_state(record.id, [DAY]) == (version + 1, 0)
