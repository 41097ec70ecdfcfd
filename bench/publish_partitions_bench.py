#!/usr/bin/env python
"""Publish of one changed partition in a table of N partitions (it grew 10x from
10 to 10,000 partitions). The target: flat in N, in proportion to what changed.

Setup (not timed; publish_bench's cheap catalog rows): one table of N days, each with one small object,
published live, closed, merged and switched with a merged version, so N - 1 past days show a merged
manifest; the last day is today and stays live. Timed, each the median of --repeats publish_once runs:

  live    one new small object in today's partition (through the stream's commit path): one append version
  merged  one past day gets a delayed object and a merge of it: one merged version (its manifests written)
  idle    nothing changed

With --iceberg the Iceberg target is on (PyIceberg's SQL catalog beside the catalog): the objects are real
tiny Parquet files, and every run also commits one Iceberg snapshot; --snapshot-retention 0 keeps only the current
one (a setup of more versions leaves more snapshots otherwise, and a commit costs the snapshots it keeps).
--profile FILE writes cProfile statistics of the `live` runs at the largest size. Also timed at each size:
`merge_queue.status` (the dashboard's history sample runs it every minute), median of --repeats calls.

Run from the repository root:  .venv/bin/python bench/publish_partitions_bench.py --sizes 10,1000,10000
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import shutil
import statistics
import sys
import time
from pathlib import Path

import sqlalchemy as sa
from common import ROOT, StatementCounter, brief_machine, catalog_url, load_avg_1m, new_deployment, save_json, utc_stamp
from publish_bench import TABLE, add_objects, add_objects_bulk, merge_partitions, tokyo

from siltlake.clock import utcnow
from siltlake.publish import publish_once
from siltlake.publish.runner import local_date
from siltlake.tabledef import TableDef


def build(deployment, size: int, iceberg: bool) -> tuple:  # a Deployment
    """N days of one table up to today (Tokyo): N - 1 merged and switched, today live; (table, days)."""
    catalog = deployment.catalog
    table = catalog.tables.create(TableDef.from_mapping(TABLE))
    today = local_date(utcnow(), table.definition.zone)
    days = [today - dt.timedelta(days=d) for d in reversed(range(size))]
    added = tokyo(today, 0)
    if iceberg:  # real Parquet files: the Iceberg target reads their footers
        add_objects(deployment, [(table, day) for day in days], added, write_files=True)
    else:
        add_objects_bulk(deployment, [(table, day) for day in days], added)
    publish_once(deployment)  # every past day closed, live versions of every day
    past = [p.id for p in catalog.partitions.list(table.id) if p.partition_date != today]
    merge_partitions(deployment, past, added, write_files=iceberg)
    publish_once(deployment)  # switched, and their first merged versions
    if catalog.dialect == "postgresql":
        # Statistics and a vacuumed visibility map, as autovacuum keeps a long-lived catalog: right after a
        # bulk load the planner guesses, and the partial indexes still hold the updated rows' dead entries.
        with catalog.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            c.execute(sa.text("VACUUM ANALYZE"))
    return table, days


def timed(
    deployment, counter: StatementCounter, prepare, profile: cProfile.Profile | None, repeats: int, check
) -> dict:
    """Publish runs on the clock (the days end today), each after prepare(attempt)."""
    seconds, statements = [], []
    for attempt in range(repeats):
        prepare(attempt)
        mark = counter.mark()
        started = time.perf_counter()
        if profile is not None:
            profile.enable()
        report = publish_once(deployment)
        if profile is not None:
            profile.disable()
        seconds.append(time.perf_counter() - started)
        statements.append(counter.statements - mark[0])
        check(report)
    return {
        "median_s": round(statistics.median(seconds), 4),
        "best_s": round(min(seconds), 4),
        "statements": sorted(set(statements)),
    }


def timed_status(deployment, repeats: int) -> dict:  # a Deployment
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        deployment.catalog.merge_queue.status(utcnow(), 600)
        seconds.append(time.perf_counter() - started)
    return {"median_s": round(statistics.median(seconds), 5), "best_s": round(min(seconds), 5)}


def run(kind: str, size: int, args, workdir: Path) -> dict:
    root = workdir / f"{kind}-{size}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    with catalog_url(kind, root) as url:
        deployment = new_deployment("ppbench1", root, catalog_url=url)
        if args.iceberg:
            deployment.config.publish.targets = ["iceberg"]
            if args.snapshot_retention is not None:
                deployment.config.publish.iceberg.snapshot_retention = args.snapshot_retention
        try:
            started = time.perf_counter()
            table, days = build(deployment, size, args.iceberg)
            now = utcnow()
            record = {
                "catalog": kind,
                "partitions": size,
                "setup_s": round(time.perf_counter() - started, 1),
                "load_avg_1m_before": load_avg_1m(),
            }
            counter = StatementCounter(deployment.catalog.engine)
            catalog = deployment.catalog
            by_date = {p.partition_date: p.id for p in catalog.partitions.list(table.id)}
            profile = cProfile.Profile() if args.profile and size == max(args.sizes) else None
            merged_profile = cProfile.Profile() if args.profile_merged and size == max(args.sizes) else None

            def one_live(_: int) -> None:
                add_objects(deployment, [(table, days[-1])], now, write_files=args.iceberg, seed=size)

            def one_merged(attempt: int) -> None:
                day = days[attempt % max(len(days) - 1, 1)]
                add_objects(deployment, [(table, day)], now, write_files=args.iceberg, seed=size + attempt)
                merge_partitions(deployment, [by_date[day]], now, write_files=args.iceberg)

            def expect(field: str, count: int):
                def check(report) -> None:
                    if len(getattr(report, field)) != count or report.target_errors:
                        raise RuntimeError(
                            f"{size} partitions: {field} = {len(getattr(report, field))}, expected "
                            f"{count}; target errors {report.target_errors}"
                        )

                return check

            publish_once(deployment)  # warm: connection pool, statement cache
            record["live"] = timed(deployment, counter, one_live, profile, args.repeats, expect("live_versions", 1))
            record["merged"] = timed(
                deployment, counter, one_merged, merged_profile, args.repeats, expect("merged_versions", 1)
            )
            record["idle"] = timed(deployment, counter, lambda _: None, None, args.repeats, expect("live_versions", 0))
            record["merge_status"] = timed_status(deployment, args.repeats)
            record["load_avg_1m_after"] = load_avg_1m()
            if args.iceberg:
                from siltlake.publish.iceberg.catalog import identifier
                from siltlake.publish.iceberg.target import IcebergTarget

                kept = IcebergTarget(deployment).load(identifier(deployment, table))
                record["iceberg_snapshots"] = len(kept.snapshots())
            if profile is not None:
                profile.dump_stats(args.profile)
            if merged_profile is not None:
                merged_profile.dump_stats(args.profile_merged)
            print(
                f"  [{kind}] {size:>6} partitions: live {record['live']['median_s']:.3f} s "
                f"({record['live']['statements']} statements), merged {record['merged']['median_s']:.3f} s, "
                f"idle {record['idle']['median_s']:.3f} s, merge status "
                f"{record['merge_status']['median_s'] * 1000:.1f} ms  (setup {record['setup_s']} s, load "
                f"{record['load_avg_1m_before']})",
                flush=True,
            )
            return record
        finally:
            deployment.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")], default=[10, 1000, 10000])
    parser.add_argument("--catalog", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--iceberg", action="store_true", help="with the Iceberg target on")
    parser.add_argument(
        "--snapshot-retention",
        type=int,
        default=None,
        help="publish.iceberg.snapshot_retention in seconds (default: the configuration's, a day)",
    )
    parser.add_argument("--profile", type=Path, help="cProfile statistics of the live runs at the largest size")
    parser.add_argument("--profile-merged", type=Path, help="the same of the merged runs")
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / "data" / "publish_partitions")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "publish_partitions.json")
    args = parser.parse_args(argv)
    kinds = ["sqlite", "postgresql"] if args.catalog == "both" else [args.catalog]
    args.workdir.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "publish_partitions",
        "started": utc_stamp(),
        "machine": brief_machine(),
        "args": {k: str(v) for k, v in vars(args).items()},
        "load_avg_1m_start": load_avg_1m(),
        "runs": [run(kind, size, args, args.workdir) for kind in kinds for size in args.sizes],
    }
    report["load_avg_1m_end"] = load_avg_1m()
    save_json(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
