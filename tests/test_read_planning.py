"""Planning a read costs a constant number of catalog statements, whatever the number of partitions.

The same table is built at two sizes (the same steps for every day: an object published, one more
published, one streamed and not yet published) and each kind of read counts the statements it sends to
the catalog; the counts must be equal at both sizes. Statement counts, not timings: bench/read_bench.py
has the times.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow.compute as pc
import sqlalchemy as sa

from siltlake.deployment import Deployment
from siltlake.lake import Lake, Table
from siltlake.publish import publish_once

from .conftest import make_config
from .merge_helpers import add_small_objects, rows_for
from .test_merge import DAY, make_table
from .test_publish import tokyo

ROWS = 4


def statements_of(engine: sa.Engine, action) -> int:  # a callable
    """The statements `action` sends through the engine (BEGIN excluded: SQLite's is a transaction)."""
    sent = []

    def count(_conn, _cursor, statement: str, *_args) -> None:
        if not statement.startswith("BEGIN"):
            sent.append(statement)

    sa.event.listen(engine, "before_cursor_execute", count)
    try:
        action()
    finally:
        sa.event.remove(engine, "before_cursor_execute", count)
    return len(sent)


def build(deployment: Deployment, sizes: dict[str, int]) -> None:
    """A table per name with that many partitions: versions 1 and 2 each publish one object a day, and
    one more object a day is streamed after version 2 (read live)."""
    tables = {name: make_table(deployment, name) for name in sizes}
    for seed in range(3):
        for name, days in sizes.items():
            for date in (DAY + dt.timedelta(days=d) for d in range(days)):
                add_small_objects(
                    deployment,
                    tables[name],
                    date,
                    [rows_for(date, ROWS, seed * 1000 + (date - DAY).days)],
                    now=tokyo(DAY, 1),
                )
        if seed < 2:
            publish_once(deployment, now=tokyo(DAY, 1 + seed))


def reads(table: Table) -> dict:
    """Each kind of read, returning what it read (so the counts below are of reads that did the work)."""
    return {
        "files of one day": lambda: table.files(dates=[DAY]),
        "files of every day": lambda: table.files(),
        "files as of version 1": lambda: table.files(as_of_version=1),
        "files as of a time": lambda: table.files(as_of=tokyo(DAY, 23)),
        "to_arrow of one day": lambda: table.to_arrow(dates=[DAY]).num_rows,
        "to_arrow filtered on dt": lambda: table.to_arrow(filter=pc.field("dt") == DAY).num_rows,
        "to_arrow as of version 1": lambda: table.to_arrow(as_of_version=1).num_rows,
        "versions": table.versions,
    }


def test_catalog_statements_per_read_do_not_grow_with_the_partitions(tmp_path: Path, catalog_url: str) -> None:
    deployment = Deployment(make_config(tmp_path, catalog_url))
    deployment.init()
    try:
        build(deployment, {"small": 2, "large": 12})
        lake = Lake(deployment)
        engine = deployment.catalog.engine
        counts, results = {}, {}
        for name in ("small", "large"):
            table = lake.table(f"web.{name}")
            counts[name] = {case: statements_of(engine, action) for case, action in reads(table).items()}
            results[name] = {case: action() for case, action in reads(table).items()}
    finally:
        deployment.close()
    for name, days in (("small", 2), ("large", 12)):
        assert results[name]["to_arrow of one day"] == 3 * ROWS
        assert results[name]["to_arrow filtered on dt"] == 3 * ROWS
        assert results[name]["to_arrow as of version 1"] == ROWS * days
        assert len(results[name]["files of every day"]) == 3 * days
    assert counts["small"] == counts["large"], counts


def test_a_days_read_opens_that_days_manifest_only(tmp_path: Path, catalog_url: str, monkeypatch) -> None:
    """Reading one day of a long table, by dates= or by a filter on dt, reads one manifest, not one a day."""
    import siltlake.storage.manifests as manifests

    deployment = Deployment(make_config(tmp_path, catalog_url))
    deployment.init()
    try:
        build(deployment, {"long": 12})
        table = Lake(deployment).table("web.long")
        opened = []
        read_manifest = manifests.read_manifest

        def counted(lake, key: str):  # the real reader, counted
            opened.append(key)
            return read_manifest(lake, key)

        monkeypatch.setattr(manifests, "read_manifest", counted)
        # As of version 2 every day is read from its file list (the current state reads live days from the
        # catalog), so the manifests opened are the partitions planned.
        on_day = pc.field("dt") == DAY
        reads = {
            "dates": lambda: table.to_arrow(dates=[DAY], as_of_version=2),
            "filter on dt": lambda: table.to_arrow(filter=on_day, as_of_version=2),
            "filter on dt and a column": lambda: table.to_arrow(
                filter=on_day & (pc.field("action") != "none"), as_of_version=2
            ),
        }
        for case, read in reads.items():
            opened.clear()
            assert read().num_rows == 2 * ROWS, case
            assert len(opened) == 1 and f"dt={DAY.isoformat()}" in opened[0], (case, opened)
        opened.clear()
        assert table.to_arrow(filter=pc.field("action") != "none", as_of_version=2).num_rows == 2 * ROWS * 12
        assert len(opened) == 12  # a filter on other columns reads every day's list
    finally:
        deployment.close()
