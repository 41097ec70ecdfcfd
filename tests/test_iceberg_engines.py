"""Two cases the reader matrices (tests/test_iceberg_readers.py, tests/test_iceberg_keyed.py) leave out: PyIceberg
through the REST catalog (`silt iceberg serve`) reading a keyed table's position deletes, and what each engine does
when asked for a time before the table's first snapshot. No Spark; DuckDB in the readers venv (skipped without it,
failed under CI)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from siltlake.deployment import Deployment
from siltlake.errors import VersionOutOfRange
from siltlake.lake import Lake
from siltlake.publish import publish_once
from siltlake.publish.iceberg.catalog import open_catalog
from siltlake.publish.iceberg.deletes import snapshot_deletes
from siltlake.publish.iceberg.rest import IcebergRestServer
from siltlake.publish.iceberg.snapshots import snapshot_of_version

from .conftest import make_config
from .merge_helpers import add_small_objects, rows_for
from .test_iceberg_follow import millis
from .test_iceberg_keyed import upsert_rows
from .test_iceberg_readers import attach_rest, require_readers_venv
from .test_merge import DAY, make_table
from .test_upsert import KEYED

IDENT = ("web", "access")


@pytest.fixture
def keyed(tmp_path: Path, catalog_url: str) -> Iterator[tuple[Deployment, IcebergRestServer]]:
    """A keyed web.access on the clock, served over REST: 100 rows, then an upsert changing ten keys and adding one,
    then one deleting two keys; no merge, so each version after the first needs position deletes."""
    deployment = Deployment(make_config(tmp_path, catalog_url))
    deployment.config.publish.targets = ["iceberg"]
    deployment.init()
    record = make_table(deployment, **KEYED)
    add_small_objects(deployment, record, DAY, [rows_for(DAY, 100, 0)])
    assert not publish_once(deployment).target_errors
    table = Lake(deployment).table("web.access")
    table.upsert(upsert_rows([*range(10), 9_000_000], ("action", "upgraded")))
    gone = upsert_rows([1, 2], ("action", "gone")).append_column("drop", pa.array([True, True]))
    table.upsert(gone, delete_column="drop")
    server = IcebergRestServer(deployment, "127.0.0.1", 0).start()
    yield deployment, server
    server.close()
    deployment.close()


def pairs(rows: pa.Table) -> Counter:
    return Counter(zip(rows.column("user_id").to_pylist(), rows.column("action").to_pylist(), strict=True))


def test_pyiceberg_through_rest_reads_a_keyed_tables_position_deletes(keyed) -> None:
    from pyiceberg.catalog.rest import RestCatalog

    deployment, server = keyed
    table = Lake(deployment).table("web.access")
    rest = RestCatalog("siltlake", uri=server.url).load_table(IDENT)
    assert snapshot_deletes(rest, rest.current_snapshot()), "the newest version has position delete files"
    for version in range(1, table.version + 1):
        snapshot = snapshot_of_version(rest, version)
        assert pairs(rest.scan(snapshot_id=snapshot.snapshot_id).to_arrow()) == pairs(
            table.to_arrow(as_of_version=version)
        ), f"version {version}"
        assert (
            rest.scan(snapshot_id=snapshot.snapshot_id, row_filter="user_id < 5").count()
            == table.scan(as_of_version=version, filter="user_id < 5").count()
        )
    assert sum(pairs(table.to_arrow()).values()) == 99


def test_each_engine_asked_for_a_time_before_the_first_snapshot(keyed) -> None:
    from pyiceberg.catalog.rest import RestCatalog

    from .duckdb_iceberg_runner import run_queries

    deployment, server = keyed
    table = Lake(deployment).table("web.access")
    iceberg = open_catalog(deployment).load_table(IDENT)
    first = min(s.timestamp_ms for s in iceberg.snapshots())
    before = first - 1
    with pytest.raises(VersionOutOfRange):  # siltlake refuses the time: the table had no version yet
        table.to_arrow(as_of=dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=before))
    assert iceberg.snapshot_as_of_timestamp(before) is None, "PyIceberg (SQL catalog): no snapshot"
    rest = RestCatalog("siltlake", uri=server.url).load_table(IDENT)
    assert rest.snapshot_as_of_timestamp(before) is None, "PyIceberg (REST catalog): no snapshot"
    assert rest.snapshot_as_of_timestamp(first).snapshot_id == snapshot_of_version(rest, 1).snapshot_id
    assert millis(deployment.catalog.version_reads.version_times(table.record.id, 0, 1)[1]) == first

    require_readers_venv()
    scan = f"iceberg_scan('{iceberg.metadata_location}', snapshot_from_timestamp => epoch_ms({{}}))"
    answers = run_queries(
        [
            f"SELECT count(*) AS n FROM {scan.format(before)}",
            f"SELECT count(*) AS n FROM {scan.format(first)}",
            f"SELECT count(*) AS n FROM lake.web.access AT (TIMESTAMP => epoch_ms({before}))",
            f"SELECT count(*) AS n FROM lake.web.access AT (TIMESTAMP => epoch_ms({first}))",
        ],
        setup=(attach_rest(server.url),),
    )
    counts = [a if isinstance(a, str) else a.column("n").to_pylist() for a in answers]
    assert counts[1] == counts[3] == [100], "at the first snapshot's time: version 1"
    assert counts[0] == [0], f"DuckDB iceberg_scan before the first snapshot: no rows, no error ({counts[0]})"
    assert counts[2] == [0], f"DuckDB ATTACH before the first snapshot: no rows, no error ({counts[2]})"
