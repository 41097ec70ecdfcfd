"""The running staging totals behind the metrics and `silt status` (catalog.observations.staging): exactly what
the staging rows count plus what pruned rows counted, whichever path wrote the rows, and under concurrent
writers on PostgreSQL (docs/design.md, "Bounded periodic queries")."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
import sqlalchemy as sa

from siltlake.catalog import schema as s
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE


def totals(deployment: Deployment) -> dict[str, tuple[int, int, int, int]]:
    """Per table: (registered, pending, records loaded, bad records) as the metrics show them."""
    return {
        row["table"]: (row["registered"], row["pending"], row["records_loaded"], row["bad_records"])
        for row in deployment.catalog.observations.staging()
    }


def recount(deployment: Deployment) -> dict[str, tuple[int, int, int, int]]:
    """The same numbers counted from the staging rows (what the metrics read before the running totals)."""
    so, t = s.staging_objects, s.tables
    with deployment.catalog.engine.begin() as c:
        rows = c.execute(
            sa.select(
                t.c.schema_name,
                t.c.table_name,
                sa.func.count(so.c.id),
                sa.func.count(so.c.id).filter(so.c.processed_time.is_(None)),
                sa.func.coalesce(sa.func.sum(so.c.records_in), 0),
                sa.func.coalesce(sa.func.sum(so.c.bad_records), 0),
            )
            .select_from(t.outerjoin(so, so.c.table_id == t.c.id))
            .group_by(t.c.schema_name, t.c.table_name)
        ).all()
    return {
        f"{schema}.{name}": (registered, pending, records - bad, bad)
        for schema, name, registered, pending, records, bad in rows
    }


def process(deployment: Deployment, uris: list[str], *, batch: bool, records_in: int = 5, bad: int = 1) -> None:
    """Mark these pending objects processed as the stream commit does, batched or one call at a time."""
    pending = {p.uri: p.id for p in deployment.catalog.staging.pending(100_000)}
    ids = [pending[uri] for uri in uris]
    with deployment.catalog.partitions.stream_commit() as tx:
        if batch:
            with tx.batch(ids, [], 0, 0):
                for staging_id in ids:
                    tx.mark_processed(staging_id, records_in=records_in, bad_records=bad, error_uri=None, now=utcnow())
        else:
            for staging_id in ids:
                tx.mark_processed(staging_id, records_in=records_in, bad_records=bad, error_uri=None, now=utcnow())


@pytest.fixture
def two_tables(plain_deployment: Deployment) -> Deployment:
    plain_deployment.catalog.tables.create(TableDef.from_mapping({**ACCESS_TABLE, "name": "errors"}))
    return plain_deployment


def test_every_write_of_staging_rows_keeps_the_totals_exact(two_tables: Deployment) -> None:
    catalog = two_tables.catalog
    access, errors = catalog.tables.get("web.access"), catalog.tables.get("web.errors")
    names = [f"file:///staging/a-{i}.jsonl" for i in range(8)]
    assert (
        catalog.staging.register(
            [(uri, access.id, 10, None) for uri in names] + [("file:///staging/e-0.jsonl", errors.id, 10, None)]
        )
        == 9
    )
    assert catalog.staging.register([(names[0], access.id, 10, None)]) == 0  # known: not counted again
    assert totals(two_tables) == recount(two_tables) == {"web.access": (8, 8, 0, 0), "web.errors": (1, 1, 0, 0)}
    process(two_tables, names[:3], batch=True)
    process(two_tables, names[3:5], batch=False, records_in=7, bad=0)
    assert totals(two_tables) == recount(two_tables)
    assert totals(two_tables)["web.access"] == (8, 3, 3 * 4 + 2 * 7, 3)
    # A part undone by its savepoint counts nothing; the commit's other parts do.
    pending = {p.uri: p.id for p in catalog.staging.pending(100)}
    with catalog.partitions.stream_commit() as tx:
        with pytest.raises(RuntimeError), tx.savepoint():
            tx.mark_processed(pending[names[5]], records_in=100, bad_records=0, error_uri=None, now=utcnow())
            raise RuntimeError("decoding failed")
        tx.mark_processed(pending[names[6]], records_in=1, bad_records=0, error_uri=None, now=utcnow())
    with pytest.raises(RuntimeError), catalog.partitions.stream_commit() as tx:  # rolled back whole
        tx.mark_processed(pending[names[5]], records_in=100, bad_records=0, error_uri=None, now=utcnow())
        raise RuntimeError("commit failed")
    assert totals(two_tables) == recount(two_tables)
    # An object that failed max_failures times: processed with no records, and unknown.
    with catalog.partitions.stream_commit() as tx:
        assert tx.record_failure(pending[names[7]], "unreadable", max_failures=1, now=utcnow())[1]
    # A load task's output, registered processed.
    with catalog.partitions.stream_commit() as tx:
        assert (
            tx.register_loaded(
                "load:run-1/task-0",
                table_id=errors.id,
                size=1,
                records_in=9,
                bad_records=2,
                error_uri=None,
                now=utcnow(),
            )
            is not None
        )
    assert totals(two_tables) == recount(two_tables)
    # Forgetting an unknown object drops its row, and its replay registers it again.
    assert catalog.staging.forget_unknown([names[7]]) == [names[7]]
    assert totals(two_tables) == recount(two_tables)
    assert totals(two_tables)["web.access"][0] == 7
    assert catalog.staging.register([(names[7], access.id, 10, None)]) == 1
    assert totals(two_tables) == recount(two_tables)


def test_pruned_rows_stay_counted(two_tables: Deployment) -> None:
    catalog = two_tables.catalog
    access = catalog.tables.get("web.access")
    names = [f"file:///staging/a-{i}.jsonl" for i in range(5)]
    catalog.staging.register([(uri, access.id, 10, None) for uri in names])
    process(two_tables, names[:4], batch=True)
    before = totals(two_tables)
    assert before == recount(two_tables)
    assert catalog.staging.prune(utcnow() + dt.timedelta(days=1)) == 4
    assert recount(two_tables)["web.access"] == (1, 1, 0, 0)  # only the pending row is left
    assert totals(two_tables) == before
    process(two_tables, names[4:], batch=False)
    assert totals(two_tables)["web.access"] == (5, 0, 5 * 4, 5)


@pytest.mark.postgres
def test_concurrent_writers_on_postgresql_lose_no_count(tmp_path, postgres_url: str) -> None:
    """Registrations and stream commits of several processes' connections at once, on two tables: the totals
    equal a recount of the rows."""
    from .conftest import make_config

    deployments = [Deployment(make_config(tmp_path / f"d{i}", postgres_url)) for i in range(4)]
    deployments[0].init()
    for deployment in deployments[1:]:
        deployment.init()
    catalog = deployments[0].catalog
    tables = [
        catalog.tables.create(TableDef.from_mapping({**ACCESS_TABLE, "name": name})) for name in ("access", "errors")
    ]
    errors: list[BaseException] = []
    start = threading.Barrier(len(deployments))

    def work(worker: int, deployment: Deployment) -> None:
        try:
            start.wait()
            for round_ in range(15):
                uris = [f"file:///staging/w{worker}-r{round_}-{i}.jsonl" for i in range(6)]
                # Both tables in one registration, in an order that differs between workers.
                rows = [(uri, tables[(i + worker) % 2].id, 10, None) for i, uri in enumerate(uris)]
                deployment.catalog.staging.register(rows)
                claimed = deployment.catalog.staging.claim(f"worker-{worker}", limit=4, now=utcnow(), timeout=60)
                with deployment.catalog.partitions.stream_commit() as tx, tx.batch([p.id for p in claimed], [], 0, 0):
                    for p in claimed:
                        tx.mark_processed(p.id, records_in=3, bad_records=worker % 2, error_uri=None, now=utcnow())
        except BaseException as exc:  # reported by the test thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i, d)) for i, d in enumerate(deployments)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert not errors, errors
        counted = recount(deployments[0])
        assert sum(registered for registered, *_ in counted.values()) == 4 * 15 * 6
        assert totals(deployments[0]) == counted
    finally:
        for deployment in deployments:
            deployment.close()


def test_the_migration_carries_the_totals_and_version_times_both_ways(two_tables: Deployment) -> None:
    from siltlake.publish import publish_once

    from .merge_helpers import add_small_objects, rows_for

    catalog = two_tables.catalog
    access = catalog.tables.get("web.access")
    names = [f"file:///staging/a-{i}.jsonl" for i in range(4)]
    catalog.staging.register([(uri, access.id, 10, None) for uri in names])
    process(two_tables, names[:3], batch=True)
    assert catalog.staging.prune(utcnow() + dt.timedelta(days=1)) == 3
    day = dt.date(2026, 1, 2)
    add_small_objects(two_tables, access, day, [rows_for(day, 3, 1)], write_files=False)
    publish_once(two_tables, now=dt.datetime(2026, 1, 2, 5))
    before = totals(two_tables)
    with catalog.engine.begin() as c:
        version_time = c.execute(sa.select(s.tables.c.version_time).where(s.tables.c.id == access.id)).scalar_one()
    assert version_time == dt.datetime(2026, 1, 2, 5)

    catalog.downgrade("0012")
    with catalog.engine.begin() as c:
        pruned = c.execute(
            sa.text("SELECT table_id, objects, records_in, bad_records FROM pruned_staging_totals")
        ).all()
    assert [tuple(row) for row in pruned if any(row[1:])] == [(access.id, 3, 15, 3)]
    catalog.upgrade()
    assert totals(two_tables) == before
    with catalog.engine.begin() as c:
        assert (
            c.execute(sa.select(s.tables.c.version_time).where(s.tables.c.id == access.id)).scalar_one() == version_time
        )
