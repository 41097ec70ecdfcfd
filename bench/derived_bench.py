#!/usr/bin/env python
"""Derived table benchmark: an incremental build after one day of a 30-day source changed, against
a full rebuild of the same query on the same state. Target: the incremental build at least 10x faster.

Setup (not timed): a deployment with web.access, --days days (UTC) of --objects Parquet small objects of
--rows generated access rows each, committed through the stream's catalog path and published; the derived
table web.daily_actions (a rollup by dt and action, incremental = true) created and built once, and one warm-up
round. Each timed round first changes one day of the source (`delete_rows` on a different day each round:
a new version of that one partition), then builds incrementally (it rebuilds that date) and then fully
(`build_derived(full=True)`: every date) on the same source state; the two alternate round by round on one
SparkSession, so both see whatever load the shared machine has.

    .venv/bin/python bench/derived_bench.py                  # 30 days x 4 objects x 25,000 rows, 5 rounds
    .venv/bin/python bench/derived_bench.py --rows 5000 --repeats 3
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from common import (
    RESULTS,
    commit_small_objects,
    load_avg_1m,
    machine,
    new_deployment,
    start_spark,
    utc_stamp,
    write_report,
)

import siltlake.derived.build as build_module
import siltlake.read as read_module
from siltlake.deployment import Deployment
from siltlake.derived import build_derived, create_derived
from siltlake.derivedef import DerivedDef
from siltlake.publish import publish_once
from siltlake.read import sql
from siltlake.tabledef import TableDef
from siltlake.write.update import delete_rows

TABLE = {
    "schema": "web",
    "name": "access",
    "time_column": "utc_event_time",
    "timezone": "UTC",
    "merge_interval": 0,
    "columns": [
        {"name": "utc_event_time", "type": "timestamp", "nullable": False},
        {"name": "user_id", "type": "bigint"},
        {"name": "action", "type": "string"},
        {"name": "status", "type": "int"},
        {"name": "bytes", "type": "bigint"},
    ],
}
QUERY = (
    "SELECT dt, action, count(*) AS hits, count(DISTINCT user_id) AS users, sum(bytes) AS bytes, "
    "sum(CASE WHEN status >= 500 THEN 1 ELSE 0 END) AS errors FROM web.access GROUP BY dt, action"
)
FIRST = dt.date(2026, 10, 1)
_names = itertools.count()


def object_rows(date: dt.date, rows: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    start = np.datetime64(dt.datetime.combine(date, dt.time()), "us")
    times = np.sort(start + rng.integers(0, 86_400_000_000, rows).astype("timedelta64[us]"))
    actions = np.array(["view", "click", "search", "buy", "login", "logout", "share", "like"])
    return pa.table(
        {
            "utc_event_time": pa.array(times, pa.timestamp("us")),
            "user_id": pa.array(rng.integers(0, 200_000, rows), pa.int64()),
            "action": pa.array(actions[rng.integers(0, len(actions), rows)], pa.string()),
            "status": pa.array(rng.choice([200, 200, 200, 304, 404, 500], rows).astype("int32"), pa.int32()),
            "bytes": pa.array(rng.integers(100, 50_000, rows), pa.int64()),
        }
    )


def fill(deployment: Deployment, days: int, objects: int, rows: int) -> int:
    """The source table's small objects, committed in one stream commit as the stream does, then published."""
    deployment.catalog.tables.create(TableDef.from_mapping(TABLE))
    plan = [FIRST + dt.timedelta(days=day) for day in range(days) for _ in range(objects)]
    commit_small_objects(
        deployment, "web.access", [(date, object_rows(date, rows, seed)) for seed, date in enumerate(plan, start=1)]
    )
    publish_once(deployment)
    return len(plan) * rows


class Phases:
    """Where a build's time goes: the core's steps, timed by wrapping them (siltlake.derived.build is not
    changed): pinning the sources, planning the query (catalog reads, the DataFrame), writing the file
    lists, the publishing transaction; the Spark job (query, shuffle, writers, collect) is the rest of
    the write step."""

    STEPS = (
        ("source_state", build_module, "source_state"),
        ("plan_query", read_module, "sql"),
        ("write_step", build_module, "_write"),
        ("manifests", build_module, "write_manifests"),
    )

    def __init__(self, deployment: Deployment) -> None:
        self.seconds: dict[str, float] = {}
        for name, module, attribute in self.STEPS:
            setattr(module, attribute, self._timed(name, getattr(module, attribute)))
        derived = deployment.catalog.derived
        derived.publish_build = self._timed("publish", derived.publish_build)

    def _timed(self, name: str, function):  # any callable, wrapped
        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started

        return timed

    def take(self) -> dict[str, float]:
        found, self.seconds = self.seconds, {}
        write = found.pop("write_step", 0.0)
        found["spark_job"] = write - found.get("plan_query", 0.0) - found.get("manifests", 0.0)
        return {name: round(value, 3) for name, value in found.items()}


def build(deployment: Deployment, full: bool, phases: Phases) -> dict:
    phases.take()
    started = time.perf_counter()
    report = build_derived(deployment, "web.daily_actions", full=full)
    seconds = time.perf_counter() - started
    steps = phases.take()
    steps["other"] = round(seconds - sum(steps.values()), 3)
    return {
        "seconds": round(seconds, 3),
        "kind": report.kind,
        "dates": len(report.dates),
        "rows": report.rows,
        "bytes": report.bytes,
        "phases": steps,
    }


def check_fresh(deployment: Deployment, spark) -> None:  # a SparkSession
    built = sorted(tuple(r) for r in sql(spark, "SELECT * FROM web.daily_actions", deployment).collect())
    fresh = sorted(
        tuple(r)
        for r in sql(spark, QUERY, deployment).select("action", "hits", "users", "bytes", "errors", "dt").collect()
    )
    if built != fresh:
        raise SystemExit("the derived table differs from its query run fresh: the benchmark measured a wrong build")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--objects", type=int, default=4, help="small objects per day")
    parser.add_argument("--rows", type=int, default=25_000, help="rows per small object")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (each changes a different day)")
    parser.add_argument("--out", type=Path, default=RESULTS / "derived.json")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    if args.repeats + 1 > args.days:
        parser.error("--repeats must be below --days: each round changes a day of its own")

    workdir = Path(tempfile.mkdtemp(prefix="silt-derived-bench-"))
    spark, spark_seconds = start_spark("derived-bench", {"spark.sql.shuffle.partitions": "2"})
    try:
        deployment = new_deployment("bench001", workdir)
        deployment.use_spark(spark)
        started = time.perf_counter()
        rows = fill(deployment, args.days, args.objects, args.rows)
        print(
            f"source: {args.days} days x {args.objects} objects x {args.rows:,} rows = {rows:,} rows "
            f"({time.perf_counter() - started:.1f} s)",
            flush=True,
        )
        create_derived(
            deployment, DerivedDef.from_mapping({"name": "web.daily_actions", "query": QUERY, "incremental": True})
        )
        phases = Phases(deployment)
        first = build(deployment, full=True, phases=phases)
        print(f"first build: {first}", flush=True)
        runs: dict[str, list[dict]] = {"incremental": [], "full": []}
        for round_ in range(args.repeats + 1):  # round 0 warms up both paths
            day = FIRST + dt.timedelta(days=args.days // 2 + round_ - args.repeats // 2)
            delete_rows(deployment, "web.access", day, f"user_id % 50 = {round_}")
            load = load_avg_1m()
            incremental = build(deployment, full=False, phases=phases)
            assert incremental["kind"] == "incremental" and incremental["dates"] == 1, incremental
            full = build(deployment, full=True, phases=phases)
            assert full["kind"] == "full" and full["dates"] == args.days, full
            label = "warm-up" if round_ == 0 else f"round {round_}/{args.repeats}"
            print(
                f"  {label}: changed {day}; incremental {incremental['seconds']:.2f} s, full {full['seconds']:.2f} s "
                f"(load {load})",
                flush=True,
            )
            if round_:
                runs["incremental"].append({**incremental, "changed": day.isoformat(), "load_avg_1m": load})
                runs["full"].append({**full, "changed": day.isoformat(), "load_avg_1m": load})
        check_fresh(deployment, spark)
        medians = {name: statistics.median(r["seconds"] for r in items) for name, items in runs.items()}
        ratios = [f["seconds"] / i["seconds"] for i, f in zip(runs["incremental"], runs["full"], strict=True)]
        ratio = round(medians["full"] / medians["incremental"], 2)
        steps = {
            name: {
                step: round(statistics.median(r["phases"].get(step, 0.0) for r in items), 3)
                for step in items[0]["phases"]
            }
            for name, items in runs.items()
        }
        report = {
            "benchmark": "derived",
            "issue": 18,
            "time": utc_stamp(),
            "machine": machine(),
            "load_avg_1m": load_avg_1m(),
            "command": "python " + " ".join(["bench/derived_bench.py", *sys.argv[1:]]),
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "source_rows": rows,
            "query": QUERY,
            "spark_start_seconds": spark_seconds,
            "first_build": first,
            "median_seconds": {k: round(v, 3) for k, v in medians.items()},
            "median_phase_seconds": steps,
            "full_over_incremental": ratio,
            "ratio_per_round": [round(r, 2) for r in ratios],
            "target": 10,
            "met": ratio >= 10,
            "runs": runs,
        }
        deployment.close()
        print(
            f"incremental {medians['incremental']:.2f} s, full {medians['full']:.2f} s (medians): "
            f"{ratio}x (target 10x: {'met' if ratio >= 10 else 'NOT met'})"
        )
        for name, values in steps.items():
            print(f"  {name} phases (medians, s): " + ", ".join(f"{k} {v:.2f}" for k, v in values.items()))
        write_report(args.out, report)
    finally:
        spark.stop()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
