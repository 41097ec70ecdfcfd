#!/usr/bin/env python
"""Publish benchmark: publish runs over 10,000 partitions and reader planning, on SQLite and PostgreSQL.

Parts (``all`` runs both; the report goes to --out, default bench/results/publish.json):

  publish  TABLES x DAYS partitions (10 x 1,000 = 10,000) each with one new small object per run:
           publish_once runs that publish a live version of every partition, close every partition,
           switch every partition (and publish its first merged version, same run), publish a merged
           version of every partition, and do nothing. Seconds, partitions/s, catalog statements and
           transactions, per step. Peer: a delta-rs commit adding one file to each of 10,000
           partitions.
  reader   Catalog.version_reads.reader_snapshot (and siltlake.read.table up to the DataFrame, unless --no-spark)
           for a table of 10, 100 and 1,000 partitions, half switched with merged versions, half live:
           planning time and catalog queries per size, current state and as of a version. Peer:
           loading a 1,000-partition Delta table's snapshot and file list (deltalake).

Small objects are committed through the stream's catalog path (StreamCommit) without Spark; in the
publish part they are catalog rows only, in the reader part real Parquet files. Merges are recorded
in the catalog directly (see publish_lake.merge_partitions); manifests are real files in the local lake.
Run from the repository root:  .venv/bin/python bench/publish_bench.py
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from common import ROOT, StatementCounter, catalog_url, load_avg_1m, machine, new_deployment, start_spark, write_report
from publish_lake import FIRST_DAY, TABLE, add_objects, add_objects_bulk, merge_partitions, object_rows, tokyo

from siltlake.deployment import Deployment
from siltlake.publish import publish_once
from siltlake.tabledef import TableDef

# The catalog.versions methods a publish run calls, timed and counted one by one (steps of docs/design.md).
STEPS = {
    "switch_partitions": "1 switch",
    "close_partitions": "2 close",
    "live_to_publish": "4 live: read",
    "merged_to_publish": "5 merged: read",
    "publish_merged": "5 merged: CAS",
    "publish_merged_many": "5 merged: CAS",
    "commit": "4+5 commit",
}


# --------------------------------------------------------------------------------------------------
# the steps of a publish run


class StepTimer:
    """Wraps the deployment's catalog.versions methods that a publish run calls: seconds, calls, statements."""

    def __init__(self, versions, counter: StatementCounter) -> None:  # a catalog's Versions
        self.counter = counter
        self.steps: dict[str, dict] = {}
        self.first_start: dict[str, float] = {}
        for name in STEPS:
            if hasattr(versions, name):
                setattr(versions, name, self._wrap(name, getattr(versions, name)))

    def _wrap(self, name: str, method: Callable) -> Callable:
        def timed(*args, **kwargs):
            statements, transactions = self.counter.mark()
            started = time.perf_counter()
            self.first_start.setdefault(name, started)
            try:
                return method(*args, **kwargs)
            finally:
                step = self.steps.setdefault(
                    STEPS[name], {"seconds": 0.0, "calls": 0, "statements": 0, "transactions": 0}
                )
                step["seconds"] += time.perf_counter() - started
                step["calls"] += 1
                step["statements"] += self.counter.statements - statements
                step["transactions"] += self.counter.transactions - transactions

        return timed

    def reset(self) -> None:
        self.steps, self.first_start = {}, {}


# --------------------------------------------------------------------------------------------------
# publish part


def timed_run(
    name: str, deployment: Deployment, counter: StatementCounter, steps: StepTimer, now: dt.datetime, partitions: int
) -> dict:
    steps.reset()
    statements, transactions = counter.mark()
    before = load_avg_1m()
    started = time.perf_counter()
    report = publish_once(deployment, now=now)
    seconds = time.perf_counter() - started
    # Step 5 as a whole (manifest writes included): from reading the switched partitions to the end.
    merged_read = steps.first_start.get("merged_to_publish")
    step_five = started + seconds - merged_read if merged_read else None
    record = {
        "run": name,
        "seconds": round(seconds, 3),
        "partitions_per_s": round(partitions / seconds) if seconds else None,
        "switched": len(report.switched),
        "closed": len(report.closed),
        "live_versions": len(report.live_versions),
        "merged_versions": len(report.merged_versions),
        "skipped_merged": report.skipped_merged,
        "statements": counter.statements - statements,
        "transactions": counter.transactions - transactions,
        "steps": {k: {**v, "seconds": round(v["seconds"], 3)} for k, v in sorted(steps.steps.items())},
        "step5_total_seconds": round(step_five, 3) if step_five is not None else None,
        "load_avg_1m_before": before,
        "load_avg_1m_after": load_avg_1m(),
    }
    print(
        f"  {name:>16}: {seconds:7.2f} s  switched {record['switched']:>5} closed {record['closed']:>5} "
        f"live {record['live_versions']:>5} merged {record['merged_versions']:>5}  "
        f"{record['statements']:>6} statements {record['transactions']:>6} transactions",
        flush=True,
    )
    return record


def publish_part(kind: str, args, workdir: Path) -> dict:
    root = workdir / f"publish-{kind}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    with catalog_url(kind, root) as url:
        deployment = new_deployment("pbench01", root, catalog_url=url)
        try:
            return publish_runs(deployment, args, root)
        finally:
            deployment.close()


def publish_runs(deployment: Deployment, args, root: Path) -> dict:
    catalog = deployment.catalog
    tables = []
    for i in range(args.tables):
        tables.append(catalog.tables.create(TableDef.from_mapping({**TABLE, "name": f"t{i:03d}"})))
    days = [FIRST_DAY + dt.timedelta(days=d) for d in range(args.days)]
    partitions = [(table, day) for table in tables for day in days]
    count = len(partitions)
    before_days, after_days = tokyo(days[0] - dt.timedelta(days=1), 12), tokyo(days[-1] + dt.timedelta(days=1), 1)
    print(f"[{kind_of(catalog)}] {count} partitions ({args.tables} tables x {args.days} days)", flush=True)
    setup: dict[str, float] = {}

    def step(label: str, action: Callable[[], object]) -> None:
        started = time.perf_counter()
        action()
        setup[label] = round(time.perf_counter() - started, 2)

    step("first objects", lambda: add_objects_bulk(deployment, partitions, before_days))
    counter = StatementCounter(catalog.engine)
    steps = StepTimer(catalog.versions, counter)
    runs = [timed_run("first_live", deployment, counter, steps, before_days, count)]
    step("one new object each", lambda: add_objects_bulk(deployment, partitions, before_days))
    runs.append(timed_run("live", deployment, counter, steps, before_days, count))
    runs.append(timed_run("close", deployment, counter, steps, after_days, count))
    ids = [row.id for table in tables for row in catalog.partitions.list(table.id)]
    step("merge every partition", lambda: merge_partitions(deployment, ids, after_days))
    runs.append(timed_run("switch_and_merged", deployment, counter, steps, after_days, count))
    step("one delayed object each", lambda: add_objects_bulk(deployment, partitions, after_days))
    step("merge them", lambda: merge_partitions(deployment, ids, after_days))
    runs.append(timed_run("merged", deployment, counter, steps, after_days, count))
    runs.append(timed_run("idle", deployment, counter, steps, after_days, count))
    manifests = sum(1 for _ in (root / "lake").rglob("manifest*"))
    expected = {
        "first_live": ("live_versions", count),
        "live": ("live_versions", count),
        "close": ("closed", count),
        "switch_and_merged": ("merged_versions", count),
        "merged": ("merged_versions", count),
    }
    for run in runs:
        field, want = expected.get(run["run"], (None, None))
        if field and run[field] != want:
            raise RuntimeError(f"run {run['run']}: {field} = {run[field]}, expected {want}")
    return {
        "partitions": count,
        "tables": args.tables,
        "days": args.days,
        "setup_seconds": setup,
        "manifest_files": manifests,
        "runs": runs,
    }


def kind_of(catalog) -> str:
    return catalog.dialect


# --------------------------------------------------------------------------------------------------
# reader part


def reader_table(deployment: Deployment, size: int) -> dict:
    """One table of `size` days: the first half closed, merged (real merged objects), switched and
    published as merged versions; the second half live, published twice, with one more object each
    that no run has published yet. Two small objects of 20 rows per partition to start with."""
    catalog = deployment.catalog
    table = catalog.tables.create(TableDef.from_mapping(TABLE))
    days = [FIRST_DAY + dt.timedelta(days=d) for d in range(size)]
    middle = days[size // 2]
    first, later = tokyo(middle, 12), tokyo(middle, 13)
    for seed in range(2):
        add_objects(deployment, [(table, day) for day in days], first, write_files=True, seed=seed)
    publish_once(deployment, now=first)  # version 1 everywhere; closes the first half
    closed = [row.id for row in catalog.partitions.list(table.id) if row.partition_date < middle]
    merge_partitions(deployment, closed, first, write_files=True)
    second = publish_once(deployment, now=later)  # switches the first half, merged versions
    open_days = [(table, day) for day in days if day >= middle]
    add_objects(deployment, open_days, later, write_files=True, seed=2)
    third = publish_once(deployment, now=later)  # version 2 of the open half
    add_objects(deployment, open_days, later, write_files=True, seed=3)  # visible, not yet published
    return {
        "table": table,
        "switched": len(second.switched),
        "merged_versions": len(second.merged_versions),
        "live_versions": len(third.live_versions),
    }


def reader_part(kind: str, args, workdir: Path, spark) -> dict:
    from siltlake.read import table as read_table

    results = []
    for size in args.reader_sizes:
        root = workdir / f"reader-{kind}-{size}"
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        with catalog_url(kind, root) as url:
            deployment = new_deployment("pbench01", root, catalog_url=url)
            try:
                started = time.perf_counter()
                state = reader_table(deployment, size)
                setup = round(time.perf_counter() - started, 2)
                table = state.pop("table")
                catalog = deployment.catalog
                counter = StatementCounter(catalog.engine)
                cases = {
                    "current": {},
                    "as_of_version_1": {"as_of_version": 1},
                    "as_of_version_2": {"as_of_version": 2},
                }
                record = {"partitions": size, "setup_seconds": setup, **state, "load_avg_1m_before": load_avg_1m()}
                for case, pin in cases.items():
                    catalog.version_reads.reader_snapshot(table.id, **pin)  # warm: connection pool, statement cache
                    times, queries = [], set()
                    for _ in range(args.reader_repeats):
                        statements = counter.statements
                        started = time.perf_counter()
                        views = catalog.version_reads.reader_snapshot(table.id, **pin)
                        times.append(time.perf_counter() - started)
                        queries.add(counter.statements - statements)
                    record[case] = {
                        "snapshot_best_ms": round(min(times) * 1000, 2),
                        "snapshot_median_ms": round(statistics.median(times) * 1000, 2),
                        "queries": sorted(queries),
                        "views": len(views),
                        "merged_views": sum(1 for v in views if v.manifest_key),
                        "live_objects": sum(len(v.live_object_ids) for v in views),
                    }
                    if spark is not None:
                        deployment.use_spark(spark)
                        read_table(spark, "bench.t", deployment, **pin)  # warm
                        frame_times = []
                        for _ in range(args.spark_repeats):
                            statements = counter.statements
                            started = time.perf_counter()
                            read_table(spark, "bench.t", deployment, **pin)
                            frame_times.append(time.perf_counter() - started)
                        record[case]["read_table_best_s"] = round(min(frame_times), 3)
                        record[case]["read_table_median_s"] = round(statistics.median(frame_times), 3)
                        record[case]["read_table_queries"] = counter.statements - statements
                record["load_avg_1m_after"] = load_avg_1m()
                results.append(record)
                print(
                    f"  [{kind}] {size:>5} partitions: "
                    + "  ".join(
                        f"{case} {record[case]['snapshot_median_ms']:.1f} ms ({record[case]['queries']} queries"
                        + (f", read.table {record[case]['read_table_median_s']:.2f} s" if spark is not None else "")
                        + ")"
                        for case in cases
                    ),
                    flush=True,
                )
            finally:
                deployment.close()
    queries = {tuple(r[case]["queries"]) for r in results for case in ("current", "as_of_version_1")}
    return {"sizes": results, "constant_queries": len(queries) == 1}


# --------------------------------------------------------------------------------------------------
# delta-rs peer


def delta_commit_peer(workdir: Path, count: int) -> dict:
    """One Delta commit adding one (already written) file to each of `count` partitions: the metadata
    work of a publish run that shows one new object per partition."""
    from deltalake import DeltaTable, write_deltalake
    from deltalake.transaction import AddAction

    root = workdir / "delta-commit"
    shutil.rmtree(root, ignore_errors=True)
    data = pa.table({"user_id": pa.array([1], pa.int64()), "dt": pa.array(["2000-01-01"])})
    write_deltalake(str(root), data, partition_by=["dt"])
    table = DeltaTable(str(root))
    days = [(FIRST_DAY + dt.timedelta(days=d)).isoformat() for d in range(count)]
    payload = pa.table({"user_id": pa.array([1], pa.int64())})
    sink = pa.BufferOutputStream()
    pq.write_table(payload, sink)
    body = sink.getvalue().to_pybytes()
    actions = []
    for day in days:  # the files exist before the commit, as small objects exist before a publish run
        relative = f"dt={day}/part-{uuid.uuid4().hex}.parquet"
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(body)
        actions.append(
            AddAction(
                path=relative,
                size=len(body),
                partition_values={"dt": day},
                modification_time=int(time.time() * 1000),
                data_change=True,
                stats='{"numRecords":1}',
            )
        )
    before = load_avg_1m()
    started = time.perf_counter()
    table.create_write_transaction(actions, mode="append", schema=table.schema(), partition_by=["dt"])
    seconds = time.perf_counter() - started
    files = len(DeltaTable(str(root)).file_uris())
    if files != count + 1:
        raise RuntimeError(f"delta commit: {files} files, expected {count + 1}")
    return {
        "partitions": count,
        "seconds": round(seconds, 3),
        "partitions_per_s": round(count / seconds),
        "load_avg_1m_before": before,
        "load_avg_1m_after": load_avg_1m(),
    }


def delta_reader_peer(workdir: Path, size: int, repeats: int) -> dict:
    """A Delta table of `size` partitions built like the reader table (two commits of one file per
    partition, half the partitions compacted into one file, one more commit for the other half): time
    to load the snapshot and list its files, current and as of version 1."""
    from deltalake import DeltaTable, write_deltalake

    root = workdir / f"delta-reader-{size}"
    shutil.rmtree(root, ignore_errors=True)
    days = [(FIRST_DAY + dt.timedelta(days=d)).isoformat() for d in range(size)]
    definition = TableDef.from_mapping(TABLE)

    def rows(selected: list[str], seed: int) -> pa.Table:
        parts = [
            object_rows(definition, dt.datetime(2024, 1, 1, 1), 20, seed * 100_000 + i) for i in range(len(selected))
        ]
        data = pa.concat_tables(parts)
        return data.append_column("dt", pa.array([d for d in selected for _ in range(20)]))

    for seed in range(2):
        write_deltalake(str(root), rows(days, seed), partition_by=["dt"], mode="append")
    half = days[: size // 2]
    # Compact the first half only, as the first half of the reader table is merged.
    table = DeltaTable(str(root))
    table.optimize.compact(partition_filters=[("dt", "in", half)])
    write_deltalake(str(root), rows(days[size // 2 :], 2), partition_by=["dt"], mode="append")
    write_deltalake(str(root), rows(days[size // 2 :], 3), partition_by=["dt"], mode="append")
    cases = {"current": None, "as_of_version_1": 1}
    record: dict = {
        "partitions": size,
        "versions": DeltaTable(str(root)).version(),
        "load_avg_1m_before": load_avg_1m(),
    }
    for case, version in cases.items():
        DeltaTable(str(root), version=version).file_uris()  # warm
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            files = DeltaTable(str(root), version=version).file_uris()
            times.append(time.perf_counter() - started)
        record[case] = {
            "best_ms": round(min(times) * 1000, 2),
            "median_ms": round(statistics.median(times) * 1000, 2),
            "files": len(files),
        }
    record["load_avg_1m_after"] = load_avg_1m()
    return record


# --------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", nargs="?", choices=["all", "publish", "reader"], default="all")
    parser.add_argument("--catalog", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--tables", type=int, default=10, help="tables in the publish part")
    parser.add_argument("--days", type=int, default=1000, help="days per table in the publish part")
    parser.add_argument("--reader-sizes", type=lambda v: [int(x) for x in v.split(",")], default=[10, 100, 1000])
    parser.add_argument("--reader-repeats", type=int, default=7)
    parser.add_argument("--spark-repeats", type=int, default=2)
    parser.add_argument("--no-spark", action="store_true", help="time reader_snapshot only, not read.table")
    parser.add_argument("--no-peers", action="store_true", help="skip the delta-rs peer")
    parser.add_argument("--workdir", type=Path, default=ROOT / "bench" / "data" / "publish")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "publish.json")
    args = parser.parse_args(argv)
    kinds = ["sqlite", "postgresql"] if args.catalog == "both" else [args.catalog]
    args.workdir.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "benchmark": "publish",
        "started": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "args": {k: str(v) for k, v in vars(args).items()},
        "machine": machine(),
        "load_avg_1m_start": load_avg_1m(),
    }
    try:
        import deltalake

        report["machine"]["deltalake"] = deltalake.__version__
    except ImportError:
        args.no_peers = True
    started = time.perf_counter()
    if args.part in ("all", "publish"):
        report["publish"] = {kind: publish_part(kind, args, args.workdir) for kind in kinds}
        if not args.no_peers:
            report["publish"]["delta_commit"] = delta_commit_peer(args.workdir, args.tables * args.days)
            print(
                f"  delta-rs commit of {args.tables * args.days} partition files: "
                f"{report['publish']['delta_commit']['seconds']} s",
                flush=True,
            )
    if args.part in ("all", "reader"):
        spark = None
        if not args.no_spark:
            spark, report["spark_session_start_seconds"] = start_spark(
                "siltlake-publish-bench", {"spark.local.dir": str(args.workdir / "spark-tmp")}
            )
        report["reader"] = {kind: reader_part(kind, args, args.workdir, spark) for kind in kinds}
        if not args.no_peers:
            report["reader"]["delta"] = [
                delta_reader_peer(args.workdir, size, args.reader_repeats) for size in args.reader_sizes
            ]
            for record in report["reader"]["delta"]:
                print(
                    f"  delta-rs {record['partitions']:>5} partitions: load + file list "
                    f"{record['current']['median_ms']} ms (as of v1 {record['as_of_version_1']['median_ms']} ms)"
                )
        if spark is not None:
            spark.stop()
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["load_avg_1m_end"] = load_avg_1m()
    write_report(args.out, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
