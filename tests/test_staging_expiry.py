"""Staging rows past stream.staging_retention: reap prunes the processed rows nothing needs, behind the staging
root's expiry watermark, and full listings skip the pruned keys still lying in the root instead of loading them
again (docs/design.md, "Staging expiry")."""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from siltlake.catalog.staging import prunable
from siltlake.clock import utcnow
from siltlake.deployment import Deployment
from siltlake.reap import reap_once
from siltlake.reap.staging_rows import prune_staging_rows
from siltlake.stream import stream_once
from siltlake.stream.discover import discover, readmit
from siltlake.tabledef import TableDef

from .conftest import ACCESS_TABLE, make_config
from .merge_helpers import add_small_objects, rows_for

DAY = "host00.web.access/2026/01/02"
LATER = dt.timedelta(days=8)  # past the default retention of 7 days
SETTLED = dt.timedelta(hours=2)  # past reap.change_slack: a recorded watermark may be pruned below


@pytest.fixture
def lake(tmp_path: Path, catalog_url: str) -> Deployment:
    """The access table; every round lists the whole root (the path that must skip expired objects)."""
    deployment = Deployment(make_config(tmp_path, catalog_url, listing_margin=0, full_listing_interval=0))
    deployment.init()
    deployment.catalog.tables.create(TableDef.from_mapping(ACCESS_TABLE))
    yield deployment
    deployment.close()


def put(deployment: Deployment, name: str) -> Path:
    path = Path(deployment.staging.path(f"{DAY}/{name}"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b'{"t":"2026-01-02"}\n')
    return path


def uri(deployment: Deployment, name: str) -> str:
    return deployment.staging.uri(f"{DAY}/{name}")


def settle() -> None:
    """Let the clock pass what was just written or listed (file times and the listing's start differ)."""
    time.sleep(0.02)


def process(deployment: Deployment, names: dict[str, str | None]) -> None:
    """Mark these objects processed, as the stream commit does (name -> its error file, or None)."""
    pending = {p.uri: p.id for p in deployment.catalog.staging.pending(1000)}
    with deployment.catalog.partitions.stream_commit() as tx:
        for name, error_uri in names.items():
            tx.mark_processed(
                pending[uri(deployment, name)],
                records_in=3,
                bad_records=1 if error_uri else 0,
                error_uri=error_uri,
                now=utcnow(),
            )


def fail(deployment: Deployment, name: str) -> None:
    pending = {p.uri: p.id for p in deployment.catalog.staging.pending(1000)}
    with deployment.catalog.partitions.stream_commit() as tx:
        tx.record_failure(pending[uri(deployment, name)], "boom", max_failures=3, now=utcnow())


def registered(deployment: Deployment) -> set[str]:
    listed = [uri(deployment, name) for name in ("done-1", "done-2", "pending", "failing", "errors", "new")]
    return deployment.catalog.staging.known_uris(listed)


def expire(deployment: Deployment) -> tuple[Deployment, dt.datetime]:
    """Objects done-1, done-2 (processed), pending, failing and errors (processed, with an error file), listed
    once more after registration so that the root's last full listing started after them all; then a reap run
    8 days later records the watermark (and prunes nothing yet)."""
    for name in ("done-1", "done-2", "pending", "failing", "errors"):
        put(deployment, name)
    settle()
    assert discover(deployment).registered == 5
    process(deployment, {"done-1": None, "done-2": None, "errors": "file:///lake/errors/staging-5.jsonl"})
    fail(deployment, "failing")
    settle()
    assert discover(deployment).registered == 0
    settle()
    now = utcnow() + LATER
    assert prune_staging_rows(deployment, now) == 0  # the watermark is recorded first, rows go a run later
    return deployment, now


def test_processed_rows_past_retention_are_pruned_and_the_rest_kept(lake: Deployment) -> None:
    table = lake.catalog.tables.get("web.access")
    add_small_objects(lake, table, dt.date(2026, 1, 2), [rows_for(dt.date(2026, 1, 2), 3, 1)], write_files=False)
    before = {row["table"]: row for row in lake.catalog.observations.staging()}["web.access"]
    _, now = expire(lake)
    assert prune_staging_rows(lake, now + dt.timedelta(minutes=10)) == 0  # recorded too recently
    # done-1 and done-2; not the small object's staging row, processed and older than them all but still named
    # by its small object.
    assert prune_staging_rows(lake, now + SETTLED) == 2
    assert registered(lake) == {uri(lake, name) for name in ("pending", "failing", "errors")}
    assert len(lake.catalog.partitions.small_objects(table.id)) == 1
    assert [f.uri for f in lake.catalog.staging.failing()] == [uri(lake, "failing")]
    # Totals of processed objects count the pruned rows still: counters never go back.
    after = {row["table"]: row for row in lake.catalog.observations.staging()}["web.access"]
    assert after["registered"] == before["registered"] + 5
    assert after["records_loaded"] == before["records_loaded"] + 3 * 3 - 1
    assert (after["pending"], after["failing"]) == (2, 1)
    assert lake.catalog.observations.backlog()["web.access"]["pending"] == 2
    assert prune_staging_rows(lake, now + 2 * SETTLED) == 0


def test_pruning_in_batches_passes_the_rows_it_keeps(lake: Deployment) -> None:
    table = lake.catalog.tables.get("web.access")
    add_small_objects(lake, table, dt.date(2026, 1, 2), [rows_for(dt.date(2026, 1, 2), 3, 1)], write_files=False)
    expire(lake)
    # One row per batch: the kept rows (the small object's, the error file's, pending ones) never end the loop.
    assert lake.catalog.staging.prune(utcnow() + dt.timedelta(days=1), batch=1) == 2
    assert registered(lake) == {uri(lake, name) for name in ("pending", "failing", "errors")}
    assert lake.catalog.staging.prune(utcnow() + dt.timedelta(days=1), batch=1) == 0


def test_a_pruned_key_still_in_the_root_is_not_loaded_again_and_a_new_one_is(lake: Deployment) -> None:
    _, now = expire(lake)
    assert prune_staging_rows(lake, now + SETTLED) == 2
    found = discover(lake)
    assert found.full_listing and found.expired == 5 and found.looked_up == 0 and found.registered == 0
    assert uri(lake, "done-1") not in registered(lake)
    # A new object, and one moved in with an old mtime (its ctime is the move's): both arrive now.
    put(lake, "new")
    moved = put(lake, "moved-in")
    old = (utcnow() - LATER).replace(tzinfo=dt.UTC).timestamp()
    os.utime(moved, (old, old))
    settle()
    found = discover(lake)
    assert (found.expired, found.registered) == (5, 2)


def test_the_stream_report_counts_expired_objects(lake: Deployment) -> None:
    _, now = expire(lake)
    process(lake, {"pending": None, "failing": None})  # nothing left to decode: this round needs no Spark
    assert prune_staging_rows(lake, now + SETTLED) == 4
    report = stream_once(lake)
    assert (report.expired, report.registered, report.processed) == (5, 0, 0)


def test_an_unknown_object_older_than_the_watermark_is_registered_by_its_replay(lake: Deployment) -> None:
    key = "host00.web.later/2026/01/02/early.jsonl"
    path = Path(lake.staging.path(key))
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"t":"2026-01-02"}\n')
    _, now = expire(lake)  # lists the object as unknown: no table web.later yet
    assert [row.uri for row in lake.catalog.staging.unknown()] == [lake.staging.uri(key)]
    assert prune_staging_rows(lake, now + SETTLED) == 2
    later = dict(ACCESS_TABLE, name="later")
    lake.catalog.tables.create(TableDef.from_mapping(later))
    forgotten = lake.catalog.staging.forget_unknown()
    assert discover(lake).registered == 0  # a full listing skips it: it arrived before the watermark
    assert readmit(lake, forgotten) == 1
    assert lake.staging.uri(key) in {p.uri for p in lake.catalog.staging.pending(100)}
    assert readmit(lake, forgotten) == 0


def test_a_root_never_listed_records_no_watermark_and_prunes_nothing(lake: Deployment) -> None:
    put(lake, "done-1")
    assert prune_staging_rows(lake, utcnow() + LATER) == 0
    assert lake.catalog.discovery.get(lake.staging.root) is None
    found = discover(lake)
    assert found.registered == 1 and found.expired == 0


def test_reap_prunes_staging_rows_and_a_dry_run_does_not(lake: Deployment) -> None:
    _, now = expire(lake)
    assert reap_once(lake, now + SETTLED, dry_run=True).staging_rows == 0
    report = reap_once(lake, now + SETTLED)
    assert report.staging_rows == 2 and report.as_dict()["staging_rows_pruned"] == 2
    assert uri(lake, "done-2") not in registered(lake)


def test_a_prune_vacuums_where_no_autovacuum_will(lake: Deployment) -> None:
    """PostgreSQL with autovacuum off (this test server's setting): the pruned table is vacuumed by the prune, so
    its dead rows do not pile up in the indexes every round reads. Elsewhere nothing is vacuumed."""
    core = lake.catalog.engine
    expire(lake)
    assert lake.catalog.staging.prune(utcnow() + dt.timedelta(days=1)) == 2
    if core.dialect.name != "postgresql":
        return
    with core.connect() as c:
        autovacuum = c.execute(sa.text("SELECT current_setting('autovacuum')")).scalar()
        vacuumed = c.execute(
            sa.text(
                "SELECT last_vacuum FROM pg_stat_user_tables WHERE relname = 'staging_objects' "
                "AND schemaname = current_schema()"
            )
        ).scalar()
    assert (vacuumed is not None) == (autovacuum == "off")


def test_each_batch_of_a_prune_reads_one_range_of_the_arrival_index(lake: Deployment) -> None:
    """A batch past the last one's row reads on from it in index order: neither an OR of two index ranges nor a
    sort of every row left (which made a day's prune quadratic in its rows; docs/benchmarks.md)."""
    if lake.catalog.engine.dialect.name != "sqlite":
        pytest.skip("the plan pinned is SQLite's; PostgreSQL's planner picks by its table statistics")
    query = prunable(utcnow(), 5000, (utcnow() - LATER, 7)).compile(lake.catalog.engine)
    with lake.catalog.engine.connect() as c:
        plan = [
            row[3] for row in c.exec_driver_sql(f"EXPLAIN QUERY PLAN {query}", tuple(query.construct_params().values()))
        ]
    assert any("ix_staging_objects_receive_time" in step for step in plan), plan
    assert not any("TEMP B-TREE" in step or "MULTI-INDEX OR" in step for step in plan), plan
