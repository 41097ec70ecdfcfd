"""The stream commits a chunk of objects as one batch: a few catalog statements per chunk, not
per object, and a batch whose writes fail commits again object by object, losing and doubling nothing."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from siltlake.catalog import StreamCommit, schema
from siltlake.deployment import Deployment
from siltlake.stream import commit, runner, stream_once

pytestmark = [pytest.mark.spark, pytest.mark.usefixtures("objects_alone")]  # the per-object commit

OBJECTS = 150  # three commit chunks (commit.COMMIT_CHUNK = 64)
START = dt.datetime(2026, 11, 20, 1, tzinfo=dt.UTC)


def stage_objects(deployment: Deployment, count: int, rows: int = 3) -> None:
    for n in range(count):
        day = START + dt.timedelta(days=n % 3)  # three partition dates, so objects of one chunk share partitions
        lines = [
            json.dumps(
                {
                    "time": (day + dt.timedelta(seconds=n * rows + i)).isoformat(),
                    "user_id": n * rows + i,
                    "action": "view",
                }
            )
            for i in range(rows)
        ]
        path = Path(deployment.staging.path(f"f.web.access/2026/11/20/o-{n:05d}.jsonl"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")


def statements_during(deployment: Deployment, action) -> int:  # a callable
    counted = []

    def count(*_args, **_kwargs) -> None:
        counted.append(1)

    sa.event.listen(deployment.catalog.engine, "before_cursor_execute", count)
    try:
        action()
    finally:
        sa.event.remove(deployment.catalog.engine, "before_cursor_execute", count)
    return len(counted)


def test_a_round_costs_at_most_three_statements_per_object(deployment: Deployment, access_table) -> None:
    stage_objects(deployment, OBJECTS)
    reports = []
    statements = statements_during(deployment, lambda: reports.append(stream_once(deployment)))
    (report,) = reports
    assert (report.processed, report.records_loaded, report.failed) == (OBJECTS, OBJECTS * 3, [])
    # Discovery, registering, the pending list and the ordered commit of every chunk, all counted.
    assert statements <= 3 * OBJECTS, statements
    assert statements < 100, f"{statements} statements for {OBJECTS} objects: a per-object statement crept in"
    rows = deployment.catalog.partitions.small_objects(access_table.id)
    assert len(rows) == OBJECTS and sum(row.row_count for row in rows) == OBJECTS * 3
    assert [row.id for row in rows] == sorted(row.id for row in rows)
    # The batch's processed marks are the values the object-by-object commit wrote, typed as it typed them.
    staging = deployment.catalog.engine
    with staging.connect() as c:
        marks = c.execute(
            sa.select(
                schema.staging_objects.c.processed_time,
                schema.staging_objects.c.records_in,
                schema.staging_objects.c.bad_records,
                schema.staging_objects.c.error_uri,
            )
        ).all()
    assert len(marks) == OBJECTS
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    for processed_time, records_in, bad_records, error_uri in marks:
        assert isinstance(processed_time, dt.datetime) and abs(now - processed_time) < dt.timedelta(minutes=5)
        assert (records_in, bad_records, error_uri) == (3, 0, None)
    with staging.connect() as c:  # stored as the catalog stores times (SQLite: text that sorts), not cast
        stored = c.execute(sa.text("SELECT processed_time FROM staging_objects LIMIT 1")).scalar_one()
    assert not isinstance(stored, int | float), stored


def test_a_failing_batch_commits_again_object_by_object(
    deployment: Deployment, access_table, monkeypatch: pytest.MonkeyPatch
) -> None:
    stage_objects(deployment, 70)
    real_flush = StreamCommit.flush
    calls = {"n": 0}

    def flush_failing_once(self) -> None:
        calls["n"] += 1
        if calls["n"] == 1:  # the first chunk's writes fail after every object was moved to its id key
            raise ValueError("the batch's insert was refused")
        real_flush(self)

    monkeypatch.setattr(StreamCommit, "flush", flush_failing_once)
    report = stream_once(deployment)
    assert (report.processed, report.records_loaded, report.failed, report.unknown) == (70, 210, [], [])
    rows = deployment.catalog.partitions.small_objects(access_table.id)
    assert len(rows) == 70 and sum(row.row_count for row in rows) == 210
    keys = {info.key.rsplit("/", 1)[-1] for info in deployment.lake.list() if "/live/" in info.key}
    assert keys == {f"obj-{row.id:019d}.parquet" for row in rows}  # the first attempt's moves were undone
    assert deployment.catalog.staging.pending(100) == []


def test_an_object_failing_in_a_batch_counts_against_it_alone(
    deployment: Deployment, access_table, monkeypatch: pytest.MonkeyPatch
) -> None:
    stage_objects(deployment, 70)
    real = commit.commit_parts

    def failing_for_one(tx, lake, table, layout, staging_object_id, parts, *rest):
        moved = real(tx, lake, table, layout, staging_object_id, parts, *rest)
        if parts[0]["rows"] == 3 and staging_object_id == 7:
            raise ArithmeticError("object 7's commit step")
        return moved

    monkeypatch.setattr(commit, "commit_parts", failing_for_one)
    report = stream_once(deployment)
    assert report.processed == 69 and report.records_loaded == 207
    assert [reason for _, reason in report.failed] == [
        "ArithmeticError: object 7's commit step (failed 1 of stream.max_failures=3 times; then it moves to "
        "unknown objects)"
    ]
    assert [pending.id for pending in deployment.catalog.staging.pending(100)] == [7]


def test_waves_commit_in_order_while_the_next_one_runs(deployment: Deployment, access_table) -> None:
    deployment.config.stream.objects_per_wave = 16  # 70 objects: five waves, four of them overlapping a commit
    stage_objects(deployment, 70)
    report = stream_once(deployment)
    assert (report.processed, report.records_loaded, report.failed) == (70, 210, [])
    rows = deployment.catalog.partitions.small_objects(access_table.id)
    with deployment.catalog.engine.connect() as c:
        staging_of = dict(c.execute(sa.text("SELECT id, staging_object_id FROM small_objects")).all())
    # Ids follow commit order, and commits follow wave (staging id) order.
    assert [staging_of[row.id] for row in rows] == sorted(staging_of.values())


def test_a_failing_wave_commit_ends_the_round_and_the_next_round_loses_nothing(
    deployment: Deployment, access_table, monkeypatch: pytest.MonkeyPatch
) -> None:
    from siltlake.errors import CatalogUnreachable

    deployment.config.stream.objects_per_wave = 16
    stage_objects(deployment, 70)
    real_commit = runner.commit_results
    calls = {"n": 0}

    def second_commit_fails(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise CatalogUnreachable("the catalog server restarts")
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(runner, "commit_results", second_commit_fails)
    with pytest.raises(CatalogUnreachable):
        stream_once(deployment)
    assert len(deployment.catalog.staging.pending(100)) == 70 - 16
    assert not any("/_tmp/" in info.key for info in deployment.lake.list())  # the third wave's output too
    monkeypatch.setattr(runner, "commit_results", real_commit)
    report = stream_once(deployment)
    assert (report.processed, report.records_loaded) == (54, 162)
    rows = deployment.catalog.partitions.small_objects(access_table.id)
    assert len(rows) == 70 and sum(row.row_count for row in rows) == 210
