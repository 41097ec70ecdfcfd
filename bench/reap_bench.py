"""Reap benchmark: delete N small objects covered by published merged versions, on the local file system.

Setup (not timed): a deployment with one table of `--partitions` switched days; each day's small objects
are catalog rows (bulk-inserted) plus real tiny files under live/, and the day's one merged range object
and compaction version (with its JSON and symlink manifests) cover them all. Timed: one `reap_once`
(a dry run first, then the real run), reported as catalog seconds (snapshot, manifests, row deletes),
listing seconds, deleting seconds and objects deleted per second.

    .venv/bin/python bench/reap_bench.py                          # 100,000 objects, SQLite and PostgreSQL
    .venv/bin/python bench/reap_bench.py --catalogs sqlite --objects 20000

`--changed N` measures incremental runs instead: `--objects` live small objects (rows and files,
nothing to delete) over `--partitions` days, one full sweep, then N of the days get a merged object and a
compaction version covering their small objects. Timed on that one state: a dry full sweep, a dry
incremental run, then the real incremental run (which must delete exactly the N days' small objects).

    .venv/bin/python bench/reap_bench.py --objects 100000 --partitions 1000 --changed 10
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from common import brief_machine, save_json

from siltlake.catalog import schema as s
from siltlake.catalog.provision import create_postgres_database, drop_postgres_database
from siltlake.clock import utcnow
from siltlake.config import Config
from siltlake.deployment import Deployment
from siltlake.reap import reap_once
from siltlake.storage.manifests import write_manifests
from siltlake.tabledef import TableDef

PG_ADMIN = os.environ.get("SILTLAKE_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
TABLE = {
    "schema": "web",
    "name": "access",
    "time_column": "t",
    "timezone": "UTC",
    "merge_interval": 0,
    "columns": [{"name": "t", "type": "timestamp", "nullable": False}],
}
FIRST_DAY = dt.date(2026, 1, 1)


def build(deployment: Deployment, objects: int, partitions: int) -> None:
    """Catalog rows and files: `objects` covered small objects over `partitions` switched days."""
    catalog, lake = deployment.catalog, deployment.lake
    table = catalog.tables.create(TableDef.from_mapping(TABLE))
    layout = table.layout(deployment.instance_key)
    now = utcnow() - dt.timedelta(days=30)
    per_day = objects // partitions
    with catalog.engine.begin() as c:
        c.execute(
            s.staging_objects.insert(),
            [
                dict(
                    id=i, uri=f"file:///staging/{i}", table_id=table.id, size=100, receive_time=now, processed_time=now
                )
                for i in range(1, objects + 1)
            ],
        )
        for day in range(partitions):
            date = FIRST_DAY + dt.timedelta(days=day)
            lower, upper = day * per_day, (day + 1) * per_day
            pid = c.execute(
                s.partitions.insert()
                .values(
                    table_id=table.id,
                    partition_date=date,
                    current_manifest_version=upper,
                    desired_manifest_version=upper,
                    last_live_object_id=upper,
                    switched=True,
                    create_time=now,
                )
                .returning(s.partitions.c.id)
            ).scalar_one()
            c.execute(
                s.small_objects.insert(),
                [
                    dict(
                        id=i,
                        staging_object_id=i,
                        partition_id=pid,
                        delayed=False,
                        content_length=100,
                        row_count=1,
                        min_event_time=now,
                        max_event_time=now,
                        upload_start_time=now,
                    )
                    for i in range(lower + 1, upper + 1)
                ],
            )
            merged = layout.merged_object(date, 0, upper)
            lake.write_bytes(merged, b"m" * 1000)
            c.execute(
                s.merge_ranges.insert(),
                [
                    dict(
                        partition_id=pid,
                        lower_bound=None,
                        upper_bound=0,
                        content_length=0,
                        create_time=now,
                        update_time=now,
                    ),
                    dict(
                        partition_id=pid,
                        lower_bound=0,
                        upper_bound=upper,
                        content_length=1000,
                        row_count=per_day,
                        create_time=now,
                        update_time=now,
                    ),
                ],
            )
            manifest, _ = write_manifests(lake, layout, date, upper, [(merged, 1000)])
            c.execute(
                s.partition_versions.insert().values(
                    partition_id=pid,
                    table_id=table.id,
                    version=1,
                    commit_op="compaction",
                    manifest_key=manifest,
                    covered_upper=upper,
                    created_at=now,
                    row_count=per_day,
                    byte_count=1000,
                )
            )
    # The small objects' files: tiny, but real files the reaper lists and deletes one by one.
    for day in range(partitions):
        date = FIRST_DAY + dt.timedelta(days=day)
        directory = Path(lake.path(layout.small_object(date, 1, False))).parent
        directory.mkdir(parents=True, exist_ok=True)
        for i in range(day * per_day + 1, (day + 1) * per_day + 1):
            (directory / f"obj-{i:019d}.parquet").write_bytes(b"x" * 100)


def build_live(deployment: Deployment, objects: int, partitions: int, when: dt.datetime) -> list[tuple[int, int]]:
    """`objects` live small objects (rows and files) over `partitions` days; returns (partition id, upper)."""
    catalog, lake = deployment.catalog, deployment.lake
    table = catalog.tables.create(TableDef.from_mapping(TABLE))
    layout = table.layout(deployment.instance_key)
    per_day = objects // partitions
    days = []
    with catalog.engine.begin() as c:
        c.execute(
            s.staging_objects.insert(),
            [
                dict(
                    id=i,
                    uri=f"file:///staging/{i}",
                    table_id=table.id,
                    size=100,
                    receive_time=when,
                    processed_time=when,
                )
                for i in range(1, objects + 1)
            ],
        )
        for day in range(partitions):
            date = FIRST_DAY + dt.timedelta(days=day)
            lower, upper = day * per_day, (day + 1) * per_day
            pid = c.execute(
                s.partitions.insert()
                .values(table_id=table.id, partition_date=date, last_live_object_id=upper, create_time=when)
                .returning(s.partitions.c.id)
            ).scalar_one()
            c.execute(
                s.small_objects.insert(),
                [
                    dict(
                        id=i,
                        staging_object_id=i,
                        partition_id=pid,
                        delayed=False,
                        content_length=100,
                        row_count=1,
                        min_event_time=when,
                        max_event_time=when,
                        upload_start_time=when,
                    )
                    for i in range(lower + 1, upper + 1)
                ],
            )
            days.append((pid, upper))
            directory = Path(lake.path(layout.small_object(date, 1, False))).parent
            directory.mkdir(parents=True, exist_ok=True)
            for i in range(lower + 1, upper + 1):
                (directory / f"obj-{i:019d}.parquet").write_bytes(b"x" * 100)
    return days


def cover(deployment: Deployment, days: list[tuple[int, int]], per_day: int, when: dt.datetime) -> None:
    """Merge and publish some days at `when`: a merged object, its range and a compaction version each."""
    catalog, lake = deployment.catalog, deployment.lake
    (table,) = catalog.tables.list()
    layout = table.layout(deployment.instance_key)
    with catalog.engine.begin() as c:
        for pid, upper in days:
            date = FIRST_DAY + dt.timedelta(days=upper // per_day - 1)
            merged = layout.merged_object(date, 0, upper)
            lake.write_bytes(merged, b"m" * 1000)
            c.execute(
                s.merge_ranges.insert(),
                [
                    dict(
                        partition_id=pid,
                        lower_bound=None,
                        upper_bound=0,
                        content_length=0,
                        create_time=when,
                        update_time=when,
                    ),
                    dict(
                        partition_id=pid,
                        lower_bound=0,
                        upper_bound=upper,
                        content_length=1000,
                        row_count=per_day,
                        create_time=when,
                        update_time=when,
                    ),
                ],
            )
            manifest, _ = write_manifests(lake, layout, date, upper, [(merged, 1000)])
            c.execute(
                s.partition_versions.insert().values(
                    partition_id=pid,
                    table_id=table.id,
                    version=1,
                    commit_op="compaction",
                    manifest_key=manifest,
                    covered_upper=upper,
                    created_at=when,
                    row_count=per_day,
                    byte_count=1000,
                )
            )


def run_incremental(deployment: Deployment, objects: int, partitions: int, changed: int, workers: int) -> dict:
    start, started = utcnow(), time.monotonic()
    days = build_live(deployment, objects, partitions, start - dt.timedelta(days=30))
    setup = time.monotonic() - started
    first = reap_once(deployment, now=start, workers=workers)
    assert first.full_sweep and first.objects == 0, first
    per_day = objects // partitions
    step = max(1, partitions // changed)
    cover(deployment, days[::step][:changed], per_day, start + dt.timedelta(hours=2))
    later = start + dt.timedelta(hours=3)
    full = reap_once(deployment, now=later, dry_run=True, full=True, workers=workers)
    dry = reap_once(deployment, now=later, dry_run=True, workers=workers)
    real = reap_once(deployment, now=later, workers=workers)
    assert not real.full_sweep and real.reasons["covered"].objects == changed * per_day and not real.failed, real
    assert counts(full) == counts(dry) == counts(real), (full, dry, real)

    def timing(report: object) -> dict:
        return {
            "seconds": round(report.seconds, 3),
            "catalog_seconds": round(report.catalog_seconds, 3),
            "list_seconds": round(report.list_seconds, 3),
            "listed": report.listed,
            "prefixes": report.prefixes_listed,
        }

    return {
        "objects": objects,
        "partitions": partitions,
        "changed_partitions": changed,
        "changed_objects": changed * per_day,
        "first_full_sweep_seconds": round(first.seconds, 2),
        "setup_seconds": round(setup, 2),
        "full_dry": timing(full),
        "incremental_dry": timing(dry),
        "incremental": {**timing(real), "delete_seconds": round(real.delete_seconds, 3)},
    }


def counts(report: object) -> dict:
    return {name: t.objects for name, t in report.reasons.items()}


def run(kind: str, objects: int, partitions: int, workers: int, workdir: Path, changed: int = 0) -> dict:
    root = workdir / f"{kind}-{uuid.uuid4().hex[:8]}"
    root.mkdir(parents=True)
    database = None
    if kind == "sqlite":
        url = f"sqlite:///{root / 'catalog.db'}"
    else:
        database = f"silt_reap_bench_{uuid.uuid4().hex[:8]}"
        url = create_postgres_database(PG_ADMIN, database)
    deployment = Deployment(
        Config.model_validate(
            {
                "instance_key": "bench001",
                "catalog": {"url": url},
                "storage": {"root": str(root / "lake"), "staging_root": str(root / "staging")},
            }
        )
    )
    try:
        deployment.init()
        if changed:
            return {"catalog": kind, **run_incremental(deployment, objects, partitions, changed, workers)}
        started = time.monotonic()
        build(deployment, objects, partitions)
        setup = time.monotonic() - started
        dry = reap_once(deployment, dry_run=True, workers=workers)
        real = reap_once(deployment, workers=workers)
        assert real.reasons["covered"].objects == objects and not real.failed, real
        left = sum(1 for _ in deployment.lake.list("bench001/"))
        return {
            "catalog": kind,
            "objects": objects,
            "partitions": partitions,
            "workers": workers,
            "setup_seconds": round(setup, 2),
            "dry_run_seconds": round(dry.seconds, 2),
            "seconds": round(real.seconds, 2),
            "catalog_seconds": round(real.catalog_seconds, 2),
            "list_seconds": round(real.list_seconds, 2),
            "delete_seconds": round(real.delete_seconds, 2),
            "objects_per_second": round(objects / real.delete_seconds),
            "objects_per_second_overall": round(objects / real.seconds),
            "rows_deleted": real.reasons["covered"].rows,
            "objects_left": left,
        }
    finally:
        deployment.close()
        shutil.rmtree(root, ignore_errors=True)
        if database is not None:
            drop_postgres_database(PG_ADMIN, database)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--workers", type=int, default=16, help="deleting threads (reap_once's default)")
    parser.add_argument("--catalogs", default="sqlite,postgresql")
    parser.add_argument("--changed", type=int, default=0, help="measure incremental runs: days changed")
    parser.add_argument("--workdir", default=None, help="where the lake goes (default: a temporary directory)")
    parser.add_argument("--out", default=None, help="default bench/results/reap.json (reap_incremental.json)")
    args = parser.parse_args()
    args.out = args.out or f"bench/results/reap{'_incremental' if args.changed else ''}.json"
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="silt-reap-bench-"))
    results = []
    for kind in args.catalogs.split(","):
        result = run(kind.strip(), args.objects, args.partitions, args.workers, workdir, args.changed)
        print(json.dumps(result))
        results.append(result)
    report = {"machine": brief_machine(), "date": utcnow().isoformat(timespec="seconds"), "results": results}
    save_json(Path(args.out), report, indent=1)


if __name__ == "__main__":
    main()
