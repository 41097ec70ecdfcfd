#!/usr/bin/env python
"""Keyed tables benchmark.

`read`: one day of --objects small objects of --rows rows each, of which --resend re-sent whole under new
keys (a shipper's retried chunks), committed through the stream's catalog path into two tables holding the
same objects: web.keyed (primary_key = event_id, read with merge-on-read) and web.plain (no key). Both are
read with the table API (`to_arrow`) and with Spark (`read.table(...).count()`), one run of each per round;
then the day is closed, merged and published (the keyed table's merge keeps one row per key) and both are
read again. Targets: keyed within 1.5x of plain before the merge, equal after.

`upsert`: a keyed table of --days days x --day-rows rows (merged and published), and --upsert-rows rows (half
of them new keys, half replacing existing rows, spread over every day) upserted with `Table.upsert` (a `merge`
commit: one small object per day, merged on read); the same 10 M rows as a delta-rs table partitioned by dt,
and the same rows merged with `DeltaTable.merge(...).when_matched_update_all().when_not_matched_insert_all()`.
Each delta-rs run starts from a fresh copy of the table (untimed). Target: the upsert faster than delta-rs.

    .venv/bin/python bench/keyed_bench.py read
    .venv/bin/python bench/keyed_bench.py upsert --days 30 --day-rows 333334 --upsert-rows 100000
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from common import (
    RESULTS,
    args_record,
    commit_small_objects,
    interleaved_runs,
    machine,
    new_deployment,
    start_spark,
    utc_stamp,
    write_report,
)

from siltlake.deployment import Deployment
from siltlake.lake import Lake
from siltlake.merge.runner import merge_once
from siltlake.publish import publish_once
from siltlake.read import table as read_table
from siltlake.tabledef import TableDef

FIRST = dt.date(2026, 10, 1)
COLUMNS = [
    {"name": "utc_event_time", "type": "timestamp", "nullable": False},
    {"name": "event_id", "type": "bigint", "nullable": False},
    {"name": "user_id", "type": "bigint"},
    {"name": "action", "type": "string"},
    {"name": "path", "type": "string"},
    {"name": "status", "type": "int"},
    {"name": "bytes", "type": "bigint"},
]


def table_def(name: str, keyed: bool) -> TableDef:
    return TableDef.from_mapping(
        {
            "schema": "web",
            "name": name,
            "time_column": "utc_event_time",
            "timezone": "UTC",
            "merge_interval": 0,
            "columns": COLUMNS,
            **({"primary_key": ["event_id"]} if keyed else {}),
        }
    )


def rows_of(date: dt.date, first_id: int, count: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    start = np.datetime64(dt.datetime.combine(date, dt.time()), "us")
    times = np.sort(start + rng.integers(0, 86_400_000_000, count).astype("timedelta64[us]"))
    actions = np.array(["view", "click", "search", "buy", "login", "logout", "share", "like"])
    paths = np.array([f"/items/{n}" for n in range(500)])
    return pa.table(
        {
            "utc_event_time": pa.array(times, pa.timestamp("us", tz="UTC")),
            "event_id": pa.array(np.arange(first_id, first_id + count), pa.int64()),
            "user_id": pa.array(rng.integers(0, 200_000, count), pa.int64()),
            "action": pa.array(actions[rng.integers(0, len(actions), count)], pa.string()),
            "path": pa.array(paths[rng.integers(0, len(paths), count)], pa.string()),
            "status": pa.array(rng.choice([200, 200, 200, 304, 404, 500], count).astype("int32"), pa.int32()),
            "bytes": pa.array(rng.integers(100, 50_000, count), pa.int64()),
        }
    )


def settle(deployment: Deployment) -> None:
    """Close, merge, switch and publish every past day (as the daemons would, after midnight)."""
    for _ in range(6):
        publish_once(deployment)
        while merge_once(deployment).claimed:
            pass
    publish_once(deployment)


def read_bench(args: argparse.Namespace, root: Path) -> dict:
    deployment = new_deployment("bench", root)
    spark, _ = start_spark("keyed-bench")
    deployment.use_spark(spark)
    for name, keyed in (("keyed", True), ("plain", False)):
        deployment.catalog.tables.create(table_def(name, keyed))
    chunks = [rows_of(FIRST, n * args.rows, args.rows, n) for n in range(args.objects)]
    rng = np.random.default_rng(7)
    resent = [chunks[int(i)] for i in rng.choice(args.objects, int(args.objects * args.resend), replace=True)]
    objects = [(FIRST, chunk) for chunk in chunks + resent]
    for name in ("web.keyed", "web.plain"):
        commit_small_objects(deployment, name, objects)
    lake = Lake(deployment)
    keyed, plain = lake.table("web.keyed"), lake.table("web.plain")
    unique = args.objects * args.rows
    stored = sum(chunk.num_rows for _, chunk in objects)

    def arrow(table):
        def run(_state: object) -> dict:
            return {"rows": table.to_arrow(dates=[FIRST]).num_rows}

        return None, run

    def spark_count(name: str):
        def run(_state: object) -> dict:
            return {"rows": read_table(spark, name, deployment, dates=[FIRST]).count()}

        return None, run

    # Each reader's pair alternates on its own: a Spark read leaves work behind (its Python workers, the
    # JVM's collector) that would land on whichever table API read came next.
    pairs = [{"keyed_arrow": arrow(keyed), "plain_arrow": arrow(plain)}]
    if not args.no_spark:
        pairs.append({"keyed_spark": spark_count("web.keyed"), "plain_spark": spark_count("web.plain")})

    def timed() -> dict:
        return {name: runs for pair in pairs for name, runs in interleaved_runs(pair, args.repeats).items()}

    before = timed()
    assert before["keyed_arrow"]["runs"][0]["rows"] == unique and before["plain_arrow"]["runs"][0]["rows"] == stored
    assert args.no_spark or before["keyed_spark"]["runs"][0]["rows"] == unique
    settle(deployment)
    assert len(keyed.files(dates=[FIRST])) == 1, keyed.files(dates=[FIRST])
    after = timed()
    assert after["keyed_arrow"]["runs"][0]["rows"] == unique
    spark.stop()
    deployment.close()

    def ratio(runs: dict, a: str, b: str) -> dict:
        return {
            "best": round(runs[a]["best_seconds"] / runs[b]["best_seconds"], 2),
            "median": round(runs[a]["median_seconds"] / runs[b]["median_seconds"], 2),
        }

    return {
        "stored_rows": stored,
        "unique_rows": unique,
        "before_merge": before,
        "after_merge": after,
        "ratios": {
            f"{phase}_{reader}": ratio(runs, f"keyed_{reader}", f"plain_{reader}")
            for phase, runs in (("before", before), ("after", after))
            for reader in (("arrow",) if args.no_spark else ("arrow", "spark"))
        },
    }


def upsert_bench(args: argparse.Namespace, root: Path) -> dict:
    from deltalake import DeltaTable, write_deltalake

    days = [FIRST + dt.timedelta(days=d) for d in range(args.days)]
    per_object = -(-args.day_rows // args.objects_per_day)
    deployment = new_deployment("bench", root)
    deployment.catalog.tables.create(table_def("events", True))
    delta_path = root / "delta-pristine"
    for number, date in enumerate(days):
        day = [
            rows_of(date, (number * args.objects_per_day + n) * per_object, per_object, number * 100 + n)
            for n in range(args.objects_per_day)
        ]
        commit_small_objects(deployment, "web.events", [(date, chunk) for chunk in day])
        whole = pa.concat_tables(day)
        write_deltalake(
            str(delta_path),
            whole.append_column("dt", pa.array([date] * whole.num_rows, pa.date32())),
            partition_by=["dt"],
            mode="append",
        )
        print(f"  filled {date} ({number + 1}/{len(days)})", flush=True)
    settle(deployment)
    total = args.days * args.objects_per_day * per_object
    rng = np.random.default_rng(11)
    half = args.upsert_rows // 2
    replaced = rng.choice(total, half, replace=False)
    pieces = []
    for number, date in enumerate(days):
        first = number * args.objects_per_day * per_object
        mine = replaced[(replaced >= first) & (replaced < first + args.objects_per_day * per_object)]
        fresh = rows_of(date, 0, len(mine) + half // len(days), 1000 + number)
        ids = np.concatenate(
            [mine, np.arange(total + number * (half // len(days)), total + (number + 1) * (half // len(days)))]
        )
        pieces.append(fresh.set_column(1, "event_id", pa.array(ids, pa.int64())))
    source = pa.concat_tables(pieces)
    lake = Lake(deployment)
    events = lake.table("web.events")
    delta_source = source.append_column(
        "dt", pc.cast(pc.cast(source.column("utc_event_time"), pa.timestamp("us")), pa.date32())
    )
    work = root / "delta-work"

    def fresh_delta(_attempt: int) -> Path:
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(delta_path, work)
        return work

    def delta_merge(path: Path) -> dict:
        metrics = (
            DeltaTable(str(path))
            .merge(
                source=delta_source,
                predicate="t.event_id = s.event_id AND t.dt = s.dt",
                source_alias="s",
                target_alias="t",
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        return {"updated": metrics.get("num_target_rows_updated"), "inserted": metrics.get("num_target_rows_inserted")}

    def silt_upsert(_state: object) -> dict:
        report = events.upsert(source)
        return {"partitions": len(report.partitions), "rows": report.rows}

    runs = interleaved_runs(
        {"siltlake_upsert": (None, silt_upsert), "delta_merge": (fresh_delta, delta_merge)}, args.repeats
    )
    # What merge-on-read defers to readers: one whole read of each table after the upsert (delta-rs's copy holds
    # the last run's merge), and the keyed table after its merge.
    reads = interleaved_runs(
        {
            "siltlake_read_after_upsert": (None, lambda _s: {"rows": events.to_arrow().num_rows}),
            "delta_read_after_merge": (None, lambda _s: {"rows": DeltaTable(str(work)).to_pyarrow_table().num_rows}),
        },
        3,
    )
    count = reads["siltlake_read_after_upsert"]["runs"][0]["rows"]
    assert count == total + half // len(days) * len(days), count
    assert reads["delta_read_after_merge"]["runs"][0]["rows"] == count
    deployment.close()
    return {
        "table_rows": total,
        "upsert_rows": source.num_rows,
        "rows_after": count,
        "runs": runs,
        "reads": reads,
        "ratio": {
            "best": round(runs["siltlake_upsert"]["best_seconds"] / runs["delta_merge"]["best_seconds"], 3),
            "median": round(runs["siltlake_upsert"]["median_seconds"] / runs["delta_merge"]["median_seconds"], 3),
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=["read", "upsert"])
    parser.add_argument("--objects", type=int, default=100)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--resend", type=float, default=0.1)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--day-rows", type=int, default=333_334)
    parser.add_argument("--objects-per-day", type=int, default=4)
    parser.add_argument("--upsert-rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-spark", action="store_true", help="read: time the table API only")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="keyed-bench-"))
    try:
        found = read_bench(args, root) if args.part == "read" else upsert_bench(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    report = {
        "benchmark": f"keyed_{args.part}",
        "when": utc_stamp(),
        "machine": machine(),
        "command": " ".join(sys.argv),
        "args": args_record(args),
        **found,
    }
    write_report(RESULTS / f"keyed_{args.part}{args.tag}.json", report)
    print({k: v for k, v in found.items() if k in ("ratios", "ratio", "stored_rows", "unique_rows")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
